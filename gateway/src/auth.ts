import { hash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyRequest } from "fastify";
import { LRUCache } from "lru-cache";
import { CatalogCache, type CatalogChange } from "@pies/common/bus";
import type { Principal } from "@pies/proto/catalog";
import type { GatewayDeps } from "./deps.js";
import { unauthorized } from "./errors.js";
import { JWT_FORMAT, TokenIssuer } from "./tokens.js";

/** What every key the catalog makes looks like: `sk-` and 43 base62 characters. */
const KEY_FORMAT = /^sk-[0-9A-Za-z]{43}$/;

/** As the catalog says it. */
const INVALID = "invalid API key";

/**
 * Each cache holds at most 10,000 keys (past this, the least recently used go). Entries expire by
 * the wall clock, read at each look-up (no cached reading of it), as the seconds configured are.
 */
const MAX_KEYS = 10_000;
const CACHE_OPTIONS = { max: MAX_KEYS, perf: Date, ttlResolution: 0 };

/** The catalog changes that can change what a key verifies as: its keys, projects and accounts. */
const concernsKeys = (change: CatalogChange) =>
  !["interaction", "prompt", "environment"].includes(change.kind);

/**
 * Verifies `Authorization: Bearer sk-…` (or `?access_token=` where a browser EventSource cannot set
 * headers) with the catalog, remembering a verified key so that a request does not cost a catalog
 * round trip. Keys are held by their hash, never in clear.
 *
 * A project's verified keys are dropped on the catalog's change events for its keys (a revoked
 * key is refused within the event's delivery, well under a second), every key when events may
 * have been lost (NATS reconnected), and each after `authCacheSeconds` whatever happens to the
 * events.
 *
 * Bad keys cost no more than good ones: a token that is not shaped like a key is refused without
 * asking; a key the catalog refused is remembered as bad for `authNegativeCacheSeconds` (or until
 * any key or project is created: the refused keys' projects are unknown); and concurrent requests
 * with the same key share one verification.
 */
export class Authenticator {
  private readonly cache: CatalogCache<Principal>;
  private readonly refused = new LRUCache<string, true>(CACHE_OPTIONS);
  /** Issues and verifies the JWTs of token exchange (tokens.ts). */
  readonly tokens: TokenIssuer;
  /**
   * Keys revoked while this gateway listened, kept as long as a token of theirs may live: their
   * tokens are refused at once rather than at `exp`.
   */
  private readonly revoked: LRUCache<string, true>;
  /** Stops following the catalog's events. */
  readonly close: () => void;

  constructor(private readonly deps: GatewayDeps) {
    this.tokens = new TokenIssuer(deps.tokenKey, deps.options.tokenTtlSeconds);
    this.revoked = new LRUCache<string, true>({
      ...CACHE_OPTIONS,
      max: 100_000,
      ttl: deps.options.tokenTtlSeconds * 1000,
    });
    this.cache = new CatalogCache<Principal>({
      // A ttl of 0 would keep the entry for ever: 0 seconds means no caching.
      maxAgeMs: deps.options.authCacheSeconds * 1000,
      max: MAX_KEYS,
      projectOf: (principal) => principal.projectId,
      concerns: concernsKeys,
    });
    const stopCache = this.cache.follow(deps.catalogEvents);
    const stopRefused = deps.catalogEvents.listen({
      change: (change) => {
        // A key just created must work at once, whatever was tried before.
        if (concernsKeys(change)) this.refused.clear();
        if (change.kind === "apikey" && change.op === "delete" && change.id) {
          this.revoked.set(change.id, true);
        }
      },
      reset: () => this.refused.clear(),
    });
    this.close = () => {
      stopCache();
      stopRefused();
    };
  }

  async authenticate(request: FastifyRequest, allowQueryToken = false): Promise<Principal> {
    const token = bearer(request) ?? (allowQueryToken ? queryToken(request) : undefined);
    if (!token) throw unauthorized();
    if (JWT_FORMAT.test(token)) {
      const principal = await this.tokens.verify(token);
      if (this.revoked.has(principal.apiKeyId))
        throw unauthorized("the token's API key was revoked");
      return principal;
    }
    return this.authenticateKey(token, credentialHash(request, token));
  }

  /** An `sk-` key only (token exchange takes no token: a token cannot outlive its key's revocation). */
  async authenticateKey(token: string, digest?: string): Promise<Principal> {
    if (!KEY_FORMAT.test(token)) throw unauthorized(INVALID);
    const key = digest ?? hash("sha256", token, "base64");
    // Entries past their time read as absent (and go); so do refused keys.
    if (this.refused.has(key)) throw unauthorized(INVALID);
    return this.cache.get(key, () => this.verify(token, key));
  }

  private async verify(token: string, key: string): Promise<Principal> {
    let principal: Principal | undefined;
    try {
      ({ principal } = await this.deps.catalog.verifyApiKey({ secret: token }));
    } catch (err) {
      // Only the catalog's "no such key" is remembered: an outage must not lock good keys out.
      if (err instanceof ConnectError && err.code === Code.Unauthenticated) this.remember(key);
      throw err;
    }
    if (!principal) throw unauthorized();
    return principal;
  }

  private remember(key: string) {
    const seconds = this.deps.options.authNegativeCacheSeconds;
    if (seconds <= 0) return;
    this.refused.set(key, true, { ttl: seconds * 1000 });
  }
}

export function bearer(request: FastifyRequest): string | undefined {
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

const digests = new WeakMap<FastifyRequest, { token: string; digest: string }>();

/**
 * The SHA-256 (base64) of a request's credential, computed once per request: the rate limiter
 * (keyed by it) and the key look-up (cached by it) share it.
 */
export function credentialHash(request: FastifyRequest, token: string): string {
  const known = digests.get(request);
  if (known?.token === token) return known.digest;
  const digest = hash("sha256", token, "base64");
  digests.set(request, { token, digest });
  return digest;
}
