import { describe, expect, it } from "vitest";
import {
  create,
  fromBinary,
  fromJson,
  ScalarType,
  toBinary,
  type DescField,
  type DescMessage,
  type JsonValue,
} from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { RunSchema, RunStatus, type Run } from "@pies/proto/runs";
import { seededRandom } from "../json-sample.js";
import { encodeRun } from "./run-binary.js";

type Random = () => number;

const pick = <T>(random: Random, items: readonly T[]): T =>
  items[Math.floor(random() * items.length)]!;

/** Strings that test the UTF-8 and length paths: empty, ASCII, multi-byte, long. */
function randomString(random: Random): string {
  const kinds = [
    () => "",
    () => "r_" + Math.floor(random() * 1e9).toString(36),
    () => "héllo wörld — ∑ 日本語 🎉",
    () => "x".repeat(40 + Math.floor(random() * 200)), // lengths around the one-byte varint limit
    () => "é".repeat(60 + Math.floor(random() * 100)),
    () => "🎉".repeat(Math.floor(random() * 50)),
    () => "z".repeat(20_000 + Math.floor(random() * 2_000)), // past the starting buffer
  ];
  return pick(random, kinds)();
}

function randomJson(random: Random, depth: number): JsonValue {
  const leaves: (() => JsonValue)[] = [
    () => null,
    () => random() < 0.5,
    () => Math.floor(random() * 2 ** 40) - 2 ** 39,
    () => random() * 1e6 - 5e5,
    () => 0,
    () => randomString(random),
  ];
  if (depth <= 0 || random() < 0.4) return pick(random, leaves)();
  if (random() < 0.5) {
    return Array.from({ length: Math.floor(random() * 5) }, () => randomJson(random, depth - 1));
  }
  return randomObject(random, depth - 1);
}

function randomObject(random: Random, depth: number): { [k: string]: JsonValue } {
  const object: { [k: string]: JsonValue } = {};
  const keys = ["text", "", "10", "2", "a key", "ключ", "nested", "z"];
  for (let i = Math.floor(random() * 6); i > 0; i--) {
    object[pick(random, keys)] = randomJson(random, depth);
  }
  return object;
}

/**
 * The proto3 JSON of a message of `schema` with every field set (sometimes to its zero value):
 * built from the descriptors, so that a field added to Run or to a message in it is set here and
 * shows in toBinary's bytes.
 */
function randomMessageJson(random: Random, schema: DescMessage, depth: number): JsonValue {
  switch (schema.typeName) {
    case "google.protobuf.Struct":
      return randomObject(random, 3);
    case "google.protobuf.Value":
      return randomJson(random, 4);
    case "google.protobuf.Timestamp":
      return new Date(Math.floor(random() * 4e12)).toISOString().replace("Z", "123456Z");
  }
  const json: { [k: string]: JsonValue } = {};
  for (const field of schema.fields) {
    const value = randomFieldJson(random, field, depth);
    if (value !== undefined) json[field.jsonName] = value;
  }
  return json;
}

function randomFieldJson(random: Random, field: DescField, depth: number): JsonValue | undefined {
  const one = (): JsonValue | undefined => {
    switch (field.fieldKind) {
      case "scalar":
        return randomScalar(random, field.scalar);
      case "enum":
        return pick(random, field.enum.values).name;
      case "message":
        return depth > 0 && random() < 0.9
          ? randomMessageJson(random, field.message, depth - 1)
          : undefined;
      case "list":
        return undefined;
      case "map":
        throw new Error(`no map fields expected in a run (${field.name})`);
    }
  };
  if (field.fieldKind !== "list") return one();
  const items: JsonValue[] = [];
  for (let i = Math.floor(random() * 4); i > 0; i--) {
    if (field.listKind === "message")
      items.push(randomMessageJson(random, field.message, depth - 1));
    else if (field.listKind === "enum") items.push(pick(random, field.enum.values).name);
    else items.push(randomScalar(random, field.scalar));
  }
  return items;
}

function randomScalar(random: Random, scalar: ScalarType): JsonValue {
  switch (scalar) {
    case ScalarType.STRING:
      return randomString(random);
    case ScalarType.BOOL:
      return random() < 0.5;
    case ScalarType.INT32:
      return pick(random, [0, 1, 127, 128, 300, 2 ** 31 - 1, -1, -(2 ** 31)]);
    case ScalarType.INT64:
      return pick(random, ["0", "1", "250", "4294967296", "9223372036854775807", "-1", "-86400"]);
    case ScalarType.DOUBLE:
      return pick(random, [0, 0.7, -2.5, 1e300, 1]);
    default:
      throw new Error(`no ${ScalarType[scalar]} fields expected in a run`);
  }
}

const expectSameBytes = (run: Run) =>
  expect(Buffer.from(encodeRun(run)).toString("hex")).toBe(
    Buffer.from(toBinary(RunSchema, run)).toString("hex"),
  );

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
      parameters: { text: "fox", n: 3, ok: true, none: null, list: [1, "two"], o: { "1": {} } },
      prompt: fromJson(ValueSchema, [{ role: "user", content: "Summarise fox" }]),
      result: fromJson(ValueSchema, "an answer"),
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
      // A Struct held as JSON with a key set to undefined: a Value with no kind.
      parameters: { gone: undefined } as never,
      result: { $typeName: "google.protobuf.Value", kind: { case: "numberValue", value: NaN } },
      prompt: { $typeName: "google.protobuf.Value", kind: { case: undefined } },
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

    const wrong = create(RunSchema, { id: "r_4", ttl: 1.5 });
    expect(() => encodeRun(wrong)).toThrow(/cannot encode field pies.runs.v1.Run.ttl/);
    // Nothing of the failed attempt is left in the next encoding.
    expectSameBytes(known);

    // An int64 out of range is toBinary's error, not a wrapped number.
    const huge = create(RunSchema, { id: "r_5", executionTime: 2n ** 64n + 5n });
    expect(() => encodeRun(huge)).toThrow(/Run.execution_time|int64/);
    // A Struct that is an array is refused as toBinary refuses it; an own `__proto__` (from
    // JSON.parse) is written as toBinary writes it.
    const list = create(RunSchema, { id: "r_6" });
    (list as { parameters: unknown }).parameters = ["a", 1];
    expect(() => encodeRun(list)).toThrow();
    const proto = create(RunSchema, {
      id: "r_7",
      parameters: JSON.parse('{"__proto__": {"a": 1}, "b": {"__proto__": 2}}'),
    });
    expect(Buffer.from(encodeRun(proto))).toEqual(Buffer.from(toBinary(RunSchema, proto)));
  });
});
