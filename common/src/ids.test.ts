import { describe, expect, it } from "vitest";
import { isNewId, newId } from "./ids.js";

describe("newId", () => {
  it("is 24 hex characters, time-ordered, and unique across refills of its random pool", () => {
    const ids = Array.from({ length: 5_000 }, () => newId());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{24}$/);
    expect(ids.every(isNewId)).toBe(true);
    for (const other of [
      "",
      "../other",
      "0123456789ABCDEF01234567",
      `${ids[0]}0`,
      ids[0]!.slice(1),
    ])
      expect(isNewId(other)).toBe(false);
    expect(new Set(ids).size).toBe(ids.length);
    // The random halves differ too (a pool that was not refilled would repeat them).
    expect(new Set(ids.map((id) => id.slice(12))).size).toBe(ids.length);
    const times = ids.map((id) => parseInt(id.slice(0, 12), 16));
    expect([...times].sort((a, b) => a - b)).toEqual(times);
    expect(Math.abs(times.at(-1)! - Date.now())).toBeLessThan(5_000);
  });
});
