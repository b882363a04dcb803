import type { JsonObject, JsonValue } from "./json.js";

/**
 * A run as the REST API answers it (SPEC.md "GET /runs", "GET /runs/{id}"): the one definition of
 * that shape. The gateway renders the runs it holds as messages with it (`runJson`), and the runs
 * service renders list and search pages with it straight from their rows, once, into the bytes the
 * gateway sends as they are (ListRunsRequest.as_json): decoding a page of 100 runs into messages
 * with Struct/Value fields and building these objects again cost the gateway more than the rest of
 * a read (docs/decisions/0020-runs-pages-passed-through.md).
 *
 * Its input is the run's fields as plain JSON values, which both sources give cheaply: a message
 * (fromValue of its Value fields) and a row (its jsonb columns are JSON already).
 */
export interface RunFields {
  id: string;
  /** SPEC.md's status name ("created" for an unset one). */
  status: string;
  interactionId: string;
  interactionName: string;
  /** The interaction's status when the run executed ("" when the run does not say: older runs). */
  interactionStatus: string;
  /** Its segments as promptRefJson renders them; undefined when the run does not say. */
  interactionPrompts: PromptRefJson[] | undefined;
  interactionUpdatedAt: Date | undefined;
  environmentId: string;
  environmentName: string;
  modelId: string;
  parameters: JsonObject | undefined;
  result: JsonValue | undefined;
  prompt: JsonValue | undefined;
  /**
   * What the runs store keeps of the run when not all of it (`metadata`: no parameters, prompt or
   * result); undefined for a run kept whole.
   */
  store: string | undefined;
  tags: string[];
  config:
    | {
        environment: string;
        model: string;
        formatter: string;
        temperature: number | undefined;
        max_tokens: number | undefined;
      }
    | undefined;
  tokenUse: TokenUseFields | undefined;
  /** Milliseconds. */
  executionTime: number | undefined;
  error: RunErrorFields | undefined;
  source:
    | {
        type: string;
        label: string;
        principal_type: string;
        principal_id: string;
        client_ip: string;
      }
    | undefined;
  ttl: number;
  stream: boolean;
  /** "" for a top-level run. */
  parentId: string;
  accountId: string;
  accountName: string;
  projectId: string;
  projectName: string;
  cached: boolean;
  /** "" unless cached. */
  cachedFrom: string;
  cachePolicy: JsonObject | undefined;
  attempts: RunAttemptFields[];
  /** USD; undefined for a run of a model of no known price. */
  cost: RunCostFields | undefined;
  createdAt: Date | undefined;
  updatedAt: Date | undefined;
}

/** A segment of a run's interaction reference: its template by id, or a chat segment's path. */
export interface PromptRefJson {
  [key: string]: string;
  id: string;
  type: string;
}

export interface TokenUseFields {
  prompt: number;
  result: number;
  total: number;
}

export interface RunErrorFields {
  code: string;
  message: string;
  /** undefined and null alike are left out. */
  data: JsonValue | undefined;
}

export interface RunCostFields {
  input: number;
  output: number;
  total: number;
  currency: string;
  estimated: boolean;
}

export interface RunAttemptFields {
  number: number;
  promptAdded: JsonValue | undefined;
  error: RunErrorFields | undefined;
  tokenUse: TokenUseFields | undefined;
  /** "" when the run does not record it (a run of a plain environment's repairs). */
  environmentId: string;
  model: string;
  durationMs: number;
}

/**
 * Drops undefined members so that they are absent from the JSON rather than null. A copy (in the
 * same order): deleting members would turn the object into a slow dictionary for JSON.stringify.
 */
export function compact<T extends Record<string, unknown>>(obj: T): T {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(obj)) if (obj[key] !== undefined) out[key] = obj[key];
  return out as T;
}

const tokenUseJson = (u: TokenUseFields | undefined) =>
  u ? { prompt: u.prompt, result: u.result, total: u.total } : undefined;

const errorJson = (e: RunErrorFields | undefined) =>
  e ? compact({ code: e.code, message: e.message, data: e.data ?? undefined }) : undefined;

/** One provider call of a run (a run with repairs has several). */
const attemptJson = (a: RunAttemptFields) =>
  compact({
    number: a.number,
    prompt_added: a.promptAdded ?? [],
    error: errorJson(a.error),
    token_use: tokenUseJson(a.tokenUse),
    environment: a.environmentId || undefined,
    model: a.model || undefined,
    duration_ms: a.environmentId ? a.durationMs : undefined,
  });

/**
 * A segment of the interaction a run executed, as SPEC.md's interaction reference lists it (and
 * GET /interactions does): its template by id, a chat segment's path instead.
 */
export function promptRefJson(
  id: string,
  type: string,
  templateId: string,
  chatPath: string,
): PromptRefJson {
  return type === "chat"
    ? { id, type, chat_path: chatPath }
    : { id, type: type || "template", template: templateId };
}

/**
 * The interaction a run executed, as SPEC.md's reference object: `{id, name, status, prompts,
 * updated_at}` (status, prompts and updated_at as they were at the execution; left out for a run
 * recorded before runs carried them).
 */
const interactionRefJson = (run: RunFields) =>
  compact({
    id: run.interactionId,
    name: run.interactionName,
    status: run.interactionStatus || undefined,
    prompts: run.interactionPrompts,
    updated_at: run.interactionUpdatedAt?.toISOString(),
  });

/** A run as JSON, with SPEC.md's field names. */
export function restRunJson(run: RunFields) {
  return compact({
    id: run.id,
    status: run.status,
    interaction: interactionRefJson(run),
    environment: { id: run.environmentId, name: run.environmentName },
    modelId: run.modelId,
    parameters: run.parameters ?? {},
    result: run.result,
    prompt: run.prompt,
    // Next to the payloads it explains: a metadata-only run's are empty wherever it is read.
    store: run.store,
    tags: run.tags,
    config: compact({
      environment: run.config?.environment,
      model: run.config?.model,
      formatter: run.config?.formatter || undefined,
      temperature: run.config?.temperature,
      max_tokens: run.config?.max_tokens,
    }),
    temperature: run.config?.temperature,
    max_tokens: run.config?.max_tokens,
    token_use: tokenUseJson(run.tokenUse),
    cost: run.cost && {
      input: run.cost.input,
      output: run.cost.output,
      total: run.cost.total,
      currency: run.cost.currency,
      estimated: run.cost.estimated,
    },
    execution_time: run.executionTime,
    error: errorJson(run.error),
    source: run.source
      ? {
          type: run.source.type,
          label: run.source.label,
          principal_type: run.source.principal_type,
          principal_id: run.source.principal_id,
          client_ip: run.source.client_ip,
        }
      : undefined,
    ttl: run.ttl || undefined,
    stream: run.stream,
    parent: run.parentId || undefined,
    account: { id: run.accountId, name: run.accountName },
    project: { id: run.projectId, name: run.projectName },
    cached: run.cached || undefined,
    cached_from: run.cachedFrom || undefined,
    cache_policy: run.cachePolicy,
    attempts: run.attempts.length > 0 ? run.attempts.map(attemptJson) : undefined,
    created_at: run.createdAt?.toISOString(),
    updated_at: run.updatedAt?.toISOString(),
  });
}

export type RestRun = ReturnType<typeof restRunJson>;
