import type { JsonObject } from "@bufbuild/protobuf";
import { runToConnectJson } from "@pies/common";
import type { JsonCodec, JsonCodecs } from "@pies/common/server";
import type { CachePolicy } from "@pies/proto/catalog";
import type {
  Caller,
  ExecuteRequest,
  ExecuteResponse,
  ExecutionConfig,
} from "@pies/proto/executor";
import type { RunSource } from "@pies/proto/runs";

/**
 * The executor's Execute in Connect JSON, read and written by hand (json-codecs.ts): the gateway
 * sends every execution's request as JSON and reads its run as JSON, and protobuf-es's reflective
 * codec for the two cost more of the executor's CPU than its lean server (profiled: its JSON read,
 * with its scan of the text for repeated keys, and its JSON write of the run;
 * docs/decisions/0013-per-call-costs-cut.md).
 */
export const executorJsonCodecs: JsonCodecs = new Map<string, JsonCodec>([
  ["pies.executor.v1.ExecuteRequest", { read: readExecuteRequest } as JsonCodec],
  ["pies.executor.v1.ExecuteResponse", { write: writeExecuteResponse } as JsonCodec],
]);

/**
 * The JSON names this reader takes, by message: every field of each (connect-json.test.ts checks
 * them against the descriptors, so that a field added to one of them fails the test until it is
 * read here). A key not among them (a proto name, or a field of a newer caller, which protobuf-es
 * ignores) leaves the request to protobuf-es.
 */
export const EXECUTE_REQUEST_JSON_NAMES = {
  "pies.executor.v1.ExecuteRequest": [
    "caller",
    "interactionId",
    "interactionName",
    "stream",
    "data",
    "tags",
    "config",
    "parentRunId",
    "ttl",
  ],
  "pies.executor.v1.Caller": ["accountId", "projectId", "source", "accountName", "projectName"],
  "pies.runs.v1.RunSource": ["type", "label", "principalType", "principalId", "clientIp"],
  "pies.executor.v1.ExecutionConfig": [
    "environmentId",
    "model",
    "temperature",
    "maxTokens",
    "formatter",
    "cachePolicy",
    "maxRepairs",
  ],
  "pies.catalog.v1.CachePolicy": ["type", "ttl", "variesOn", "refreshProbability"],
};

/** Thrown (and caught in readExecuteRequest) when protobuf-es should read the request. */
const UNEXPECTED = Symbol("unexpected");

/**
 * An ExecuteRequest from its JSON (as JSON.parse made it), the message that `fromJson(
 * ExecuteRequestSchema, json, { ignoreUnknownFields: true })` makes of it, field for field; or
 * undefined for anything else, which protobuf-es then reads (or refuses, with its message):
 * a key it does not know, a null, a value of another type, an int32 out of range, a string that
 * is not well-formed UTF-16, `__proto__` or deep nesting in `data`. One difference, a key given
 * twice: JSON.parse keeps the last, where fromJsonString refuses the text; pies' callers write
 * their JSON with JSON.stringify, which never repeats one.
 */
export function readExecuteRequest(json: unknown): ExecuteRequest | undefined {
  try {
    return executeRequest(object(json));
  } catch (err) {
    if (err === UNEXPECTED) return undefined;
    throw err;
  }
}

/**
 * The answer's JSON, as toJsonString(ExecuteResponseSchema, …) writes it (runToConnectJson). Its
 * one field, `run` (connect-json.test.ts fails when ExecuteResponse has another, until it is
 * written here).
 */
export function writeExecuteResponse(response: ExecuteResponse): string | undefined {
  if (response.run === undefined) return "{}";
  const run = runToConnectJson(response.run);
  return run === undefined ? undefined : JSON.stringify({ run });
}

function executeRequest(json: Record<string, unknown>): ExecuteRequest {
  // create(ExecuteRequestSchema)'s zero message, its fields in the same order.
  const req: ExecuteRequest = {
    $typeName: "pies.executor.v1.ExecuteRequest",
    interaction: { case: undefined },
    stream: false,
    tags: [],
    parentRunId: "",
    ttl: 0,
  };
  for (const key in json) {
    const v = json[key];
    switch (key) {
      case "caller":
        req.caller = caller(object(v));
        break;
      case "interactionId":
      case "interactionName":
        // Both set: protobuf-es's error.
        if (req.interaction.case !== undefined) throw UNEXPECTED;
        req.interaction = { case: key, value: string(v) };
        break;
      case "stream":
        req.stream = bool(v);
        break;
      case "data":
        req.data = struct(v);
        break;
      case "tags":
        req.tags = strings(v);
        break;
      case "config":
        req.config = config(object(v));
        break;
      case "parentRunId":
        req.parentRunId = string(v);
        break;
      case "ttl":
        req.ttl = int32(v);
        break;
      default:
        throw UNEXPECTED;
    }
  }
  return req;
}

function caller(json: Record<string, unknown>): Caller {
  const c: Caller = {
    $typeName: "pies.executor.v1.Caller",
    accountId: "",
    projectId: "",
    accountName: "",
    projectName: "",
  };
  for (const key in json) {
    const v = json[key];
    switch (key) {
      case "accountId":
        c.accountId = string(v);
        break;
      case "projectId":
        c.projectId = string(v);
        break;
      case "source":
        c.source = source(object(v));
        break;
      case "accountName":
        c.accountName = string(v);
        break;
      case "projectName":
        c.projectName = string(v);
        break;
      default:
        throw UNEXPECTED;
    }
  }
  return c;
}

function source(json: Record<string, unknown>): RunSource {
  const s: RunSource = {
    $typeName: "pies.runs.v1.RunSource",
    type: "",
    label: "",
    principalType: "",
    principalId: "",
    clientIp: "",
  };
  for (const key in json) {
    const v = json[key];
    switch (key) {
      case "type":
      case "label":
      case "principalType":
      case "principalId":
      case "clientIp":
        s[key] = string(v);
        break;
      default:
        throw UNEXPECTED;
    }
  }
  return s;
}

function config(json: Record<string, unknown>): ExecutionConfig {
  const c: ExecutionConfig = {
    $typeName: "pies.executor.v1.ExecutionConfig",
    environmentId: "",
    model: "",
    formatter: "",
  };
  for (const key in json) {
    const v = json[key];
    switch (key) {
      case "environmentId":
      case "model":
      case "formatter":
        c[key] = string(v);
        break;
      case "temperature":
        c.temperature = double(v);
        break;
      case "maxTokens":
      case "maxRepairs":
        c[key] = int32(v);
        break;
      case "cachePolicy":
        c.cachePolicy = cachePolicy(object(v));
        break;
      default:
        throw UNEXPECTED;
    }
  }
  return c;
}

function cachePolicy(json: Record<string, unknown>): CachePolicy {
  const p: CachePolicy = { $typeName: "pies.catalog.v1.CachePolicy", type: "", variesOn: [] };
  for (const key in json) {
    const v = json[key];
    switch (key) {
      case "type":
        p.type = string(v);
        break;
      case "ttl":
        p.ttl = int32(v);
        break;
      case "variesOn":
        p.variesOn = strings(v);
        break;
      case "refreshProbability":
        p.refreshProbability = double(v);
        break;
      default:
        throw UNEXPECTED;
    }
  }
  return p;
}

/** A JSON object (null, an array or anything else: protobuf-es's). */
function object(v: unknown): Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw UNEXPECTED;
  return v as Record<string, unknown>;
}

/** A string field: protobuf-es refuses one that is not valid UTF-16 (a lone surrogate). */
function string(v: unknown): string {
  if (typeof v !== "string" || !(v as WellFormed).isWellFormed()) throw UNEXPECTED;
  return v;
}

/** String.prototype.isWellFormed (Node 20; the TypeScript lib here predates it). */
type WellFormed = string & { isWellFormed(): boolean };

function strings(v: unknown): string[] {
  if (!Array.isArray(v)) throw UNEXPECTED;
  for (const item of v) string(item);
  return v as string[];
}

function bool(v: unknown): boolean {
  if (typeof v !== "boolean") throw UNEXPECTED;
  return v;
}

/** A JSON number (protobuf-es also takes "NaN", "1.5" and the like: its to read). */
function double(v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v)) throw UNEXPECTED;
  return v;
}

function int32(v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v > 0x7fffffff || v < -0x80000000) {
    throw UNEXPECTED;
  }
  return v;
}

/**
 * Past this nesting `data` is left to protobuf-es, whose recursion limit (100, counting each
 * level of a Value and of the messages around it) would refuse it somewhere below 50 levels.
 */
const MAX_DEPTH = 32;

/**
 * A Struct field: the object JSON.parse made, as it is (no copy: it is this request's own), once
 * it is known to come out of protobuf-es's conversion (structFromJson, then the Struct back to
 * JSON) unchanged: JSON values all the way down, not too deep, and no own `__proto__` key, which
 * that conversion loses (it assigns the key, which sets the prototype).
 */
function struct(v: unknown): JsonObject {
  checkJson(object(v), 0);
  return v as JsonObject;
}

function checkJson(v: unknown, depth: number) {
  if (v === null) return;
  if (typeof v !== "object") {
    // A Value of anything else (undefined, a function) is protobuf-es's to refuse.
    if (typeof v !== "string" && typeof v !== "number" && typeof v !== "boolean") throw UNEXPECTED;
    return;
  }
  if (depth >= MAX_DEPTH) throw UNEXPECTED;
  if (Array.isArray(v)) {
    for (const item of v) checkJson(item, depth + 1);
    return;
  }
  for (const key in v) {
    if (key === "__proto__") throw UNEXPECTED;
    checkJson((v as Record<string, unknown>)[key], depth + 1);
  }
}
