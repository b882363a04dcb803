import { describe, expect, it } from "vitest";
import { canonical, judgeScore, resultDiff } from "./compare.js";

describe("resultDiff", () => {
  it("is empty for equal results, whatever their keys' order", () => {
    expect(resultDiff({ a: 1, b: [1, { c: 2, d: 3 }] }, { b: [1, { d: 3, c: 2 }], a: 1 })).toEqual(
      [],
    );
    expect(resultDiff("same", "same")).toEqual([]);
    expect(resultDiff(null, null)).toEqual([]);
  });

  it("says what changes the original into the candidate, as JSON Patch", () => {
    expect(resultDiff({ a: 1, b: "x", gone: true }, { a: 2, b: "x", added: [1] })).toEqual(
      expect.arrayContaining([
        { op: "replace", path: "/a", value: 2 },
        { op: "remove", path: "/gone" },
        { op: "add", path: "/added", value: [1] },
      ]),
    );
    // An item inserted into an array is one add, not every later item replaced.
    expect(resultDiff({ l: ["a", "b", "c"] }, { l: ["a", "x", "b", "c"] })).toEqual([
      { op: "add", path: "/l/1", value: "x" },
    ]);
  });

  it("replaces the whole of a result that is not an object on either side", () => {
    expect(resultDiff("old", "new")).toEqual([{ op: "replace", path: "", value: "new" }]);
    expect(resultDiff({ a: 1 }, null)).toEqual([{ op: "replace", path: "", value: null }]);
    expect(resultDiff(null, [1])).toEqual([{ op: "replace", path: "", value: [1] }]);
  });

  it("leaves its inputs as they were", () => {
    const original = { l: [{ a: 1 }], s: "x" };
    const candidate = { l: [{ a: 2 }], s: "y" };
    const before = JSON.stringify([original, candidate]);
    resultDiff(original, candidate);
    expect(JSON.stringify([original, candidate])).toBe(before);
  });
});

describe("canonical", () => {
  it("sorts keys at every depth", () => {
    expect(canonical({ b: 1, a: { d: 1, c: [{ f: 1, e: 2 }] } })).toBe(
      '{"a":{"c":[{"e":2,"f":1}],"d":1},"b":1}',
    );
  });
});

describe("judgeScore", () => {
  it("is the result's number field score, else nothing", () => {
    expect(judgeScore({ score: 0.75, why: "close" })).toBe(0.75);
    expect(judgeScore({ score: 0 })).toBe(0);
    expect(judgeScore({ score: "1" })).toBeUndefined();
    expect(judgeScore({ grade: 1 })).toBeUndefined();
    expect(judgeScore([{ score: 1 }])).toBeUndefined();
    expect(judgeScore(null)).toBeUndefined();
  });
});
