import { createHash } from "node:crypto";
import type { JsonObject, JsonValue } from "./json.js";

// One JSON-Schema sampler for the two places that answer in place of a model: the executor's
// `test` provider (production code, seeded by the prompt) and the test kit's fake OpenAI server.
// json-schema-faker was measured as the alternative: seeded and valid, but far slower per sample,
// which the benchmark's fake upstream would pay on every request
// (docs/decisions/0052-own-json-schema-sampler.md). This
// module imports node built-ins only, so the fake server stays free of dependencies.

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

/** A 32-bit seed from the JSON of `value` (e.g. a request's messages): equal values, equal seeds. */
export function seedOf(value: unknown): number {
  return createHash("sha256").update(JSON.stringify(value)).digest().readUInt32LE(0);
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

/** Schemas nested deeper than this (recursive $refs) sample null rather than loop forever. */
const MAX_DEPTH = 8;
/** From this depth on, arrays get only the items they must have, so recursive schemas end. */
const SHALLOW_ARRAYS = 3;

const isObject = (v: unknown): v is JsonObject =>
  typeof v === "object" && v !== null && !Array.isArray(v);

const numberAt = (schema: JsonObject, key: string): number | undefined => {
  const v = schema[key];
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
};

/** Follows local `$ref`s (`#/$defs/X`, `#/definitions/X`, any JSON pointer into the root). */
function resolveRef(schema: JsonValue | undefined, root: JsonObject): JsonObject {
  let current = schema;
  for (let hops = 0; hops < MAX_DEPTH && isObject(current); hops++) {
    const ref = current.$ref;
    if (typeof ref !== "string") break;
    if (!ref.startsWith("#")) return {};
    let target: JsonValue | undefined = root;
    for (const raw of ref
      .slice(1)
      .split("/")
      .filter((p) => p !== "")) {
      const key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
      target = isObject(target)
        ? target[key]
        : Array.isArray(target)
          ? target[Number(key)]
          : undefined;
    }
    current = target;
  }
  return isObject(current) ? current : {};
}

/** The schema's type: the first non-"null" entry of `type`, else inferred from its keywords. */
function schemaType(schema: JsonObject): string {
  const t = schema.type;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const nonNull = t.find((x) => typeof x === "string" && x !== "null");
    return typeof nonNull === "string" ? nonNull : "null";
  }
  if (isObject(schema.properties) || Array.isArray(schema.required)) return "object";
  if (schema.items !== undefined || Array.isArray(schema.prefixItems)) return "array";
  return "string";
}

/**
 * A value that validates against `schema`, chosen by `random`: enums and consts, objects (every
 * property, required or not), arrays (prefixItems, minItems..maxItems), strings (min/maxLength;
 * formats date-time, date, time, email, uri, url, uuid), numbers and integers within their
 * (exclusive) bounds and multipleOf, booleans, nullable types, anyOf/oneOf (a non-null branch),
 * allOf (merged) and local $refs. Deterministic for a given `random` sequence.
 */
export function sampleJson(
  schema: JsonObject,
  random: () => number,
  root: JsonObject = schema,
  depth = 0,
): JsonValue {
  if (depth > MAX_DEPTH) return null;
  const s = resolveRef(schema, root);
  const next = (sub: JsonValue | undefined) =>
    sampleJson(resolveRef(sub, root), random, root, depth + 1);
  if ("const" in s) return s.const ?? null;
  if (Array.isArray(s.enum) && s.enum.length > 0) {
    return s.enum[Math.floor(random() * s.enum.length)] ?? null;
  }
  const alternatives = s.anyOf ?? s.oneOf;
  if (Array.isArray(alternatives) && alternatives.length > 0) {
    // A non-null branch, so that optional-but-nullable fields still carry data.
    return next(
      alternatives.find((o) => schemaType(resolveRef(o, root)) !== "null") ?? alternatives[0],
    );
  }
  if (Array.isArray(s.allOf)) {
    const merged: JsonObject = Object.assign({}, s, ...s.allOf.map((p) => resolveRef(p, root)));
    delete merged.allOf;
    return next(merged);
  }
  switch (schemaType(s)) {
    case "object": {
      const out: JsonObject = {};
      // Every property, not only required ones: strict structured outputs require all of them,
      // and optional ones are always allowed.
      for (const [key, sub] of Object.entries(isObject(s.properties) ? s.properties : {}))
        out[key] = next(sub);
      // Required names without a property schema still need a value.
      for (const key of Array.isArray(s.required) ? s.required : []) {
        if (typeof key === "string" && !(key in out)) out[key] = "value";
      }
      return out;
    }
    case "array": {
      const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : [];
      const shallow = depth < SHALLOW_ARRAYS;
      const min = Math.max(numberAt(s, "minItems") ?? (shallow ? 1 : 0), prefix.length);
      const max = Math.max(min, shallow ? (numberAt(s, "maxItems") ?? Math.max(min, 3)) : min);
      const count = min + Math.floor(random() * (max - min + 1));
      return Array.from({ length: count }, (_, i) => next(i < prefix.length ? prefix[i] : s.items));
    }
    case "integer":
      return sampleInteger(s, random);
    case "number":
      return sampleNumber(s, random);
    case "boolean":
      return random() < 0.5;
    case "null":
      return null;
    default:
      return sampleString(s, random);
  }
}

function sampleInteger(schema: JsonObject, random: () => number): number {
  const exclusiveMin = numberAt(schema, "exclusiveMinimum");
  const exclusiveMax = numberAt(schema, "exclusiveMaximum");
  const minimum = numberAt(schema, "minimum");
  const maximum = numberAt(schema, "maximum");
  const min = Math.max(
    Math.ceil(minimum ?? -Infinity),
    exclusiveMin !== undefined ? Math.floor(exclusiveMin) + 1 : -Infinity,
  );
  const lowest = Number.isFinite(min) ? min : 0;
  const max = Math.min(
    Math.floor(maximum ?? Infinity),
    exclusiveMax !== undefined ? Math.ceil(exclusiveMax) - 1 : Infinity,
  );
  const highest = Math.max(lowest, Number.isFinite(max) ? max : lowest + 100);
  const value = lowest + Math.floor(random() * (highest - lowest + 1));
  const step = numberAt(schema, "multipleOf");
  if (step === undefined || step <= 0) return value;
  // The multiple nearest above the value, or below it when that is out of range.
  const up = Math.ceil(value / step) * step;
  return up <= highest ? up : Math.floor(value / step) * step;
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
  const step = bound("multipleOf");
  // The middle 80% of the range never touches an exclusive bound.
  const value = min + (0.1 + 0.8 * random()) * (max - min);
  if (step !== undefined && step > 0) {
    const multiple = Math.round(value / step) * step;
    if (inside(multiple)) return multiple;
  }
  const rounded = Math.round(value * 100) / 100;
  return inside(rounded) ? rounded : value;
}

function sampleString(schema: JsonObject, random: () => number): string {
  const word = () => WORDS[Math.floor(random() * WORDS.length)] ?? "alpha";
  const day = () => new Date(Date.UTC(2026, 0, 1 + Math.floor(random() * 365))).toISOString();
  const two = (n: number) => String(n).padStart(2, "0");
  switch (schema.format) {
    case "date-time":
      return day();
    case "date":
      return day().slice(0, 10);
    case "time":
      return `${two(Math.floor(random() * 24))}:${two(Math.floor(random() * 60))}:00Z`;
    case "email":
      return `${word()}@example.com`;
    case "uri":
    case "url":
      return `https://example.com/${word()}`;
    case "uuid": {
      const hex = Array.from({ length: 32 }, () => Math.floor(random() * 16).toString(16)).join("");
      // Version 4, variant 10xx.
      return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20)}`;
    }
  }
  const min = numberAt(schema, "minLength") ?? 1;
  const max = numberAt(schema, "maxLength") ?? Infinity;
  let text = "";
  while (text.length < min || text === "") text += (text ? " " : "") + word();
  return text.slice(0, max);
}

/**
 * Valid JSON that does not satisfy `schema`, for the models that must answer wrongly (`test-invalid`
 * of the test provider, `invalid-json` of the fake server): an object without its required
 * properties, or with its first property of the wrong type, or a value of another type.
 */
export function violateJson(schema: JsonObject, root: JsonObject = schema): JsonValue {
  const s = resolveRef(schema, root);
  if (schemaType(s) === "object") {
    // Dropping required properties is the most common real-world failure.
    if (Array.isArray(s.required) && s.required.length > 0) return {};
    const first = Object.entries(isObject(s.properties) ? s.properties : {})[0];
    if (first) return { [first[0]]: wrongTypeFor(resolveRef(first[1], root)) };
    return "not an object";
  }
  return wrongTypeFor(s);
}

/** A value of a different JSON type than the one `schema` asks for. */
function wrongTypeFor(schema: JsonObject): JsonValue {
  if ("const" in schema || Array.isArray(schema.enum)) return { unexpected: true };
  switch (schemaType(schema)) {
    case "string":
      return 12345;
    case "number":
    case "integer":
      return "not a number";
    case "boolean":
      return "not a boolean";
    case "array":
      return "not an array";
    case "object":
      return "not an object";
    default:
      return "not null";
  }
}
