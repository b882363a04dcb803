import { createLogger } from "@pies/common";
import {
  JetStreamRunEventBus,
  NatsCatalogEvents,
  recordsFromConfig,
  RunLog,
} from "@pies/common/bus";
import { peerTransport, peersServing, serveConnect, type RunningServer } from "@pies/common/server";
import { ExecutorService } from "@pies/proto/executor";
import type { ExecutorConfig } from "./config.js";
import { createExecutorDeps } from "./deps.js";
import { startExecutorWork } from "./work.js";

export interface ExecutorProcess {
  server: RunningServer;
  stop(): Promise<void>;
}

/** Serves the executor on its own port (the process of `main.ts`). */
export async function startExecutor(config: ExecutorConfig): Promise<ExecutorProcess> {
  const logger = createLogger("executor", config.LOG_LEVEL);
  const bus = await JetStreamRunEventBus.fromConfig(config, "pies-executor");
  // On the bus's connection: one NATS connection per process.
  const log = new RunLog(await recordsFromConfig(bus.connection, config));
  const catalogEvents = await NatsCatalogEvents.over(bus.connection, {
    subjectPrefix: config.PIES_NATS_SUBJECT_PREFIX,
    logger,
    listen: true,
  });
  const catalog = peerTransport(config.CATALOG_URL, "catalog");
  const runs = peerTransport(config.RUNS_URL, "runs");
  const deps = await createExecutorDeps({
    catalog,
    runs,
    bus,
    log,
    catalogEvents,
    logger,
    config,
  });
  const work = startExecutorWork(deps, config.PIES_RUN_HEARTBEAT_SECONDS);
  const server = await serveConnect({
    name: "executor",
    host: config.HOST,
    port: config.PORT,
    logger,
    routes: work.routes,
    serviceNames: [ExecutorService.typeName],
    isReady: async () => (await bus.ready()) && (await peersServing([catalog, runs], "")),
  });
  return {
    server,
    async stop() {
      await server.close();
      // Streamed runs already started finish and publish their end before NATS is drained.
      await work.stop(config.PIES_PROVIDER_TIMEOUT_MS);
      await catalogEvents.close();
      await bus.close();
    },
  };
}
