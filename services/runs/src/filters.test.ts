import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  FLOOR_MAX_AGE_MS,
  MAX_RUN_SPAN_MS,
  RECENT_WINDOW_MS,
  RUN_CLOCK_SKEW_MS,
  newestFirst,
} from "./filters.js";
import { DAY_MS, idPrefix } from "./partitions.js";

const NOW = Date.UTC(2026, 11, 7, 12);

interface Row {
  id: string;
  updated_at: Date;
  match: boolean;
}

/** Runs made over the last `days`, each updated within what idBounds allows of its creation. */
const runsArb = (days: number) =>
  fc
    .array(
      fc.record({
        // Often near the window's floor, where runs made before it are updated after it.
        madeAgo: fc.oneof(
          fc.integer({ min: 0, max: days * DAY_MS }),
          fc.integer({ min: RECENT_WINDOW_MS - 2 * DAY_MS, max: RECENT_WINDOW_MS + 2 * DAY_MS }),
        ),
        // From the clock skew before its id's time to a run's longest span after it, often
        // at either end.
        updatedAfter: fc.oneof(
          fc.integer({ min: -RUN_CLOCK_SKEW_MS, max: MAX_RUN_SPAN_MS }),
          fc.constantFrom(-RUN_CLOCK_SKEW_MS, MAX_RUN_SPAN_MS, MAX_RUN_SPAN_MS - 1),
        ),
        match: fc.boolean(),
      }),
      { minLength: 50, maxLength: 300 },
    )
    .map((specs) =>
      specs.map((s, i): Row => {
        const made = NOW - s.madeAgo;
        return {
          id: idPrefix(made) + i.toString(16).padStart(12, "0"),
          updated_at: new Date(Math.min(NOW, made + s.updatedAfter)),
          match: s.match,
        };
      }),
    );

const byNewest = (a: Row, b: Row) =>
  b.updated_at.getTime() - a.updated_at.getTime() || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);

/** The statement newestFirst's callers run: the matches from the floor on, paged. */
function reader(rows: Row[], page: { limit: number; offset: number }) {
  const floors: (string | undefined)[] = [];
  const read = async (floorId?: string) => {
    floors.push(floorId);
    return rows
      .filter((r) => r.match && (floorId === undefined || r.id >= floorId))
      .sort(byNewest)
      .slice(page.offset, page.offset + page.limit);
  };
  return { read, floors };
}

describe("newestFirst", () => {
  it("answers the page a read over every partition answers, in at most four reads", async () => {
    await fc.assert(
      fc.asyncProperty(
        runsArb(60),
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 0, max: 60 }),
        fc.constantFrom(1, 0.5, 0.05, 0.01),
        async (all, limit, offset, density) => {
          // Thin the matches: from every run to a rare few.
          const rows = all.map((r, i) => ({
            ...r,
            match: r.match && (i * 7919) % 100 < density * 100,
          }));
          const page = { limit, offset };
          const { read, floors } = reader(rows, page);
          const truth = await reader(rows, page).read();
          const got = await newestFirst(read, page, undefined, NOW);
          expect(got.map((r) => r.id)).toEqual(truth.map((r) => r.id));
          expect(floors.length).toBeLessThanOrEqual(4);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("reads the window first, then as far back as its matches say, then all", async () => {
    const runs = (count: number, overDays: number, matchEvery: number): Row[] =>
      Array.from({ length: count }, (_, i) => {
        const made = NOW - (i * overDays * DAY_MS) / count;
        return {
          id: idPrefix(made) + i.toString(16).padStart(12, "0"),
          updated_at: new Date(made + 1000),
          match: i % matchEvery === 0,
        };
      });
    const page = { limit: 20, offset: 0 };
    // Common: the window holds the page.
    let r = reader(runs(6000, 60, 2), page);
    await newestFirst(r.read, page, undefined, NOW);
    expect(r.floors).toEqual([idPrefix(NOW - RECENT_WINDOW_MS)]);
    // A few a day: a second read from a floor some weeks back, not over all.
    r = reader(runs(6000, 60, 60), page);
    await newestFirst(r.read, page, undefined, NOW);
    expect(r.floors).toHaveLength(2);
    expect(r.floors[1]! < idPrefix(NOW - RECENT_WINDOW_MS)).toBe(true);
    expect(r.floors[1]! >= idPrefix(NOW - FLOOR_MAX_AGE_MS)).toBe(true);
    // None in the window (a rare term): over all at once.
    const rare = runs(6000, 60, 1).map((row) => ({
      ...row,
      match: row.updated_at.getTime() < NOW - 20 * DAY_MS && row.id.endsWith("0"),
    }));
    r = reader(rare, page);
    const got = await newestFirst(r.read, page, undefined, NOW);
    expect(r.floors).toEqual([idPrefix(NOW - RECENT_WINDOW_MS), undefined]);
    expect(got.length).toBe(20);
    // Bounded before the window: over all, once.
    r = reader(runs(600, 60, 2), page);
    await newestFirst(
      r.read,
      page,
      { updatedBefore: { seconds: BigInt((NOW - 10 * DAY_MS) / 1000), nanos: 0 } } as never,
      NOW,
    );
    expect(r.floors).toEqual([undefined]);
  });
});
