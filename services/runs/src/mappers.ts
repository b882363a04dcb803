import { clone, create } from "@bufbuild/protobuf";
import {
  fromTimestamp,
  jsonBytes,
  jsonOf,
  jsonTextOf,
  NO_JSON,
  promptRefJson,
  restRunJson,
  toTimestamp,
  type JsonObject,
  type JsonValue,
  type PromptRefJson,
  type RunFields,
} from "@pies/common";
import {
  RunSchema,
  RunStatus,
  runStatuses,
  RunStore,
  runStores,
  type Run,
  type RunAttempt,
  type RunUpdate,
} from "@pies/proto/runs";
import type { RunRow } from "./tables.js";

/** The stored name of a status; "" for the unspecified one. */
export const statusName = (status: RunStatus) => runStatuses.name(status) ?? "";

/** The status of a stored name; unspecified for any other string. */
export const statusFromName = (name: string): RunStatus =>
  runStatuses.value(name) ?? RunStatus.UNSPECIFIED;

const str = (json: JsonObject, key: string) => (typeof json[key] === "string" ? json[key] : "");
const num = (json: JsonObject, key: string) =>
  typeof json[key] === "number" ? (json[key] as number) : undefined;

/** A stored run (the heartbeat and record sequence are bookkeeping, not part of the run). */
type StoredRun = Omit<RunRow, "heartbeat_at" | "record_seq">;
/** The heavy columns that lists do not read. */
type Unlisted = "prompt" | "result_schema" | "attempts";
/** A run as lists read it: without the prompt, the output schema and the attempts. */
export type ListedRun = Omit<StoredRun, Unlisted>;

/** A run's token use, from its columns (none without a total). */
const tokenUseOf = (row: ListedRun) =>
  row.total_tokens === null
    ? undefined
    : { prompt: row.prompt_tokens ?? 0, result: row.result_tokens ?? 0, total: row.total_tokens };

/** A run's cost, from its columns (none without a total). */
const costOf = (row: ListedRun) =>
  row.cost_total === null
    ? undefined
    : {
        input: row.cost_input ?? 0,
        output: row.cost_output ?? 0,
        total: row.cost_total,
        currency: "USD",
        estimated: row.cost_estimated ?? false,
      };

/** A run row as a message; a listed one has no prompt, output schema or attempts. */
export function runToProto(row: ListedRun & Partial<Pick<StoredRun, Unlisted>>): Run {
  const config = row.config ?? {};
  const source = row.source ?? {};
  const error = row.error;
  return create(RunSchema, {
    id: row.id,
    projectId: row.project_id,
    accountId: row.account_id,
    interactionId: row.interaction_id,
    interactionName: row.interaction_name,
    environmentId: row.environment_id,
    environmentName: row.environment_name,
    provider: row.provider,
    modelId: row.model_id,
    status: statusFromName(row.status),
    stream: row.stream,
    parametersJson: jsonBytes(row.parameters),
    resultJson: row.result === null ? NO_JSON : jsonBytes(row.result),
    promptJson: row.prompt === null || row.prompt === undefined ? NO_JSON : jsonBytes(row.prompt),
    tags: row.tags,
    store: storeOf(config),
    config: {
      environmentId: str(config, "environment"),
      model: str(config, "model"),
      formatter: str(config, "formatter"),
      temperature: num(config, "temperature"),
      maxTokens: num(config, "max_tokens"),
    },
    source: {
      type: str(source, "type"),
      label: str(source, "label"),
      principalType: str(source, "principal_type"),
      principalId: str(source, "principal_id"),
      clientIp: str(source, "client_ip"),
    },
    tokenUse: tokenUseOf(row),
    executionTime: row.execution_time === null ? undefined : BigInt(row.execution_time),
    cost: costOf(row),
    error: error
      ? {
          code: str(error, "code"),
          message: str(error, "message"),
          dataJson: error.data === null ? NO_JSON : jsonBytes(error.data),
        }
      : undefined,
    ttl: row.ttl,
    parentId: row.parent_id ?? "",
    cachePolicyJson: jsonBytes(row.cache_policy ?? undefined),
    resultSchemaJson: jsonBytes(row.result_schema ?? undefined),
    cached: row.cached,
    cachedFrom: row.cached_from ?? "",
    attempts: (row.attempts ?? []).map((a) => attemptOfJson(a)),
    createdAt: toTimestamp(row.created_at),
    updatedAt: toTimestamp(row.updated_at),
    interactionStatus: row.interaction_status,
    interactionPrompts: (row.interaction_prompts ?? []).map((p) => promptRefOfJson(p)),
    interactionUpdatedAt: toTimestamp(row.interaction_updated_at ?? undefined),
    projectName: row.project_name,
    accountName: row.account_name,
  });
}

/**
 * A stored attempt (attemptJson's: the protobuf JSON mapping of RunAttempt as the releases before
 * decision 0059 stored it, which rows keep) as the run's message has it.
 */
function attemptOfJson(json: JsonValue) {
  const a = (json ?? {}) as JsonObject;
  const error = a.error as JsonObject | undefined;
  const usage = a.tokenUse as JsonObject | undefined;
  return {
    number: num(a, "number") ?? 0,
    promptAddedJson: jsonBytes(a.promptAdded),
    error: error && {
      code: str(error, "code"),
      message: str(error, "message"),
      dataJson: jsonBytes(error.data),
    },
    tokenUse: usage && {
      prompt: num(usage, "prompt") ?? 0,
      result: num(usage, "result") ?? 0,
      total: num(usage, "total") ?? 0,
    },
    environmentId: str(a, "environmentId"),
    model: str(a, "model"),
    durationMs: num(a, "durationMs") ?? 0,
  };
}

/** An attempt as its row keeps it (attemptOfJson reads it back). */
function attemptJson(a: RunAttempt): JsonObject {
  const json: JsonObject = {};
  if (a.number !== 0) json.number = a.number;
  const added = jsonOf(a.promptAddedJson);
  if (added !== undefined) json.promptAdded = added;
  if (a.error) json.error = errorJson(a.error);
  if (a.tokenUse) {
    const { prompt, result, total } = a.tokenUse;
    json.tokenUse = {
      ...(prompt !== 0 ? { prompt } : {}),
      ...(result !== 0 ? { result } : {}),
      ...(total !== 0 ? { total } : {}),
    };
  }
  if (a.environmentId) json.environmentId = a.environmentId;
  if (a.model) json.model = a.model;
  if (a.durationMs !== 0) json.durationMs = a.durationMs;
  return json;
}

/** A stored segment (promptRefJson's) as the run's message has it. */
function promptRefOfJson(json: JsonValue) {
  const p = (json ?? {}) as JsonObject;
  return {
    id: str(p, "id"),
    type: str(p, "type"),
    templateId: str(p, "template"),
    chatPath: str(p, "chat_path"),
  };
}

/**
 * A listed run's fields as the REST API renders them (restRunJson), the same as runToProto's
 * message gives (the gateway's runJson of it), without building the message: its jsonb columns
 * are JSON already.
 */
export function rowFields(row: ListedRun): RunFields {
  const config = row.config ?? {};
  const source = row.source ?? {};
  const error = row.error;
  return {
    id: row.id,
    status: runStatuses.name(statusFromName(row.status)) ?? "created",
    interactionId: row.interaction_id,
    interactionName: row.interaction_name,
    interactionStatus: row.interaction_status,
    interactionPrompts: (row.interaction_prompts as PromptRefJson[] | null) ?? undefined,
    interactionUpdatedAt: row.interaction_updated_at ?? undefined,
    environmentId: row.environment_id,
    environmentName: row.environment_name,
    modelId: row.model_id,
    parameters: row.parameters ?? undefined,
    result: row.result ?? undefined,
    // Lists read neither the prompt nor the attempts.
    prompt: undefined,
    store: str(config, "store") || undefined,
    tags: row.tags,
    config: {
      environment: str(config, "environment"),
      model: str(config, "model"),
      formatter: str(config, "formatter"),
      temperature: num(config, "temperature"),
      max_tokens: num(config, "max_tokens"),
    },
    source: {
      type: str(source, "type"),
      label: str(source, "label"),
      principal_type: str(source, "principal_type"),
      principal_id: str(source, "principal_id"),
      client_ip: str(source, "client_ip"),
    },
    tokenUse: tokenUseOf(row),
    executionTime: row.execution_time === null ? undefined : Number(row.execution_time),
    cost: costOf(row),
    error: error
      ? { code: str(error, "code"), message: str(error, "message"), data: error.data ?? undefined }
      : undefined,
    ttl: row.ttl,
    stream: row.stream,
    parentId: row.parent_id ?? "",
    accountId: row.account_id,
    accountName: row.account_name,
    projectId: row.project_id,
    projectName: row.project_name,
    cached: row.cached,
    cachedFrom: row.cached_from ?? "",
    cachePolicy: row.cache_policy ?? undefined,
    attempts: [],
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/**
 * Rows as the JSON array the REST API answers (GET /runs, POST /runs/search's `results`), in
 * UTF-8: what ListRunsResponse.runs_json carries.
 */
export const rowsJson = (rows: ListedRun[]) =>
  Buffer.from(JSON.stringify(rows.map((row) => restRunJson(rowFields(row)))));

/**
 * JSON text for a jsonb column. PostgreSQL cannot store NUL (\u0000) in jsonb, and a model's answer
 * may contain one: it is recorded as U+FFFD rather than failing the write and leaving the run
 * unrecorded. (An escaped backslash followed by "u0000" is left alone.)
 */
export const jsonColumn = (v: unknown) => withoutNul(JSON.stringify(v ?? null));

/**
 * A payload's JSON text (json-bytes.ts) for a jsonb column, as jsonColumn; `none` when empty.
 * Parsed once to be sure it is JSON: a text that is not would fail the insert of its whole batch,
 * where a record that throws here is kept aside (record-writer.ts) and a call refused.
 */
export function jsonBytesColumn(bytes: Uint8Array, none = "null"): string {
  const text = jsonTextOf(bytes);
  if (text === undefined) return none;
  try {
    JSON.parse(text);
  } catch (err) {
    throw new Error(`a payload is not JSON (${(err as Error).message})`);
  }
  return withoutNul(text);
}

function withoutNul(text: string) {
  // Most texts have no NUL: the look-behind scan is skipped for them.
  return text.includes("\\u0000") ? text.replace(/(?<!\\)((?:\\\\)*)\\u0000/g, "$1\\ufffd") : text;
}

/**
 * Column values of a new run (its dates, when it has them, are its own; the store's clock when
 * undefined). One literal, no spread: an object spread before its thirty properties made V8 build
 * it the slow way (docs/decisions/0014-record-put-without-reflection.md).
 */
export function runToRow(run: Run) {
  return {
    created_at: fromTimestamp(run.createdAt),
    updated_at: fromTimestamp(run.updatedAt),
    id: run.id,
    project_id: run.projectId,
    account_id: run.accountId,
    interaction_id: run.interactionId,
    interaction_name: run.interactionName,
    environment_id: run.environmentId,
    environment_name: run.environmentName,
    provider: run.provider,
    model_id: run.modelId,
    status: statusName(run.status),
    stream: run.stream,
    parameters: jsonBytesColumn(run.parametersJson, "{}"),
    result: jsonBytesColumn(run.resultJson),
    prompt: jsonBytesColumn(run.promptJson),
    tags: run.tags,
    config: configColumn(
      run.config?.environmentId ?? run.environmentId,
      run.config?.model ?? run.modelId,
      run.config?.formatter ?? "",
      run.config?.temperature,
      run.config?.maxTokens,
      run.store,
    ),
    source: sourceColumn(
      run.source?.type ?? "",
      run.source?.label ?? "",
      run.source?.principalType ?? "",
      run.source?.principalId ?? "",
      run.source?.clientIp ?? "",
    ),
    ...tokenColumns(run.tokenUse),
    execution_time: run.executionTime === undefined ? null : Number(run.executionTime),
    cost_input: run.cost ? run.cost.input : null,
    cost_output: run.cost ? run.cost.output : null,
    cost_total: run.cost ? run.cost.total : null,
    cost_estimated: run.cost ? run.cost.estimated : null,
    error: jsonColumn(run.error ? errorJson(run.error) : null),
    ttl: run.ttl,
    parent_id: run.parentId || null,
    cache_policy: jsonBytesColumn(run.cachePolicyJson),
    result_schema: jsonBytesColumn(run.resultSchemaJson),
    cached: run.cached,
    attempts: jsonColumn(run.attempts.length > 0 ? run.attempts.map(attemptJson) : null),
    cached_from: run.cachedFrom || null,
    interaction_status: run.interactionStatus,
    interaction_prompts: jsonColumn(
      run.interactionStatus
        ? run.interactionPrompts.map((p) => promptRefJson(p.id, p.type, p.templateId, p.chatPath))
        : null,
    ),
    interaction_updated_at: fromTimestamp(run.interactionUpdatedAt) ?? null,
    project_name: run.projectName,
    account_name: run.accountName,
  };
}

/**
 * The `config` column: the settings a run used (the record reader in record-row.ts writes it
 * through this too, so the two cannot disagree). A metadata-only run's says so (`store`), which
 * explains its empty payloads to whoever reads it: a key in this JSON column rather than a column
 * of its own (docs/decisions/0063-metadata-only-runs.md).
 */
export function configColumn(
  environment: string,
  model: string,
  formatter: string,
  temperature: number | undefined,
  maxTokens: number | undefined,
  store = RunStore.UNSPECIFIED,
) {
  return jsonColumn({
    environment,
    model,
    formatter,
    ...(temperature !== undefined ? { temperature } : {}),
    ...(maxTokens !== undefined ? { max_tokens: maxTokens } : {}),
    ...(store === RunStore.METADATA ? { store: runStores.name(store) } : {}),
  });
}

/** The store setting a `config` column records (unspecified, kept whole, when none). */
const storeOf = (config: JsonObject) =>
  runStores.value(str(config, "store")) ?? RunStore.UNSPECIFIED;

/** The `source` column: where a run came from (shared with record-row.ts, as configColumn). */
export function sourceColumn(
  type: string,
  label: string,
  principalType: string,
  principalId: string,
  clientIp: string,
) {
  return jsonColumn({
    type,
    label,
    principal_type: principalType,
    principal_id: principalId,
    client_ip: clientIp,
  });
}

function tokenColumns(usage: Run["tokenUse"]) {
  return {
    prompt_tokens: usage ? usage.prompt : null,
    result_tokens: usage ? usage.result : null,
    total_tokens: usage ? usage.total : null,
  };
}

function errorJson(error: NonNullable<Run["error"]>) {
  return { code: error.code, message: error.message, data: jsonOf(error.dataJson) ?? null };
}

/** The run with an update applied (only the fields it carries). */
export function applyUpdate(run: Run, update: RunUpdate): Run {
  const next = clone(RunSchema, run);
  if (update.status !== RunStatus.UNSPECIFIED) next.status = update.status;
  if (update.resultJson.length > 0) next.resultJson = update.resultJson;
  if (update.promptJson.length > 0) next.promptJson = update.promptJson;
  if (update.tokenUse !== undefined) next.tokenUse = update.tokenUse;
  if (update.executionTime !== undefined) next.executionTime = update.executionTime;
  if (update.error !== undefined) next.error = update.error;
  return next;
}
