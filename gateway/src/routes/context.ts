import type { FastifyReply, FastifyRequest } from "fastify";
import type { Principal } from "@pies/proto/catalog";
import type { Authenticator } from "../auth.js";
import type { GatewayDeps } from "../deps.js";

export interface RouteContext {
  deps: GatewayDeps;
  auth: Authenticator;
}

export type Params = Record<string, string>;

/** A handler that runs for an authenticated caller; what it returns is the JSON response. */
export function authed(
  ctx: RouteContext,
  handler: (request: FastifyRequest, principal: Principal, reply: FastifyReply) => Promise<unknown>,
) {
  return async (request: FastifyRequest, reply: FastifyReply) => {
    const principal = await ctx.auth.authenticate(request);
    return handler(request, principal, reply);
  };
}

export const params = (request: FastifyRequest) => request.params as Params;
