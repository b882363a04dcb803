import { describe, expect, it } from "vitest";
import { compact } from "./common.js";

describe("compact", () => {
  it("drops undefined members and keeps the others, in order", () => {
    const out = compact({ b: 1, a: undefined, c: null, d: 0, e: undefined, f: "", g: false });
    expect(Object.keys(out)).toEqual(["b", "c", "d", "f", "g"]);
    expect(JSON.stringify(out)).toBe('{"b":1,"c":null,"d":0,"f":"","g":false}');
    expect(compact({})).toEqual({});
  });
});
