import type { ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import {
  checkGenerationSettings,
  INT32_MAX,
  invalid,
  newId,
  notFound,
  pageSize,
  requireProject,
} from "@pies/common";
import { hasAnyTag } from "@pies/common/db";
import { InteractionStatus, type CatalogService, type InteractionInput } from "@pies/proto/catalog";
import type { CatalogDeps } from "./context.js";
import { findEnvironment } from "./environments.js";
import {
  cachePolicyToJson,
  environmentToProto,
  interactionToProto,
  statusName,
} from "./mappers.js";
import type {
  CatalogDatabase,
  EnvironmentRow,
  InteractionRow,
  PromptRow,
  StoredSegment,
} from "./tables.js";

const SEGMENT_TYPES = ["template", "chat"];

/** Loads the templates the segments refer to, in one query. */
async function templatesOf(
  db: Kysely<CatalogDatabase>,
  projectId: string,
  rows: InteractionRow[],
): Promise<Map<string, PromptRow>> {
  const ids = [
    ...new Set(rows.flatMap((r) => r.prompts.filter((s) => !s.template).map((s) => s.template_id))),
  ].filter(Boolean);
  if (ids.length === 0) return new Map();
  const templates = await db
    .selectFrom("catalog.prompts")
    .selectAll()
    .where("project_id", "=", projectId)
    .where("id", "in", ids)
    .execute();
  return new Map(templates.map((t) => [t.id, t]));
}

/** Checks the segments and that every template and the environment exist in the project. */
async function checkReferences(
  db: Kysely<CatalogDatabase>,
  projectId: string,
  input: InteractionInput,
) {
  const segments: StoredSegment[] = input.prompts.map((p) => {
    const type = p.type || "template";
    if (!SEGMENT_TYPES.includes(type))
      throw invalid(`prompt segment type ${type} is not supported`);
    if (type === "template" && !p.templateId) throw invalid("a template segment needs template");
    if (type === "chat" && !p.chatPath) throw invalid("a chat segment needs chat_path");
    return {
      id: p.id || newId(),
      type,
      template_id: type === "template" ? p.templateId : "",
      ...(type === "chat" ? { chat_path: p.chatPath } : {}),
    };
  });
  const templateIds = [...new Set(segments.map((s) => s.template_id).filter(Boolean))];
  if (templateIds.length > 0) {
    const found = await db
      .selectFrom("catalog.prompts")
      .select("id")
      .where("project_id", "=", projectId)
      .where("id", "in", templateIds)
      .execute();
    const missing = templateIds.filter((id) => !found.some((f) => f.id === id));
    if (missing.length > 0) throw invalid(`prompt template ${missing.join(", ")} not found`);
  }
  if (input.environmentId) {
    const env = await db
      .selectFrom("catalog.environments")
      .select("id")
      .where("project_id", "=", projectId)
      .where("id", "=", input.environmentId)
      .executeTakeFirst();
    if (!env) throw invalid(`environment ${input.environmentId} not found`);
  }
  return segments;
}

/** The version selector of `Name@3`, `Name@latest`, `Name@draft` or a bare `Name`. */
function parseSelector(ref: string): { name: string; selector: string } {
  const at = ref.lastIndexOf("@");
  return at > 0
    ? { name: ref.slice(0, at), selector: ref.slice(at + 1) }
    : { name: ref, selector: "" };
}

async function findByName(db: Kysely<CatalogDatabase>, projectId: string, ref: string) {
  const { name, selector } = parseSelector(ref);
  let query = db
    .selectFrom("catalog.interactions")
    .selectAll()
    .where("project_id", "=", projectId)
    .where("name", "=", name);
  if (selector === "draft") {
    query = query.where("parent_id", "is", null);
  } else if (selector === "latest") {
    query = query.where("latest", "=", true);
  } else if (selector) {
    // Versions are `integer` columns: a larger number is no version, and PostgreSQL refuses it.
    const version = Number(selector);
    if (!/^[0-9]+$/.test(selector) || version < 1 || version > INT32_MAX) {
      throw invalid(
        `version selector ${selector} must be latest, draft or a number from 1 to ${INT32_MAX}`,
      );
    }
    query = query.where("version", "=", version);
  } else {
    // A bare name runs the latest published version, or the draft when nothing is published.
    query = query.orderBy("latest", "desc").orderBy("version", "desc");
  }
  return query.orderBy("updated_at", "desc").limit(1).executeTakeFirst();
}

export function interactionHandlers({
  db,
  secrets,
}: CatalogDeps): Partial<ServiceImpl<typeof CatalogService>> {
  const apiKeyOf = (env: EnvironmentRow) => (env.api_key_enc ? secrets.open(env.api_key_enc) : "");
  return {
    async createInteraction(req) {
      const projectId = requireProject(req.projectId);
      const input = req.interaction;
      if (!input?.name) throw invalid("name is required");
      checkGenerationSettings(input);
      const segments = await checkReferences(db, projectId, input);
      const row = await db
        .insertInto("catalog.interactions")
        .values({
          id: newId(),
          project_id: projectId,
          name: input.name,
          description: input.description ?? "",
          status: statusName(input.status ?? InteractionStatus.DRAFT),
          test_data: JSON.stringify(input.testData ?? null),
          result_schema: JSON.stringify(input.resultSchema ?? null),
          cache_policy: JSON.stringify(cachePolicyToJson(input.cachePolicy)),
          model: input.model ?? "",
          temperature: input.temperature ?? null,
          max_tokens: input.maxTokens ?? null,
          environment_id: input.environmentId || null,
          prompts: JSON.stringify(segments),
          tags: input.tags,
          parent_id: null,
          formatter: input.formatter ?? "",
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      return { interaction: interactionToProto(row) };
    },

    async getInteraction(req) {
      const projectId = requireProject(req.projectId);
      const row = await db
        .selectFrom("catalog.interactions")
        .selectAll()
        .where("project_id", "=", projectId)
        .where("id", "=", req.id)
        .executeTakeFirst();
      if (!row) throw notFound("interaction", req.id);
      const templates = req.expandTemplates ? await templatesOf(db, projectId, [row]) : undefined;
      return { interaction: interactionToProto(row, templates) };
    },

    async listInteractions(req) {
      const projectId = requireProject(req.projectId);
      let query = db
        .selectFrom("catalog.interactions")
        .selectAll()
        .where("project_id", "=", projectId);
      if (req.status !== InteractionStatus.UNSPECIFIED) {
        query = query.where("status", "=", statusName(req.status));
      }
      if (req.name) query = query.where("name", "=", req.name);
      if (req.version !== undefined) query = query.where("version", "=", req.version);
      if (req.tags.length > 0) query = query.where(hasAnyTag(req.tags));
      // Without a name filter, list drafts only: versions are reached by name or via /versions.
      if (!req.name && req.version === undefined) query = query.where("parent_id", "is", null);
      const rows = await query
        .orderBy("updated_at", "desc")
        .orderBy("id", "desc")
        .limit(pageSize(req.limit))
        .offset(Math.max(0, req.offset))
        .execute();
      return { interactions: rows.map((row) => interactionToProto(row)) };
    },

    async resolveExecution(req) {
      const projectId = requireProject(req.projectId);
      if (req.environmentOnly) {
        if (!req.environmentId) throw invalid("environment_id is required");
        const env = await findEnvironment(db, projectId, req.environmentId);
        return { environment: environmentToProto(env), apiKey: apiKeyOf(env) };
      }
      const ref = req.interaction;
      if (!ref.case || !ref.value) throw invalid("interaction is required");
      const row =
        ref.case === "interactionId"
          ? await db
              .selectFrom("catalog.interactions")
              .selectAll()
              .where("project_id", "=", projectId)
              .where("id", "=", ref.value)
              .executeTakeFirst()
          : await findByName(db, projectId, ref.value);
      if (!row) throw notFound("interaction", ref.value);
      const environmentId = req.environmentId || row.environment_id;
      if (!environmentId) {
        throw new ConnectError(
          `interaction ${row.id} has no environment and the request names none`,
          Code.InvalidArgument,
        );
      }
      const [templates, env] = await Promise.all([
        templatesOf(db, projectId, [row]),
        findEnvironment(db, projectId, environmentId),
      ]);
      const interaction = interactionToProto(row, templates);
      const missing = interaction.prompts.find((p) => p.type === "template" && !p.template);
      if (missing) {
        throw new ConnectError(
          `prompt template ${missing.templateId} of interaction ${row.id} no longer exists`,
          Code.FailedPrecondition,
        );
      }
      return {
        interaction,
        environment: environmentToProto(env),
        apiKey: apiKeyOf(env),
      };
    },
  };
}
