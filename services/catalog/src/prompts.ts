import type { ServiceImpl } from "@connectrpc/connect";
import { invalid, newId, notFound, pageSize, requireProject } from "@pies/common";
import type { CatalogService, PromptTemplateInput } from "@pies/proto/catalog";
import type { CatalogDeps } from "./context.js";
import { promptToProto } from "./mappers.js";

const CONTENT_TYPES = ["jst", "handlebars", "text"];
export const ROLES = ["system", "user", "assistant"];

function checkPrompt(input: PromptTemplateInput | undefined, creating: boolean) {
  if (!input) throw invalid("prompt is required");
  if (creating && !input.content) throw invalid("content is required");
  if (input.contentType !== undefined && !CONTENT_TYPES.includes(input.contentType)) {
    throw invalid(`content_type must be one of ${CONTENT_TYPES.join(", ")}`);
  }
  if (input.role !== undefined && !ROLES.includes(input.role)) {
    throw invalid(`role must be one of ${ROLES.join(", ")}`);
  }
  return input;
}

export function promptHandlers({ db }: CatalogDeps): Partial<ServiceImpl<typeof CatalogService>> {
  return {
    async createPrompt(req) {
      const projectId = requireProject(req.projectId);
      const input = checkPrompt(req.prompt, true);
      const row = await db
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
  };
}
