import { z } from "zod";
import {
  databaseSettingsSchema,
  env,
  loadConfig,
  natsConfigSchema,
  internalAuthConfigSchema,
} from "@pies/common";

/** When runs that nothing will end are failed (shared with the embedded mode). */
export const runsSweepSettingsSchema = {
  PIES_RUN_LEASE_SECONDS: env.int(60, 1),
  PIES_SWEEP_INTERVAL_SECONDS: env.int(10, 1),
};

export const runsConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(50052),
  DATABASE_URL: z.string().min(1, "DATABASE_URL is required"),
  DATABASE_POOL_MAX: env.int(10, 1),
  ...databaseSettingsSchema,
  ...natsConfigSchema,
  ...internalAuthConfigSchema,
  ...runsSweepSettingsSchema,
  // The least time between the starts of two batches of the record writer under a steady flow
  // of records (a full batch, or a record after a pause, is written at once).
  PIES_RECORD_BATCH_INTERVAL_MS: env.int(10, 0, 1000),
  LOG_LEVEL: env.logLevel(),
});

export type RunsConfig = z.infer<typeof runsConfigSchema>;

export const loadRunsConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(runsConfigSchema, source);
