import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyRequest } from "fastify";
import { LRUCache } from "lru-cache";
import type { Principal } from "@pies/proto/catalog";
import type { GatewayDeps } from "./deps.js";
import { unauthorized } from "./errors.js";

/** What every key the catalog makes looks like: `sk-` and 43 base62 characters. */
const KEY_FORMAT = /^sk-[0-9A-Za-z]{43}$/;

/** As the catalog says it. */
const INVALID = "invalid API key";

/**
 * Each cache holds at most 10,000 keys (past this, the least recently used go). Entries expire by
 * the wall clock, read at each look-up (no cached reading of it), as the seconds configured are.
 */
const CACHE_OPTIONS = { max: 10_000, perf: Date, ttlResolution: 0 };

/**
 * Verifies `Authorization: Bearer sk-…` (or `?access_token=` where a browser EventSource cannot set
 * headers) with the catalog, remembering a verified key for a short time so that a request does
 * not cost a catalog round trip. Keys are held by their hash, never in clear.
 *
 * Bad keys cost no more than good ones: a token that is not shaped like a key is refused without
 * asking; a key the catalog refused is remembered as bad for `authNegativeCacheSeconds`; and
 * concurrent requests with the same key share one verification.
 */
export class Authenticator {
  private readonly cache = new LRUCache<string, Principal>(CACHE_OPTIONS);
  private readonly refused = new LRUCache<string, true>(CACHE_OPTIONS);
  private readonly pending = new Map<string, Promise<Principal>>();

  constructor(private readonly deps: GatewayDeps) {}

  async authenticate(request: FastifyRequest, allowQueryToken = false): Promise<Principal> {
    const token = bearer(request) ?? (allowQueryToken ? queryToken(request) : undefined);
    if (!token) throw unauthorized();
    if (!KEY_FORMAT.test(token)) throw unauthorized(INVALID);
    const key = createHash("sha256").update(token).digest("base64");
    // Entries past their time read as absent (and go).
    const hit = this.cache.get(key);
    if (hit) return hit;
    if (this.refused.has(key)) throw unauthorized(INVALID);
    let verifying = this.pending.get(key);
    if (!verifying) {
      verifying = this.verify(token, key).finally(() => this.pending.delete(key));
      this.pending.set(key, verifying);
    }
    return verifying;
  }

  private async verify(token: string, key: string): Promise<Principal> {
    let principal: Principal | undefined;
    try {
      ({ principal } = await this.deps.catalog.verifyApiKey({ secret: token }));
    } catch (err) {
      this.cache.delete(key);
      // Only the catalog's "no such key" is remembered: an outage must not lock good keys out.
      if (err instanceof ConnectError && err.code === Code.Unauthenticated) this.remember(key);
      throw err;
    }
    if (!principal) throw unauthorized();
    const seconds = this.deps.options.authCacheSeconds;
    // A ttl of 0 would keep the entry for ever: 0 seconds means no caching.
    if (seconds > 0) this.cache.set(key, principal, { ttl: seconds * 1000 });
    return principal;
  }

  private remember(key: string) {
    const seconds = this.deps.options.authNegativeCacheSeconds;
    if (seconds <= 0) return;
    this.refused.set(key, true, { ttl: seconds * 1000 });
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
