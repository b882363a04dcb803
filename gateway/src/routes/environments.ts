import type { FastifyInstance } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { environmentBody, environmentInput, environmentJson } from "../json/environments.js";
import { type InputLimits } from "../json/limits.js";
import { answered } from "@pies/common";
import { principalOf, type RouteContext } from "./context.js";
import {
  environmentResponse,
  errorResponse,
  idParams,
  modelsResponse,
  noContent,
} from "../json/responses.js";

/** The request schemas of these routes, with the configured limits. */
function schemas(limits: InputLimits) {
  return {
    environmentBody: environmentBody(limits),
  };
}

/**
 * Environments (a provider, its key and models). Members read them; admin keys create, edit and
 * delete them (`auth: "admin"`, context.ts).
 */
export function environmentRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const { catalog } = ctx.deps;
  const { environmentBody } = schemas(ctx.deps.options);
  const admin = { auth: "admin" } as const;
  const errors = { default: errorResponse };

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
}
