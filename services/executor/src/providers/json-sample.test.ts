import { sampleJson, seededRandom, violateJson, type JsonObject } from "@pies/common";
import { describe, expect, it } from "vitest";
import { SchemaValidator } from "../schemas.js";

// The shared JSON-Schema sampler (common/src/json-sample.ts) that the test provider and the fake
// OpenAI server answer with, checked here against the validator the executor checks results with.

const validator = new SchemaValidator();
const SEEDS = Array.from({ length: 200 }, (_, i) => i * 7919 + 1);

/** Samples with many seeds and returns the first sample that fails validation, with its errors. */
function firstInvalid(schema: JsonObject) {
  for (const seed of SEEDS) {
    const value = sampleJson(schema, seededRandom(seed));
    const errors = validator.errors(schema, value);
    if (errors.length > 0) return { seed, value, errors };
  }
  return undefined;
}

describe("seededRandom", () => {
  it("is deterministic per seed, in [0, 1), and differs between seeds", () => {
    const a = seededRandom(42);
    const b = seededRandom(42);
    const c = seededRandom(43);
    const seqA = Array.from({ length: 50 }, () => a());
    const seqB = Array.from({ length: 50 }, () => b());
    const seqC = Array.from({ length: 50 }, () => c());
    expect(seqA).toEqual(seqB);
    expect(seqA).not.toEqual(seqC);
    for (const x of [...seqA, ...seqC]) {
      expect(x).toBeGreaterThanOrEqual(0);
      expect(x).toBeLessThan(1);
    }
    expect(new Set(seqA).size).toBeGreaterThan(45);
  });
});

describe("sampleJson", () => {
  const schemas: Record<string, JsonObject> = {
    "nested objects": {
      type: "object",
      additionalProperties: false,
      required: ["user", "meta"],
      properties: {
        user: {
          type: "object",
          required: ["name", "age", "address"],
          properties: {
            name: { type: "string", minLength: 3, maxLength: 10 },
            age: { type: "integer", minimum: 18, maximum: 99 },
            address: {
              type: "object",
              required: ["city"],
              properties: { city: { type: "string" }, zip: { type: "string", maxLength: 5 } },
            },
          },
        },
        meta: {
          type: "object",
          properties: { active: { type: "boolean" }, note: { type: "null" } },
        },
      },
    },
    "arrays with bounds": {
      type: "object",
      required: ["tags", "matrix", "one"],
      properties: {
        tags: { type: "array", items: { type: "string" }, minItems: 2, maxItems: 4 },
        matrix: {
          type: "array",
          minItems: 3,
          items: { type: "array", items: { type: "integer" }, minItems: 1, maxItems: 2 },
        },
        one: { type: "array", items: { type: "number" }, minItems: 1, maxItems: 1 },
        many: {
          type: "array",
          items: { type: "object", properties: { id: { type: "integer" } }, required: ["id"] },
          minItems: 5,
        },
      },
    },
    enums: {
      type: "object",
      required: ["color", "size", "fixed", "mixed"],
      properties: {
        color: { enum: ["red", "green", "blue"] },
        size: { type: "string", enum: ["s", "m", "l"] },
        fixed: { const: 7 },
        mixed: { enum: [1, "two", null, true] },
      },
    },
    "integers and numbers with bounds": {
      type: "object",
      required: ["a", "b", "c", "d", "n", "big"],
      properties: {
        a: { type: "integer", minimum: -5, maximum: 5 },
        b: { type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 10 },
        c: { type: "integer", minimum: 3, maximum: 3 },
        d: { type: "integer", minimum: 1000 },
        n: { type: "number", minimum: 0, maximum: 1 },
        big: { type: "number", minimum: -1e6, maximum: 1e6 },
      },
    },
    formats: {
      type: "object",
      required: ["at", "day", "email", "uri"],
      properties: {
        at: { type: "string", format: "date-time" },
        day: { type: "string", format: "date" },
        email: { type: "string", format: "email" },
        uri: { type: "string", format: "uri" },
      },
    },
    "string lengths": {
      type: "object",
      required: ["long", "short", "exact"],
      properties: {
        long: { type: "string", minLength: 40 },
        short: { type: "string", maxLength: 2 },
        exact: { type: "string", minLength: 6, maxLength: 6 },
      },
    },
    "nullable, anyOf, oneOf and allOf": {
      type: "object",
      required: ["x", "y", "z", "w"],
      properties: {
        x: { type: ["string", "null"] },
        y: { anyOf: [{ type: "integer", minimum: 1 }, { type: "null" }] },
        z: { oneOf: [{ type: "string", format: "email" }, { type: "integer" }] },
        w: {
          allOf: [{ type: "object", properties: { p: { type: "boolean" } } }, { required: ["p"] }],
        },
      },
    },
    "local $refs": {
      type: "object",
      $defs: {
        point: {
          type: "object",
          required: ["x", "y"],
          properties: { x: { type: "number" }, y: { type: "number" } },
        },
      },
      definitions: { label: { type: "string", minLength: 2 } },
      required: ["origin", "path", "label"],
      properties: {
        origin: { $ref: "#/$defs/point" },
        path: { type: "array", items: { $ref: "#/$defs/point" }, minItems: 2 },
        label: { $ref: "#/definitions/label" },
      },
    },
    "top-level array": {
      type: "array",
      items: { type: "string", enum: ["a", "b"] },
      minItems: 1,
      maxItems: 3,
    },
    "top-level string": { type: "string" },
    "more formats, multipleOf, prefixItems and required names without a schema": {
      type: "object",
      required: ["id", "at", "link", "even", "half", "pair", "bare"],
      properties: {
        id: { type: "string", format: "uuid" },
        at: { type: "string", format: "time" },
        link: { type: "string", format: "url" },
        even: { type: "integer", minimum: 1, maximum: 9, multipleOf: 2 },
        half: { type: "number", minimum: 0, maximum: 3, multipleOf: 0.5 },
        pair: {
          type: "array",
          prefixItems: [{ type: "integer" }, { type: "string", format: "email" }],
          minItems: 2,
        },
      },
    },
    "properties without type": { properties: { a: { type: "integer" } }, required: ["a"] },
  };

  for (const [name, schema] of Object.entries(schemas)) {
    it(`answers values that validate: ${name}`, () => {
      expect(firstInvalid(schema)).toBeUndefined();
    });
  }

  it("is deterministic for a seed and varies with it", () => {
    const schema = schemas["nested objects"]!;
    expect(sampleJson(schema, seededRandom(1))).toEqual(sampleJson(schema, seededRandom(1)));
    const distinct = new Set(
      SEEDS.slice(0, 20).map((s) => JSON.stringify(sampleJson(schema, seededRandom(s)))),
    );
    expect(distinct.size).toBeGreaterThan(10);
  });

  it("covers every enum value and the whole array length range across seeds", () => {
    const colors = new Set<unknown>();
    const lengths = new Set<number>();
    for (const seed of SEEDS) {
      colors.add(sampleJson({ enum: ["red", "green", "blue"] }, seededRandom(seed)));
      lengths.add(
        (sampleJson({ type: "array", minItems: 2, maxItems: 4 }, seededRandom(seed)) as unknown[])
          .length,
      );
    }
    expect([...colors].sort()).toEqual(["blue", "green", "red"]);
    expect([...lengths].sort()).toEqual([2, 3, 4]);
  });

  it("fills every property, required or not", () => {
    const value = sampleJson(
      {
        type: "object",
        properties: { a: { type: "string" }, b: { type: "integer" }, c: { type: "boolean" } },
      },
      seededRandom(3),
    ) as JsonObject;
    expect(Object.keys(value).sort()).toEqual(["a", "b", "c"]);
  });

  // Once a bug: exclusive bounds were turned into inclusive ones by ±1 whatever the type, so a
  // number in (0, 1) got the value 1.
  it("keeps numbers strictly inside exclusive bounds", () => {
    expect(
      firstInvalid({
        type: "object",
        required: ["confidence"],
        properties: { confidence: { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 1 } },
      }),
    ).toBeUndefined();
  });

  // Once a bug: a recursive $ref (a tree of nodes with children) reached the depth cut, because
  // arrays had at least one item, and the null there violated the node schema.
  it("answers valid values for a recursive $ref schema", () => {
    expect(
      firstInvalid({
        type: "object",
        $defs: {
          node: {
            type: "object",
            required: ["name", "children"],
            properties: {
              name: { type: "string" },
              children: { type: "array", items: { $ref: "#/$defs/node" } },
            },
          },
        },
        required: ["root"],
        properties: { root: { $ref: "#/$defs/node" } },
      }),
    ).toBeUndefined();
  });

  it("prefers a non-null branch of anyOf, so nullable fields carry data", () => {
    for (const seed of SEEDS.slice(0, 20)) {
      const value = sampleJson(
        { anyOf: [{ type: "null" }, { type: "integer" }] },
        seededRandom(seed),
      );
      expect(typeof value).toBe("number");
    }
  });
});

describe("violateJson", () => {
  const schemas: Record<string, JsonObject> = {
    "required properties": {
      type: "object",
      required: ["a"],
      properties: { a: { type: "string" } },
    },
    "an optional property": { type: "object", properties: { n: { type: "integer" } } },
    "an optional $ref property": {
      type: "object",
      $defs: { flag: { type: "boolean" } },
      properties: { f: { $ref: "#/$defs/flag" } },
    },
    "an object without properties": { type: "object" },
    "a string": { type: "string" },
    "an array": { type: "array", items: { type: "string" } },
    "an enum": { enum: ["a", "b"] },
  };
  for (const [name, schema] of Object.entries(schemas)) {
    it(`answers JSON that does not validate: ${name}`, () => {
      expect(validator.errors(schema, violateJson(schema))).not.toEqual([]);
    });
  }
});
