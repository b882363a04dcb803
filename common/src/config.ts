import { z } from "zod";

/** A configuration problem: reported as one line, without a stack. */
export class ConfigError extends Error {}

/**
 * Parses the environment once against a schema and freezes the result. Nothing else in pies reads
 * `process.env`: configuration is injected.
 */
export function loadConfig<S extends z.ZodTypeAny>(
  schema: S,
  env: Record<string, string | undefined> = process.env,
): Readonly<z.infer<S>> {
  const parsed = schema.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
    throw new ConfigError(`invalid configuration: ${problems}`);
  }
  return Object.freeze(parsed.data);
}

/** Reusable field schemas for environment variables. */
export const env = {
  port: (fallback: number) => z.coerce.number().int().min(0).max(65535).default(fallback),
  int: (fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER) =>
    z.coerce.number().int().min(min).max(max).default(fallback),
  host: (fallback = "0.0.0.0") => z.string().min(1).default(fallback),
  logLevel: () =>
    z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  /** `true` or `false`. */
  bool: (fallback: boolean) =>
    z
      .enum(["true", "false"])
      .default(fallback ? "true" : "false")
      .transform((v) => v === "true"),
};

/** Settings of the PostgreSQL pool of a process that has one (catalog, runs, embedded on one). */
export const databaseSettingsSchema = {
  // Named prepared statements for the statements run most (the record writer's upsert), prepared
  // once per connection. Off behind a pooler that does not keep a connection's prepared statements
  // across transactions (PgBouncer in transaction mode before 1.21, or without
  // max_prepared_statements).
  DATABASE_PREPARED_STATEMENTS: env.bool(true),
};

/**
 * The shared secret that pies' processes present to each other (common/src/server/internal-auth.ts):
 * required by every process that serves or calls Connect over the network.
 */
export const internalAuthConfigSchema = {
  PIES_INTERNAL_TOKEN: z
    .string({
      required_error:
        "is required: the secret pies' processes share (at least 32 characters, e.g. `openssl rand -base64 32`)",
    })
    .min(32, "must be at least 32 characters (e.g. `openssl rand -base64 32`)"),
};

export const natsConfigSchema = {
  NATS_URL: z.string().min(1).default("nats://127.0.0.1:4222"),
  PIES_NATS_STREAM: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/)
    .default("PIES_RUNS"),
  PIES_NATS_SUBJECT_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/)
    .default("pies"),
  // How many nodes of a NATS cluster keep each stream pies makes (run events, record log, result
  // cache); 3 on a three-node cluster keeps every stream through the loss of any one node. More
  // than the cluster has nodes (any more than 1 on a single server) stops the process at start.
  PIES_NATS_REPLICAS: env.int(1, 1, 5),
  PIES_STREAM_MAX_AGE_SECONDS: env.int(3600, 1),
  // How long the record log keeps a run's last record: the longest the runs store may fall
  // behind (runs service or PostgreSQL down) without losing a record. Each run in that window is
  // a subject NATS keeps in memory, so the window is sized by the rate of runs; what it costs per
  // run and per hour: docs/decisions/0002-record-log-subjects.md.
  PIES_RECORD_MAX_AGE_SECONDS: env.int(3600, 60),
  // The most disk the record log takes on each NATS node (0: bounded by its age alone). When it is
  // full a put is refused, and retried by the executor, rather than an unwritten record dropped.
  // NATS reserves it at start: a node with less free storage refuses the log (ConfigError).
  PIES_RECORD_MAX_BYTES: env.int(4 * 1024 ** 3, 0),
};
