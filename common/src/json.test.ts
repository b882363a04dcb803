import { describe, expect, it } from "vitest";
import { fromJson, toBinary, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { seededRandom } from "./json-sample.js";
import { toValue } from "./json.js";

function randomJson(random: () => number, depth: number): JsonValue {
  const r = random();
  if (depth <= 0 || r < 0.35) {
    const leaves: JsonValue[] = [null, true, false, 0, -1.5, 1e300, "", "text", "日本語 🎉"];
    return leaves[Math.floor(random() * leaves.length)]!;
  }
  if (r < 0.65) {
    return Array.from({ length: Math.floor(random() * 4) }, () => randomJson(random, depth - 1));
  }
  const object: { [k: string]: JsonValue } = {};
  for (const key of ["b", "a", "10", "2", "", "role"]) {
    if (random() < 0.5) object[key] = randomJson(random, depth - 1);
  }
  return object;
}

const nested = (levels: number): JsonValue => (levels === 0 ? "leaf" : [nested(levels - 1)]);

describe("toValue", () => {
  it("makes what fromJson(ValueSchema) makes, on random JSON", () => {
    const random = seededRandom(11);
    for (let i = 0; i < 500; i++) {
      const json = randomJson(random, 6);
      const expected = fromJson(ValueSchema, json);
      const value = toValue(json)!;
      expect(value).toStrictEqual(expected);
      expect(toBinary(ValueSchema, value)).toEqual(toBinary(ValueSchema, expected));
    }
  });

  it("keeps what fromJson does with values JSON cannot hold, and its errors", () => {
    expect(toValue(undefined)).toBeUndefined();
    for (const json of [
      NaN,
      -0,
      Infinity,
      { __proto__: 1 },
      JSON.parse('{"__proto__": {"a": 1}}'),
    ]) {
      expect(toValue(json)).toStrictEqual(fromJson(ValueSchema, json as JsonValue));
    }
    for (const json of [[1, undefined], { f: () => 1 }, nested(150), 10n]) {
      expect(() => toValue(json)).toThrow();
      expect(() => toValue(json)).toThrow(
        (() => {
          try {
            fromJson(ValueSchema, json as JsonValue);
          } catch (err) {
            return (err as Error).message;
          }
          return "no error";
        })(),
      );
    }
    // Nesting up to its limit is as fromJson builds it.
    expect(toValue(nested(95))).toStrictEqual(fromJson(ValueSchema, nested(95)));
  });
});
