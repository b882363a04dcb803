import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kysely, sql } from "kysely";
import pg from "pg";
import { createLogger } from "@pies/common";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { createTestDatabase, seedRuns, type TestDatabase } from "@pies/testkit";
import { migrations } from "../src/migrations/index.js";
import {
  DAY_MS,
  idPrefix,
  listPartitions,
  makePartitions,
  partitionName,
  periodOf,
} from "../src/partitions.js";
import { applyRetention } from "../src/retention.js";
import type { RunsDatabase } from "../src/tables.js";
import { expectRecount } from "./rollup-recount.js";

// Partitions of another width than a day (PIES_RUN_PARTITION_DAYS; a week by default:
// docs/decisions/0071-runs-partitions-a-week-wide.md) on the real PostgreSQL server: made from a
// Monday, a width changed on a running store continuing where the last partition ends, and the
// retention dropping a week only once the floor is past its end.
let testDb: TestDatabase;
let db: Kysely<RunsDatabase>;
let pool: pg.Pool;
const logger = createLogger("test", "silent");
const NOW = Date.now();
const WEEK_MS = 7 * DAY_MS;

beforeAll(async () => {
  testDb = await createTestDatabase("partition_width");
  db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 4 });
  pool = new pg.Pool({ connectionString: testDb.url, max: 2 });
  await migrateToLatest(db, "runs", migrations);
});

afterAll(async () => {
  await pool?.end();
  await db?.destroy();
  await testDb?.drop();
});

/** The range partitions, with their bounds as times (ms). */
async function ranges() {
  return (await listPartitions(db))
    .filter((p) => !p.isDefault)
    .map((p) => ({ name: p.name, from: parseInt(p.from!, 16), to: parseInt(p.to!, 16) }));
}

describe("partitions a week wide", () => {
  it("are made from a Monday, each once, and hold the runs of their week", async () => {
    const made = await makePartitions(db, {
      now: NOW,
      from: NOW - 40 * DAY_MS,
      daysAhead: 3,
      days: 7,
    });
    const first = periodOf(NOW - 40 * DAY_MS, 7);
    expect(made[0]).toBe(partitionName(first));
    expect(await makePartitions(db, { now: NOW, from: NOW - 40 * DAY_MS, days: 7 })).toEqual([]);
    const partitions = await ranges();
    expect(partitions.map((p) => p.name)).toEqual(made);
    for (const [i, p] of partitions.entries()) {
      expect(new Date(p.from).getUTCDay()).toBe(1);
      expect(p.from).toBe(first + i * WEEK_MS);
      expect(p.to - p.from).toBe(WEEK_MS);
    }
    // The last one starts at most daysAhead after today, and reaches past it.
    expect(partitions.at(-1)!.from).toBeLessThanOrEqual(NOW + 3 * DAY_MS);
    expect(partitions.at(-1)!.to).toBeGreaterThan(NOW + 3 * DAY_MS - DAY_MS);
    await seedRuns(pool, {
      count: 2_000,
      projects: ["p1", "p2"],
      end: new Date(NOW - 60_000),
      spanDays: 35,
    });
    const { rows } = await sql<{ partition: string; id: string }>`
      select tableoid::regclass::text as partition, id from runs.runs`.execute(db);
    expect(rows).toHaveLength(2_000);
    for (const r of rows) {
      const ms = parseInt(r.id.slice(0, 12), 16);
      expect(r.partition).toBe(`runs.${partitionName(periodOf(ms, 7))}`);
    }
    await expectRecount(db);
  });

  it("go on where the last partition ends when the width is changed, with no gap and no overlap", async () => {
    // A day wide from here: days after the last week, then a week again after those.
    const before = await ranges();
    const later = before.at(-1)!.to + 2 * DAY_MS;
    const daily = await makePartitions(db, {
      now: later,
      from: before.at(-1)!.to,
      daysAhead: 0,
      days: 1,
    });
    expect(daily).toEqual([
      partitionName(before.at(-1)!.to),
      partitionName(before.at(-1)!.to + DAY_MS),
      partitionName(later),
    ]);
    const weekly = await makePartitions(db, {
      now: later + 10 * DAY_MS,
      from: later,
      daysAhead: 0,
      days: 7,
    });
    expect(weekly.length).toBeGreaterThanOrEqual(1);
    const after = await ranges();
    for (let i = 1; i < after.length; i++) expect(after[i]!.from).toBe(after[i - 1]!.to);
    // The first week-wide one after the days starts where the last day ends, and ends at a week's
    // end: the calendar weeks go on as before.
    const resumed = after.find((p) => p.name === weekly[0])!;
    expect(resumed.from).toBe(later + DAY_MS);
    expect(resumed.to).toBe(periodOf(resumed.from, 7) + WEEK_MS);
    expect(new Set(after.map((p) => p.name)).size).toBe(after.length);
  });

  it("fill a gap anywhere in a week, not only after the last partition in it", async () => {
    // Two days in a week ahead made a day wide (its first day skipped as busy, say), then the
    // width back to a week: the day before them and the days after get partitions.
    const week = (await ranges()).at(-1)!.to;
    expect(new Date(week).getUTCDay()).toBe(1);
    const daily = await makePartitions(db, {
      now: week + 2 * DAY_MS,
      from: week + DAY_MS,
      daysAhead: 0,
      days: 1,
    });
    expect(daily).toEqual([partitionName(week + DAY_MS), partitionName(week + 2 * DAY_MS)]);
    const filled = await makePartitions(db, { now: week, from: week, daysAhead: 0, days: 7 });
    expect(filled).toEqual([partitionName(week), partitionName(week + 3 * DAY_MS)]);
    const inWeek = (await ranges()).filter((p) => p.from >= week);
    expect(inWeek.map((p) => [p.from - week, p.to - week])).toEqual([
      [0, DAY_MS],
      [DAY_MS, 2 * DAY_MS],
      [2 * DAY_MS, 3 * DAY_MS],
      [3 * DAY_MS, WEEK_MS],
    ]);
  });

  it("leave a gap the retention would drop at once", async () => {
    // Days made a day wide in a later week, then a week's width with a retention of two days:
    // the week's first day, past it, is not made (to be dropped again at each pass).
    const week = (await ranges()).at(-1)!.to;
    await makePartitions(db, { now: week + DAY_MS, from: week + DAY_MS, daysAhead: 1, days: 1 });
    const now = week + 3 * DAY_MS + 2 * 3_600_000;
    expect(
      await makePartitions(db, { now, from: week, daysAhead: 0, days: 7, retentionDays: 2 }),
    ).toEqual([partitionName(week + 3 * DAY_MS)]);
    const inWeek = (await ranges()).filter((p) => p.from >= week);
    expect(inWeek.map((p) => [p.from - week, p.to - week])).toEqual([
      [DAY_MS, 2 * DAY_MS],
      [2 * DAY_MS, 3 * DAY_MS],
      [3 * DAY_MS, WEEK_MS],
    ]);
    // Without a retention, it is made.
    expect(await makePartitions(db, { now, from: week, daysAhead: 0, days: 7 })).toEqual([
      partitionName(week),
    ]);
  });

  it("are dropped by the retention only once the floor is past a week's end; the rollup stays exact", async () => {
    const weeks = await ranges();
    const retentionDays = 20;
    const floor = NOW - retentionDays * DAY_MS;
    const result = await applyRetention(db, { retentionDays, now: NOW, logger });
    const gone = weeks.filter((p) => p.to <= floor - 3_600_000).map((p) => p.name);
    expect(gone.length).toBeGreaterThanOrEqual(2);
    expect(result.dropped).toEqual(gone);
    // The week the floor cuts keeps its runs older than the floor (a week's width more at most).
    const cut = weeks.find((p) => p.from < floor && p.to > floor - 3_600_000)!;
    expect((await ranges())[0]!.name).toBe(cut.name);
    const { rows } = await sql<{ n: number }>`
      select count(*)::int as n from runs.runs where id < ${idPrefix(floor)}`.execute(db);
    expect(rows[0]!.n).toBeGreaterThan(0);
    const { rows: oldest } = await sql<{ id: string }>`select min(id) as id from runs.runs`.execute(
      db,
    );
    expect(oldest[0]!.id >= idPrefix(cut.from)).toBe(true);
    await expectRecount(db);
  });
});
