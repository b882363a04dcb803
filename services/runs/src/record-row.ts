import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { jsonOf, NO_JSON, promptRefJson, type JsonValue } from "@pies/common";
import { decodeStoredRun } from "@pies/common/bus";
import type { RunStatus } from "@pies/proto/runs";
import {
  configColumn,
  jsonBytesColumn,
  jsonColumn,
  runToRow,
  sourceColumn,
  statusName,
} from "./mappers.js";

/** A run's columns as runToRow gives them. */
export type RunColumns = ReturnType<typeof runToRow>;

/** A decoded record: the run's id and status (which record of a run wins) and its columns. */
export interface RecordRow {
  id: string;
  status: RunStatus;
  row: RunColumns;
}

/** The fast reader met something only the full decoder handles the same way (see below). */
const unhandled = (): never => {
  throw new Error("unhandled");
};

/**
 * A record's columns, read from its protobuf bytes (pies.runs.v1.Run) straight into what runToRow
 * makes of the decoded message, its JSON payloads as the text they hold. The record writer decodes
 * every record of the log, and protobuf-es's reflective decoding of the message cost several times
 * this (docs/decisions/0059-json-payloads-as-bytes.md). Anything this reader does not handle
 * exactly as fromBinary and runToRow do (a repeated singular message, which the decoder would
 * merge; attempts; the old payload fields of a record from the release before; a wire type other
 * than the field's) goes through them instead, so the columns are the same either way; and
 * whatever fromBinary refuses
 * (invalid UTF-8, nesting past its recursion limit, a field it knows in a wire type it misreads)
 * this reader refuses too, so the record goes to fromBinary, which throws (the writer keeps it
 * aside: see writeRecords).
 */
export function recordRow(data: Uint8Array): RecordRow {
  const read = readRecordRow(data);
  if (read) return read;
  // Unhandled, or malformed bytes: the full decoder decides (and throws as it did).
  const run = decodeStoredRun(data);
  return { id: run.id, status: run.status, row: runToRow(run) };
}

/** The fast reader alone: undefined when the record needs the full decoder. */
export function readRecordRow(data: Uint8Array): RecordRow | undefined {
  try {
    return readRun(new BinaryReader(data), 1);
  } catch {
    return undefined;
  }
}

/**
 * fromBinary's recursion limit: it refuses a message nested deeper (the Run is at depth 1), and
 * skips an unknown group with what is left of it.
 */
const RECURSION_LIMIT = 100;

/**
 * The fields this reader handles, per message: read, or checked as fromBinary reads them and left
 * out (Run's cache_key, RunConfig's max_repairs: runToRow does not store them). A field added to
 * one of them fails the tests until it is handled.
 */
export const handledFields: Record<string, number[]> = {
  "pies.runs.v1.Run": [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
    27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
  ],
  "pies.runs.v1.RunPromptRef": [1, 2, 3, 4],
  "pies.runs.v1.RunConfig": [1, 2, 3, 4, 5, 6],
  "pies.runs.v1.RunSource": [1, 2, 3, 4, 5],
  "pies.runs.v1.TokenUsage": [1, 2, 3],
  "pies.runs.v1.RunError": [1, 2, 3, 4],
  "google.protobuf.Timestamp": [1, 2],
};

/** A nested message's depth, refused past fromBinary's limit. */
function deeper(depth: number): number {
  if (depth >= RECURSION_LIMIT) unhandled();
  return depth + 1;
}

/** Skips a field no message here knows, as fromBinary does (groups within what depth leaves). */
function skip(r: BinaryReader, wt: WireType, no: number, depth: number) {
  r.skip(wt, no, RECURSION_LIMIT - depth);
}

/** Reads the length of a length-delimited field and returns where it ends. */
function end(r: BinaryReader, wireType: WireType): number {
  if (wireType !== WireType.LengthDelimited) unhandled();
  const len = r.uint32();
  const to = r.pos + len;
  if (to > r.len) unhandled();
  return to;
}

function expect(wireType: WireType, expected: WireType) {
  if (wireType !== expected) unhandled();
}

function readRun(r: BinaryReader, depth: number): RecordRow {
  const inner = deeper(depth);
  let id = "";
  let projectId = "";
  let accountId = "";
  let interactionId = "";
  let interactionName = "";
  let environmentId = "";
  let environmentName = "";
  let modelId = "";
  let status = 0;
  let stream = false;
  let parameters: Uint8Array = NO_JSON;
  let result: Uint8Array = NO_JSON;
  let prompt: Uint8Array = NO_JSON;
  const tags: string[] = [];
  let config: RunConfigFields | undefined;
  let source: string[] | undefined;
  let tokens: [number, number, number] | undefined;
  let executionTime: number | null = null;
  let error: { code: string; message: string; data: Uint8Array } | undefined;
  let ttl = 0;
  let parentId = "";
  let cachePolicy: Uint8Array = NO_JSON;
  let resultSchema: Uint8Array = NO_JSON;
  let provider = "";
  let cached = false;
  let createdAt: Date | undefined;
  let updatedAt: Date | undefined;
  let cachedFrom = "";
  let interactionStatus = "";
  const interactionPrompts: JsonValue[] = [];
  let interactionUpdatedAt: Date | undefined;
  let projectName = "";
  let accountName = "";
  // Singular message fields seen: a second one would be merged into the first by fromBinary.
  let seen = 0;
  const once = (bit: number) => {
    if (seen & bit) unhandled();
    seen |= bit;
  };
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    switch (no) {
      case 1:
        id = str(r, wt);
        break;
      case 2:
        projectId = str(r, wt);
        break;
      case 3:
        accountId = str(r, wt);
        break;
      case 4:
        interactionId = str(r, wt);
        break;
      case 5:
        interactionName = str(r, wt);
        break;
      case 6:
        environmentId = str(r, wt);
        break;
      case 7:
        environmentName = str(r, wt);
        break;
      case 8:
        modelId = str(r, wt);
        break;
      case 9:
        expect(wt, WireType.Varint);
        status = r.int32();
        break;
      case 10:
        expect(wt, WireType.Varint);
        stream = r.bool();
        break;
      case 11:
      case 12:
      case 13:
      case 22:
      case 23:
        // The old payload fields (a record of the release before decision 0059): the full
        // decoder's, which moves them into their bytes.
        return unhandled();
      case 14:
        tags.push(str(r, wt));
        break;
      case 15:
        once(8);
        config = runConfig(r, end(r, wt), inner);
        break;
      case 16:
        once(16);
        source = strings(r, end(r, wt), 5, inner);
        break;
      case 17:
        once(32);
        tokens = tokenUse(r, end(r, wt), inner);
        break;
      case 18:
        expect(wt, WireType.Varint);
        executionTime = Number(r.int64());
        break;
      case 19:
        once(64);
        error = runError(r, end(r, wt), inner);
        break;
      case 20:
        expect(wt, WireType.Varint);
        ttl = r.int32();
        break;
      case 21:
        parentId = str(r, wt);
        break;
      case 24:
        provider = str(r, wt);
        break;
      case 25:
        expect(wt, WireType.Varint);
        cached = r.bool();
        break;
      case 26:
        once(512);
        createdAt = timestamp(r, end(r, wt), inner);
        break;
      case 27:
        once(1024);
        updatedAt = timestamp(r, end(r, wt), inner);
        break;
      case 28:
        // Attempts (a run that was repaired) are rare: their JSON is the full decoder's.
        return unhandled();
      case 29:
        cachedFrom = str(r, wt);
        break;
      case 30:
        // cache_key: not stored, but read as fromBinary reads it (it refuses invalid UTF-8).
        str(r, wt);
        break;
      case 31:
        interactionStatus = str(r, wt);
        break;
      case 32: {
        const ref = strings(r, end(r, wt), 4, inner);
        interactionPrompts.push(
          promptRefJson(ref[0] ?? "", ref[1] ?? "", ref[2] ?? "", ref[3] ?? ""),
        );
        break;
      }
      case 33:
        once(2048);
        interactionUpdatedAt = timestamp(r, end(r, wt), inner);
        break;
      case 34:
        projectName = str(r, wt);
        break;
      case 35:
        accountName = str(r, wt);
        break;
      case 36:
        parameters = bytes(r, wt);
        break;
      case 37:
        result = bytes(r, wt);
        break;
      case 38:
        prompt = bytes(r, wt);
        break;
      case 39:
        cachePolicy = bytes(r, wt);
        break;
      case 40:
        resultSchema = bytes(r, wt);
        break;
      default:
        skip(r, wt, no, depth);
    }
  }
  if (r.pos !== r.len) unhandled();
  const row: RunColumns = {
    created_at: createdAt,
    updated_at: updatedAt,
    id,
    project_id: projectId,
    account_id: accountId,
    interaction_id: interactionId,
    interaction_name: interactionName,
    environment_id: environmentId,
    environment_name: environmentName,
    provider,
    model_id: modelId,
    status: statusName(status),
    stream,
    parameters: jsonBytesColumn(parameters, "{}"),
    result: jsonBytesColumn(result),
    prompt: jsonBytesColumn(prompt),
    tags,
    config: configColumn(
      config ? config.environment : environmentId,
      config ? config.model : modelId,
      config ? config.formatter : "",
      config?.temperature,
      config?.maxTokens,
    ),
    source: sourceColumn(
      source?.[0] ?? "",
      source?.[1] ?? "",
      source?.[2] ?? "",
      source?.[3] ?? "",
      source?.[4] ?? "",
    ),
    prompt_tokens: tokens ? tokens[0] : null,
    result_tokens: tokens ? tokens[1] : null,
    total_tokens: tokens ? tokens[2] : null,
    execution_time: executionTime,
    error: jsonColumn(
      error ? { code: error.code, message: error.message, data: jsonOf(error.data) ?? null } : null,
    ),
    ttl,
    parent_id: parentId || null,
    cache_policy: jsonBytesColumn(cachePolicy),
    result_schema: jsonBytesColumn(resultSchema),
    cached,
    attempts: jsonColumn(null),
    cached_from: cachedFrom || null,
    interaction_status: interactionStatus,
    interaction_prompts: jsonColumn(interactionStatus ? interactionPrompts : null),
    interaction_updated_at: interactionUpdatedAt ?? null,
    project_name: projectName,
    account_name: accountName,
  };
  return { id, status, row };
}

/** A bytes field: the last one wins, as fromBinary reads it. */
function bytes(r: BinaryReader, wt: WireType): Uint8Array {
  expect(wt, WireType.LengthDelimited);
  return r.bytes();
}

function str(r: BinaryReader, wt: WireType): string {
  expect(wt, WireType.LengthDelimited);
  // Strict, as fromBinary reads proto3 strings: invalid UTF-8 throws.
  return r.string(true);
}

/** Message fields 1..n that are all strings (RunSource), "" when absent. */
function strings(r: BinaryReader, to: number, n: number, depth: number): string[] {
  const out = new Array<string>(n).fill("");
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no >= 1 && no <= n) out[no - 1] = str(r, wt);
    else skip(r, wt, no, depth);
  }
  if (r.pos !== to) unhandled();
  return out;
}

interface RunConfigFields {
  environment: string;
  model: string;
  formatter: string;
  temperature?: number;
  maxTokens?: number;
}

function runConfig(r: BinaryReader, to: number, depth: number): RunConfigFields {
  const config: RunConfigFields = { environment: "", model: "", formatter: "" };
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) config.environment = str(r, wt);
    else if (no === 2) config.model = str(r, wt);
    else if (no === 3) config.formatter = str(r, wt);
    else if (no === 4) {
      expect(wt, WireType.Bit64);
      config.temperature = r.double();
    } else if (no === 5) {
      expect(wt, WireType.Varint);
      config.maxTokens = r.int32();
    } else if (no === 6) {
      // max_repairs: not stored, but read as fromBinary reads it.
      expect(wt, WireType.Varint);
      r.int32();
    } else skip(r, wt, no, depth);
  }
  if (r.pos !== to) unhandled();
  return config;
}

function tokenUse(r: BinaryReader, to: number, depth: number): [number, number, number] {
  const use: [number, number, number] = [0, 0, 0];
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no >= 1 && no <= 3) {
      expect(wt, WireType.Varint);
      use[no - 1] = r.int32();
    } else skip(r, wt, no, depth);
  }
  if (r.pos !== to) unhandled();
  return use;
}

function runError(r: BinaryReader, to: number, depth: number) {
  let code = "";
  let message = "";
  let data: Uint8Array = NO_JSON;
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) code = str(r, wt);
    else if (no === 2) message = str(r, wt);
    // The old data field (legacy-payloads.ts) is the full decoder's.
    else if (no === 3) unhandled();
    else if (no === 4) data = bytes(r, wt);
    else skip(r, wt, no, depth);
  }
  if (r.pos !== to) unhandled();
  return { code, message, data };
}

function timestamp(r: BinaryReader, to: number, depth: number): Date {
  let seconds = 0;
  let nanos = 0;
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) {
      expect(wt, WireType.Varint);
      seconds = Number(r.int64());
    } else if (no === 2) {
      expect(wt, WireType.Varint);
      nanos = r.int32();
    } else skip(r, wt, no, depth);
  }
  if (r.pos !== to) unhandled();
  // As timestampDate computes it.
  return new Date(seconds * 1000 + Math.round(nanos / 1000000));
}
