import { createLogger, type Logger } from "@pies/common";
import {
  JetStreamRunEventBus,
  catalogEventsFromConfig,
  type NatsCatalogEvents,
  recordsFromConfig,
  resultCacheFromConfig,
  runInputsFromConfig,
  RunLog,
} from "@pies/common/bus";
import {
  peerTransport,
  peersServing,
  serveConnect,
  type MetricsServer,
  type RunningServer,
} from "@pies/common/server";
import { ExecutorService } from "@pies/proto/executor";
import type { Transport } from "@connectrpc/connect";
import type { ExecutorConfig } from "./config.js";
import { createExecutorDeps } from "./deps.js";
import { serveExecutorMetrics } from "./metrics.js";
import type { Router } from "./providers/router.js";
import { startExecutorWork, type ExecutorWork } from "./work.js";
import { loadTokenizer } from "./providers/tokens.js";

export interface ExecutorProcess {
  server: RunningServer;
  /** GET /metrics, when PIES_METRICS_PORT asks for it. */
  metrics: MetricsServer | undefined;
  stop(): Promise<void>;
}

/** What an executor needs of its process's settings: peers, NATS and how it executes. */
export type ExecutorWiringConfig = Omit<
  ExecutorConfig,
  "HOST" | "PORT" | "LOG_LEVEL" | "PIES_METRICS_PORT"
>;

/** An executor at work in a process, over NATS and its peers, not yet serving anything. */
export interface ConnectedExecutor {
  bus: JetStreamRunEventBus;
  /** The catalog's change events (a gateway in the same process follows them too). */
  catalogEvents: NatsCatalogEvents;
  catalog: Transport;
  runs: Transport;
  work: ExecutorWork;
  /** Routes virtual environments (its breakers' state is in the metrics). */
  router: Router;
  /** Whether NATS and the peers answer. */
  isReady(): Promise<boolean>;
  /** Lets the runs in flight end (streamed ones publish their end), then drains NATS. */
  stop(graceMs: number): Promise<void>;
}

/**
 * Connects an executor's dependencies (one NATS connection for the run events, the record log
 * and the catalog's change events; Connect to catalog and runs) and starts its work. The executor
 * process serves it on its own port; the edge calls it in memory.
 */
export async function connectExecutor(
  config: ExecutorWiringConfig,
  logger: Logger,
  name: string,
): Promise<ConnectedExecutor> {
  const bus = await JetStreamRunEventBus.fromConfig(config, name, logger);
  try {
    const log = new RunLog(await recordsFromConfig(bus.connection, config, logger));
    const catalogEvents = await catalogEventsFromConfig(bus.connection, config, logger);
    const resultCache = await resultCacheFromConfig(bus.connection, config, logger);
    const inputs = await runInputsFromConfig(bus.connection, config, logger);
    const catalog = peerTransport(config.CATALOG_URL, "catalog", config.PIES_INTERNAL_TOKEN);
    const runs = peerTransport(config.RUNS_URL, "runs", config.PIES_INTERNAL_TOKEN);
    const deps = await createExecutorDeps({
      catalog,
      runs,
      bus,
      log,
      catalogEvents,
      logger,
      config,
      resultCache,
      inputs,
    });
    const work = startExecutorWork(deps, config.PIES_RUN_HEARTBEAT_SECONDS);
    // The tokenizer (about a second of loading) now, not on the first execution whose provider
    // reports no usage, which would stall every run and stream of the process meanwhile.
    setImmediate(loadTokenizer);
    return {
      bus,
      catalogEvents,
      catalog,
      runs,
      work,
      router: deps.providers.router,
      isReady: async () => (await bus.ready()) && (await peersServing([catalog, runs], "")),
      async stop(graceMs) {
        await work.stop(graceMs);
        await catalogEvents.close();
        await bus.close();
      },
    };
  } catch (err) {
    await bus.close();
    throw err;
  }
}

/** Serves the executor on its own port (the process of `main.ts`). */
export async function startExecutor(config: ExecutorConfig): Promise<ExecutorProcess> {
  const logger = createLogger("executor", config.LOG_LEVEL);
  const executor = await connectExecutor(config, logger, "pies-executor");
  const server = await serveConnect({
    name: "executor",
    host: config.HOST,
    port: config.PORT,
    logger,
    routes: executor.work.routes,
    serviceNames: [ExecutorService.typeName],
    isReady: executor.isReady,
    internalToken: config.PIES_INTERNAL_TOKEN,
  });
  const metrics =
    config.PIES_METRICS_PORT > 0
      ? await serveExecutorMetrics(executor.router, config.HOST, config.PIES_METRICS_PORT, (err) =>
          logger.error({ err }, "the metrics server failed"),
        )
      : undefined;
  return {
    server,
    metrics,
    async stop() {
      await metrics?.close();
      await server.close();
      // Streamed runs already started finish and publish their end before NATS is drained.
      await executor.stop(config.PIES_PROVIDER_TIMEOUT_MS);
    },
  };
}
