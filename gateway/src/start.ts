import { createClient } from "@connectrpc/connect";
import { createLogger, grpcClient, grpcTransport, JetStreamRunEventBus } from "@pies/common";
import { CatalogService } from "@pies/proto/catalog";
import { ExecutorService } from "@pies/proto/executor";
import { Health, HealthCheckResponse_ServingStatus } from "@pies/proto/health";
import { RunsService } from "@pies/proto/runs";
import { closeGracefully, createGateway } from "./app.js";
import { gatewayOptions, type GatewayConfig } from "./config.js";

export interface GatewayProcess {
  url: string;
  stop(): Promise<void>;
}

/** Serves the gateway on its own port against the three services over gRPC and NATS. */
export async function startGateway(config: GatewayConfig): Promise<GatewayProcess> {
  const logger = createLogger("gateway", config.LOG_LEVEL);
  const bus = await JetStreamRunEventBus.connect({
    url: config.NATS_URL,
    stream: config.PIES_NATS_STREAM,
    subjectPrefix: config.PIES_NATS_SUBJECT_PREFIX,
    maxAgeSeconds: config.PIES_STREAM_MAX_AGE_SECONDS,
    name: "pies-gateway",
  });
  const transports = [config.CATALOG_URL, config.RUNS_URL, config.EXECUTOR_URL].map(grpcTransport);
  const [catalog, runs, executor] = transports as [
    ReturnType<typeof grpcTransport>,
    ReturnType<typeof grpcTransport>,
    ReturnType<typeof grpcTransport>,
  ];
  const peers = transports.map((t) => createClient(Health, t));
  const app = createGateway({
    catalog: grpcClient(CatalogService, catalog),
    runs: grpcClient(RunsService, runs),
    executor: grpcClient(ExecutorService, executor),
    bus,
    logger,
    options: gatewayOptions(config),
    async isReady() {
      const checks = await Promise.all([
        bus.ready(),
        ...peers.map((p) =>
          p.check({ service: "readiness" }, { timeoutMs: 2000 }).then(
            (r) => r.status === HealthCheckResponse_ServingStatus.SERVING,
            () => false,
          ),
        ),
      ]);
      return checks.every(Boolean);
    },
  });
  const url = await app.listen({ host: config.HOST, port: config.PORT });
  logger.info({ url }, "gateway listening");
  return {
    url,
    async stop() {
      await closeGracefully(app, 10_000);
      await bus.close();
    },
  };
}
