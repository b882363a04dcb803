import { describe, expect, it } from "vitest";
import {
  create,
  fromJson,
  toJsonString,
  type DescMessage,
  type JsonObject,
  type JsonValue,
} from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { seededRandom } from "@pies/common";
import {
  ExecuteRequestSchema,
  ExecuteResponseSchema,
  type ExecuteRequest,
} from "@pies/proto/executor";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import { randomMessageJson } from "../../../common/test/run-samples.js";
import {
  EXECUTE_REQUEST_JSON_NAMES,
  readExecuteRequest,
  writeExecuteResponse,
} from "./connect-json.js";

/** What the executor's server made of a request's JSON before: protobuf-es's reading of it. */
const protobufEs = (json: unknown): ExecuteRequest =>
  fromJson(ExecuteRequestSchema, json as JsonValue, { ignoreUnknownFields: true });

/** The reader takes the JSON (as JSON.parse makes it), and makes protobuf-es's message of it. */
function expectRead(json: unknown) {
  const text = JSON.stringify(json);
  const read = readExecuteRequest(JSON.parse(text));
  expect(read, text.slice(0, 200)).toBeDefined();
  expect(read).toEqual(protobufEs(JSON.parse(text)));
}

/** The reader gives way: protobuf-es reads the JSON, or refuses it, as before. */
function expectLeftToProtobufEs(json: unknown) {
  expect(readExecuteRequest(JSON.parse(JSON.stringify(json)))).toBeUndefined();
}

const caller = {
  accountId: "a_1",
  projectId: "p_1",
  source: {
    type: "api",
    label: "bench",
    principalType: "apikey",
    principalId: "k_1",
    clientIp: "127.0.0.1",
  },
};

describe("the executor's Execute request read from its JSON", () => {
  it("makes protobuf-es's message of what the gateway sends", () => {
    expectRead({
      caller,
      interactionId: "i_1",
      data: { text: "the quarterly report" },
      config: {},
    });
    expectRead({
      caller,
      interactionName: "Summarise@3",
      stream: true,
      data: { text: "fox", n: -0, list: [1, "two", null, { deep: [[]] }], "10": true, "": "" },
      tags: ["a", "b", "日本語 🎉"],
      parentRunId: "r_0",
      ttl: 600,
      config: {
        environmentId: "e_1",
        model: "gpt-4o-mini",
        temperature: 0,
        maxTokens: 2 ** 31 - 1,
        formatter: "json",
        maxRepairs: 0,
        cachePolicy: { type: "cache", ttl: 60, variesOn: ["text"], refreshProbability: 0.25 },
      },
    });
    expectRead({ caller: {}, interactionId: "", data: {}, tags: [], config: { cachePolicy: {} } });
    expectRead({});
  });

  it("makes protobuf-es's message of requests with every field set, at random", () => {
    // randomMessageJson sets every field of the request and of the messages in it, from the
    // descriptors; one member of the `interaction` oneof is kept (both is protobuf-es's error).
    const random = seededRandom(3);
    for (let i = 0; i < 300; i++) {
      const json = randomMessageJson(random, ExecuteRequestSchema, 3) as JsonObject;
      delete json[random() < 0.5 ? "interactionId" : "interactionName"];
      expectRead(json);
    }
  });

  it("knows every field of the request and of the messages in it", () => {
    // A field added to one of them must be read here (or the request is left to protobuf-es).
    const names: Record<string, string[]> = {};
    const collect = (schema: DescMessage) => {
      if (schema.typeName.startsWith("google.protobuf.") || names[schema.typeName]) return;
      names[schema.typeName] = schema.fields.map((f) => f.jsonName);
      for (const f of schema.fields) if (f.message) collect(f.message);
    };
    collect(ExecuteRequestSchema);
    expect(EXECUTE_REQUEST_JSON_NAMES).toEqual(names);
  });

  it("leaves to protobuf-es what it ignores, refuses or reads another way", () => {
    const base = { caller, interactionId: "i_1", data: { text: "x" } };
    const cases: unknown[] = [
      // A field of a newer caller (ignored), and a proto name (read).
      { ...base, newerField: 1 },
      { ...base, caller: { ...caller, account_id: "a_2" } },
      { ...base, config: { max_tokens: 5 } },
      // Nulls: a field reset, or refused.
      { ...base, caller: null },
      { ...base, tags: ["a", null] },
      { ...base, config: { temperature: null } },
      // Both members of the oneof.
      { ...base, interactionName: "n" },
      // Values of another type, or that protobuf-es converts.
      { ...base, ttl: "5" },
      { ...base, ttl: 1.5 },
      { ...base, ttl: 2 ** 31 },
      { ...base, config: { temperature: "NaN" } },
      { ...base, config: { maxTokens: -(2 ** 31) - 1 } },
      { ...base, stream: "true" },
      { ...base, data: [1, 2] },
      { ...base, tags: "a" },
      { ...base, config: { cachePolicy: { variesOn: [1] } } },
      // A string that is not well-formed UTF-16 (protobuf-es refuses it).
      { ...base, interactionId: "i\ud800" },
      { ...base, caller: { ...caller, source: { label: "\udc00" } } },
      { ...base, tags: ["ok", "\ud83d"] },
    ];
    for (const json of cases) expectLeftToProtobufEs(json);
    // An own `__proto__` in data (lost in protobuf-es's conversion), and data nested past what
    // the reader checks.
    expect(
      readExecuteRequest(JSON.parse('{"interactionId": "i", "data": {"a": {"__proto__": {}}}}')),
    ).toBeUndefined();
    let deep: JsonValue = "leaf";
    for (let i = 0; i < 40; i++) deep = [deep];
    expectLeftToProtobufEs({ ...base, data: { deep } });
    // Lone surrogates inside data are protobuf-es's to keep, as it does.
    expectRead({ ...base, data: { text: "a\ud800b" } });
  });

  it("answers a key given twice as JSON.parse reads it: the last one", () => {
    const read = readExecuteRequest(JSON.parse('{"ttl": 5, "parentRunId": "a", "ttl": 7}'));
    expect(read?.ttl).toBe(7);
  });
});

describe("the executor's Execute answer written as JSON", () => {
  it("is toJsonString's text", () => {
    const run = create(RunSchema, {
      id: "r_1",
      projectId: "p_1",
      status: RunStatus.COMPLETED,
      parameters: { text: "fox" },
      prompt: fromJson(ValueSchema, [{ role: "user", content: "Summarise fox" }]),
      result: fromJson(ValueSchema, "an answer"),
      config: { environmentId: "e_1", model: "m", temperature: 0.7 },
      tokenUse: { prompt: 3, result: 2, total: 5 },
      executionTime: 4n,
      createdAt: { seconds: 1_700_000_000n, nanos: 0 },
      updatedAt: { seconds: 1_700_000_001n, nanos: 250_000_000 },
    });
    const answer = create(ExecuteResponseSchema, { run });
    expect(writeExecuteResponse(answer)).toBe(toJsonString(ExecuteResponseSchema, answer));
    const none = create(ExecuteResponseSchema, {});
    expect(writeExecuteResponse(none)).toBe(toJsonString(ExecuteResponseSchema, none));
  });

  it("knows every field of the answer", () => {
    // writeExecuteResponse writes `run` alone: a field added to ExecuteResponse would be dropped.
    expect(
      ExecuteResponseSchema.fields.map((f) => f.jsonName),
      "ExecuteResponse has a field writeExecuteResponse does not write: extend the writer " +
        "(services/executor/src/connect-json.ts), or leave such answers to protobuf-es",
    ).toEqual(["run"]);
  });

  it("gives way to protobuf-es for a run it does not write", () => {
    const run = create(RunSchema, { id: "r_1", result: { kind: { case: undefined } } });
    expect(writeExecuteResponse(create(ExecuteResponseSchema, { run }))).toBeUndefined();
  });
});
