import type { ListValue, Struct, Timestamp, Value } from "@bufbuild/protobuf/wkt";
import {
  RunStatus,
  RunStatusSchema,
  type Run,
  type RunAttempt,
  type RunConfig,
  type RunError,
  type RunPromptRef,
  type RunSource,
  type TokenUsage,
} from "@pies/proto/runs";
import type { JsonObject, JsonValue } from "./json.js";

/**
 * `toJson(RunSchema, run)`, the same JSON, written by hand for `pies.runs.v1.Run` and the messages
 * it holds: the Connect JSON of a run as the executor answers a blocking execution with it
 * (`JSON.stringify` of this is `toJsonString`'s text). protobuf-es writes JSON by reflection, a
 * reflected message and field lookups per field, its Struct fields (JsonObject here) turned into
 * Struct messages first and back into JSON: most of its cost was that, not the text. Fields in
 * number order under their JSON names, each written when protobuf-es counts it as set (implicit
 * presence: not the zero value; explicit: not undefined), enums by name, int64 as a string,
 * timestamps in RFC 3339, Struct and Value as plain JSON, converted as protobuf-es converts them
 * (an own `__proto__` key is lost, as there). Anything it does not expect (a value of the wrong
 * type, a number JSON cannot carry where protobuf-es throws, a Value without a kind, a timestamp
 * out of range) gives undefined: protobuf-es writes it, or throws, as before. run-connect-json.test.ts
 * compares the text with toJsonString's and fails when Run or a message in it gains a field this
 * does not know.
 */
export function runToConnectJson(run: Run): JsonObject | undefined {
  try {
    return writeRun(run);
  } catch (err) {
    if (err === UNEXPECTED) return undefined;
    throw err;
  }
}

/** Thrown (and caught in runToConnectJson) when protobuf-es should write the message instead. */
const UNEXPECTED = Symbol("unexpected");

/**
 * RunStatus's JSON names, by number, from the descriptor protobuf-es writes them from (it writes
 * an unknown number as the number).
 */
const STATUS_NAMES: Record<number, string> = Object.fromEntries(
  RunStatusSchema.values.map((v) => [v.number, v.name]),
);

/** An implicit-presence string: written unless "". */
function str(json: JsonObject, key: string, v: unknown) {
  if (typeof v !== "string") throw UNEXPECTED;
  if (v !== "") json[key] = v;
}

/** An implicit-presence bool: written unless false. */
function bool(json: JsonObject, key: string, v: unknown) {
  if (typeof v !== "boolean") throw UNEXPECTED;
  if (v) json[key] = v;
}

/** An int32 as protobuf-es writes it: a number (never checked for range by its JSON writer). */
function int32(v: unknown): number {
  if (typeof v !== "number") throw UNEXPECTED;
  return v;
}

/** An implicit-presence int32: written unless 0 (-0 and 0 alike). */
function implicitInt32(json: JsonObject, key: string, v: unknown) {
  if (int32(v) != 0) json[key] = v as number;
}

/** A double: NaN and the infinities as their JSON strings. */
function double(v: unknown): JsonValue {
  if (typeof v !== "number") throw UNEXPECTED;
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "Infinity";
  if (v === -Infinity) return "-Infinity";
  return v;
}

function writeRun(run: Run): JsonObject {
  const json: JsonObject = {};
  str(json, "id", run.id);
  str(json, "projectId", run.projectId);
  str(json, "accountId", run.accountId);
  str(json, "interactionId", run.interactionId);
  str(json, "interactionName", run.interactionName);
  str(json, "environmentId", run.environmentId);
  str(json, "environmentName", run.environmentName);
  str(json, "modelId", run.modelId);
  const status = run.status as unknown;
  if (typeof status !== "number") throw UNEXPECTED;
  if (status !== RunStatus.UNSPECIFIED) json.status = STATUS_NAMES[status] ?? status;
  bool(json, "stream", run.stream);
  if (run.parameters !== undefined) json.parameters = structOfJson(run.parameters, 0);
  if (run.result !== undefined) json.result = value(run.result, 0);
  if (run.prompt !== undefined) json.prompt = value(run.prompt, 0);
  const tags = run.tags as unknown;
  if (!Array.isArray(tags)) throw UNEXPECTED;
  if (tags.length > 0) {
    for (const tag of tags) if (typeof tag !== "string") throw UNEXPECTED;
    json.tags = tags.slice() as string[];
  }
  if (run.config !== undefined) json.config = config(run.config);
  if (run.source !== undefined) json.source = source(run.source);
  if (run.tokenUse !== undefined) json.tokenUse = tokenUsage(run.tokenUse);
  if (run.executionTime !== undefined) json.executionTime = int64(run.executionTime);
  if (run.error !== undefined) json.error = error(run.error);
  implicitInt32(json, "ttl", run.ttl);
  str(json, "parentId", run.parentId);
  if (run.cachePolicy !== undefined) json.cachePolicy = structOfJson(run.cachePolicy, 0);
  if (run.resultSchema !== undefined) json.resultSchema = structOfJson(run.resultSchema, 0);
  str(json, "provider", run.provider);
  bool(json, "cached", run.cached);
  if (run.createdAt !== undefined) json.createdAt = timestamp(run.createdAt);
  if (run.updatedAt !== undefined) json.updatedAt = timestamp(run.updatedAt);
  const attempts = run.attempts as unknown;
  if (!Array.isArray(attempts)) throw UNEXPECTED;
  if (attempts.length > 0) json.attempts = (attempts as RunAttempt[]).map(attempt);
  str(json, "cachedFrom", run.cachedFrom);
  str(json, "cacheKey", run.cacheKey);
  str(json, "interactionStatus", run.interactionStatus);
  const prompts = run.interactionPrompts as unknown;
  if (!Array.isArray(prompts)) throw UNEXPECTED;
  if (prompts.length > 0) json.interactionPrompts = (prompts as RunPromptRef[]).map(promptRef);
  if (run.interactionUpdatedAt !== undefined)
    json.interactionUpdatedAt = timestamp(run.interactionUpdatedAt);
  str(json, "projectName", run.projectName);
  str(json, "accountName", run.accountName);
  return json;
}

function promptRef(p: RunPromptRef): JsonObject {
  const m = message(p);
  const json: JsonObject = {};
  str(json, "id", m.id);
  str(json, "type", m.type);
  str(json, "templateId", m.templateId);
  str(json, "chatPath", m.chatPath);
  return json;
}

/** An int64 (bigint, or a string or integer as protobuf-es takes them) as a decimal string. */
function int64(v: unknown): string {
  if (typeof v === "bigint" || typeof v === "string") return v.toString();
  if (typeof v === "number" && Number.isInteger(v)) return v.toString();
  throw UNEXPECTED;
}

function message(v: unknown): Record<string, unknown> {
  if (typeof v !== "object" || v === null) throw UNEXPECTED;
  return v as Record<string, unknown>;
}

function config(c: RunConfig): JsonObject {
  const m = message(c);
  const json: JsonObject = {};
  str(json, "environmentId", m.environmentId);
  str(json, "model", m.model);
  str(json, "formatter", m.formatter);
  if (m.temperature !== undefined) json.temperature = double(m.temperature);
  if (m.maxTokens !== undefined) json.maxTokens = int32(m.maxTokens);
  if (m.maxRepairs !== undefined) json.maxRepairs = int32(m.maxRepairs);
  return json;
}

function source(s: RunSource): JsonObject {
  const m = message(s);
  const json: JsonObject = {};
  str(json, "type", m.type);
  str(json, "label", m.label);
  str(json, "principalType", m.principalType);
  str(json, "principalId", m.principalId);
  str(json, "clientIp", m.clientIp);
  return json;
}

function tokenUsage(u: TokenUsage): JsonObject {
  const m = message(u);
  const json: JsonObject = {};
  implicitInt32(json, "prompt", m.prompt);
  implicitInt32(json, "result", m.result);
  implicitInt32(json, "total", m.total);
  return json;
}

function error(e: RunError): JsonObject {
  const m = message(e);
  const json: JsonObject = {};
  str(json, "code", m.code);
  str(json, "message", m.message);
  if (m.data !== undefined) json.data = value(m.data as Value, 0);
  return json;
}

function attempt(a: RunAttempt): JsonObject {
  const m = message(a);
  const json: JsonObject = {};
  implicitInt32(json, "number", m.number);
  if (m.promptAdded !== undefined) json.promptAdded = value(m.promptAdded as Value, 0);
  if (m.error !== undefined) json.error = error(m.error as RunError);
  if (m.tokenUse !== undefined) json.tokenUse = tokenUsage(m.tokenUse as TokenUsage);
  return json;
}

/** timestampToJson's bounds (0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z), in ms. */
const MIN_MS = Date.parse("0001-01-01T00:00:00Z");
const MAX_MS = Date.parse("9999-12-31T23:59:59Z");

/** RFC 3339 with 0, 3, 6 or 9 digits of fraction, as protobuf-es's timestampToJson. */
function timestamp(t: Timestamp): string {
  const m = message(t);
  const { seconds, nanos } = m;
  if (typeof seconds !== "bigint" || typeof nanos !== "number") throw UNEXPECTED;
  const ms = Number(seconds) * 1000;
  if (ms < MIN_MS || ms > MAX_MS || nanos < 0 || nanos > 999_999_999) throw UNEXPECTED;
  let z = "Z";
  if (nanos > 0) {
    const digits = (nanos + 1_000_000_000).toString().substring(1);
    if (digits.substring(3) === "000000") z = "." + digits.substring(0, 3) + "Z";
    else if (digits.substring(6) === "000") z = "." + digits.substring(0, 6) + "Z";
    else z = "." + digits + "Z";
  }
  return new Date(ms).toISOString().replace(".000Z", z);
}

/**
 * Past this nesting the structure is left to protobuf-es (a stack it may overflow is its to
 * overflow; the runs pies makes are nested far less).
 */
const MAX_DEPTH = 64;

/** A google.protobuf.Value message as JSON (valueToJson). */
function value(v: Value, depth: number): JsonValue {
  const kind = message(message(v).kind);
  switch (kind.case) {
    case "nullValue":
      return null;
    case "numberValue":
      if (typeof kind.value !== "number" || !Number.isFinite(kind.value)) throw UNEXPECTED;
      return kind.value;
    case "boolValue":
      if (typeof kind.value !== "boolean") throw UNEXPECTED;
      return kind.value;
    case "stringValue":
      if (typeof kind.value !== "string") throw UNEXPECTED;
      return kind.value;
    case "structValue":
      return struct(kind.value as Struct, depth + 1);
    case "listValue":
      return list(kind.value as ListValue, depth + 1);
    default:
      throw UNEXPECTED;
  }
}

function struct(s: Struct, depth: number): JsonObject {
  if (depth > MAX_DEPTH) throw UNEXPECTED;
  const fields = message(message(s).fields);
  const json: JsonObject = {};
  for (const [key, v] of Object.entries(fields)) {
    // protobuf-es assigns it, which sets the prototype: the key is not in its JSON.
    if (key === "__proto__") continue;
    json[key] = value(v as Value, depth);
  }
  return json;
}

function list(l: ListValue, depth: number): JsonValue[] {
  if (depth > MAX_DEPTH) throw UNEXPECTED;
  const values = message(l).values;
  if (!Array.isArray(values)) throw UNEXPECTED;
  return values.map((v: Value) => value(v, depth));
}

/**
 * A Struct field held as JSON (protobuf-es's JsonObject), as protobuf-es writes it: converted to
 * a Struct (wktStructToReflect) and back, so each JSON value through a Value.
 */
function structOfJson(obj: unknown, depth: number): JsonObject {
  if (depth > MAX_DEPTH || typeof obj !== "object" || obj === null || Array.isArray(obj)) {
    throw UNEXPECTED;
  }
  const json: JsonObject = {};
  for (const [key, v] of Object.entries(obj)) {
    if (key === "__proto__") continue;
    json[key] = jsonOfJson(v, depth);
  }
  return json;
}

/** One JSON value as a Value made of it (wktValueToReflect) and written (valueToJson) makes it. */
function jsonOfJson(v: unknown, depth: number): JsonValue {
  switch (typeof v) {
    case "number":
      if (!Number.isFinite(v)) throw UNEXPECTED;
      return v;
    case "string":
    case "boolean":
      return v;
    case "object":
      if (v === null) return null;
      if (Array.isArray(v)) {
        if (depth + 1 > MAX_DEPTH) throw UNEXPECTED;
        const items: JsonValue[] = [];
        // for…of, as protobuf-es iterates: a hole is undefined (a Value without a kind).
        for (const item of v as unknown[]) items.push(jsonOfJson(item, depth + 1));
        return items;
      }
      return structOfJson(v, depth + 1);
    default:
      // undefined, a function, a bigint: a Value without a kind, which protobuf-es refuses.
      throw UNEXPECTED;
  }
}
