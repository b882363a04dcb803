import { z } from "zod";
import {
  databaseSettingsSchema,
  env,
  loadConfig,
  natsConfigSchema,
  internalAuthConfigSchema,
} from "@pies/common";
import { DEFAULT_PARTITION_DAYS } from "./partitions.js";

/** When runs that nothing will end are failed (shared with the embedded mode). */
export const runsSweepSettingsSchema = {
  PIES_RUN_LEASE_SECONDS: env.int(60, 1),
  PIES_SWEEP_INTERVAL_SECONDS: env.int(10, 1),
};

/**
 * How many records the writer cannot decode (runs.dead_records) are kept for a replay: the newest
 * PIES_DEAD_RECORDS_MAX, none older than PIES_DEAD_RECORDS_MAX_AGE_DAYS (0: no age bound). Shared
 * with the embedded mode.
 */
export const deadRecordSettingsSchema = {
  PIES_DEAD_RECORDS_MAX: env.int(10_000, 1),
  PIES_DEAD_RECORDS_MAX_AGE_DAYS: env.int(30, 0),
};

/** How long runs are kept, and how often the store's upkeep runs (shared with the embedded mode). */
export const runsLifecycleSettingsSchema = {
  // Days a run is kept after its creation (DESIGN.md §8); 0 keeps runs for ever.
  PIES_RUN_RETENTION_DAYS: env.int(90, 0, 36_500),
  // Days of creation time a partition of the runs table holds (from a Monday when 7): a week
  // keeps few partitions for a read over all of them to plan; a day suits a store whose week of
  // runs is past a quarter of the database's memory (docs/decisions/0071). Changed, it applies
  // to the partitions made from then on.
  PIES_RUN_PARTITION_DAYS: env.int(DEFAULT_PARTITION_DAYS, 1, 31),
  // Seconds between two passes of the upkeep: partitions made ahead, the retention applied.
  PIES_RUN_MAINTENANCE_SECONDS: env.int(600, 1),
};

export const runsConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(50052),
  // GET /metrics over HTTP/1.1 on a port of its own (the service's port is HTTP/2); 0: none.
  PIES_METRICS_PORT: env.int(0, 0),
  DATABASE_URL: z.string().min(1, "DATABASE_URL is required"),
  DATABASE_POOL_MAX: env.int(10, 1),
  ...databaseSettingsSchema,
  ...natsConfigSchema,
  ...internalAuthConfigSchema,
  ...runsSweepSettingsSchema,
  ...deadRecordSettingsSchema,
  ...runsLifecycleSettingsSchema,
  // The catalog, asked for the projects that keep their runs for less than the deployment does.
  CATALOG_URL: z.string().url().default("http://127.0.0.1:50051"),
  // The executor, which experiments replay their runs through (DESIGN.md §13).
  EXECUTOR_URL: z.string().url().default("http://127.0.0.1:50053"),
  // Seconds an experiment stays with the process replaying it without news from it: what a
  // process that dies makes its experiments wait before another one takes them over.
  PIES_EXPERIMENT_LEASE_SECONDS: env.int(15, 1, 3600),
  // Seconds a stopping process gives an experiment's pairs in flight to end before it goes.
  PIES_EXPERIMENT_STOP_GRACE_SECONDS: env.int(30, 0, 3600),
  // The least time between the starts of two batches of the record writer under a steady flow
  // of records (a full batch, or a record after a pause, is written at once).
  PIES_RECORD_BATCH_INTERVAL_MS: env.int(10, 0, 1000),
  LOG_LEVEL: env.logLevel(),
});

export type RunsConfig = z.infer<typeof runsConfigSchema>;

export const loadRunsConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(runsConfigSchema, source);

/** The runs CLI's configuration (cli.ts): the database, and the retention a replay keeps to. */
const runsCliConfigSchema = runsConfigSchema.pick({
  DATABASE_URL: true,
  DATABASE_PREPARED_STATEMENTS: true,
  // A replay writes as the writer does: nothing past the retention.
  PIES_RUN_RETENTION_DAYS: true,
});

export type RunsCliConfig = z.infer<typeof runsCliConfigSchema>;

export const loadRunsCliConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(runsCliConfigSchema, source);
