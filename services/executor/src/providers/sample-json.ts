import type { JsonObject, JsonValue } from "@pies/common";

/** mulberry32: a small seeded generator, so the same seed always gives the same output. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = [
  "alpha",
  "bravo",
  "delta",
  "echo",
  "lima",
  "nova",
  "orbit",
  "prism",
  "quartz",
  "sierra",
];

/**
 * A value that validates against `schema`, chosen by `random`: enums and consts, objects (every
 * property), arrays (minItems..maxItems), strings (formats date-time, date, email, uri), numbers and
 * integers within their bounds, booleans, nullable types, anyOf/oneOf (the first) and allOf
 * (merged), and local $refs.
 */
export function sampleJson(
  schema: JsonObject,
  random: () => number,
  root = schema,
  depth = 0,
): JsonValue {
  if (depth > 8) return null;
  if (typeof schema.$ref === "string" && schema.$ref.startsWith("#/")) {
    const target = schema.$ref
      .slice(2)
      .split("/")
      .reduce<JsonValue | undefined>(
        (s, k) => (s && typeof s === "object" && !Array.isArray(s) ? s[k] : undefined),
        root,
      );
    return target && typeof target === "object" && !Array.isArray(target)
      ? sampleJson(target, random, root, depth + 1)
      : null;
  }
  if ("const" in schema) return schema.const ?? null;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) {
    return schema.enum[Math.floor(random() * schema.enum.length)] ?? null;
  }
  const alternatives = (schema.anyOf ?? schema.oneOf) as JsonObject[] | undefined;
  if (Array.isArray(alternatives) && alternatives[0]) {
    return sampleJson(alternatives[0], random, root, depth + 1);
  }
  if (Array.isArray(schema.allOf)) {
    const merged = Object.assign({}, ...(schema.allOf as JsonObject[]), { allOf: undefined });
    delete merged.allOf;
    return sampleJson(merged, random, root, depth + 1);
  }
  const types = Array.isArray(schema.type)
    ? schema.type
    : [schema.type ?? (schema.properties ? "object" : "string")];
  const type = String(types.find((t) => t !== "null") ?? "null");
  const num = (key: string) => numberAt(schema, key);
  switch (type) {
    case "object": {
      const properties = (schema.properties ?? {}) as Record<string, JsonObject>;
      const out: JsonObject = {};
      for (const [key, sub] of Object.entries(properties))
        out[key] = sampleJson(sub, random, root, depth + 1);
      return out;
    }
    case "array": {
      // Deep down, arrays get only the items they must have, so recursive schemas end.
      const shallow = depth < 3;
      const min = num("minItems") ?? (shallow ? 1 : 0);
      const max = Math.max(min, shallow ? (num("maxItems") ?? Math.max(min, 3)) : min);
      const count = min + Math.floor(random() * (max - min + 1));
      const items = (schema.items ?? {}) as JsonObject;
      return Array.from({ length: count }, () => sampleJson(items, random, root, depth + 1));
    }
    case "integer": {
      const exclusiveMin = num("exclusiveMinimum");
      const exclusiveMax = num("exclusiveMaximum");
      const min = Math.ceil(
        num("minimum") ?? (exclusiveMin !== undefined ? Math.floor(exclusiveMin) + 1 : 0),
      );
      const max = Math.max(
        min,
        Math.floor(
          num("maximum") ?? (exclusiveMax !== undefined ? Math.ceil(exclusiveMax) - 1 : min + 100),
        ),
      );
      return min + Math.floor(random() * (max - min + 1));
    }
    case "number":
      return sampleNumber(schema, random);
    case "boolean":
      return random() < 0.5;
    case "null":
      return null;
    default:
      return sampleString(schema, random);
  }
}

function numberAt(schema: JsonObject, key: string): number | undefined {
  return typeof schema[key] === "number" ? (schema[key] as number) : undefined;
}

/** A number within the bounds (strictly inside exclusive ones), with two decimals when they fit. */
function sampleNumber(schema: JsonObject, random: () => number): number {
  const bound = (key: string) => numberAt(schema, key);
  const exclusiveMin = bound("exclusiveMinimum");
  const exclusiveMax = bound("exclusiveMaximum");
  const min = bound("minimum") ?? exclusiveMin ?? 0;
  const max = Math.max(min, bound("maximum") ?? exclusiveMax ?? min + 100);
  const inside = (v: number) =>
    v >= min &&
    v <= max &&
    (exclusiveMin === undefined || v > exclusiveMin) &&
    (exclusiveMax === undefined || v < exclusiveMax);
  // The middle 80% of the range never touches an exclusive bound.
  const value = min + (0.1 + 0.8 * random()) * (max - min);
  const rounded = Math.round(value * 100) / 100;
  return inside(rounded) ? rounded : value;
}

function sampleString(schema: JsonObject, random: () => number): string {
  switch (schema.format) {
    case "date-time":
      return new Date(Date.UTC(2026, 0, 1 + Math.floor(random() * 365))).toISOString();
    case "date":
      return new Date(Date.UTC(2026, 0, 1 + Math.floor(random() * 365))).toISOString().slice(0, 10);
    case "email":
      return `${WORDS[Math.floor(random() * WORDS.length)]}@example.com`;
    case "uri":
      return `https://example.com/${WORDS[Math.floor(random() * WORDS.length)]}`;
  }
  const min = typeof schema.minLength === "number" ? schema.minLength : 1;
  const max = typeof schema.maxLength === "number" ? schema.maxLength : Infinity;
  let text = "";
  while (text.length < min || text === "") {
    text += (text ? " " : "") + WORDS[Math.floor(random() * WORDS.length)];
  }
  return text.slice(0, max);
}
