import { createLogger } from "@pies/common";
import { catalogEventsFromConfig, JetStreamRunEventBus } from "@pies/common/bus";
import { serviceClient, peerTransport, peersServing } from "@pies/common/server";
import { CatalogService } from "@pies/proto/catalog";
import { ExecutorService } from "@pies/proto/executor";
import { ExperimentsService } from "@pies/proto/experiments";
import { RunsService } from "@pies/proto/runs";
import { createGateway } from "./app.js";
import { closeGracefully } from "./drain.js";
import { gatewayOptions, type GatewayConfig } from "./config.js";
import { tokenKeyFrom } from "./tokens.js";

export interface GatewayProcess {
  url: string;
  stop(): Promise<void>;
}

/** Serves the gateway on its own port against the three services (Connect over HTTP/2) and NATS. */
export async function startGateway(config: GatewayConfig): Promise<GatewayProcess> {
  const logger = createLogger("gateway", config.LOG_LEVEL);
  const bus = await JetStreamRunEventBus.fromConfig(config, "pies-gateway", logger);
  // On the bus's connection: one NATS connection per process.
  const catalogEvents = await catalogEventsFromConfig(bus.connection, config, logger);
  const catalog = peerTransport(config.CATALOG_URL, "catalog", config.PIES_INTERNAL_TOKEN);
  const runs = peerTransport(config.RUNS_URL, "runs", config.PIES_INTERNAL_TOKEN);
  const executor = peerTransport(config.EXECUTOR_URL, "executor", config.PIES_INTERNAL_TOKEN);
  const app = createGateway({
    catalog: serviceClient(CatalogService, catalog),
    runs: serviceClient(RunsService, runs),
    experiments: serviceClient(ExperimentsService, runs),
    executor: serviceClient(ExecutorService, executor),
    bus,
    catalogEvents,
    logger,
    options: gatewayOptions(config),
    tokenKey: tokenKeyFrom(config),
    // Ready when NATS answers and every service is ready (each checks its own dependencies).
    // Asked together: a probe waits for the slowest, not for the sum.
    isReady: async () =>
      (
        await Promise.all([bus.ready(), peersServing([catalog, runs, executor], "readiness")])
      ).every(Boolean),
  });
  const url = await app.listen({ host: config.HOST, port: config.PORT });
  logger.info({ url }, "gateway listening");
  return {
    url,
    async stop() {
      await closeGracefully(app, 10_000);
      await catalogEvents.close();
      await bus.close();
    },
  };
}
