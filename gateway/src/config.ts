import { z } from "zod";
import {
  env,
  internalAuthConfigSchema,
  loadConfig,
  MAX_JSON_DEPTH,
  natsConfigSchema,
} from "@pies/common";
import { READ_MAX_BYTES } from "@pies/common/server";

/**
 * The largest body the gateway may take in: a body reaches the services as protobuf, where JSON
 * grows up to 5.5 times (an array of one-digit numbers: 2 bytes each in JSON, 11 as a Value), and
 * they read at most READ_MAX_BYTES of a request; a sixth of it leaves room for the rest of the
 * message. (~5.3 MiB.)
 */
export const MAX_BODY_BYTES = Math.floor(READ_MAX_BYTES / 6);

/** How the gateway serves (shared with the embedded mode), apart from where it runs. */
export const gatewaySettingsSchema = {
  PIES_MAX_BODY_BYTES: env.int(1024 * 1024, 1024, MAX_BODY_BYTES),
  // A JSON body's nesting: data and schemas reach the services as google.protobuf.Struct, which
  // holds at most MAX_JSON_DEPTH levels (protobuf's recursion limit).
  PIES_MAX_JSON_DEPTH: env.int(32, 2, MAX_JSON_DEPTH),
  // Names, ids, model ids, tags, labels: they land in indexed columns, and PostgreSQL refuses an
  // index entry over ~2,700 bytes (800 UTF-16 code units are at most 2,400 bytes of UTF-8).
  PIES_MAX_NAME_LENGTH: env.int(256, 1, 800),
  PIES_AUTH_CACHE_SECONDS: env.int(30, 0),
  PIES_AUTH_NEGATIVE_CACHE_SECONDS: env.int(5, 0),
  PIES_SSE_HEARTBEAT_SECONDS: env.int(15, 1),
  PIES_MAX_STREAMS_PER_KEY: env.int(100, 1),
  PIES_HEADERS_TIMEOUT_MS: env.int(10_000, 100),
  PIES_REQUEST_TIMEOUT_MS: env.int(30_000, 100),
  // Requests per minute per API key (or token) and replica; over it, 429 with Retry-After. 0: off.
  PIES_RATE_LIMIT_PER_MINUTE: env.int(3000, 0),
  // Origins allowed to call the API from a browser: a comma list, or * for any. Empty: no CORS.
  PIES_CORS_ORIGINS: z.string().default(""),
  // Lifetime of the JWTs of token exchange (POST /token/issue).
  PIES_TOKEN_TTL_SECONDS: env.int(3600, 60, 7 * 24 * 3600),
  PIES_TRUST_PROXY: env.bool(false),
  // A port of its own for Kubernetes' probes (GET /readyz, /healthz), served by a thread of their
  // own (probe-server.ts). 0: none (the API's port answers them too).
  PIES_PROBE_PORT: env.int(0, 0, 65535),
};

export const gatewayConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(8080),
  CATALOG_URL: z.string().url().default("http://127.0.0.1:50051"),
  RUNS_URL: z.string().url().default("http://127.0.0.1:50052"),
  EXECUTOR_URL: z.string().url().default("http://127.0.0.1:50053"),
  ...natsConfigSchema,
  ...internalAuthConfigSchema,
  // Signs the JWTs of token exchange (base64 of at least 32 bytes); default: derived from
  // PIES_INTERNAL_TOKEN, which every gateway replica shares.
  PIES_JWT_SECRET: z
    .string()
    .refine(
      (v) => Buffer.from(v, "base64").length >= 32,
      "must be at least 32 bytes, base64-encoded",
    )
    .optional(),
  ...gatewaySettingsSchema,
  LOG_LEVEL: env.logLevel(),
});

export type GatewayConfig = z.infer<typeof gatewayConfigSchema>;

export const loadGatewayConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(gatewayConfigSchema, source);

/** Only how the gateway serves (what `gatewayOptions` reads): for tests, benches and the embedded mode. */
export const loadGatewaySettings = (source?: Record<string, string | undefined>) =>
  loadConfig(z.object(gatewaySettingsSchema), source);

export const gatewayOptions = (
  config: z.infer<z.ZodObject<typeof gatewaySettingsSchema>> & { HOST?: string },
) => ({
  maxBodyBytes: config.PIES_MAX_BODY_BYTES,
  maxJsonDepth: config.PIES_MAX_JSON_DEPTH,
  maxNameLength: config.PIES_MAX_NAME_LENGTH,
  authCacheSeconds: config.PIES_AUTH_CACHE_SECONDS,
  authNegativeCacheSeconds: config.PIES_AUTH_NEGATIVE_CACHE_SECONDS,
  sseHeartbeatSeconds: config.PIES_SSE_HEARTBEAT_SECONDS,
  maxStreamsPerKey: config.PIES_MAX_STREAMS_PER_KEY,
  // Node refuses a headers timeout longer than the request timeout.
  headersTimeoutMs: Math.min(config.PIES_HEADERS_TIMEOUT_MS, config.PIES_REQUEST_TIMEOUT_MS),
  requestTimeoutMs: config.PIES_REQUEST_TIMEOUT_MS,
  trustProxy: config.PIES_TRUST_PROXY,
  tokenTtlSeconds: config.PIES_TOKEN_TTL_SECONDS,
  rateLimitPerMinute: config.PIES_RATE_LIMIT_PER_MINUTE,
  corsOrigins: config.PIES_CORS_ORIGINS.split(",")
    .map((origin) => origin.trim())
    .filter(Boolean),
  probe:
    config.PIES_PROBE_PORT > 0
      ? { host: config.HOST ?? "127.0.0.1", port: config.PIES_PROBE_PORT }
      : undefined,
});
