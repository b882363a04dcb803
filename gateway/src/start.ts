import {
  createLogger,
  grpcClient,
  grpcTransport,
  JetStreamRunEventBus,
  peersServing,
} from "@pies/common";
import { CatalogService } from "@pies/proto/catalog";
import { ExecutorService } from "@pies/proto/executor";
import { RunsService } from "@pies/proto/runs";
import { createGateway } from "./app.js";
import { closeGracefully } from "./drain.js";
import { gatewayOptions, type GatewayConfig } from "./config.js";

export interface GatewayProcess {
  url: string;
  stop(): Promise<void>;
}

/** Serves the gateway on its own port against the three services over gRPC and NATS. */
export async function startGateway(config: GatewayConfig): Promise<GatewayProcess> {
  const logger = createLogger("gateway", config.LOG_LEVEL);
  const bus = await JetStreamRunEventBus.fromConfig(config, "pies-gateway");
  const catalog = grpcTransport(config.CATALOG_URL);
  const runs = grpcTransport(config.RUNS_URL);
  const executor = grpcTransport(config.EXECUTOR_URL);
  const app = createGateway({
    catalog: grpcClient(CatalogService, catalog),
    runs: grpcClient(RunsService, runs),
    executor: grpcClient(ExecutorService, executor),
    bus,
    logger,
    options: gatewayOptions(config),
    // Ready when NATS answers and every service is ready (each checks its own dependencies).
    isReady: async () =>
      (await bus.ready()) && (await peersServing([catalog, runs, executor], "readiness")),
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
