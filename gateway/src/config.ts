import { z } from "zod";
import { env, loadConfig, natsConfigSchema } from "@pies/common";

/** How the gateway serves (shared with the embedded mode), apart from where it runs. */
export const gatewaySettingsSchema = {
  PIES_MAX_BODY_BYTES: env.int(1024 * 1024, 1024),
  PIES_AUTH_CACHE_SECONDS: env.int(30, 0),
  PIES_AUTH_NEGATIVE_CACHE_SECONDS: env.int(5, 0),
  PIES_SSE_HEARTBEAT_SECONDS: env.int(15, 1),
  PIES_MAX_STREAMS_PER_KEY: env.int(100, 1),
  PIES_HEADERS_TIMEOUT_MS: env.int(10_000, 100),
  PIES_REQUEST_TIMEOUT_MS: env.int(30_000, 100),
  PIES_TRUST_PROXY: z
    .enum(["true", "false"])
    .default("false")
    .transform((v) => v === "true"),
};

export const gatewayConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(8080),
  CATALOG_URL: z.string().url().default("http://127.0.0.1:50051"),
  RUNS_URL: z.string().url().default("http://127.0.0.1:50052"),
  EXECUTOR_URL: z.string().url().default("http://127.0.0.1:50053"),
  ...natsConfigSchema,
  ...gatewaySettingsSchema,
  LOG_LEVEL: env.logLevel(),
});

export type GatewayConfig = z.infer<typeof gatewayConfigSchema>;

export const loadGatewayConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(gatewayConfigSchema, source);

export const gatewayOptions = (config: z.infer<z.ZodObject<typeof gatewaySettingsSchema>>) => ({
  maxBodyBytes: config.PIES_MAX_BODY_BYTES,
  authCacheSeconds: config.PIES_AUTH_CACHE_SECONDS,
  authNegativeCacheSeconds: config.PIES_AUTH_NEGATIVE_CACHE_SECONDS,
  sseHeartbeatSeconds: config.PIES_SSE_HEARTBEAT_SECONDS,
  maxStreamsPerKey: config.PIES_MAX_STREAMS_PER_KEY,
  // Node refuses a headers timeout longer than the request timeout.
  headersTimeoutMs: Math.min(config.PIES_HEADERS_TIMEOUT_MS, config.PIES_REQUEST_TIMEOUT_MS),
  requestTimeoutMs: config.PIES_REQUEST_TIMEOUT_MS,
  trustProxy: config.PIES_TRUST_PROXY,
});
