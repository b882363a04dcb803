import { createHash } from "node:crypto";
import type { FastifyRequest } from "fastify";
import type { Principal } from "@pies/proto/catalog";
import type { GatewayDeps } from "./deps.js";
import { unauthorized } from "./errors.js";

interface Cached {
  principal: Principal;
  expires: number;
}

/**
 * Verifies `Authorization: Bearer sk-…` (or `?access_token=` where a browser EventSource cannot set
 * headers) with the catalog, remembering a verified key for a short time so that a request does
 * not cost a catalog round trip. Keys are held by their hash, never in clear.
 */
export class Authenticator {
  private readonly cache = new Map<string, Cached>();

  constructor(private readonly deps: GatewayDeps) {}

  async authenticate(request: FastifyRequest, allowQueryToken = false): Promise<Principal> {
    const token = bearer(request) ?? (allowQueryToken ? queryToken(request) : undefined);
    if (!token) throw unauthorized();
    const key = createHash("sha256").update(token).digest("base64");
    const now = Date.now();
    const hit = this.cache.get(key);
    if (hit && hit.expires > now) return hit.principal;
    let principal: Principal | undefined;
    try {
      ({ principal } = await this.deps.catalog.verifyApiKey({ secret: token }));
    } catch (err) {
      this.cache.delete(key);
      throw err;
    }
    if (!principal) throw unauthorized();
    if (this.cache.size >= 10_000) this.cache.clear();
    this.cache.set(key, { principal, expires: now + this.deps.options.authCacheSeconds * 1000 });
    return principal;
  }
}

function bearer(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (!header) return undefined;
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  if (!match) throw unauthorized("the Authorization header must be `Bearer <API key>`");
  return match[1];
}

function queryToken(request: FastifyRequest): string | undefined {
  const token = (request.query as Record<string, unknown> | undefined)?.access_token;
  return typeof token === "string" && token ? token : undefined;
}
