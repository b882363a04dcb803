import type { ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import {
  EndpointRefusedError,
  invalid,
  newId,
  notFound,
  pricesOf,
  requireProject,
  routingOf,
  VIRTUAL_PROVIDER,
  type EndpointPolicy,
  type JsonObject,
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

const PROVIDERS = [
  "openai",
  "openai_compatible",
  "azure_openai",
  "anthropic",
  "google",
  VIRTUAL_PROVIDER,
  "test",
];
/** Providers with no endpoint of their own to default to: the environment names its server. */
const NEEDS_ENDPOINT = ["openai_compatible", "azure_openai"];
/** Providers whose models the catalog lists from `GET {endpoint}/models` (OpenAI's list). */
const LISTS_MODELS = ["openai", "openai_compatible"];

/** An environment's provider and endpoint, as they will be stored, checked. */
async function checkProvider(
  endpoints: EndpointPolicy,
  input: EnvironmentInput,
  stored?: {
    provider: string;
    endpoint_url: string;
    default_model: string;
    enabled_models: string[];
  },
) {
  const provider = input.provider ?? stored?.provider;
  const endpointUrl = input.endpointUrl ?? stored?.endpoint_url ?? "";
  if (!provider || !PROVIDERS.includes(provider)) {
    throw invalid(`provider must be one of ${PROVIDERS.join(", ")}`);
  }
  if (NEEDS_ENDPOINT.includes(provider) && !endpointUrl) {
    throw invalid(`endpoint_url is required for provider ${provider}`);
  }
  if (provider === VIRTUAL_PROVIDER && (endpointUrl || input.apiKey)) {
    throw invalid(
      "a virtual_lb environment has no endpoint_url or API key of its own: its entries' environments have theirs",
    );
  }
  const models = input.setEnabledModels ? input.enabledModels : (stored?.enabled_models ?? []);
  const defaultModel = input.defaultModel ?? stored?.default_model ?? "";
  if (provider === VIRTUAL_PROVIDER && (models.length > 0 || defaultModel)) {
    throw invalid(
      "a virtual_lb environment has no default_model or enabled_models of its own: its entries name their models",
    );
  }
  if (input.endpointUrl) await checkEndpoint(endpoints, input.endpointUrl);
  return provider;
}

/**
 * A virtual environment's routing, checked against the project's environments: each entry names
 * one of them, not virtual itself, whose model (the entry's, else its default) it enables. They
 * are read FOR SHARE: one deleted meanwhile waits, then sees this environment route to it.
 */
async function checkRouting(
  tx: Kysely<CatalogDatabase>,
  projectId: string,
  config: JsonObject,
): Promise<void> {
  const routing = routingOf(config);
  if ("invalid" in routing) throw invalid(routing.invalid);
  const ids = [...new Set(routing.entries.map((e) => e.environmentId))];
  const rows = await tx
    .selectFrom("catalog.environments")
    .select(["id", "provider", "default_model", "enabled_models"])
    .where("project_id", "=", projectId)
    .where("id", "in", ids)
    .forShare()
    .execute();
  for (const [i, entry] of routing.entries.entries()) {
    const at = `config.entries.${i}`;
    const env = rows.find((r) => r.id === entry.environmentId);
    // As everywhere: another project's environment reads as unknown.
    if (!env)
      throw invalid(`${at}: environment ${entry.environmentId} is not one of this project's`);
    if (env.provider === VIRTUAL_PROVIDER) {
      throw invalid(`${at}: environment ${env.id} is virtual itself`);
    }
    const model = entry.model || env.default_model;
    if (!model) throw invalid(`${at}: environment ${env.id} has no default model: name one`);
    if (env.enabled_models.length > 0 && !env.enabled_models.includes(model)) {
      throw invalid(`${at}: model ${model} is not enabled in environment ${env.id}`);
    }
  }
}

/** An environment's `config.prices`, checked (INVALID_ARGUMENT naming what is wrong). */
function checkPrices(config: JsonObject): void {
  const prices = pricesOf(config);
  if ("invalid" in prices) throw invalid(prices.invalid);
}

/** The virtual environments of the project that route to `id` (at most 10, for a 409). */
async function routedBy(tx: Kysely<CatalogDatabase>, projectId: string, id: string) {
  const virtual = await tx
    .selectFrom("catalog.environments")
    .select(["id", "name", "config"])
    .where("project_id", "=", projectId)
    .where("provider", "=", VIRTUAL_PROVIDER)
    .execute();
  return virtual
    .filter((v) => {
      const routing = routingOf(v.config);
      return !("invalid" in routing) && routing.entries.some((e) => e.environmentId === id);
    })
    .slice(0, 10);
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
      const config = payloadOf("config", input.configJson) ?? {};
      checkPrices(config);
      const row = await db.transaction().execute(async (tx) => {
        if (provider === VIRTUAL_PROVIDER) await checkRouting(tx, projectId, config);
        return tx
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
            config: JSON.stringify(config),
          })
          .returningAll()
          .executeTakeFirstOrThrow();
      });
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
      if (config) checkPrices(config);
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
        const provider = await checkProvider(endpoints, input, current);
        if (provider === VIRTUAL_PROVIDER) {
          await checkRouting(tx, projectId, config !== undefined ? (config ?? {}) : current.config);
          // One that others route to must stay one they can: not virtual itself.
          const routers =
            current.provider === VIRTUAL_PROVIDER ? [] : await routedBy(tx, projectId, current.id);
          if (routers.length > 0) {
            throw invalid(
              `provider: environment ${current.id} is routed to by virtual environment ${routers
                .map((v) => v.id)
                .join(", ")}, so it cannot be virtual itself`,
            );
          }
        }
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
        const routers = await routedBy(tx, projectId, req.id);
        if (routers.length > 0) {
          throw new ConnectError(
            `environment ${req.id} is routed to by virtual environment ${routers
              .map((v) => `${v.name} (${v.id})`)
              .join(", ")}`,
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
