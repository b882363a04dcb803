import { ScalarType, type DescField, type DescMessage, type JsonValue } from "@bufbuild/protobuf";

// Random runs for the tests of the hand-written encoder of a run (run-binary.ts) and its copy:
// their JSON is built from the descriptors, so that a field added to Run or to a message in it is
// set here, and shows in protobuf-es's output, which the codec under test must then match.

export type Random = () => number;

const pick = <T>(random: Random, items: readonly T[]): T =>
  items[Math.floor(random() * items.length)]!;

/** Strings that test the UTF-8 and length paths: empty, ASCII, multi-byte, long. */
export function randomString(random: Random): string {
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

export function randomJson(random: Random, depth: number): JsonValue {
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

export function randomObject(random: Random, depth: number): { [k: string]: JsonValue } {
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
export function randomMessageJson(random: Random, schema: DescMessage, depth: number): JsonValue {
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
    case ScalarType.BYTES:
      // The JSON payloads (json-bytes.ts): JSON text, base64 in the protobuf JSON mapping.
      return Buffer.from(
        JSON.stringify(
          pick(random, [{}, null, "text", [1, "two", { three: 3 }], { a: { b: [true, 1.5] } }]),
        ),
      ).toString("base64");
    default:
      throw new Error(`no ${ScalarType[scalar]} fields expected in a run`);
  }
}
