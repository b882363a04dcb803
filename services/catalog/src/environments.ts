import type { ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import {
  EndpointRefusedError,
  invalid,
  newId,
  notFound,
  requireProject,
  type EndpointPolicy,
} from "@pies/common";
import type { CatalogService, EnvironmentInput } from "@pies/proto/catalog";
import type { CatalogDeps } from "./context.js";
import { environmentToProto } from "./mappers.js";
import { payloadOf } from "./payloads.js";
import { usedBy } from "./prompts.js";
import { providerModels } from "./provider-models.js";
import type { CatalogDatabase } from "./tables.js";
import { secretHint } from "./secrets.js";

/** An environment of the project, or NOT_FOUND. */
export async function findEnvironment(db: Kysely<CatalogDatabase>, projectId: string, id: string) {
  const env = await db
    .selectFrom("catalog.environments")
    .selectAll()
    .where("project_id", "=", projectId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (!env) throw notFound("environment", id);
  return env;
}

async function lockEnvironment(tx: Kysely<CatalogDatabase>, projectId: string, id: string) {
  const env = await tx
    .selectFrom("catalog.environments")
    .selectAll()
    .where("project_id", "=", projectId)
    .where("id", "=", id)
    .forUpdate()
    .executeTakeFirst();
  if (!env) throw notFound("environment", id);
  return env;
}

/**
 * Checks an endpoint against the policy: its text, and the addresses its host resolves to now
 * (the executor checks them again at every connection). INVALID_ARGUMENT naming the reason.
 */
async function checkEndpoint(endpoints: EndpointPolicy, url: string): Promise<void> {
  try {
    await endpoints.checkUrl(url);
  } catch (err) {
    if (err instanceof EndpointRefusedError) throw invalid(`endpoint_url: ${err.message}`);
    throw err;
  }
}

const PROVIDERS = ["openai", "openai_compatible", "azure_openai", "anthropic", "google", "test"];
/** Providers with no endpoint of their own to default to: the environment names its server. */
const NEEDS_ENDPOINT = ["openai_compatible", "azure_openai"];
/** Providers whose models the catalog lists from `GET {endpoint}/models` (OpenAI's list). */
const LISTS_MODELS = ["openai", "openai_compatible"];

/** An environment's provider and endpoint, as they will be stored, checked. */
async function checkProvider(
  endpoints: EndpointPolicy,
  input: EnvironmentInput,
  stored?: { provider: string; endpoint_url: string },
) {
  const provider = input.provider ?? stored?.provider;
  const endpointUrl = input.endpointUrl ?? stored?.endpoint_url ?? "";
  if (!provider || !PROVIDERS.includes(provider)) {
    throw invalid(`provider must be one of ${PROVIDERS.join(", ")}`);
  }
  if (NEEDS_ENDPOINT.includes(provider) && !endpointUrl) {
    throw invalid(`endpoint_url is required for provider ${provider}`);
  }
  if (input.endpointUrl) await checkEndpoint(endpoints, input.endpointUrl);
  return provider;
}

export function environmentHandlers({
  db,
  secrets,
  endpoints,
}: CatalogDeps): Partial<ServiceImpl<typeof CatalogService>> {
  return {
    async createEnvironment(req) {
      const projectId = requireProject(req.projectId);
      const input = req.environment ?? ({} as EnvironmentInput);
      const provider = await checkProvider(endpoints, input);
      const row = await db
        .insertInto("catalog.environments")
        .values({
          id: newId(),
          project_id: projectId,
          name: input.name || provider,
          provider,
          endpoint_url: input.endpointUrl ?? "",
          api_key_enc: input.apiKey ? secrets.seal(input.apiKey) : null,
          api_key_hint: input.apiKey ? secretHint(input.apiKey) : "",
          default_model: input.defaultModel ?? "",
          enabled_models: JSON.stringify(input.enabledModels),
          config: JSON.stringify(payloadOf("config", input.configJson) ?? {}),
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      return { environment: environmentToProto(row) };
    },

    async getEnvironment(req) {
      const row = await findEnvironment(db, requireProject(req.projectId), req.id);
      return { environment: environmentToProto(row) };
    },

    async listEnvironments(req) {
      const rows = await db
        .selectFrom("catalog.environments")
        .selectAll()
        .where("project_id", "=", requireProject(req.projectId))
        .orderBy("updated_at", "desc")
        .limit(1000)
        .execute();
      return { environments: rows.map(environmentToProto) };
    },

    async updateEnvironment(req) {
      const projectId = requireProject(req.projectId);
      const input = req.environment ?? ({} as EnvironmentInput);
      const config = payloadOf("config", input.configJson);
      const row = await db.transaction().execute(async (tx) => {
        const current = await lockEnvironment(tx, projectId, req.id);
        // The stored key goes only where it was given for: moving the environment to another
        // endpoint or provider needs the key again (or an empty one, to drop it). Otherwise whoever
        // may edit environments could send it to a server of theirs without ever seeing it.
        const moves =
          (input.endpointUrl !== undefined && input.endpointUrl !== current.endpoint_url) ||
          (input.provider !== undefined && input.provider !== current.provider);
        if (moves && current.api_key_enc && input.apiKey === undefined) {
          throw invalid(
            "apiKey: changing endpoint_url or provider needs the API key again (or an empty one to remove the stored key)",
          );
        }
        await checkProvider(endpoints, input, current);
        return tx
          .updateTable("catalog.environments")
          .set({
            ...(input.name !== undefined ? { name: input.name || current.provider } : {}),
            ...(input.provider !== undefined ? { provider: input.provider } : {}),
            ...(input.endpointUrl !== undefined ? { endpoint_url: input.endpointUrl } : {}),
            // An empty key removes the stored one.
            ...(input.apiKey !== undefined
              ? {
                  api_key_enc: input.apiKey ? secrets.seal(input.apiKey) : null,
                  api_key_hint: input.apiKey ? secretHint(input.apiKey) : "",
                }
              : {}),
            ...(input.defaultModel !== undefined ? { default_model: input.defaultModel } : {}),
            ...(input.setEnabledModels
              ? { enabled_models: JSON.stringify(input.enabledModels) }
              : {}),
            ...(config !== undefined ? { config: JSON.stringify(config ?? {}) } : {}),
            updated_at: new Date(),
          })
          .where("id", "=", current.id)
          .returningAll()
          .executeTakeFirstOrThrow();
      });
      return { environment: environmentToProto(row) };
    },

    async deleteEnvironment(req) {
      const projectId = requireProject(req.projectId);
      await db.transaction().execute(async (tx) => {
        // Locked: an interaction that names it meanwhile waits (it reads it FOR SHARE).
        await lockEnvironment(tx, projectId, req.id);
        const users = await tx
          .selectFrom("catalog.interactions")
          .select(["id", "name", "parent_id", "version"])
          .where("project_id", "=", projectId)
          .where("environment_id", "=", req.id)
          .orderBy("parent_id", "desc")
          .limit(10)
          .execute();
        if (users.length > 0) {
          throw new ConnectError(
            `environment ${req.id} is used by ${usedBy(users)}`,
            Code.FailedPrecondition,
          );
        }
        await tx.deleteFrom("catalog.environments").where("id", "=", req.id).execute();
      });
      return {};
    },

    async listEnvironmentModels(req) {
      const env = await findEnvironment(db, requireProject(req.projectId), req.id);
      if (LISTS_MODELS.includes(env.provider)) {
        const apiKey = env.api_key_enc ? secrets.open(env.api_key_enc) : "";
        const listed = await providerModels(endpoints, env.endpoint_url, apiKey);
        if (listed) return { models: listed, source: "provider" };
      }
      const models = env.enabled_models.length > 0 ? env.enabled_models : [env.default_model];
      return { models: models.filter(Boolean), source: "enabled_models" };
    },
  };
}
