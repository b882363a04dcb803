import type { Transport } from "@connectrpc/connect";
import { EndpointPolicy, type Logger } from "@pies/common";
import {
  MemoryResultCache,
  MemoryRunInputs,
  type CatalogEvents,
  type ResultCacheStore,
  type RunEventBus,
  type RunInputs,
  type RunLog,
} from "@pies/common/bus";
import { serviceClient } from "@pies/common/server";
import { CatalogService } from "@pies/proto/catalog";
import { RunsService } from "@pies/proto/runs";
import type { ExecutorConfig } from "./config.js";
import type { ExecutorDeps } from "./context.js";
import { ProjectExecutions } from "./project-limits.js";
import { ProviderRegistry } from "./providers/registry.js";
import { CatalogResolver } from "./resolver.js";
import { ResultCache } from "./result-cache.js";
import { SchemaValidator } from "./schemas.js";
import { JstSandbox } from "./templates/jst.js";
import { PromptRenderer } from "./templates/render.js";

/** The executor's settings that do not concern its own process (ports, peers, NATS). */
export type ExecutorSettings = Pick<
  ExecutorConfig,
  | "PIES_RUN_TTL_SECONDS"
  | "PIES_PROVIDER_TIMEOUT_MS"
  | "PIES_PROVIDER_MAX_RETRIES"
  | "PIES_TEMPLATE_TIMEOUT_MS"
  | "PIES_TEMPLATE_MEMORY_BYTES"
  | "PIES_TEMPLATE_WORKERS"
  | "PIES_MAX_PROMPT_BYTES"
  | "PIES_RUN_HEARTBEAT_SECONDS"
  | "PIES_RECORD_START_AFTER_MS"
  | "PIES_ALLOWED_ENDPOINTS"
  | "PIES_PROJECT_MAX_EXECUTIONS"
  | "PIES_PROJECT_MAX_RENDERS"
  | "PIES_CATALOG_CACHE_SECONDS"
  | "PIES_RESULT_CACHE_MAX_BYTES"
  | "PIES_RESULT_CACHE_MAX_AGE_SECONDS"
  | "PIES_STREAM_MAX_AGE_SECONDS"
>;

/** Builds the executor's dependencies over transports to its peers (Connect over HTTP/2, or in memory). */
export async function createExecutorDeps(options: {
  catalog: Transport;
  runs: Transport;
  bus: RunEventBus;
  log: RunLog;
  /** The catalog's change events, which drop what the executor keeps from the catalog. */
  catalogEvents: CatalogEvents;
  logger: Logger;
  config: ExecutorSettings;
  /** Where cached results live (shared by the replicas); in the process when not given. */
  resultCache?: ResultCacheStore;
  /**
   * Where metadata-only streamed runs' inputs wait (shared by the replicas); in the process, for
   * as long as run events are kept, when not given.
   */
  inputs?: RunInputs;
}): Promise<ExecutorDeps> {
  const { config } = options;
  const sandbox = await JstSandbox.create(
    { timeoutMs: config.PIES_TEMPLATE_TIMEOUT_MS, memoryBytes: config.PIES_TEMPLATE_MEMORY_BYTES },
    config.PIES_TEMPLATE_WORKERS,
    config.PIES_PROJECT_MAX_RENDERS,
  );
  const catalog = serviceClient(CatalogService, options.catalog);
  const resolver = new CatalogResolver(catalog, {
    maxAgeSeconds: config.PIES_CATALOG_CACHE_SECONDS,
  });
  resolver.follow(options.catalogEvents);
  const providers = new ProviderRegistry(
    { timeoutMs: config.PIES_PROVIDER_TIMEOUT_MS, maxRetries: config.PIES_PROVIDER_MAX_RETRIES },
    new EndpointPolicy(config.PIES_ALLOWED_ENDPOINTS),
  );
  providers.follow(options.catalogEvents);
  return {
    catalog,
    resolver,
    runs: serviceClient(RunsService, options.runs),
    bus: options.bus,
    log: options.log,
    providers,
    renderer: new PromptRenderer(sandbox, { maxPromptBytes: config.PIES_MAX_PROMPT_BYTES }),
    schemas: new SchemaValidator(),
    logger: options.logger,
    runTtlSeconds: config.PIES_RUN_TTL_SECONDS,
    recordStartAfterMs: config.PIES_RECORD_START_AFTER_MS,
    executions: new ProjectExecutions(config.PIES_PROJECT_MAX_EXECUTIONS),
    providerMaxRetries: config.PIES_PROVIDER_MAX_RETRIES,
    results: new ResultCache(
      options.resultCache ??
        new MemoryResultCache({
          maxBytes: config.PIES_RESULT_CACHE_MAX_BYTES,
          maxAgeSeconds: config.PIES_RESULT_CACHE_MAX_AGE_SECONDS,
        }),
      options.logger,
      config.PIES_RESULT_CACHE_MAX_AGE_SECONDS,
    ),
    inputs: options.inputs ?? new MemoryRunInputs(config.PIES_STREAM_MAX_AGE_SECONDS),
  };
}
