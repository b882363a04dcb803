import { timestampNow } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  checkGenerationSettings,
  invalid,
  isNewId,
  jsonBytes,
  jsonOf,
  newId,
  VIRTUAL_PROVIDER,
  type JsonObject,
  type JsonValue,
} from "@pies/common";
import {
  interactionStatuses,
  type CachePolicy,
  type Environment,
  type Interaction,
  type PromptSegment,
  type RoutedEnvironment,
} from "@pies/proto/catalog";
import type { ExecuteRequest } from "@pies/proto/executor";
import { zeroRun } from "@pies/common/bus";
import { RunStatus, RunStore, type Run, type RunConfig, type RunPromptRef } from "@pies/proto/runs";
import { DEFAULT_MAX_REPAIRS } from "./call.js";
import { configOf, resultSchemaOf } from "./catalog-payloads.js";
import type { ExecutorDeps } from "./context.js";
import { ResultCache, type CacheMode } from "./result-cache.js";
import type { CompletionRequest } from "./providers/types.js";
import { mergedInputSchema, SchemaError } from "./schemas.js";
import { PromptTooLarge, TemplateError } from "./templates/render.js";

const DEFAULT_TEMPERATURE = 0.7;

/** An execution ready to go: the run to record and the provider call to make. */
export interface PreparedExecution {
  run: Run;
  environment: Environment;
  apiKey: string;
  /** A virtual environment's: the environments its entries name. */
  routes: RoutedEnvironment[];
  request: CompletionRequest;
  /** Repairs allowed when the answer fails the output schema. */
  maxRepairs: number;
  /** Set when the cache policy caches: the policy, and what it asks of this execution. */
  cache?: { policy: CachePolicy; mode: CacheMode };
}

/**
 * Steps 1–4 of an execution (DESIGN.md §4): resolve the interaction, merge the configuration
 * (request > interaction > environment), validate the input data and render the prompt. Every
 * problem with the request is INVALID_ARGUMENT (or NOT_FOUND from the catalog) before any run is
 * recorded.
 */
export async function prepareExecution(
  deps: ExecutorDeps,
  req: ExecuteRequest,
): Promise<PreparedExecution> {
  const caller = req.caller;
  if (!caller?.projectId) throw invalid("caller project is required");
  if (!req.interaction.case || !req.interaction.value) throw invalid("interaction is required");
  const { interaction, environment, apiKey, routes } = await deps.resolver.resolve({
    projectId: caller.projectId,
    interaction: req.interaction,
    environmentId: req.config?.environmentId ?? "",
  });
  if (!interaction || !environment)
    throw new ConnectError("catalog answered no interaction", Code.Internal);

  const data = requestData(req.dataJson);
  checkInput(deps, interaction, data);
  const resultSchema = resultSchemaOf(interaction);
  if (resultSchema) compileOutputSchema(deps, resultSchema);
  const messages = await render(deps, interaction, data, caller.projectId);

  // A virtual environment's entries name their models (the run names the one that answers).
  const virtual = environment.provider === VIRTUAL_PROVIDER;
  const model = virtual ? "" : req.config?.model || interaction.model || environment.defaultModel;
  if (!model && !virtual)
    throw invalid(
      `no model: neither the request, interaction ${interaction.id} nor environment ${environment.id} names one`,
    );
  if (
    !virtual &&
    environment.enabledModels.length > 0 &&
    !environment.enabledModels.includes(model)
  ) {
    throw invalid(`model ${model} is not enabled in environment ${environment.id}`);
  }
  const temperature = req.config?.temperature ?? interaction.temperature ?? DEFAULT_TEMPERATURE;
  const maxTokens = req.config?.maxTokens ?? interaction.maxTokens;
  checkGenerationSettings({ temperature, maxTokens });
  const maxRepairs = repairsOf(req.config?.maxRepairs, environment);
  const request: CompletionRequest = {
    model,
    messages,
    temperature,
    maxTokens,
    schema: resultSchema,
  };
  // Nothing of the cache is done for an interaction whose policy does not cache (the hot path),
  // nor for a metadata-only one: its results are kept nowhere, the cache included.
  const metadataOnly = interaction.store === RunStore.METADATA;
  const policy = metadataOnly ? undefined : (req.config?.cachePolicy ?? interaction.cachePolicy);
  const mode = ResultCache.mode(policy);

  // Field by field on a zero run of V8's fast kind (see zeroRun), as create() would set them.
  const run = Object.assign(zeroRun(), newRunOf(caller, interaction, environment, model));
  if (req.runId) run.id = callersRunId(req);
  run.stream = req.stream;
  run.tags = req.tags;
  // (At most six days, as PIES_RUN_TTL_SECONDS: docs/decisions/0064.)
  run.ttl = req.stream ? Math.min(req.ttl || deps.runTtlSeconds, 518_400) : 0;
  // A metadata-only run's input waits for its stream no longer than it is kept.
  if (metadataOnly) run.ttl = Math.min(run.ttl, deps.inputs.maxAgeSeconds);
  run.parentId = req.parentRunId;
  // The request's own bytes: the data is recorded as it came.
  run.parametersJson = req.dataJson.length > 0 ? req.dataJson : jsonBytes(data);
  run.promptJson = jsonBytes(messages);
  const config = zeroRunConfig();
  config.environmentId = environment.id;
  config.model = model;
  config.formatter = req.config?.formatter ?? interaction.formatter;
  config.temperature = temperature;
  if (maxTokens !== undefined) config.maxTokens = maxTokens;
  run.config = config;
  if (caller.source) run.source = caller.source;
  // The catalog's own bytes: the schema is recorded as it was stored.
  if (resultSchema) run.resultSchemaJson = interaction.resultSchemaJson;
  run.createdAt = timestampNow();
  if (req.config?.maxRepairs !== undefined) config.maxRepairs = maxRepairs;
  if (policy && mode) {
    run.cachePolicyJson = jsonBytes(policyJson(policy));
    run.cacheKey = ResultCache.key(
      caller.projectId,
      environment.id,
      interaction,
      request,
      policy,
      data,
    );
  }
  return {
    run,
    environment,
    apiKey,
    routes,
    request,
    maxRepairs,
    cache: policy && mode ? { policy, mode } : undefined,
  };
}

/** The id a caller made for a run started at once (ExecuteRequest.run_id). */
function callersRunId(req: ExecuteRequest): string {
  if (!req.stream || !req.start) throw invalid("run_id: only for a streamed run started at once");
  if (!isNewId(req.runId)) throw invalid("run_id: not an id pies makes");
  return req.runId;
}

/** An execution's data (`{}` when none); INVALID_ARGUMENT unless a JSON object. */
export function requestData(bytes: Uint8Array): JsonObject {
  let data: JsonValue | undefined;
  try {
    data = jsonOf(bytes);
  } catch (err) {
    throw invalid(`data: not JSON: ${(err as Error).message}`);
  }
  if (data === undefined) return {};
  if (data === null || typeof data !== "object" || Array.isArray(data))
    throw invalid("data: must be a JSON object");
  return data;
}

/** `create(RunConfigSchema)`, written out for the same reason as zeroRun (run-binary.ts). */
export function zeroRunConfig(): RunConfig {
  return { $typeName: "pies.runs.v1.RunConfig", environmentId: "", model: "", formatter: "" };
}

/** What every new run starts with: its id, who runs what, where, with which model; created. */
export function newRunOf(
  caller: { projectId: string; accountId: string; projectName?: string; accountName?: string },
  interaction: Interaction,
  environment: Environment,
  model: string,
) {
  return {
    id: newId(),
    projectId: caller.projectId,
    accountId: caller.accountId,
    interactionId: interaction.id,
    interactionName: interaction.name,
    interactionStatus: interactionStatuses.name(interaction.status) ?? "draft",
    interactionPrompts: interaction.prompts.map(promptRefOf),
    interactionUpdatedAt: interaction.updatedAt,
    environmentId: environment.id,
    environmentName: environment.name,
    provider: environment.provider,
    modelId: model,
    status: RunStatus.CREATED,
    projectName: caller.projectName ?? "",
    accountName: caller.accountName ?? "",
    // Only a metadata-only run says: every other run is stored whole, and encodes as before.
    store: interaction.store === RunStore.METADATA ? RunStore.METADATA : RunStore.UNSPECIFIED,
  };
}

/** A segment of the interaction as the run records it: its template by id. */
const promptRefOf = (p: PromptSegment): RunPromptRef => ({
  $typeName: "pies.runs.v1.RunPromptRef",
  id: p.id,
  type: p.type,
  templateId: p.templateId,
  chatPath: p.chatPath,
});

export function repairsOf(requested: number | undefined, environment: Environment): number {
  if (requested !== undefined) {
    if (requested < 0 || requested > MAX_REPAIRS)
      throw invalid(`config.max_repairs must be between 0 and ${MAX_REPAIRS}`);
    return requested;
  }
  const configured = configOf(environment).max_repairs;
  return typeof configured === "number" &&
    Number.isInteger(configured) &&
    configured >= 0 &&
    configured <= MAX_REPAIRS
    ? configured
    : DEFAULT_MAX_REPAIRS;
}

/** The most repairs one execution may ask for: each is a provider call. */
export const MAX_REPAIRS = 5;

/** A cache policy as the run records it (SPEC.md's field names). */
export function policyJson(policy: CachePolicy): JsonObject {
  return {
    type: policy.type,
    ...(policy.ttl !== undefined ? { ttl: policy.ttl } : {}),
    ...(policy.variesOn.length > 0 ? { varies_on: policy.variesOn } : {}),
    ...(policy.refreshProbability !== undefined
      ? { refresh_probability: policy.refreshProbability }
      : {}),
  };
}

function checkInput(deps: ExecutorDeps, interaction: Interaction, data: JsonObject) {
  const schema = mergedInputSchema(interaction);
  if (!schema) return;
  let errors: string[];
  try {
    errors = deps.schemas.errors(schema, data);
  } catch (err) {
    if (err instanceof SchemaError)
      throw invalid(`the input schema of interaction ${interaction.id} is ${err.message}`);
    throw err;
  }
  if (errors.length > 0) {
    throw invalid(`data does not match the input schema: ${errors.join("; ")}`);
  }
}

function compileOutputSchema(deps: ExecutorDeps, schema: JsonObject) {
  try {
    deps.schemas.compile(schema);
  } catch (err) {
    if (err instanceof SchemaError) throw invalid(`the result schema is an ${err.message}`);
    throw err;
  }
}

async function render(
  deps: ExecutorDeps,
  interaction: Interaction,
  data: JsonObject,
  projectId: string,
) {
  try {
    return await deps.renderer.render(interaction, data, projectId);
  } catch (err) {
    if (err instanceof TemplateError) {
      throw invalid(`template error: ${err.message}`);
    }
    if (err instanceof PromptTooLarge) throw invalid(err.message);
    throw err;
  }
}
