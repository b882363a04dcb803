import type { Client } from "@connectrpc/connect";
import type { Logger } from "@pies/common";
import type { RunEventBus, RunInputs, RunLog } from "@pies/common/bus";
import type { CatalogService } from "@pies/proto/catalog";
import type { RunsService } from "@pies/proto/runs";
import type { ProjectExecutions } from "./project-limits.js";
import type { ProviderRegistry } from "./providers/registry.js";
import type { CatalogResolver } from "./resolver.js";
import type { ResultCache } from "./result-cache.js";
import type { SchemaValidator } from "./schemas.js";
import type { PromptRenderer } from "./templates/render.js";

/** What the executor is built over: peers, the bus, providers, templates. */
export interface ExecutorDeps {
  catalog: Client<typeof CatalogService>;
  /** ResolveExecution with its answers kept until the catalog changes (the hot path). */
  resolver: CatalogResolver;
  runs: Client<typeof RunsService>;
  bus: RunEventBus;
  /** Where runs are recorded: durable once a put resolves, written to the runs store in batches. */
  log: RunLog;
  providers: ProviderRegistry;
  renderer: PromptRenderer;
  schemas: SchemaValidator;
  logger: Logger;
  /** Seconds a streamed run may wait in status created. */
  runTtlSeconds: number;
  /** How long a blocking run may wait for its provider before its start is recorded. */
  recordStartAfterMs: number;
  /** Each project's concurrent executions, against its limit. */
  executions: ProjectExecutions;
  /** Retries of a provider call refused with a Retry-After, for clients that do not retry. */
  providerMaxRetries: number;
  /** The result cache (cache_policy). */
  results: ResultCache;
  /** Where a metadata-only streamed run's input waits for its stream (its record has none). */
  inputs: RunInputs;
}
