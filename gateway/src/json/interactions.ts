import { z } from "zod";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { jsonOf, MIN_MAX_TOKENS, type JsonObject } from "@pies/common";
import {
  interactionStatuses,
  visibilities,
  type Environment,
  type Interaction,
  type InteractionInputSchema,
  type PromptTemplateSchema,
} from "@pies/proto/catalog";
import { RunStore, runStores } from "@pies/proto/runs";
import { compact, iso, jsonObject, payloadBytes, statusNameOf } from "./common.js";
import { int32, shortText, shortTextList, type InputLimits } from "./limits.js";

import { promptBody, promptInput, promptJson } from "./prompts.js";

/** A template given inside a segment: with an id it refers to that template, else it is new. */
const inlineTemplate = (limits: InputLimits) =>
  promptBody(limits).extend({ id: shortText(limits).optional() });

// A bare string is a template's id. The transform comes after the union: inside it, a string
// over the length limit would fail as "Invalid input" instead of naming the limit.
const segment = (limits: InputLimits) =>
  z
    .union([
      shortText(limits),
      z
        .object({
          id: shortText(limits).optional(),
          type: shortText(limits).optional(),
          // The template's id, an expanded template object carrying one (which refers to it),
          // or a template object without id (stored as a new template).
          template: z.union([shortText(limits), inlineTemplate(limits)]).optional(),
          chat_path: shortText(limits).optional(),
        })
        .passthrough(),
    ])
    .transform((s) =>
      typeof s === "string"
        ? { type: "template", template: s, id: undefined, chat_path: undefined }
        : s,
    );

/** The body of POST and PUT /interactions, within the limits. */
export const interactionBody = (limits: InputLimits) =>
  z
    .object({
      name: shortText(limits).min(1).optional(),
      description: z.string().optional(),
      status: z.enum(interactionStatuses.names).optional(),
      test_data: jsonObject.nullish(),
      result_schema: jsonObject.nullish(),
      resultSchema: jsonObject.nullish(),
      schema: jsonObject.nullish(),
      cache_policy: z
        .object({
          type: z.enum(["cache", "no_cache", "cache_and_refresh"]),
          ttl: int32(0).optional(),
          varies_on: z.array(shortText(limits)).optional(),
          refresh_probability: z.number().min(0).max(1).optional(),
        })
        .nullish(),
      model: shortText(limits).optional(),
      temperature: z.number().optional(),
      max_tokens: int32(MIN_MAX_TOKENS).optional(),
      model_options: z
        .object({
          temperature: z.number().optional(),
          max_tokens: int32(MIN_MAX_TOKENS).optional(),
        })
        .passthrough()
        .optional(),
      environment: z
        .union([shortText(limits), z.object({ id: shortText(limits) }).passthrough()])
        .optional(),
      prompts: z.array(segment(limits)).optional(),
      tags: shortTextList(limits).optional(),
      formatter: shortText(limits).optional(),
      // What the runs store keeps of the interaction's runs (DESIGN.md §8).
      store: z.enum(runStores.names).optional(),
    })
    .passthrough();

export function interactionInput(
  body: z.infer<ReturnType<typeof interactionBody>>,
): MessageInitShape<typeof InteractionInputSchema> {
  const environment =
    typeof body.environment === "string" ? body.environment : body.environment?.id;
  const given = [body.result_schema, body.resultSchema, body.schema].find((s) => s !== undefined);
  // null clears a field on update: the catalog reads an empty object so.
  const schema = given === null ? {} : given;
  return compact({
    name: body.name,
    description: body.description,
    status: body.status ? interactionStatuses.value(body.status) : undefined,
    testDataJson: payloadBytes(body.test_data === null ? {} : body.test_data),
    resultSchemaJson: payloadBytes(schema),
    cachePolicy:
      body.cache_policy === null
        ? { type: "", variesOn: [] }
        : body.cache_policy
          ? {
              type: body.cache_policy.type,
              ttl: body.cache_policy.ttl,
              variesOn: body.cache_policy.varies_on ?? [],
              refreshProbability: body.cache_policy.refresh_probability,
            }
          : undefined,
    model: body.model,
    temperature: body.temperature ?? body.model_options?.temperature,
    maxTokens: body.max_tokens ?? body.model_options?.max_tokens,
    environmentId: environment,
    prompts: (body.prompts ?? []).map((p) => ({
      id: p.id ?? "",
      type: p.type ?? "template",
      templateId: typeof p.template === "string" ? p.template : (p.template?.id ?? ""),
      // A template object without id: the catalog stores it as a new template.
      template:
        typeof p.template === "object" && !p.template.id
          ? (promptInput(p.template) as MessageInitShape<typeof PromptTemplateSchema>)
          : undefined,
      chatPath: p.chat_path ?? "",
    })),
    setPrompts: body.prompts !== undefined,
    tags: body.tags ?? [],
    setTags: body.tags !== undefined,
    formatter: body.formatter,
    store: body.store ? runStores.value(body.store) : undefined,
  });
}

/** The name of an interaction's store setting (`full` when unset). */
const storeNameOf = (i: Interaction) =>
  runStores.name(i.store === RunStore.UNSPECIFIED ? RunStore.FULL : i.store) ?? "full";

/**
 * The store setting in a reference: only a metadata-only one's, so that every other reference is
 * SPEC.md's subset as before, and a list still tells which interactions keep no payloads.
 */
const refStoreOf = (i: Interaction) => (i.store === RunStore.METADATA ? storeNameOf(i) : undefined);

/** The segments, each template expanded when loaded so unless `ids` (a version's `template`). */
function segmentsJson(i: Interaction, ids = false) {
  return i.prompts.map((p) =>
    compact({
      id: p.id,
      type: p.type,
      template:
        p.type === "chat" ? undefined : p.template && !ids ? promptJson(p.template) : p.templateId,
      chat_path: p.chatPath || undefined,
    }),
  );
}

/**
 * The full interaction (GET /interactions/:id, create): templates expanded when loaded so, or as
 * identifiers (`templateIds`: the version object that publishing answers, SPEC.md).
 */
export function interactionJson(i: Interaction, templateIds = false) {
  return compact({
    id: i.id,
    name: i.name,
    description: i.description,
    status: statusNameOf(i.status),
    test_data: jsonOf(i.testDataJson) as JsonObject | undefined,
    resultSchema: jsonOf(i.resultSchemaJson) as JsonObject | undefined,
    cache_policy: i.cachePolicy
      ? compact({
          type: i.cachePolicy.type,
          ttl: i.cachePolicy.ttl,
          varies_on: i.cachePolicy.variesOn,
          refresh_probability: i.cachePolicy.refreshProbability,
        })
      : undefined,
    model: i.model || undefined,
    temperature: i.temperature,
    max_tokens: i.maxTokens,
    prompts: segmentsJson(i, templateIds),
    environment: i.environmentId || undefined,
    project: i.projectId,
    version: i.version,
    latest: i.latest,
    visibility: visibilities.name(i.visibility) ?? "private",
    tags: i.tags,
    parent: i.parentId || undefined,
    formatter: i.formatter || undefined,
    store: storeNameOf(i),
    created_at: iso(i.createdAt),
    updated_at: iso(i.updatedAt),
  });
}

/**
 * An interaction reference (list results); a version's carries the version reference's fields
 * too (SPEC.md: latest, version, created_at) and its parent.
 */
export function interactionRefJson(i: Interaction) {
  const ref = {
    id: i.id,
    name: i.name,
    description: i.description,
    status: statusNameOf(i.status),
    prompts: segmentsJson(i, true),
    updated_at: iso(i.updatedAt),
    store: refStoreOf(i),
  };
  return compact(
    i.parentId
      ? {
          ...ref,
          latest: i.latest,
          version: i.version,
          parent: i.parentId,
          created_at: iso(i.createdAt),
        }
      : ref,
  );
}

/** A version reference (GET /interactions/:id/versions). */
export function versionRefJson(i: Interaction) {
  return compact({
    id: i.id,
    name: i.name,
    status: statusNameOf(i.status),
    latest: i.latest,
    version: i.version,
    visibility: visibilities.name(i.visibility) ?? "private",
    tags: i.tags,
    parent: i.parentId,
    store: refStoreOf(i),
    created_at: iso(i.createdAt),
    updated_at: iso(i.updatedAt),
  });
}

/**
 * What GET /interactions/resolve/:ref answers (@vertesia/client's ResolvedInteractionExecutionInfo):
 * the interaction or version an execution would run, and the environment and model it would use.
 */
export function resolvedInteractionJson(
  i: Interaction,
  environment: Environment | undefined,
  resolved: { model: string; modelSource: string },
) {
  return {
    id: i.id,
    name: i.name,
    version: i.version,
    status: statusNameOf(i.status),
    tags: i.tags,
    resolved: compact({
      environment: environment && {
        id: environment.id,
        name: environment.name,
        provider: environment.provider,
      },
      model: resolved.model || undefined,
      model_source: resolved.modelSource || undefined,
    }),
  };
}
