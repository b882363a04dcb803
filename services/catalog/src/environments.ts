import type { ServiceImpl } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import {
  EndpointRefusedError,
  invalid,
  newId,
  notFound,
  requireProject,
  type EndpointPolicy,
} from "@pies/common";
import type { CatalogService } from "@pies/proto/catalog";
import type { CatalogDeps } from "./context.js";
import { environmentToProto } from "./mappers.js";
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

const PROVIDERS = ["openai", "openai_compatible", "test"];

export function environmentHandlers({
  db,
  secrets,
  endpoints,
}: CatalogDeps): Partial<ServiceImpl<typeof CatalogService>> {
  return {
    async createEnvironment(req) {
      const projectId = requireProject(req.projectId);
      const input = req.environment;
      if (!input?.provider || !PROVIDERS.includes(input.provider)) {
        throw invalid(`provider must be one of ${PROVIDERS.join(", ")}`);
      }
      if (input.provider === "openai_compatible" && !input.endpointUrl) {
        throw invalid("endpoint_url is required for provider openai_compatible");
      }
      if (input.endpointUrl) await checkEndpoint(endpoints, input.endpointUrl);
      const row = await db
        .insertInto("catalog.environments")
        .values({
          id: newId(),
          project_id: projectId,
          name: input.name || input.provider,
          provider: input.provider,
          endpoint_url: input.endpointUrl ?? "",
          api_key_enc: input.apiKey ? secrets.seal(input.apiKey) : null,
          api_key_hint: input.apiKey ? secretHint(input.apiKey) : "",
          default_model: input.defaultModel ?? "",
          enabled_models: JSON.stringify(input.enabledModels),
          config: JSON.stringify(input.config ?? {}),
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
  };
}
