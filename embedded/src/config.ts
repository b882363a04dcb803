import { z } from "zod";
import {
  allowedEndpointsSetting,
  databaseSettingsSchema,
  env,
  loadConfig,
  natsConfigSchema,
} from "@pies/common";
import { executorSettingsSchema } from "@pies/executor";
import {
  deadRecordSettingsSchema,
  runsLifecycleSettingsSchema,
  runsSweepSettingsSchema,
} from "@pies/runs";
import { gatewayConfigSchema, gatewaySettingsSchema } from "@pies/gateway";

/** The embedded mode's configuration: everything optional, defaults for a laptop. */
const embeddedConfigSchema = z.object({
  HOST: env.host("127.0.0.1"),
  PORT: env.port(8080),
  PIES_DATA_DIR: z.string().min(1).default("./.pies"),
  // Unset: PGlite in the data dir, and the in-process event bus.
  DATABASE_URL: z.string().optional(),
  ...databaseSettingsSchema,
  NATS_URL: z.string().optional(),
  PIES_NATS_STREAM: natsConfigSchema.PIES_NATS_STREAM,
  PIES_NATS_SUBJECT_PREFIX: natsConfigSchema.PIES_NATS_SUBJECT_PREFIX,
  PIES_NATS_REPLICAS: natsConfigSchema.PIES_NATS_REPLICAS,
  PIES_STREAM_MAX_AGE_SECONDS: natsConfigSchema.PIES_STREAM_MAX_AGE_SECONDS,
  PIES_RECORD_MAX_AGE_SECONDS: natsConfigSchema.PIES_RECORD_MAX_AGE_SECONDS,
  PIES_RECORD_MAX_BYTES: natsConfigSchema.PIES_RECORD_MAX_BYTES,
  // Unset: generated once into the data dir.
  PIES_SECRET_KEY: z.string().optional(),
  // Token exchange's signing key (base64, 32+ bytes); default: generated into the data dir.
  PIES_JWT_SECRET: gatewayConfigSchema.shape.PIES_JWT_SECRET,
  ...executorSettingsSchema,
  // Local models (Ollama, LM Studio, llama.cpp) listen on loopback.
  PIES_ALLOWED_ENDPOINTS: allowedEndpointsSetting("loopback"),
  ...runsSweepSettingsSchema,
  ...deadRecordSettingsSchema,
  ...runsLifecycleSettingsSchema,
  ...gatewaySettingsSchema,
  // One user on a laptop: no rate limit unless asked for.
  PIES_RATE_LIMIT_PER_MINUTE: gatewaySettingsSchema.PIES_RATE_LIMIT_PER_MINUTE.default(0),
  LOG_LEVEL: env.logLevel().default("warn"),
  // How far the heap may grow past what a full collection kept, in percent (0: V8's own choice,
  // up to 300); see heap.ts.
  PIES_HEAP_GROWTH_PERCENT: env.int(100, 0, 1000),
});

export type EmbeddedConfig = z.infer<typeof embeddedConfigSchema>;

export const loadEmbeddedConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(embeddedConfigSchema, source);
