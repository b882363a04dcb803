import type { Selectable } from "kysely";
import { create } from "@bufbuild/protobuf";
import { jsonBytes, toTimestamp, type JsonObject } from "@pies/common";
import {
  AccountSchema,
  CachePolicySchema,
  ApiKeySchema,
  EnvironmentSchema,
  InteractionSchema,
  InteractionStatus,
  interactionStatuses,
  visibilities,
  ProjectSchema,
  PromptTemplateSchema,
  Visibility,
  apiKeyRoleFromName,
  type CachePolicy,
  type Interaction,
  type PromptTemplate,
} from "@pies/proto/catalog";
import { RunStore, runStores } from "@pies/proto/runs";
import type {
  AccountsTable,
  ApiKeysTable,
  EnvironmentRow,
  InteractionRow,
  ProjectsTable,
  PromptRow,
} from "./tables.js";

/** The status of a stored name; an unknown one reads as draft. */
export function statusFromName(name: string): InteractionStatus {
  return interactionStatuses.value(name) ?? InteractionStatus.DRAFT;
}

/** The stored name of a status; unset reads as draft. */
export function statusName(status: InteractionStatus): string {
  return interactionStatuses.name(status) ?? "draft";
}

/** The store setting of a stored name; an unknown one reads as full. */
export function storeFromName(name: string): RunStore {
  return runStores.value(name) ?? RunStore.FULL;
}

/** The stored name of a store setting; unset reads as full. */
export function storeName(store: RunStore): string {
  return runStores.name(store) ?? "full";
}

export function promptToProto(row: PromptRow): PromptTemplate {
  return create(PromptTemplateSchema, {
    id: row.id,
    projectId: row.project_id,
    name: row.name,
    role: row.role,
    contentType: row.content_type,
    content: row.content,
    testDataJson: jsonBytes(row.test_data ?? undefined),
    inputSchemaJson: jsonBytes(row.input_schema ?? undefined),
    status: statusFromName(row.status),
    version: row.version,
    latest: row.latest,
    createdAt: toTimestamp(row.created_at),
    updatedAt: toTimestamp(row.updated_at),
  });
}

function cachePolicyToProto(json: JsonObject | null): CachePolicy | undefined {
  if (!json) return undefined;
  return create(CachePolicySchema, {
    type: typeof json.type === "string" ? json.type : "",
    ttl: typeof json.ttl === "number" ? json.ttl : undefined,
    variesOn: Array.isArray(json.varies_on) ? json.varies_on.map(String) : [],
    refreshProbability:
      typeof json.refresh_probability === "number" ? json.refresh_probability : undefined,
  });
}

export function cachePolicyToJson(policy: CachePolicy | undefined): JsonObject | null {
  if (!policy) return null;
  const json: JsonObject = { type: policy.type, varies_on: policy.variesOn };
  if (policy.ttl !== undefined) json.ttl = policy.ttl;
  if (policy.refreshProbability !== undefined) json.refresh_probability = policy.refreshProbability;
  return json;
}

/**
 * An interaction row as a message. `templates` (by id) expands each segment's template; a
 * published snapshot carries its own templates and ignores it.
 */
export function interactionToProto(
  row: InteractionRow,
  templates?: Map<string, PromptRow>,
): Interaction {
  return create(InteractionSchema, {
    id: row.id,
    projectId: row.project_id,
    name: row.name,
    description: row.description,
    status: statusFromName(row.status),
    testDataJson: jsonBytes(row.test_data ?? undefined),
    resultSchemaJson: jsonBytes(row.result_schema ?? undefined),
    cachePolicy: cachePolicyToProto(row.cache_policy),
    model: row.model,
    temperature: row.temperature ?? undefined,
    maxTokens: row.max_tokens ?? undefined,
    environmentId: row.environment_id ?? "",
    prompts: row.prompts.map((segment) => {
      const template = segment.template ?? templates?.get(segment.template_id);
      return {
        id: segment.id,
        type: segment.type,
        templateId: segment.template_id,
        chatPath: segment.chat_path ?? "",
        template: template ? promptToProto(template) : undefined,
      };
    }),
    version: row.version,
    latest: row.latest,
    visibility: visibilities.value(row.visibility) ?? Visibility.PRIVATE,
    tags: row.tags,
    parentId: row.parent_id ?? "",
    formatter: row.formatter,
    store: storeFromName(row.store),
    createdAt: toTimestamp(row.created_at),
    updatedAt: toTimestamp(row.updated_at),
  });
}

export function environmentToProto(row: EnvironmentRow) {
  return create(EnvironmentSchema, {
    id: row.id,
    projectId: row.project_id,
    name: row.name,
    provider: row.provider,
    endpointUrl: row.endpoint_url,
    apiKeyHint: row.api_key_hint,
    defaultModel: row.default_model,
    enabledModels: row.enabled_models,
    configJson: jsonBytes(row.config ?? undefined),
    createdAt: toTimestamp(row.created_at),
    updatedAt: toTimestamp(row.updated_at),
  });
}

export function accountToProto(row: Selectable<AccountsTable>) {
  return create(AccountSchema, {
    id: row.id,
    name: row.name,
    createdAt: toTimestamp(row.created_at),
  });
}

export function projectToProto(row: Selectable<ProjectsTable>) {
  return create(ProjectSchema, {
    id: row.id,
    accountId: row.account_id,
    name: row.name,
    createdAt: toTimestamp(row.created_at),
    retentionDays: row.retention_days,
  });
}

export function apiKeyToProto(row: Selectable<ApiKeysTable>) {
  return create(ApiKeySchema, {
    id: row.id,
    projectId: row.project_id,
    accountId: row.account_id,
    name: row.name,
    keyHint: row.key_hint,
    role: apiKeyRoleFromName(row.role),
    createdAt: toTimestamp(row.created_at),
  });
}
