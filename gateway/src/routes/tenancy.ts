import type { FastifyInstance } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { accountJson, apiKeyJson, projectJson } from "../json/tenancy.js";
import { shortText, type InputLimits } from "../json/limits.js";
import { answered } from "@pies/common";
import { principalOf, type RouteContext } from "./context.js";
import {
  accountResponse,
  apiKeyCreatedResponse,
  apiKeyResponse,
  errorResponse,
  idParams,
  noContent,
  projectCreatedResponse,
  projectResponse,
} from "../json/responses.js";
import {
  ApiKeyRole,
  apiKeyRoleFromName,
  apiKeyRoleName,
  apiKeyRoleNames,
} from "@pies/proto/catalog";

/** Days a project's runs are kept (0: as the deployment keeps them; DESIGN.md §8). */
const retentionDays = z
  .number()
  .int()
  .min(0)
  .max(36_500)
  .describe("Days its runs are kept, when fewer than the deployment keeps them; 0: as it does");

/** The request schemas of these routes, with the configured limits. */
function schemas(limits: InputLimits) {
  return {
    projectBody: z
      .object({ name: shortText(limits).min(1), retention_days: retentionDays.optional() })
      .passthrough(),
    projectUpdateBody: z
      .object({
        name: shortText(limits).min(1).optional(),
        retention_days: retentionDays.optional(),
      })
      .passthrough(),
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
 * The account, its projects and API keys: read by members, managed with admin keys (`auth:
 * "admin"`, context.ts).
 */
export function tenancyRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const { catalog } = ctx.deps;
  const { projectBody, projectUpdateBody, apiKeyBody } = schemas(ctx.deps.options);
  const admin = { auth: "admin" } as const;
  const errors = { default: errorResponse };

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
        retentionDays: request.body.retention_days ?? 0,
      });
      reply.status(201);
      // Keys act within their project: the new project's admin key is the way into it.
      return {
        ...projectJson(answered(project, "project")),
        api_key: { ...apiKeyJson(answered(apiKey, "API key")), key: secret },
      };
    },
  );

  app.put(
    "/projects/:id",
    {
      config: admin,
      schema: {
        summary: "Update a project of the account: its name, its runs' retention (admin key)",
        params: idParams,
        body: projectUpdateBody,
        response: { 200: projectResponse, ...errors },
      },
    },
    async (request) => {
      const { project } = await catalog.updateProject({
        accountId: principalOf(request).accountId,
        projectId: request.params.id,
        name: request.body.name,
        retentionDays: request.body.retention_days,
      });
      return projectJson(answered(project, "project"));
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
