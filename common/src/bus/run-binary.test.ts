import { jsonBytes } from "../json-bytes.js";
import { describe, expect, it } from "vitest";
import {
  create,
  fromBinary,
  fromJson,
  toBinary,
  type DescMessage,
  type Message,
} from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  GetRunResponseSchema,
  ListRunsResponseSchema,
  RunSchema,
  RunStatus,
  type Run,
} from "@pies/proto/runs";
import {
  ExecuteRequestSchema,
  ExecuteResponseSchema,
  StartRunResponseSchema,
} from "@pies/proto/executor";
import { seededRandom } from "../json-sample.js";
import { encodedRunLength, encodeRun, encodeRunAnswer } from "./run-binary.js";
import { randomMessageJson } from "../../test/run-samples.js";

const expectSameBytes = (run: Run) => {
  const bytes = toBinary(RunSchema, run);
  expect(Buffer.from(encodeRun(run)).toString("hex")).toBe(Buffer.from(bytes).toString("hex"));
  // The length alone (a size check's) is theirs too.
  expect(encodedRunLength(run)).toBe(bytes.length);
};

describe("encodeRun", () => {
  it("writes toBinary's bytes for runs with every field set, at random", () => {
    const random = seededRandom(7);
    for (let i = 0; i < 400; i++) {
      const run = fromJson(RunSchema, randomMessageJson(random, RunSchema, 3));
      expectSameBytes(run);
      expect(fromBinary(RunSchema, encodeRun(run))).toEqual(run);
    }
  });

  it("answers bytes of their own, which the next encoding leaves as they are", () => {
    const first = encodeRun(create(RunSchema, { id: "r_a", modelId: "m" }));
    const copy = Uint8Array.from(first);
    encodeRun(create(RunSchema, { id: "r_b", modelId: "another model" }));
    expect(first).toEqual(copy);
    expect(first).toBeInstanceOf(Uint8Array);
    expect(Buffer.isBuffer(first)).toBe(false);
  });

  it("writes toBinary's bytes for a run as the executor records it", () => {
    const run = create(RunSchema, {
      id: "r_1",
      projectId: "p_1",
      status: RunStatus.COMPLETED,
      parametersJson: jsonBytes({
        text: "fox",
        n: 3,
        ok: true,
        none: null,
        list: [1, "two"],
        o: { "1": {} },
      }),
      promptJson: jsonBytes([{ role: "user", content: "Summarise fox" }]),
      resultJson: jsonBytes("an answer"),
      error: { code: "c", message: "m", dataJson: jsonBytes({ why: 1 }) },
      attempts: [{ number: 1, promptAddedJson: jsonBytes([]), error: { code: "c" } }],
      config: { environmentId: "e_1", model: "m", temperature: 0, maxTokens: 0 },
      source: {},
      executionTime: 0n,
      createdAt: { seconds: 1_700_000_000n, nanos: 5 },
    });
    expectSameBytes(run);
  });

  it("writes the values protobuf-es writes where JSON has none", () => {
    const run = create(RunSchema, {
      id: "r_2",
      // Lone surrogates (fromJson refuses them, a template may output them): U+FFFD each.
      interactionName: "a\ud800b\udc00c",
      tags: ["\ud83d", "x".repeat(50) + "\udc00"],
      // Bytes of any length (a length past one byte's varint).
      resultJson: new Uint8Array(300).fill(0x61),
      config: { temperature: -0 },
      ttl: -5,
      executionTime: -3n,
    });
    expectSameBytes(run);
  });

  it("leaves unknown fields and values out of range to protobuf-es", () => {
    const known = create(RunSchema, { id: "r_3", status: RunStatus.FAILED });
    // Field 99 (a newer writer's): kept by fromBinary, written back by toBinary.
    const bytes = new Uint8Array([...toBinary(RunSchema, known), 0x98, 0x06, 0x01]);
    const decoded = fromBinary(RunSchema, bytes);
    expect(Buffer.from(encodeRun(decoded))).toEqual(Buffer.from(bytes));
    expect(encodedRunLength(decoded)).toBe(bytes.length);

    const wrong = create(RunSchema, { id: "r_4", ttl: 1.5 });
    expect(() => encodeRun(wrong)).toThrow(/cannot encode field pies.runs.v1.Run.ttl/);
    // Nothing of the failed attempt is left in the next encoding.
    expectSameBytes(known);

    // An int64 out of range is toBinary's error, not a wrapped number.
    const huge = create(RunSchema, { id: "r_5", executionTime: 2n ** 64n + 5n });
    expect(() => encodeRun(huge)).toThrow(/Run.execution_time|int64/);
    // The old payload fields (a run on its way to a release before decision 0059) are
    // protobuf-es's to write, the same bytes as toBinary's.
    const old = create(RunSchema, {
      id: "r_6",
      parameters: { a: 1 },
      result: fromJson(ValueSchema, ["b"]),
      error: { code: "c", data: fromJson(ValueSchema, null) },
    });
    expectSameBytes(old);
  });
});

describe("encodeRunAnswer", () => {
  it("writes toBinary's bytes for the answers that hold a run", () => {
    const random = seededRandom(11);
    for (let i = 0; i < 100; i++) {
      const run = fromJson(RunSchema, randomMessageJson(random, RunSchema, 3));
      const answers: [DescMessage, Message][] = [
        [ExecuteResponseSchema, create(ExecuteResponseSchema, { run })],
        [StartRunResponseSchema, create(StartRunResponseSchema, { started: i % 2 === 0, run })],
        [StartRunResponseSchema, create(StartRunResponseSchema, { started: true })],
        [GetRunResponseSchema, create(GetRunResponseSchema, { run })],
        [GetRunResponseSchema, create(GetRunResponseSchema)],
      ];
      for (const [schema, answer] of answers) {
        const bytes = encodeRunAnswer(schema, answer);
        expect(bytes, schema.typeName).toBeDefined();
        const same = Buffer.from(bytes!).equals(Buffer.from(toBinary(schema, answer)));
        expect(same, `${schema.typeName} of run ${i}`).toBe(true);
      }
    }
  });

  it("leaves other messages to protobuf-es", () => {
    expect(encodeRunAnswer(ListRunsResponseSchema, create(ListRunsResponseSchema))).toBeUndefined();
    expect(encodeRunAnswer(ExecuteRequestSchema, create(ExecuteRequestSchema))).toBeUndefined();
    // An answer with fields of a newer writer is protobuf-es's too.
    const decoded = fromBinary(GetRunResponseSchema, new Uint8Array([0x98, 0x06, 0x01]));
    expect(encodeRunAnswer(GetRunResponseSchema, decoded)).toBeUndefined();
  });
});
