import type { FastifyInstance } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { environmentBody, environmentInput, environmentJson } from "../json/environments.js";
import {
  interactionBody,
  interactionInput,
  interactionJson,
  interactionRefJson,
  resolvedInteractionJson,
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
import { answered, PAGE_SIZE } from "@pies/common";
import { principalOf, type RouteContext } from "./context.js";
import { badRequest } from "../errors.js";
import {
  accountResponse,
  apiKeyCreatedResponse,
  apiKeyResponse,
  environmentResponse,
  errorResponse,
  idParams,
  interactionRefResponse,
  interactionResponse,
  interactionTagResponse,
  modelsResponse,
  noContent,
  projectCreatedResponse,
  projectResponse,
  promptResponse,
  resolvedInteractionResponse,
  versionRefResponse,
} from "../json/responses.js";
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
    forkBody: z
      .object({
        keepTags: z.boolean().optional(),
        forkPrompts: z.boolean().optional(),
        targetProject: shortText(limits).optional(),
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
 * projects and environments are managed with admin keys (`auth: "admin"`, context.ts).
 */
export function catalogRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const { catalog } = ctx.deps;
  const {
    interactionBody,
    promptBody,
    environmentBody,
    listInteractionsQuery,
    publishBody,
    forkBody,
    projectBody,
    apiKeyBody,
  } = schemas(ctx.deps.options);
  const admin = { auth: "admin" } as const;
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
    "/environments",
    {
      config: admin,
      schema: {
        summary: "Create an environment (a provider's configuration; admin key)",
        body: environmentBody,
        response: { 201: environmentResponse, ...errors },
      },
    },
    async (request, reply) => {
      const { environment } = await catalog.createEnvironment({
        projectId: principalOf(request).projectId,
        environment: environmentInput(request.body),
      });
      reply.status(201);
      return environmentJson(answered(environment, "environment"));
    },
  );

  app.get(
    "/environments",
    {
      schema: {
        summary: "List environments",
        response: { 200: z.array(environmentResponse), ...errors },
      },
    },
    async (request) => {
      const { environments } = await catalog.listEnvironments({
        projectId: principalOf(request).projectId,
      });
      return environments.map(environmentJson);
    },
  );

  app.get(
    "/environments/:id",
    {
      schema: {
        summary: "Get an environment",
        params: idParams,
        response: { 200: environmentResponse, ...errors },
      },
    },
    async (request) => {
      const { environment } = await catalog.getEnvironment({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return environmentJson(answered(environment, "environment"));
    },
  );

  app.get(
    "/environments/:id/models",
    {
      schema: {
        summary: "List the models of an environment",
        params: idParams,
        response: { 200: modelsResponse, ...errors },
      },
    },
    async (request) => {
      const { models, source } = await catalog.listEnvironmentModels({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return { models, source };
    },
  );

  app.put(
    "/environments/:id",
    {
      config: admin,
      schema: {
        summary: "Update an environment (the fields given; admin key)",
        params: idParams,
        body: environmentBody,
        response: { 200: environmentResponse, ...errors },
      },
    },
    async (request) => {
      const { environment } = await catalog.updateEnvironment({
        projectId: principalOf(request).projectId,
        id: request.params.id,
        environment: environmentInput(request.body),
      });
      return environmentJson(answered(environment, "environment"));
    },
  );

  app.delete(
    "/environments/:id",
    {
      config: admin,
      schema: {
        summary: "Delete an environment (admin key)",
        params: idParams,
        response: { 204: noContent, ...errors },
      },
    },
    async (request, reply) => {
      await catalog.deleteEnvironment({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return reply.status(204).send();
    },
  );

  app.get(
    "/account",
    {
      schema: {
        summary: "The caller's account, project and key",
        response: { 200: accountResponse, ...errors },
      },
    },
    async (request) => {
      const principal = principalOf(request);
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
    },
  );

  app.get(
    "/projects",
    {
      config: admin,
      schema: {
        summary: "List the projects of the account (admin key)",
        response: { 200: z.array(projectResponse), ...errors },
      },
    },
    async (request) => {
      const { projects } = await catalog.listProjects({
        accountId: principalOf(request).accountId,
      });
      return projects.map(projectJson);
    },
  );

  app.post(
    "/projects",
    {
      config: admin,
      schema: {
        summary: "Create a project, with an admin key of its own (admin key)",
        body: projectBody,
        response: { 201: projectCreatedResponse, ...errors },
      },
    },
    async (request, reply) => {
      const { project, apiKey, secret } = await catalog.createProject({
        accountId: principalOf(request).accountId,
        name: request.body.name,
      });
      reply.status(201);
      // Keys act within their project: the new project's admin key is the way into it.
      return {
        ...projectJson(answered(project, "project")),
        api_key: { ...apiKeyJson(answered(apiKey, "API key")), key: secret },
      };
    },
  );

  app.get(
    "/apikeys",
    {
      config: admin,
      schema: {
        summary: "List the API keys of the project (admin key)",
        response: { 200: z.array(apiKeyResponse), ...errors },
      },
    },
    async (request) => {
      const { apiKeys } = await catalog.listApiKeys({ projectId: principalOf(request).projectId });
      return apiKeys.map(apiKeyJson);
    },
  );

  app.post(
    "/apikeys",
    {
      config: admin,
      schema: {
        summary: "Create an API key (admin key); its secret is answered once",
        body: apiKeyBody,
        response: { 201: apiKeyCreatedResponse, ...errors },
      },
    },
    async (request, reply) => {
      const principal = principalOf(request);
      const body = request.body;
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
    },
  );

  app.delete(
    "/apikeys/:id",
    {
      config: admin,
      schema: {
        summary: "Revoke an API key (admin key)",
        params: idParams,
        response: { 204: noContent, ...errors },
      },
    },
    async (request, reply) => {
      await catalog.deleteApiKey({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return reply.status(204).send();
    },
  );
}
