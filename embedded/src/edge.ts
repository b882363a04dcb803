import { createRouterTransport } from "@connectrpc/connect";
import { z } from "zod";
import { createLogger, env, loadConfig, natsConfigSchema } from "@pies/common";
import {
  JetStreamRunEventBus,
  NatsCatalogEvents,
  recordsFromConfig,
  RunLog,
} from "@pies/common/bus";
import { errorInterceptor, peerTransport, peersServing, serviceClient } from "@pies/common/server";
import { createExecutorDeps, executorSettingsSchema, startExecutorWork } from "@pies/executor";
import {
  closeGracefully,
  createGateway,
  gatewayOptions,
  gatewaySettingsSchema,
} from "@pies/gateway";
import { CatalogService } from "@pies/proto/catalog";
import { ExecutorService } from "@pies/proto/executor";
import { RunsService } from "@pies/proto/runs";

/** The edge's configuration: the gateway's and the executor's, less the executor's address. */
export const edgeConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(8080),
  CATALOG_URL: z.string().url().default("http://127.0.0.1:50051"),
  RUNS_URL: z.string().url().default("http://127.0.0.1:50052"),
  ...natsConfigSchema,
  ...executorSettingsSchema,
  ...gatewaySettingsSchema,
  LOG_LEVEL: env.logLevel(),
});

export type EdgeConfig = z.infer<typeof edgeConfigSchema>;

export const loadEdgeConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(edgeConfigSchema, source);

/**
 * The edge: the gateway and an executor in one process, the gateway calling the executor through
 * an in-memory Connect transport (full serialization, no HTTP/2 hop, no second process to wake),
 * with catalog and runs remote as in the four-process deployment. Executions cost one Connect
 * call less: what DESIGN.md §4's hot path needs most (README, "The hot path, measured").
 */
export async function startEdge(config: EdgeConfig): Promise<{ url: string; stop(): Promise<void> }> {
  const logger = createLogger("edge", config.LOG_LEVEL);
  const bus = await JetStreamRunEventBus.fromConfig(config, "pies-edge");
  try {
    // One NATS connection for the run events, the record log and the catalog's change events.
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
    // As in an executor process: unexpected errors logged with their cause, answered INTERNAL.
    const executor = createRouterTransport(work.routes, {
      router: { interceptors: [errorInterceptor(logger)] },
    });
    const app = createGateway({
      catalog: serviceClient(CatalogService, catalog),
      runs: serviceClient(RunsService, runs),
      executor: serviceClient(ExecutorService, executor),
      bus,
      catalogEvents,
      logger,
      options: gatewayOptions(config),
      isReady: async () =>
        (await bus.ready()) && (await peersServing([catalog, runs], "readiness")),
    });
    const url = await app.listen({ host: config.HOST, port: config.PORT });
    logger.info({ url }, "edge listening");
    return {
      url,
      async stop() {
        await closeGracefully(app, 10_000);
        // Streamed runs already started finish and publish their end before NATS is drained.
        await work.stop(config.PIES_PROVIDER_TIMEOUT_MS);
        await catalogEvents.close();
        await bus.close();
      },
    };
  } catch (err) {
    await bus.close();
    throw err;
  }
}
