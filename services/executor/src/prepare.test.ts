import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { RunConfigSchema, RunSchema } from "@pies/proto/runs";
import { zeroRun } from "@pies/common/bus";
import { zeroRunConfig } from "./prepare.js";

describe("the zero messages written out", () => {
  // A field added to Run or RunConfig fails here until zeroRun / zeroRunConfig have it.
  it("are create()'s, field for field and in the same order", () => {
    expect(zeroRun()).toStrictEqual(create(RunSchema));
    expect(Object.keys(zeroRun())).toEqual(Object.keys(create(RunSchema)));
    expect(zeroRunConfig()).toStrictEqual(create(RunConfigSchema));
    expect(Object.keys(zeroRunConfig())).toEqual(Object.keys(create(RunConfigSchema)));
  });

  it("are new objects each time (a run's fields are its own)", () => {
    const a = zeroRun();
    a.tags.push("x");
    a.attempts.length = 0;
    expect(zeroRun().tags).toEqual([]);
    expect(zeroRun()).not.toBe(a);
  });
});
