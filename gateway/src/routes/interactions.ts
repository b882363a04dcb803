import type { FastifyInstance } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import {
  interactionBody,
  interactionInput,
  interactionJson,
  interactionRefJson,
  resolvedInteractionJson,
  versionRefJson,
} from "../json/interactions.js";
import {
  pageQuery,
  queryInt32,
  shortText,
  shortTextList,
  type InputLimits,
} from "../json/limits.js";
import { answered, PAGE_SIZE } from "@pies/common";
import { principalOf, type RouteContext } from "./context.js";
import { badRequest } from "../errors.js";
import {
  errorResponse,
  idParams,
  interactionRefResponse,
  interactionResponse,
  interactionTagResponse,
  noContent,
  resolvedInteractionResponse,
  versionRefResponse,
} from "../json/responses.js";
import {
  InteractionStatus,
  interactionStatuses,
  visibilities,
  Visibility,
} from "@pies/proto/catalog";

/** The request schemas of these routes, with the configured limits. */
function schemas(limits: InputLimits) {
  return {
    interactionBody: interactionBody(limits),
    listInteractionsQuery: pageQuery.extend({
      status: z.enum(interactionStatuses.names).optional(),
      name: shortText(limits).optional(),
      version: queryInt32(1).optional(),
      tags: shortTextList(limits).optional(),
    }),
    publishBody: z
      .object({
        visibility: z.enum(visibilities.names).optional(),
        tags: z.array(shortText(limits)).optional(),
      })
      .passthrough(),
    forkBody: z
      .object({
        keepTags: z.boolean().optional(),
        forkPrompts: z.boolean().optional(),
        targetProject: shortText(limits).optional(),
      })
      .passthrough(),
  };
}

/**
 * Interactions: create, list, read, edit and delete them, resolve a name, publish, list versions,
 * fork. Members read and edit them.
 */
export function interactionRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const { catalog } = ctx.deps;
  const { interactionBody, listInteractionsQuery, publishBody, forkBody } = schemas(
    ctx.deps.options,
  );
  const errors = { default: errorResponse };

  app.post(
    "/interactions",
    {
      schema: {
        summary: "Create an interaction",
        body: interactionBody,
        response: { 201: interactionResponse, ...errors },
      },
    },
    async (request, reply) => {
      const principal = principalOf(request);
      const { interaction } = await catalog.createInteraction({
        projectId: principal.projectId,
        interaction: interactionInput(request.body),
      });
      reply.status(201);
      return interactionJson(answered(interaction, "interaction"));
    },
  );

  app.get(
    "/interactions",
    {
      schema: {
        summary: "List interactions",
        querystring: listInteractionsQuery,
        response: { 200: z.array(interactionRefResponse), ...errors },
      },
    },
    async (request) => {
      const q = request.query;
      const { interactions } = await catalog.listInteractions({
        projectId: principalOf(request).projectId,
        status: q.status
          ? (interactionStatuses.value(q.status) ?? InteractionStatus.UNSPECIFIED)
          : InteractionStatus.UNSPECIFIED,
        name: q.name ?? "",
        version: q.version,
        tags: q.tags ?? [],
        limit: q.limit,
        offset: q.offset,
      });
      return interactions.map(interactionRefJson);
    },
  );

  app.get(
    "/interactions/resolve/:ref",
    {
      schema: {
        summary:
          "Resolve an interaction by id or by `Name`, `Name@3`, `Name@latest`, `Name@draft`: the version an execution would run, its environment and model",
        params: z.object({ ref: shortText(ctx.deps.options).min(1) }),
        querystring: z
          .object({
            environment: shortText(ctx.deps.options).optional(),
            model: shortText(ctx.deps.options).optional(),
          })
          .passthrough(),
        response: { 200: resolvedInteractionResponse, ...errors },
      },
    },
    async (request) => {
      const { interaction, environment, model, modelSource } = await catalog.resolveInteraction({
        projectId: principalOf(request).projectId,
        ref: request.params.ref,
        environmentId: request.query.environment ?? "",
        model: request.query.model ?? "",
      });
      return resolvedInteractionJson(answered(interaction, "interaction"), environment, {
        model,
        modelSource,
      });
    },
  );

  app.get(
    "/interactions/versions/:name",
    {
      schema: {
        summary: "List the published versions of the interaction named so",
        params: z.object({ name: shortText(ctx.deps.options).min(1) }),
        response: { 200: z.array(interactionRefResponse), ...errors },
      },
    },
    async (request) => {
      const { interactions } = await catalog.listInteractions({
        projectId: principalOf(request).projectId,
        name: request.params.name,
        status: InteractionStatus.PUBLISHED,
        limit: PAGE_SIZE.max,
      });
      return interactions.map(interactionRefJson);
    },
  );

  app.get(
    "/interactions/names",
    {
      schema: {
        summary: `The ids and names of the project's interactions (drafts; the ${PAGE_SIZE.max} most recently updated)`,
        response: { 200: z.array(z.object({ id: z.string(), name: z.string() })), ...errors },
      },
    },
    async (request) => {
      const { interactions } = await catalog.listInteractions({
        projectId: principalOf(request).projectId,
        limit: PAGE_SIZE.max,
      });
      return interactions.map((i) => ({ id: i.id, name: i.name }));
    },
  );

  app.get(
    "/interactions/tags",
    {
      schema: {
        summary: `The tags on the project's interactions and published versions: how many carry each, and which (of the ${PAGE_SIZE.max} most recently updated that carry tags)`,
        response: { 200: z.array(interactionTagResponse), ...errors },
      },
    },
    async (request) => {
      const { tags } = await catalog.listInteractionTags({
        projectId: principalOf(request).projectId,
      });
      return tags.map(({ tag, count, interactions }) => ({
        tag,
        count,
        interactions: interactions.map((i) => ({
          ...interactionRefJson(i),
          version: i.version,
          tags: i.tags,
        })),
      }));
    },
  );

  app.get(
    "/interactions/:id",
    {
      schema: {
        summary: "Get an interaction, its templates expanded",
        params: idParams,
        response: { 200: interactionResponse, ...errors },
      },
    },
    async (request) => {
      const { interaction } = await catalog.getInteraction({
        projectId: principalOf(request).projectId,
        id: request.params.id,
        expandTemplates: true,
      });
      return interactionJson(answered(interaction, "interaction"));
    },
  );

  app.put(
    "/interactions/:id",
    {
      schema: {
        summary: "Update an interaction (the fields given)",
        params: idParams,
        body: interactionBody,
        response: { 200: interactionResponse, ...errors },
      },
    },
    async (request) => {
      const { interaction } = await catalog.updateInteraction({
        projectId: principalOf(request).projectId,
        id: request.params.id,
        interaction: interactionInput(request.body),
      });
      return interactionJson(answered(interaction, "interaction"));
    },
  );

  app.delete(
    "/interactions/:id",
    {
      schema: {
        summary: "Delete an interaction",
        params: idParams,
        response: { 204: noContent, ...errors },
      },
    },
    async (request, reply) => {
      await catalog.deleteInteraction({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return reply.status(204).send();
    },
  );

  app.post(
    "/interactions/:id/publish",
    {
      schema: {
        summary: "Publish a version of an interaction",
        params: idParams,
        body: publishBody,
        response: { 201: interactionResponse, ...errors },
      },
    },
    async (request, reply) => {
      const body = request.body;
      const { version } = await catalog.publishInteraction({
        projectId: principalOf(request).projectId,
        id: request.params.id,
        visibility: body.visibility
          ? (visibilities.value(body.visibility) ?? Visibility.PRIVATE)
          : Visibility.PRIVATE,
        tags: body.tags ?? [],
      });
      reply.status(201);
      // SPEC.md's version object: its prompts name their templates by id.
      return interactionJson(answered(version, "version"), true);
    },
  );

  app.get(
    "/interactions/:id/versions",
    {
      schema: {
        summary: "List the published versions of an interaction",
        params: idParams,
        response: { 200: z.array(versionRefResponse), ...errors },
      },
    },
    async (request) => {
      const { versions } = await catalog.listInteractionVersions({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return versions.map(versionRefJson);
    },
  );

  app.post(
    "/interactions/:id/fork",
    {
      schema: {
        summary:
          "Fork an interaction or a version into a new draft, `<name> (fork)`, with its templates or (`forkPrompts`) copies of them",
        params: idParams,
        body: forkBody,
        response: { 201: interactionResponse, ...errors },
      },
    },
    async (request, reply) => {
      const principal = principalOf(request);
      const { keepTags, forkPrompts, targetProject } = request.body;
      if (targetProject !== undefined && targetProject !== principal.projectId) {
        throw badRequest(
          "targetProject: a key acts within its project; a fork is made in the key's project",
        );
      }
      const { interaction } = await catalog.forkInteraction({
        projectId: principal.projectId,
        id: request.params.id,
        keepTags: keepTags ?? false,
        forkPrompts: forkPrompts ?? false,
      });
      reply.status(201);
      return interactionJson(answered(interaction, "interaction"));
    },
  );

  app.get(
    "/interactions/:id/forks",
    {
      schema: {
        summary: `The drafts forked from an interaction or a version (the ${PAGE_SIZE.max} most recently updated)`,
        params: idParams,
        response: { 200: z.array(interactionRefResponse), ...errors },
      },
    },
    async (request) => {
      const { interactions } = await catalog.listInteractionForks({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return interactions.map(interactionRefJson);
    },
  );
}
