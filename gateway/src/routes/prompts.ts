import type { FastifyInstance } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { answered, jsonBytes } from "@pies/common";
import type { Interaction } from "@pies/proto/catalog";
import { jsonObject } from "../json/common.js";
import { type InputLimits, pageQuery } from "../json/limits.js";
import { promptBody, promptInput, promptJson } from "../json/prompts.js";
import { errorResponse, idParams, noContent, promptResponse } from "../json/responses.js";
import { principalOf, type RouteContext } from "./context.js";

const renderResponse = z.object({
  id: z.string(),
  name: z.string(),
  role: z.string(),
  content_type: z.string(),
  rendered: z.string().describe("The template's text with the data, as an execution sends it"),
});

const promptInteractionsResponse = z.object({
  prompt: z.string(),
  interactions: z.array(
    z.object({
      id: z.string().describe("The interaction (its draft)"),
      name: z.string(),
      versions: z
        .array(z.object({ version: z.number().int() }))
        .describe("Its published versions that use the template, latest first"),
    }),
  ),
});

/** The request schemas of these routes, with the configured limits. */
function schemas(limits: InputLimits) {
  return { promptBody: promptBody(limits) };
}

/**
 * Prompt templates: create, list, read, edit and delete them; and what @vertesia/client's
 * PromptsApi asks of a template beyond that: its text rendered with data (the executor renders
 * it, in the sandbox an execution uses: never the gateway), its versions and the interactions
 * that use it.
 */
export function promptRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const { catalog, executor } = ctx.deps;
  const { promptBody } = schemas(ctx.deps.options);
  const errors = { default: errorResponse };

  app.post(
    "/prompts",
    {
      schema: {
        summary: "Create a prompt template",
        body: promptBody,
        response: { 201: promptResponse, ...errors },
      },
    },
    async (request, reply) => {
      const { prompt } = await catalog.createPrompt({
        projectId: principalOf(request).projectId,
        prompt: promptInput(request.body),
      });
      reply.status(201);
      return promptJson(answered(prompt, "prompt"));
    },
  );

  app.get(
    "/prompts",
    {
      schema: {
        summary: "List prompt templates",
        querystring: pageQuery,
        response: { 200: z.array(promptResponse), ...errors },
      },
    },
    async (request) => {
      const { limit, offset } = request.query;
      const { prompts } = await catalog.listPrompts({
        projectId: principalOf(request).projectId,
        limit,
        offset,
      });
      return prompts.map(promptJson);
    },
  );

  app.get(
    "/prompts/:id",
    {
      schema: {
        summary: "Get a prompt template",
        params: idParams,
        response: { 200: promptResponse, ...errors },
      },
    },
    async (request) => {
      const { prompt } = await catalog.getPrompt({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return promptJson(answered(prompt, "prompt"));
    },
  );

  app.put(
    "/prompts/:id",
    {
      schema: {
        summary: "Update a prompt template (the fields given)",
        params: idParams,
        body: promptBody,
        response: { 200: promptResponse, ...errors },
      },
    },
    async (request) => {
      const { prompt } = await catalog.updatePrompt({
        projectId: principalOf(request).projectId,
        id: request.params.id,
        prompt: promptInput(request.body, true),
      });
      return promptJson(answered(prompt, "prompt"));
    },
  );

  app.delete(
    "/prompts/:id",
    {
      schema: {
        summary: "Delete a prompt template",
        params: idParams,
        response: { 204: noContent, ...errors },
      },
    },
    async (request, reply) => {
      await catalog.deletePrompt({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return reply.status(204).send();
    },
  );

  app.post(
    "/prompts/:id/render",
    {
      schema: {
        summary:
          "Render a prompt template with data (the body: its variables), as an execution would; no provider call, no run",
        params: idParams,
        body: jsonObject,
        response: { 200: renderResponse, ...errors },
      },
    },
    async (request) => {
      const { prompt, rendered } = await executor.renderPrompt({
        projectId: principalOf(request).projectId,
        promptId: request.params.id,
        dataJson: jsonBytes(request.body),
      });
      const p = answered(prompt, "prompt");
      return { id: p.id, name: p.name, role: p.role, content_type: p.contentType, rendered };
    },
  );

  app.get(
    "/prompts/:id/versions",
    {
      schema: {
        summary:
          "The versions of a prompt template: none, templates are not versioned (a published interaction version keeps a copy of its templates)",
        params: idParams,
        response: { 200: z.array(z.unknown()).max(0), ...errors },
      },
    },
    async (request) => {
      // 404 for a template that is not the project's, as for any template route.
      await catalog.getPrompt({ projectId: principalOf(request).projectId, id: request.params.id });
      return [];
    },
  );

  app.get(
    "/prompts/:id/interactions",
    {
      schema: {
        summary: "The interactions that use a prompt template, and which of their versions do",
        params: idParams,
        response: { 200: promptInteractionsResponse, ...errors },
      },
    },
    async (request) => {
      const { interactions } = await catalog.listPromptInteractions({
        projectId: principalOf(request).projectId,
        promptId: request.params.id,
      });
      return { prompt: request.params.id, interactions: byInteraction(interactions) };
    },
  );
}

/**
 * Drafts and versions grouped by interaction, most recently updated first. An interaction whose
 * draft no longer uses the template but a version still does is named as that version was.
 */
export function byInteraction(rows: Interaction[]) {
  const groups = new Map<string, { id: string; name: string; versions: { version: number }[] }>();
  for (const row of rows) {
    const id = row.parentId || row.id;
    let group = groups.get(id);
    if (!group) groups.set(id, (group = { id, name: row.name, versions: [] }));
    if (row.parentId) group.versions.push({ version: row.version });
    else group.name = row.name;
  }
  for (const group of groups.values()) group.versions.sort((a, b) => b.version - a.version);
  return [...groups.values()];
}
