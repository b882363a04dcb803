import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { environmentBody, environmentInput, environmentJson } from "../json/environments.js";
import {
  interactionBody,
  interactionInput,
  interactionJson,
  interactionRefJson,
  versionRefJson,
} from "../json/interactions.js";
import { promptBody, promptInput, promptJson } from "../json/prompts.js";
import { accountJson, apiKeyJson, projectJson } from "../json/tenancy.js";
import {
  pageQuery,
  queryInt32,
  shortText,
  shortTextList,
  type InputLimits,
} from "../json/limits.js";
import { answered } from "@pies/common";
import { adminOnly, authed, routeId, type RouteContext } from "./context.js";
import {
  ApiKeyRole,
  apiKeyRoleFromName,
  apiKeyRoleName,
  apiKeyRoleNames,
  InteractionStatus,
  interactionStatuses,
  visibilities,
  Visibility,
} from "@pies/proto/catalog";

/** The request schemas of these routes, with the configured limits. */
function schemas(limits: InputLimits) {
  return {
    interactionBody: interactionBody(limits),
    promptBody: promptBody(limits),
    environmentBody: environmentBody(limits),
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
    projectBody: z.object({ name: shortText(limits).min(1) }).passthrough(),
    apiKeyBody: z
      .object({
        name: shortText(limits).optional(),
        // A project of the caller's account; the caller's own project when absent.
        project: shortText(limits).optional(),
        role: z
          .string()
          .refine((r) => apiKeyRoleFromName(r) !== undefined, {
            message: `must be one of ${apiKeyRoleNames.join(", ")}`,
          })
          .optional(),
      })
      .passthrough(),
  };
}

/**
 * Interactions, prompt templates, environments, projects, the account and API keys. Members
 * execute, read and edit interactions and prompts, and read environments and runs; keys,
 * projects and environments are managed with admin keys (`adminOnly`).
 */
export function catalogRoutes(app: FastifyInstance, ctx: RouteContext) {
  const { catalog } = ctx.deps;
  const {
    interactionBody,
    promptBody,
    environmentBody,
    listInteractionsQuery,
    publishBody,
    projectBody,
    apiKeyBody,
  } = schemas(ctx.deps.options);

  app.post(
    "/interactions",
    authed(ctx, async (request, principal, reply) => {
      const body = interactionBody.parse(request.body ?? {});
      const { interaction } = await catalog.createInteraction({
        projectId: principal.projectId,
        interaction: interactionInput(body),
      });
      reply.status(201);
      return interactionJson(answered(interaction, "interaction"));
    }),
  );

  app.get(
    "/interactions",
    authed(ctx, async (request, principal) => {
      const q = listInteractionsQuery.parse(request.query ?? {});
      const { interactions } = await catalog.listInteractions({
        projectId: principal.projectId,
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
    }),
  );

  app.get(
    "/interactions/:id",
    authed(ctx, async (request, principal) => {
      const { interaction } = await catalog.getInteraction({
        projectId: principal.projectId,
        id: routeId(request),
        expandTemplates: true,
      });
      return interactionJson(answered(interaction, "interaction"));
    }),
  );

  app.put(
    "/interactions/:id",
    authed(ctx, async (request, principal) => {
      const body = interactionBody.parse(request.body ?? {});
      const { interaction } = await catalog.updateInteraction({
        projectId: principal.projectId,
        id: routeId(request),
        interaction: interactionInput(body),
      });
      return interactionJson(answered(interaction, "interaction"));
    }),
  );

  app.delete(
    "/interactions/:id",
    authed(ctx, async (request, principal, reply) => {
      await catalog.deleteInteraction({ projectId: principal.projectId, id: routeId(request) });
      return reply.status(204).send();
    }),
  );

  app.post(
    "/interactions/:id/publish",
    authed(ctx, async (request, principal, reply) => {
      const body = publishBody.parse(request.body ?? {});
      const { version } = await catalog.publishInteraction({
        projectId: principal.projectId,
        id: routeId(request),
        visibility: body.visibility
          ? (visibilities.value(body.visibility) ?? Visibility.PRIVATE)
          : Visibility.PRIVATE,
        tags: body.tags ?? [],
      });
      reply.status(201);
      // SPEC.md's version object: its prompts name their templates by id.
      return interactionJson(answered(version, "version"), true);
    }),
  );

  app.get(
    "/interactions/:id/versions",
    authed(ctx, async (request, principal) => {
      const { versions } = await catalog.listInteractionVersions({
        projectId: principal.projectId,
        id: routeId(request),
      });
      return versions.map(versionRefJson);
    }),
  );

  app.post(
    "/prompts",
    authed(ctx, async (request, principal, reply) => {
      const body = promptBody.parse(request.body ?? {});
      const { prompt } = await catalog.createPrompt({
        projectId: principal.projectId,
        prompt: promptInput(body),
      });
      reply.status(201);
      return promptJson(answered(prompt, "prompt"));
    }),
  );

  app.get(
    "/prompts",
    authed(ctx, async (request, principal) => {
      const q = pageQuery.parse(request.query ?? {});
      const { prompts } = await catalog.listPrompts({ projectId: principal.projectId, ...q });
      return prompts.map(promptJson);
    }),
  );

  app.get(
    "/prompts/:id",
    authed(ctx, async (request, principal) => {
      const { prompt } = await catalog.getPrompt({
        projectId: principal.projectId,
        id: routeId(request),
      });
      return promptJson(answered(prompt, "prompt"));
    }),
  );

  app.put(
    "/prompts/:id",
    authed(ctx, async (request, principal) => {
      const body = promptBody.parse(request.body ?? {});
      const { prompt } = await catalog.updatePrompt({
        projectId: principal.projectId,
        id: routeId(request),
        prompt: promptInput(body, true),
      });
      return promptJson(answered(prompt, "prompt"));
    }),
  );

  app.delete(
    "/prompts/:id",
    authed(ctx, async (request, principal, reply) => {
      await catalog.deletePrompt({ projectId: principal.projectId, id: routeId(request) });
      return reply.status(204).send();
    }),
  );

  app.post(
    "/environments",
    adminOnly(ctx, async (request, principal, reply) => {
      const body = environmentBody.parse(request.body ?? {});
      const { environment } = await catalog.createEnvironment({
        projectId: principal.projectId,
        environment: environmentInput(body),
      });
      reply.status(201);
      return environmentJson(answered(environment, "environment"));
    }),
  );

  app.get(
    "/environments",
    authed(ctx, async (_request, principal) => {
      const { environments } = await catalog.listEnvironments({ projectId: principal.projectId });
      return environments.map(environmentJson);
    }),
  );

  app.get(
    "/environments/:id",
    authed(ctx, async (request, principal) => {
      const { environment } = await catalog.getEnvironment({
        projectId: principal.projectId,
        id: routeId(request),
      });
      return environmentJson(answered(environment, "environment"));
    }),
  );

  app.get(
    "/environments/:id/models",
    authed(ctx, async (request, principal) => {
      const { models, source } = await catalog.listEnvironmentModels({
        projectId: principal.projectId,
        id: routeId(request),
      });
      return { models, source };
    }),
  );

  app.put(
    "/environments/:id",
    adminOnly(ctx, async (request, principal) => {
      const body = environmentBody.parse(request.body ?? {});
      const { environment } = await catalog.updateEnvironment({
        projectId: principal.projectId,
        id: routeId(request),
        environment: environmentInput(body),
      });
      return environmentJson(answered(environment, "environment"));
    }),
  );

  app.delete(
    "/environments/:id",
    adminOnly(ctx, async (request, principal, reply) => {
      await catalog.deleteEnvironment({ projectId: principal.projectId, id: routeId(request) });
      return reply.status(204).send();
    }),
  );

  app.get(
    "/account",
    authed(ctx, async (_request, principal) => {
      const { account } = await catalog.getAccount({ accountId: principal.accountId });
      return {
        ...accountJson(answered(account, "account")),
        project: { id: principal.projectId, name: principal.projectName },
        key: {
          id: principal.apiKeyId,
          name: principal.apiKeyName,
          role: apiKeyRoleName(principal.role),
        },
      };
    }),
  );

  app.get(
    "/projects",
    adminOnly(ctx, async (_request, principal) => {
      const { projects } = await catalog.listProjects({ accountId: principal.accountId });
      return projects.map(projectJson);
    }),
  );

  app.post(
    "/projects",
    adminOnly(ctx, async (request, principal, reply) => {
      const body = projectBody.parse(request.body ?? {});
      const { project, apiKey, secret } = await catalog.createProject({
        accountId: principal.accountId,
        name: body.name,
      });
      reply.status(201);
      // Keys act within their project: the new project's admin key is the way into it.
      return {
        ...projectJson(answered(project, "project")),
        api_key: { ...apiKeyJson(answered(apiKey, "API key")), key: secret },
      };
    }),
  );

  app.get(
    "/apikeys",
    adminOnly(ctx, async (_request, principal) => {
      const { apiKeys } = await catalog.listApiKeys({ projectId: principal.projectId });
      return apiKeys.map(apiKeyJson);
    }),
  );

  app.post(
    "/apikeys",
    adminOnly(ctx, async (request, principal, reply) => {
      const body = apiKeyBody.parse(request.body ?? {});
      const { apiKey, secret } = await catalog.createApiKey({
        projectId: body.project ?? principal.projectId,
        // Any project of the caller's account, and no other (404).
        accountId: principal.accountId,
        name: body.name ?? "",
        // Least privilege: a key is a member key unless an admin key is asked for.
        role: (body.role && apiKeyRoleFromName(body.role)) || ApiKeyRole.MEMBER,
      });
      reply.status(201);
      // The only response that ever carries the secret.
      return { ...apiKeyJson(answered(apiKey, "API key")), key: secret };
    }),
  );

  app.delete(
    "/apikeys/:id",
    adminOnly(ctx, async (request, principal, reply) => {
      await catalog.deleteApiKey({ projectId: principal.projectId, id: routeId(request) });
      return reply.status(204).send();
    }),
  );
}
