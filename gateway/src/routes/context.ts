import type { FastifyReply, FastifyRequest } from "fastify";
import { ApiKeyRole, type Principal } from "@pies/proto/catalog";
import type { Authenticator } from "../auth.js";
import type { GatewayDeps } from "../deps.js";
import type { GatewayMetrics } from "../metrics.js";
import { inRequestTrace } from "../tracing.js";
import { forbidden } from "../errors.js";

export interface RouteContext {
  deps: GatewayDeps;
  auth: Authenticator;
  metrics: GatewayMetrics;
}

export type Params = Record<string, string>;

type Handler = (
  request: FastifyRequest,
  principal: Principal,
  reply: FastifyReply,
) => Promise<unknown>;

/** A handler that runs for an authenticated caller; what it returns is the JSON response. */
export function authed(ctx: RouteContext, handler: Handler) {
  return (request: FastifyRequest, reply: FastifyReply) =>
    inRequestTrace(request, async () => {
      const principal = await ctx.auth.authenticate(request);
      return handler(request, principal, reply);
    });
}

/**
 * A handler that runs for an admin key only (DESIGN.md §9: keys, projects and environments are
 * managed by admins); a member key gets 403 `forbidden` before the handler runs. The one place
 * where roles are enforced.
 */
export function adminOnly(ctx: RouteContext, handler: Handler) {
  return authed(ctx, async (request, principal, reply) => {
    if (principal.role !== ApiKeyRole.ADMIN) {
      throw forbidden(
        `${request.method} ${request.routeOptions.url ?? request.url.split("?")[0]} needs an admin key`,
      );
    }
    return handler(request, principal, reply);
  });
}

/** The `:id` of the route (Fastify matches a route with `:id` only when it is there). */
export function routeId(request: FastifyRequest): string {
  const { id } = request.params as Params;
  if (id === undefined) throw new Error(`route ${request.routeOptions.url} has no :id`);
  return id;
}

/**
 * Aborted when the client goes away before its answer is sent: passed to the executor, it
 * cancels the provider call of a blocking execution.
 */
export function callerGone(reply: FastifyReply): AbortSignal {
  const gone = new AbortController();
  const res = reply.raw;
  res.once("close", () => {
    if (!res.writableFinished) gone.abort();
  });
  return gone.signal;
}

/** Who is executing, as the executor records it on the run (`source`). */
export function callerOf(request: FastifyRequest, principal: Principal) {
  return {
    accountId: principal.accountId,
    projectId: principal.projectId,
    source: {
      type: "api",
      label: principal.apiKeyName,
      principalType: "apikey",
      principalId: principal.apiKeyId,
      clientIp: request.ip,
    },
  };
}
