import { z } from "zod";
import { env, loadConfig, natsConfigSchema } from "@pies/common";

/** The embedded mode's configuration: everything optional, defaults for a laptop. */
export const embeddedConfigSchema = z.object({
  HOST: env.host("127.0.0.1"),
  PORT: env.port(8080),
  PIES_DATA_DIR: z.string().min(1).default("./.pies"),
  DATABASE_URL: z.string().optional(),
  NATS_URL: z.string().optional(),
  PIES_NATS_STREAM: natsConfigSchema.PIES_NATS_STREAM,
  PIES_NATS_SUBJECT_PREFIX: natsConfigSchema.PIES_NATS_SUBJECT_PREFIX,
  PIES_STREAM_MAX_AGE_SECONDS: natsConfigSchema.PIES_STREAM_MAX_AGE_SECONDS,
  PIES_SECRET_KEY: z.string().optional(),
  PIES_RUN_TTL_SECONDS: env.int(300, 1),
  PIES_PROVIDER_TIMEOUT_MS: env.int(120_000, 1),
  PIES_PROVIDER_MAX_RETRIES: env.int(2, 0),
  PIES_TEMPLATE_TIMEOUT_MS: env.int(100, 1),
  PIES_TEMPLATE_MEMORY_BYTES: env.int(16 * 1024 * 1024, 1024 * 1024),
  PIES_TEMPLATE_WORKERS: env.int(2, 1),
  PIES_MAX_BODY_BYTES: env.int(1024 * 1024, 1024),
  PIES_AUTH_CACHE_SECONDS: env.int(30, 0),
  PIES_SSE_HEARTBEAT_SECONDS: env.int(15, 1),
  LOG_LEVEL: env.logLevel().default("warn"),
});

export type EmbeddedConfig = z.infer<typeof embeddedConfigSchema>;

export const loadEmbeddedConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(embeddedConfigSchema, source);
