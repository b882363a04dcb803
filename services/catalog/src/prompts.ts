import type { ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import {
  invalid,
  newId,
  notFound,
  PAGE_SIZE,
  pageSize,
  requireProject,
  type JsonObject,
} from "@pies/common";
import type { CatalogService, PromptTemplateInput } from "@pies/proto/catalog";
import type { CatalogDeps } from "./context.js";
import { interactionToProto, promptToProto } from "./mappers.js";
import { payloadOf } from "./payloads.js";
import { checkJsonSchema } from "./schemas.js";
import type { CatalogDatabase } from "./tables.js";

const CONTENT_TYPES = ["jst", "handlebars", "text"];
export const ROLES = ["system", "user", "assistant"];

/**
 * A template's writable fields (a PromptTemplateInput, or a template given inline), its JSON
 * payloads read (payloadOf: undefined keeps the stored value, null clears it).
 */
export interface PromptFields extends Partial<
  Pick<PromptTemplateInput, "name" | "role" | "contentType" | "content">
> {
  testData?: JsonObject | null;
  inputSchema?: JsonObject | null;
}

/** The fields of a PromptTemplateInput. */
function promptFieldsOf(input: PromptTemplateInput): PromptFields {
  return {
    name: input.name,
    role: input.role,
    contentType: input.contentType,
    content: input.content,
    testData: payloadOf("test_data", input.testDataJson),
    inputSchema: payloadOf("inputSchema", input.inputSchemaJson),
  };
}

function checkPrompt(input: PromptFields | undefined, creating: boolean) {
  if (!input) throw invalid("prompt is required");
  if (creating && !input.content) throw invalid("content is required");
  if (input.contentType !== undefined && !CONTENT_TYPES.includes(input.contentType)) {
    throw invalid(`content_type must be one of ${CONTENT_TYPES.join(", ")}`);
  }
  if (input.role !== undefined && !ROLES.includes(input.role)) {
    throw invalid(`role must be one of ${ROLES.join(", ")}`);
  }
  checkJsonSchema("inputSchema", input.inputSchema ?? undefined);
  return input;
}

/** Checks and inserts a new template (also a template given inline in an interaction's segment). */
export async function insertPrompt(
  db: Kysely<CatalogDatabase>,
  projectId: string,
  prompt: PromptFields | undefined,
) {
  const input = checkPrompt(prompt, true);
  return db
    .insertInto("catalog.prompts")
    .values({
      id: newId(),
      project_id: projectId,
      name: input.name || "untitled",
      role: input.role ?? "user",
      content_type: input.contentType ?? "jst",
      content: input.content ?? "",
      test_data: JSON.stringify(input.testData ?? null),
      input_schema: JSON.stringify(input.inputSchema ?? null),
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/**
 * The interactions and versions that use something, named for a 409: who must change first.
 * At most 10 are named; the lookups are by index (the segments' GIN index, the environment's).
 */
export function usedBy(
  rows: { id: string; name: string; parent_id: string | null; version: number }[],
): string {
  return rows
    .map((r) =>
      r.parent_id
        ? `version ${r.version} of ${r.name} (${r.id})`
        : `interaction ${r.name} (${r.id})`,
    )
    .join(", ");
}

export function promptHandlers({ db }: CatalogDeps): Partial<ServiceImpl<typeof CatalogService>> {
  return {
    async createPrompt(req) {
      const row = await insertPrompt(
        db,
        requireProject(req.projectId),
        req.prompt && promptFieldsOf(req.prompt),
      );
      return { prompt: promptToProto(row) };
    },

    async getPrompt(req) {
      const row = await db
        .selectFrom("catalog.prompts")
        .selectAll()
        .where("project_id", "=", requireProject(req.projectId))
        .where("id", "=", req.id)
        .executeTakeFirst();
      if (!row) throw notFound("prompt", req.id);
      return { prompt: promptToProto(row) };
    },

    async listPrompts(req) {
      const rows = await db
        .selectFrom("catalog.prompts")
        .selectAll()
        .where("project_id", "=", requireProject(req.projectId))
        .orderBy("updated_at", "desc")
        .orderBy("id", "desc")
        .limit(pageSize(req.limit))
        .offset(Math.max(0, req.offset))
        .execute();
      return { prompts: rows.map(promptToProto) };
    },

    async listPromptInteractions(req) {
      const projectId = requireProject(req.projectId);
      const prompt = await db
        .selectFrom("catalog.prompts")
        .select("id")
        .where("project_id", "=", projectId)
        .where("id", "=", req.promptId)
        .executeTakeFirst();
      if (!prompt) throw notFound("prompt", req.promptId);
      // Drafts and versions (a version's snapshot keeps its template's id), by the segments' index.
      const rows = await db
        .selectFrom("catalog.interactions")
        .selectAll()
        .where("project_id", "=", projectId)
        .where(usesTemplate(req.promptId))
        .orderBy("updated_at", "desc")
        .orderBy("id", "desc")
        .limit(PAGE_SIZE.max)
        .execute();
      return { interactions: rows.map((row) => interactionToProto(row)) };
    },

    // Published versions hold a copy of their templates: editing one never changes them.
    async updatePrompt(req) {
      const projectId = requireProject(req.projectId);
      const input = checkPrompt(req.prompt ? promptFieldsOf(req.prompt) : {}, false);
      if (input.content === "") throw invalid("content must not be empty");
      const row = await db
        .updateTable("catalog.prompts")
        .set({
          ...(input.name !== undefined ? { name: input.name || "untitled" } : {}),
          ...(input.role !== undefined ? { role: input.role } : {}),
          ...(input.contentType !== undefined ? { content_type: input.contentType } : {}),
          ...(input.content !== undefined ? { content: input.content } : {}),
          ...(input.testData !== undefined ? { test_data: JSON.stringify(input.testData) } : {}),
          ...(input.inputSchema !== undefined
            ? { input_schema: JSON.stringify(input.inputSchema) }
            : {}),
          updated_at: new Date(),
        })
        .where("project_id", "=", projectId)
        .where("id", "=", req.id)
        .returningAll()
        .executeTakeFirst();
      if (!row) throw notFound("prompt", req.id);
      return { prompt: promptToProto(row) };
    },

    async deletePrompt(req) {
      const projectId = requireProject(req.projectId);
      await db.transaction().execute(async (tx) => {
        // Locked: an interaction that refers to it meanwhile waits (it reads it FOR SHARE).
        const row = await tx
          .selectFrom("catalog.prompts")
          .select("id")
          .where("project_id", "=", projectId)
          .where("id", "=", req.id)
          .forUpdate()
          .executeTakeFirst();
        if (!row) throw notFound("prompt", req.id);
        const users = await tx
          .selectFrom("catalog.interactions")
          .select(["id", "name", "parent_id", "version"])
          .where("project_id", "=", projectId)
          .where(usesTemplate(req.id))
          .orderBy("parent_id", "desc")
          .limit(10)
          .execute();
        if (users.length > 0) {
          throw new ConnectError(
            `prompt template ${req.id} is used by ${usedBy(users)}`,
            Code.FailedPrecondition,
          );
        }
        await tx.deleteFrom("catalog.prompts").where("id", "=", req.id).execute();
      });
      return {};
    },
  };
}

/** Interactions and versions whose segments name the template (the segments' GIN index). */
const usesTemplate = (templateId: string) =>
  sql<boolean>`prompts @> ${JSON.stringify([{ template_id: templateId }])}::jsonb`;
