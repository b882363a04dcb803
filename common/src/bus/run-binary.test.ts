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
import {
  decodeRun,
  decodeRunAnswer,
  encodedRunLength,
  encodeRun,
  encodeRunAnswer,
  readRunBytes,
} from "./run-binary.js";
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

/** A random run with every field of this release set (the old payload fields left out). */
function currentRun(random: () => number): Run {
  const run = fromJson(RunSchema, randomMessageJson(random, RunSchema, 3));
  const m = run as unknown as Record<string, unknown>;
  for (const f of RunSchema.fields) if (f.deprecated) delete m[f.localName];
  if (run.error) delete (run.error as { data?: unknown }).data;
  for (const a of run.attempts) {
    delete (a as { promptAdded?: unknown }).promptAdded;
    if (a.error) delete (a.error as { data?: unknown }).data;
  }
  return run;
}

describe("decodeRun", () => {
  it("reads fromBinary's message, by hand, for runs with every field set, at random", () => {
    const random = seededRandom(13);
    for (let i = 0; i < 400; i++) {
      const bytes = toBinary(RunSchema, currentRun(random));
      const fast = readRunBytes(bytes);
      expect(fast, `run ${i} went to protobuf-es`).toBeDefined();
      expect(fast).toEqual(fromBinary(RunSchema, bytes));
    }
  });

  it("leaves to protobuf-es what only it reads the same way, and refuses what it refuses", () => {
    const known = toBinary(RunSchema, create(RunSchema, { id: "r", status: RunStatus.FAILED }));
    const cases = {
      // A newer writer's field: protobuf-es keeps it.
      unknown: new Uint8Array([...known, 0x98, 0x06, 0x01]),
      // The old result (field 12): read into its bytes by decodeStoredRun.
      old: toBinary(RunSchema, create(RunSchema, { id: "o", result: fromJson(ValueSchema, 1) })),
      // A second config: protobuf-es merges the two.
      merged: new Uint8Array([0x7a, 0x02, 0x0a, 0x00, 0x7a, 0x03, 0x12, 0x01, 0x6d]),
    };
    for (const [name, bytes] of Object.entries(cases)) {
      expect(readRunBytes(bytes), name).toBeUndefined();
      expect(decodeRun(bytes), name).toEqual(fromBinary(RunSchema, bytes));
    }
    for (const bad of [
      new Uint8Array([0x0a, 0x02, 0x61, 0xff]), // invalid UTF-8 in id
      new Uint8Array([0x0a, 0x05, 0x61]), // cut short
    ]) {
      expect(readRunBytes(bad)).toBeUndefined();
      expect(() => decodeRun(bad)).toThrow();
    }
  });

  it("reads the answers that hold a run as fromBinary does", () => {
    const random = seededRandom(17);
    for (let i = 0; i < 50; i++) {
      const run = currentRun(random);
      const answers: [DescMessage, Message][] = [
        [ExecuteResponseSchema, create(ExecuteResponseSchema, { run })],
        [StartRunResponseSchema, create(StartRunResponseSchema, { started: i % 2 === 0, run })],
        [GetRunResponseSchema, create(GetRunResponseSchema)],
      ];
      for (const [schema, answer] of answers) {
        const bytes = toBinary(schema, answer);
        const read = decodeRunAnswer(schema, bytes);
        expect(read, schema.typeName).toBeDefined();
        expect(read).toEqual(fromBinary(schema, bytes));
      }
    }
    expect(decodeRunAnswer(ListRunsResponseSchema, new Uint8Array())).toBeUndefined();
  });
});
