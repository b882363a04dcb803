import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ApiKeyRole, type Principal } from "@pies/proto/catalog";
import type { Authenticator } from "../auth.js";
import type { GatewayDeps } from "../deps.js";
import type { GatewayMetrics } from "../metrics.js";
import type { StreamSlots } from "../sse/stream-slots.js";
import { inRequestTrace } from "../tracing.js";
import { forbidden } from "../errors.js";
import { JSON_CONTENT_TYPE } from "../json/runs.js";

export interface RouteContext {
  deps: GatewayDeps;
  auth: Authenticator;
  metrics: GatewayMetrics;
  /** The SSE streams each key holds, runs' and experiments' alike. */
  streamSlots: StreamSlots;
}

/**
 * Who may call a route, declared in its `config.auth`: any key of the project (`member`, the
 * default), an admin key only (`admin`; DESIGN.md §9: keys, projects and environments are managed
 * by admins), a key given as header or as `?access_token=` (`stream`: a browser EventSource cannot
 * set headers), or nobody in particular (`public`).
 */
export type RouteAuth = "member" | "admin" | "stream" | "public";

declare module "fastify" {
  interface FastifyContextConfig {
    auth?: RouteAuth;
  }
  interface FastifyRequest {
    /** The caller, once the `/api/v1` authentication hook has verified its credential. */
    principal: Principal | null;
  }
}

/**
 * Authentication of the API: one `onRequest` hook for the routes of the `/api/v1` plugin, before
 * the body is read or validated (a request without a valid credential is 401 whatever it carries),
 * and the one place where roles are enforced (a member key on an admin route is 403 `forbidden`).
 * It is the last of each route's `onRequest` hooks, after the rate limit's (which @fastify/rate-limit
 * adds to each route): a plugin-wide hook would run before it, and a flood of bad credentials
 * would then reach the key look-up unlimited.
 */
export function installAuthentication(api: FastifyInstance, ctx: RouteContext) {
  api.decorateRequest("principal", null);
  const authenticate = async (request: FastifyRequest) => {
    const auth = request.routeOptions.config.auth ?? "member";
    if (auth === "public") return;
    const principal = await inRequestTrace(request, () =>
      ctx.auth.authenticate(request, auth === "stream"),
    );
    if (auth === "admin" && principal.role !== ApiKeyRole.ADMIN) {
      throw forbidden(
        `${request.method} ${request.routeOptions.url ?? request.url.split("?")[0]} needs an admin key`,
      );
    }
    request.principal = principal;
  };
  api.addHook("onRoute", (route) => {
    const own = route.onRequest;
    route.onRequest = [
      ...(own === undefined ? [] : Array.isArray(own) ? own : [own]),
      authenticate,
    ];
    // Each handler runs in its request's trace context (tracing.ts).
    const handler = route.handler;
    route.handler = function traced(request, reply) {
      return inRequestTrace(request, () => handler.call(this, request, reply));
    };
  });
}

/** The authenticated caller of a route (not `public`). */
export function principalOf(request: FastifyRequest): Principal {
  const { principal } = request;
  if (!principal) throw new Error(`route ${request.routeOptions.url} ran without a principal`);
  return principal;
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
    accountName: principal.accountName,
    projectName: principal.projectName,
    source: {
      type: "api",
      label: principal.apiKeyName,
      principalType: "apikey",
      principalId: principal.apiKeyId,
      clientIp: request.ip,
    },
  };
}

/**
 * Sends JSON written elsewhere (bytes: a runs service's page, an experiment) as the body, as it
 * is: Fastify's serializer does not run on bytes. The route's declared response stays, for the
 * OpenAPI document.
 */
export const sendJson = (reply: FastifyReply, body: Uint8Array) =>
  reply.type(JSON_CONTENT_TYPE).send(body);
