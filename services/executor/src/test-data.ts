import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  checkGenerationSettings,
  invalid,
  jsonBytes,
  VIRTUAL_PROVIDER,
  type JsonObject,
  type JsonValue,
} from "@pies/common";
import type { GenerateTestDataRequest } from "@pies/proto/executor";
import { RunSchema } from "@pies/proto/runs";
import type { ExecutorDeps } from "./context.js";
import { newRunOf, repairsOf, type PreparedExecution } from "./prepare.js";
import { mergedInputSchema } from "./schemas.js";
import type { ChatMessage } from "./templates/render.js";

/** The most objects one call may ask for: they come in one answer. */
export const MAX_TEST_DATA_COUNT = 50;
const DEFAULT_TEMPERATURE = 0.7;

/**
 * GenerateTestData as an execution: the environment's model is asked for an object
 * `{items: [...]}` whose items are the interaction's input schema, exactly `count` of them, with
 * that schema enforced like an output schema (structured output, or stated in a system message),
 * validated with ajv and repaired like any execution. The call is recorded as a run of the
 * interaction, tagged `test-data`.
 */
export async function prepareTestData(
  deps: ExecutorDeps,
  req: GenerateTestDataRequest,
): Promise<PreparedExecution> {
  const caller = req.caller;
  if (!caller?.projectId) throw invalid("caller project is required");
  if (!req.interactionId) throw invalid("interaction is required");
  const environmentId = req.config?.environmentId;
  if (!environmentId)
    throw invalid("config.environment: the environment to generate with is required");
  const count = req.count === 0 ? 1 : req.count;
  if (count < 1 || count > MAX_TEST_DATA_COUNT) {
    throw invalid(`count must be between 1 and ${MAX_TEST_DATA_COUNT}`);
  }
  const { interaction, environment, apiKey, routes } = await deps.resolver.resolve({
    projectId: caller.projectId,
    interaction: { case: "interactionId", value: req.interactionId },
    environmentId,
  });
  if (!interaction || !environment)
    throw new ConnectError("catalog answered no interaction", Code.Internal);
  const inputSchema = mergedInputSchema(interaction);
  if (!inputSchema) {
    throw invalid(
      `interaction ${interaction.id} has no input schema (none of its templates declares one): there is nothing to generate test data from`,
    );
  }
  // A virtual environment's entries name their models.
  const virtual = environment.provider === VIRTUAL_PROVIDER;
  const model = virtual ? "" : req.config?.model || environment.defaultModel;
  if (!model && !virtual)
    throw invalid(`no model: neither the request nor environment ${environment.id} names one`);
  if (
    !virtual &&
    environment.enabledModels.length > 0 &&
    !environment.enabledModels.includes(model)
  ) {
    throw invalid(`model ${model} is not enabled in environment ${environment.id}`);
  }
  const temperature = req.config?.temperature ?? DEFAULT_TEMPERATURE;
  const maxTokens = req.config?.maxTokens;
  checkGenerationSettings({ temperature, maxTokens });
  // The input schema nested under items: its root-level definitions go to the wrapper's root,
  // where its `#/definitions/…` and `#/$defs/…` references point from there.
  const { definitions, $defs, $schema: _dialect, $id: _id, ...itemSchema } = inputSchema;
  const schema: JsonObject = {
    type: "object",
    ...(definitions !== undefined ? { definitions } : {}),
    ...($defs !== undefined ? { $defs } : {}),
    properties: {
      items: { type: "array", items: itemSchema, minItems: count, maxItems: count },
    },
    required: ["items"],
    additionalProperties: false,
  };
  // Compiled before any provider call: a schema that cannot be used is the caller's 400.
  try {
    deps.schemas.compile(schema);
  } catch (err) {
    throw invalid(`the interaction's input schema cannot be used: ${(err as Error).message}`);
  }
  const messages: ChatMessage[] = [
    {
      role: "system",
      content:
        "You generate realistic, varied test data for an application. Answer with JSON only: " +
        `an object whose "items" holds exactly ${count} object${count > 1 ? "s" : ""}, each valid ` +
        "against this JSON Schema:\n" +
        JSON.stringify(inputSchema),
    },
    {
      role: "user",
      content:
        `Generate ${count} test input${count > 1 ? "s" : ""} for "${interaction.name}".` +
        (req.message ? `\n${req.message}` : ""),
    },
  ];
  const parameters: JsonObject = { count, ...(req.message ? { message: req.message } : {}) };
  const run = create(RunSchema, {
    ...newRunOf(caller, interaction, environment, model),
    parametersJson: jsonBytes(parameters),
    promptJson: jsonBytes(messages),
    tags: ["test-data"],
    config: { environmentId: environment.id, model, temperature, maxTokens },
    source: caller.source,
    resultSchemaJson: jsonBytes(schema),
    createdAt: timestampNow(),
  });
  return {
    run,
    environment,
    apiKey,
    routes,
    request: { model, messages, temperature, maxTokens, schema },
    maxRepairs: repairsOf(req.config?.maxRepairs, environment),
  };
}

/** The objects of a completed test-data run. */
export function testDataItems(result: JsonValue | undefined): JsonValue[] {
  const items = (result as { items?: JsonValue[] } | undefined)?.items;
  return Array.isArray(items) ? items : [];
}
