import { describe, expect, it } from "vitest";
import { DAY_MS, dayOf, gapsIn, idPrefix, periodOf, type Partition } from "./partitions.js";

describe("periodOf", () => {
  it("starts a week on the Monday (UTC) that begins it", () => {
    const monday = Date.UTC(2026, 11, 7); // 2026-12-07 was a Monday
    expect(new Date(monday).getUTCDay()).toBe(1);
    for (let ms = monday; ms < monday + 7 * DAY_MS; ms += 3_600_000 * 5) {
      expect(periodOf(ms, 7)).toBe(monday);
    }
    expect(periodOf(monday - 1, 7)).toBe(monday - 7 * DAY_MS);
    expect(periodOf(monday + 7 * DAY_MS, 7)).toBe(monday + 7 * DAY_MS);
  });

  it("is the day when a period is a day wide", () => {
    for (const ms of [0, 1, DAY_MS - 1, Date.UTC(2026, 1, 28, 23, 59), Date.now()]) {
      expect(periodOf(ms, 1)).toBe(dayOf(ms));
    }
  });

  it("tiles time: each period holds the times from its start to the next one's", () => {
    for (const days of [2, 3, 5, 14, 31]) {
      const start = periodOf(Date.UTC(2026, 5, 15, 12), days);
      expect(periodOf(start, days)).toBe(start);
      expect(periodOf(start + days * DAY_MS - 1, days)).toBe(start);
      expect(periodOf(start + days * DAY_MS, days)).toBe(start + days * DAY_MS);
    }
  });
});

describe("gapsIn", () => {
  const day = (n: number) => idPrefix(Date.UTC(2026, 11, 7) + n * DAY_MS);
  const part = (from: number | null, to: number | null): Partition => ({
    name: `p${from}`,
    from: from === null ? null : day(from),
    to: to === null ? null : day(to),
    isDefault: false,
  });
  const fallback: Partition = { name: "runs_default", from: null, to: null, isDefault: true };
  const gaps = (partitions: Partition[]) =>
    gapsIn([fallback, ...partitions], day(0), day(7)).map((g) => [g.from, g.to]);

  it("is the whole period where nothing covers it, the default partition aside", () => {
    expect(gaps([])).toEqual([[day(0), day(7)]]);
    expect(gaps([part(-7, 0), part(7, 14)])).toEqual([[day(0), day(7)]]);
  });

  it("is what partitions made before leave: before, between and after them", () => {
    expect(gaps([part(2, 3), part(1, 2), part(5, 6)])).toEqual([
      [day(0), day(1)],
      [day(3), day(5)],
      [day(6), day(7)],
    ]);
    // The legacy partition (from MINVALUE) up to a day inside the period.
    expect(gaps([part(null, 3)])).toEqual([[day(3), day(7)]]);
    // One of another width over the period's start, one past its end.
    expect(gaps([part(-3, 2), part(6, 9)])).toEqual([[day(2), day(6)]]);
  });

  it("is nothing where the period is covered", () => {
    expect(gaps([part(0, 7)])).toEqual([]);
    expect(gaps([part(-1, 3), part(3, 10)])).toEqual([]);
    expect(gaps([part(4, null), part(0, 4)])).toEqual([]);
  });
});
