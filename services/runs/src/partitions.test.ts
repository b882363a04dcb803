import { describe, expect, it } from "vitest";
import { DAY_MS, dayOf, periodOf } from "./partitions.js";

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
