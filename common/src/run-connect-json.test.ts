import { describe, expect, it } from "vitest";
import { create, fromJson, toJsonString } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { RunSchema, RunStatus, type Run } from "@pies/proto/runs";
import { seededRandom } from "./json-sample.js";
import { runToConnectJson } from "./run-connect-json.js";
import { randomMessageJson } from "../test/run-samples.js";

/** The hand-written JSON is toJsonString's text, exactly; it does not give way on this run. */
const expectSameJson = (run: Run) => {
  const json = runToConnectJson(run);
  expect(json).toBeDefined();
  expect(JSON.stringify(json)).toBe(toJsonString(RunSchema, run));
};

/** It gives way (undefined), and protobuf-es writes the run or throws as it did. */
const expectLeftToProtobufEs = (run: Run) => expect(runToConnectJson(run)).toBeUndefined();

describe("runToConnectJson", () => {
  it("writes toJsonString's JSON for runs with every field set, at random", () => {
    // randomMessageJson sets every field of Run and of the messages in it, from the descriptors:
    // a field this does not know is missing from its JSON, and the comparison fails.
    const random = seededRandom(11);
    for (let i = 0; i < 400; i++) {
      expectSameJson(fromJson(RunSchema, randomMessageJson(random, RunSchema, 3)));
    }
  });

  it("writes toJsonString's JSON for a run as the executor answers it", () => {
    expectSameJson(
      create(RunSchema, {
        id: "r_1",
        projectId: "p_1",
        status: RunStatus.COMPLETED,
        parameters: { text: "fox", n: 3, ok: true, none: null, list: [1, "two"], o: { "1": {} } },
        prompt: fromJson(ValueSchema, [{ role: "user", content: "Summarise fox" }]),
        result: fromJson(ValueSchema, { summary: "an answer", score: 0.5 }),
        config: { environmentId: "e_1", model: "m", temperature: 0.7, maxTokens: 0 },
        source: { type: "api", label: "key", principalType: "apikey", principalId: "k_1" },
        tokenUse: { prompt: 12, result: 0, total: 12 },
        executionTime: 0n,
        createdAt: { seconds: 1_700_000_000n, nanos: 5 },
        updatedAt: { seconds: 1_700_000_000n, nanos: 123_000_000 },
        tags: ["a", "b"],
      }),
    );
  });

  it("writes the values protobuf-es writes where JSON has none, or loses", () => {
    const run = create(RunSchema, {
      id: "r_2",
      status: 17 as RunStatus, // a number RunStatus does not name: written as the number
      config: { temperature: NaN, maxTokens: -0, maxRepairs: 2 },
      ttl: -5,
      executionTime: -3n,
      createdAt: { seconds: 0n, nanos: 1_500 },
      cachePolicy: { type: "cache", ttl: 60, when: new Date(0) } as never,
    });
    // An own `__proto__` (from JSON.parse; set after create, which would lose it): protobuf-es
    // assigns it, and it is lost.
    run.parameters = JSON.parse('{"__proto__": {"a": 1}, "b": {"__proto__": 2, "c": [null]}}');
    expect(Object.keys(run.parameters!)).toContain("__proto__");
    expectSameJson(run);
    expectSameJson(create(RunSchema, { config: { temperature: -Infinity } }));
    expectSameJson(create(RunSchema, {}));
  });

  it("leaves to protobuf-es what it refuses or writes another way", () => {
    const cases: Partial<Run>[] = [
      // A Struct held as JSON with a key set to undefined: a Value with no kind.
      { parameters: { gone: undefined } as never },
      { result: { $typeName: "google.protobuf.Value", kind: { case: "numberValue", value: NaN } } },
      { prompt: { $typeName: "google.protobuf.Value", kind: { case: undefined } } },
      { parameters: { n: Infinity } },
      // A Struct that is an array: protobuf-es writes its indexes as keys.
      { parameters: ["a", 1] as never },
      { ttl: "5" as never },
      { id: 7 as never },
      { executionTime: 1.5 as never },
      { createdAt: { $typeName: "google.protobuf.Timestamp", seconds: 10n ** 12n, nanos: 0 } },
      { updatedAt: { $typeName: "google.protobuf.Timestamp", seconds: 0n, nanos: -1 } },
    ];
    for (const fields of cases) {
      const run = create(RunSchema, { id: "r" });
      Object.assign(run, fields);
      expectLeftToProtobufEs(run);
    }
  });

  it("leaves structures nested deeper than it goes to protobuf-es", () => {
    let deep: unknown = "leaf";
    for (let i = 0; i < 80; i++) deep = { d: deep };
    const run = create(RunSchema, { id: "r", parameters: deep as never });
    expectLeftToProtobufEs(run);
    expect(toJsonString(RunSchema, run)).toContain('"leaf"');
  });
});
