import { describe, expect, it } from "vitest";
import { newId } from "./ids.js";

describe("newId", () => {
  it("is 24 hex characters, time-ordered, and unique across refills of its random pool", () => {
    const ids = Array.from({ length: 5_000 }, () => newId());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{24}$/);
    expect(new Set(ids).size).toBe(ids.length);
    // The random halves differ too (a pool that was not refilled would repeat them).
    expect(new Set(ids.map((id) => id.slice(12))).size).toBe(ids.length);
    const times = ids.map((id) => parseInt(id.slice(0, 12), 16));
    expect([...times].sort((a, b) => a - b)).toEqual(times);
    expect(Math.abs(times.at(-1)! - Date.now())).toBeLessThan(5_000);
  });
});
