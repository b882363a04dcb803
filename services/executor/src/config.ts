import { z } from "zod";
import {
  allowedEndpointsSetting,
  internalAuthConfigSchema,
  env,
  loadConfig,
  natsConfigSchema,
} from "@pies/common";

/** How the executor executes (shared with the embedded mode), apart from where it runs. */
export const executorSettingsSchema = {
  // At most six days: a run is updated within a week of its creation (the runs store relies on it:
  // docs/decisions/0064-runs-partitioned-by-id.md).
  PIES_RUN_TTL_SECONDS: env.int(300, 1, 518_400),
  PIES_PROVIDER_TIMEOUT_MS: env.int(120_000, 1),
  PIES_PROVIDER_MAX_RETRIES: env.int(2, 0),
  PIES_TEMPLATE_TIMEOUT_MS: env.int(100, 1),
  PIES_TEMPLATE_MEMORY_BYTES: env.int(16 * 1024 * 1024, 1024 * 1024),
  PIES_TEMPLATE_WORKERS: env.int(2, 1),
  // The rendered prompt of one execution: it is stored with the run and sent to the provider, and
  // a small request with a template that repeats its input could otherwise make it any size.
  PIES_MAX_PROMPT_BYTES: env.int(1024 * 1024, 1024),
  PIES_RUN_HEARTBEAT_SECONDS: env.int(10, 1),
  // A blocking run still waiting for its provider after this long is recorded as processing; one
  // that ends sooner is recorded once, at its end (0: always at its start too).
  PIES_RECORD_START_AFTER_MS: env.int(250, 0),
  // Deployed: providers on loopback, private, link-local or metadata addresses only when listed.
  PIES_ALLOWED_ENDPOINTS: allowedEndpointsSetting(""),
  // Per project and per executor replica; 0 turns the limit off.
  PIES_PROJECT_MAX_EXECUTIONS: env.int(256, 0),
  PIES_PROJECT_MAX_RENDERS: env.int(64, 0),
  // The longest the executor keeps what it resolved from the catalog when a change event is lost
  // (events drop it at once); 0: ask the catalog at every execution.
  PIES_CATALOG_CACHE_SECONDS: env.int(60, 0),
  // The result cache (cache_policy): its entries' bytes at most (the oldest go first), and the
  // longest an entry is kept whatever its ttl.
  PIES_RESULT_CACHE_MAX_BYTES: env.int(256 * 1024 * 1024, 1024),
  PIES_RESULT_CACHE_MAX_AGE_SECONDS: env.int(86_400, 1),
};

export const executorConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(50053),
  // GET /metrics over HTTP/1.1 on a port of its own (the service's port is HTTP/2); 0: none.
  PIES_METRICS_PORT: env.int(0, 0),
  CATALOG_URL: z.string().url().default("http://127.0.0.1:50051"),
  RUNS_URL: z.string().url().default("http://127.0.0.1:50052"),
  ...natsConfigSchema,
  ...internalAuthConfigSchema,
  ...executorSettingsSchema,
  LOG_LEVEL: env.logLevel(),
});

export type ExecutorConfig = z.infer<typeof executorConfigSchema>;

export const loadExecutorConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(executorConfigSchema, source);
