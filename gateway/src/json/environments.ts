import { z } from "zod";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Environment, EnvironmentInputSchema } from "@pies/proto/catalog";
import { jsonOf, type JsonObject } from "@pies/common";
import { compact, iso, jsonObject, payloadBytes } from "./common.js";
import { shortText, type InputLimits } from "./limits.js";

/** The body of POST /environments, within the limits. */
export const environmentBody = (limits: InputLimits) =>
  z
    .object({
      name: shortText(limits).optional(),
      provider: shortText(limits).optional(),
      endpoint_url: z.string().optional(),
      apiKey: z.string().optional(),
      api_key: z.string().optional(),
      default_model: shortText(limits).optional(),
      enabled_models: z.array(shortText(limits)).optional(),
      config: jsonObject.optional(),
    })
    .passthrough();

export function environmentInput(
  body: z.infer<ReturnType<typeof environmentBody>>,
): MessageInitShape<typeof EnvironmentInputSchema> {
  return compact({
    name: body.name,
    provider: body.provider,
    endpointUrl: body.endpoint_url,
    apiKey: body.apiKey ?? body.api_key,
    defaultModel: body.default_model,
    enabledModels: body.enabled_models ?? [],
    setEnabledModels: body.enabled_models !== undefined,
    configJson: payloadBytes(body.config),
  });
}

/** An environment as JSON. The API key is never returned: only a hint of it. */
export function environmentJson(e: Environment) {
  return compact({
    id: e.id,
    name: e.name,
    provider: e.provider,
    endpoint_url: e.endpointUrl,
    api_key_hint: e.apiKeyHint || undefined,
    default_model: e.defaultModel,
    enabled_models: e.enabledModels,
    config: (jsonOf(e.configJson) as JsonObject | undefined) ?? {},
    project: e.projectId,
    created_at: iso(e.createdAt),
    updated_at: iso(e.updatedAt),
  });
}
