import { describe, expect, it } from "vitest";
import { childPointer, diffMarks, parsePointer } from "./diff-marks";
import type { PatchOp } from "./model";

// The patches below are what the runs service answers as a pair's `diff` for these results
// (services/runs/src/experiments/compare.ts: jsondiffpatch, arrays by value with moves, then its
// JSON Patch formatter), taken from it as they are.

const marks = (original: unknown, candidate: unknown, ops: PatchOp[]) => {
  const m = diffMarks(original, candidate, ops);
  return { original: Object.fromEntries(m.original), candidate: Object.fromEntries(m.candidate) };
};

describe("a pair's difference, highlighted on each side", () => {
  it("marks what was removed in the original and added in the candidate, with shifting indexes", () => {
    expect(
      marks(
        { tags: ["lima"], score: 32.09, title: "quartz" },
        { tags: ["delta", "orbit", "sierra"], score: 27.82, title: "quartz" },
        [
          { op: "remove", path: "/tags/0" },
          { op: "add", path: "/tags/0", value: "delta" },
          { op: "add", path: "/tags/1", value: "orbit" },
          { op: "add", path: "/tags/2", value: "sierra" },
          { op: "replace", path: "/score", value: 27.82 },
        ],
      ),
    ).toEqual({
      original: { "/tags/0": "removed", "/score": "changed" },
      candidate: {
        "/tags/0": "added",
        "/tags/1": "added",
        "/tags/2": "added",
        "/score": "changed",
      },
    });
  });

  it("follows a moved item to where it ends up, past earlier removals", () => {
    expect(
      marks(
        {
          items: [
            { id: 1, n: "a" },
            { id: 2, n: "b" },
            { id: 3, n: "c" },
          ],
        },
        {
          items: [
            { id: 3, n: "c" },
            { id: 1, n: "a" },
            { id: 2, n: "B" },
          ],
        },
        [
          { op: "remove", path: "/items/1" },
          { op: "move", from: "/items/1", path: "/items/0" },
          { op: "add", path: "/items/2", value: { id: 2, n: "B" } },
        ],
      ),
    ).toEqual({
      original: { "/items/1": "removed", "/items/2": "moved" },
      candidate: { "/items/0": "moved", "/items/2": "added" },
    });
    // A reversed list: each move takes the last item that is left where it was.
    expect(
      marks({ list: [1, 2, 3, 4, 5] }, { list: [5, 4, 3, 2, 1] }, [
        { op: "move", from: "/list/4", path: "/list/0" },
        { op: "move", from: "/list/4", path: "/list/1" },
        { op: "move", from: "/list/4", path: "/list/2" },
        { op: "move", from: "/list/4", path: "/list/3" },
      ]),
    ).toEqual({
      original: { "/list/1": "moved", "/list/2": "moved", "/list/3": "moved", "/list/4": "moved" },
      candidate: { "/list/0": "moved", "/list/1": "moved", "/list/2": "moved", "/list/3": "moved" },
    });
    expect(
      marks(
        ["x", "y", "z"],
        ["z", "x", "y", "w"],
        [
          { op: "move", from: "/2", path: "/0" },
          { op: "add", path: "/3", value: "w" },
        ],
      ),
    ).toEqual({ original: { "/2": "moved" }, candidate: { "/0": "moved", "/3": "added" } });
  });

  it("marks nested members and escaped keys", () => {
    expect(
      marks({ a: 1, b: { c: [1, 2, 3], d: "x" } }, { a: 1, b: { c: [1, 3], e: "y" } }, [
        { op: "remove", path: "/b/c/1" },
        { op: "remove", path: "/b/d" },
        { op: "add", path: "/b/e", value: "y" },
      ]),
    ).toEqual({
      original: { "/b/c/1": "removed", "/b/d": "removed" },
      candidate: { "/b/e": "added" },
    });
    expect(
      marks({ a: "a/b", "k~": 1 }, { a: "a/b", "k~": 2, "s/l": true }, [
        { op: "replace", path: "/k~0", value: 2 },
        { op: "add", path: "/s~1l", value: true },
      ]),
    ).toEqual({
      original: { "/k~0": "changed" },
      candidate: { "/k~0": "changed", "/s~1l": "added" },
    });
  });

  it("marks a whole value replaced (text results, or a different shape)", () => {
    const whole = { original: { "": "changed" }, candidate: { "": "changed" } };
    expect(marks("hello", "world", [{ op: "replace", path: "", value: "world" }])).toEqual(whole);
    expect(marks({ a: 1 }, [1], [{ op: "replace", path: "", value: [1] }])).toEqual(whole);
  });

  it("marks nothing for equal results, and the wholes for a patch that does not apply", () => {
    expect(marks({ a: 1 }, { a: 1 }, [])).toEqual({ original: {}, candidate: {} });
    expect(diffMarks({ a: 1 }, null, null).candidate.size).toBe(0);
    const whole = { original: { "": "changed" }, candidate: { "": "changed" } };
    // A path that is not there.
    expect(marks({ a: 1 }, { a: 2 }, [{ op: "replace", path: "/b", value: 2 }])).toEqual(whole);
    // A patch that applies but does not give the candidate (never trusted half-way).
    expect(marks({ a: 1 }, { a: 3 }, [{ op: "replace", path: "/a", value: 2 }])).toEqual(whole);
    expect(marks([1], [1, 2], [{ op: "add", path: "/5", value: 2 }])).toEqual(whole);
    expect(marks({ a: 1 }, { a: 2 }, [{ op: "replace", path: "a", value: 2 }])).toEqual(whole);
  });

  it("copies and appends as RFC 6902 says", () => {
    expect(
      marks({ a: [1] }, { a: [1, 1], b: [1, 1] }, [
        { op: "add", path: "/a/-", value: 1 },
        { op: "copy", from: "/a", path: "/b" },
        { op: "test", path: "/a/0", value: 1 },
      ]),
    ).toEqual({ original: {}, candidate: { "/a/1": "added", "/b": "added" } });
  });
});

describe("JSON Pointers", () => {
  it("parse and build with ~0 and ~1", () => {
    expect(parsePointer("")).toEqual([]);
    expect(parsePointer("/a~1b/~0c/0")).toEqual(["a/b", "~c", "0"]);
    expect(parsePointer("a")).toBeUndefined();
    expect(childPointer(childPointer("", "a/b"), "~c")).toBe("/a~1b/~0c");
    expect(childPointer("/x", 3)).toBe("/x/3");
  });
});
