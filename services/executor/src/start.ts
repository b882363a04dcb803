import { createClient } from "@connectrpc/connect";
import {
  createLogger,
  grpcTransport,
  JetStreamRunEventBus,
  serveConnect,
  type RunningServer,
} from "@pies/common";
import { ExecutorService } from "@pies/proto/executor";
import { Health, HealthCheckResponse_ServingStatus } from "@pies/proto/health";
import type { ExecutorConfig } from "./config.js";
import { createExecutorDeps } from "./deps.js";
import { executorRoutes, InFlight } from "./service.js";

export interface ExecutorProcess {
  server: RunningServer;
  stop(): Promise<void>;
}

/** Serves the executor on its own port (the process of `main.ts`). */
export async function startExecutor(config: ExecutorConfig): Promise<ExecutorProcess> {
  const logger = createLogger("executor", config.LOG_LEVEL);
  const bus = await JetStreamRunEventBus.connect({
    url: config.NATS_URL,
    stream: config.PIES_NATS_STREAM,
    subjectPrefix: config.PIES_NATS_SUBJECT_PREFIX,
    maxAgeSeconds: config.PIES_STREAM_MAX_AGE_SECONDS,
    name: "pies-executor",
  });
  const catalog = grpcTransport(config.CATALOG_URL);
  const runs = grpcTransport(config.RUNS_URL);
  const deps = await createExecutorDeps({ catalog, runs, bus, logger, config });
  const peers = [createClient(Health, catalog), createClient(Health, runs)];
  const inFlight = new InFlight();
  const server = await serveConnect({
    name: "executor",
    host: config.HOST,
    port: config.PORT,
    logger,
    routes: executorRoutes(deps, inFlight),
    serviceNames: [ExecutorService.typeName],
    async isReady() {
      const checks = await Promise.all([
        bus.ready(),
        ...peers.map((peer) =>
          peer.check({ service: "" }, { timeoutMs: 2000 }).then(
            (r) => r.status === HealthCheckResponse_ServingStatus.SERVING,
            () => false,
          ),
        ),
      ]);
      return checks.every(Boolean);
    },
  });
  return {
    server,
    async stop() {
      await server.close();
      // Streamed runs already started finish and publish their end before NATS is drained.
      await inFlight.settle(config.PIES_PROVIDER_TIMEOUT_MS);
      await bus.close();
    },
  };
}
