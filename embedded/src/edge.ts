import { z } from "zod";
import {
  createLogger,
  env,
  internalAuthConfigSchema,
  loadConfig,
  natsConfigSchema,
} from "@pies/common";
import {
  directTransport,
  EXECUTOR_DEADLINE_MS,
  errorInterceptor,
  peersServing,
  serveConnect,
  serviceClient,
} from "@pies/common/server";
import { connectExecutor, executorSettingsSchema, registerRouteMetrics } from "@pies/executor";
import {
  closeGracefully,
  createGateway,
  gatewayConfigSchema,
  gatewayOptions,
  gatewaySettingsSchema,
  tokenKeyFrom,
} from "@pies/gateway";
import { CatalogService } from "@pies/proto/catalog";
import { ExecutorService } from "@pies/proto/executor";
import { ExperimentsService } from "@pies/proto/experiments";
import { RunsService } from "@pies/proto/runs";

/** The edge's configuration: the gateway's and the executor's, less the executor's address. */
export const edgeConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(8080),
  // Where the edge's executor is served to the runs service, which replays experiments through
  // it (DESIGN.md §13), on HTTP/2 with the internal token; 0: not served (no experiment replays).
  PIES_EXECUTOR_PORT: env.int(0, 0, 65_535),
  CATALOG_URL: z.string().url().default("http://127.0.0.1:50051"),
  RUNS_URL: z.string().url().default("http://127.0.0.1:50052"),
  ...natsConfigSchema,
  ...internalAuthConfigSchema,
  PIES_JWT_SECRET: gatewayConfigSchema.shape.PIES_JWT_SECRET,
  ...executorSettingsSchema,
  ...gatewaySettingsSchema,
  LOG_LEVEL: env.logLevel(),
});

export type EdgeConfig = z.infer<typeof edgeConfigSchema>;

export const loadEdgeConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(edgeConfigSchema, source);

/**
 * The edge: the gateway and an executor in one process, the gateway calling the executor's
 * handlers directly (directTransport: no serialization, no HTTP/2 hop, no second process to wake),
 * with catalog and runs remote as in the four-process deployment. Executions cost one Connect
 * call less: what DESIGN.md §4's hot path needs most (docs/decisions/0017-edge-as-the-default.md).
 */
export async function startEdge(
  config: EdgeConfig,
): Promise<{ url: string; stop(): Promise<void> }> {
  const logger = createLogger("edge", config.LOG_LEVEL);
  const executor = await connectExecutor(config, logger, "pies-edge");
  try {
    // The gateway's key cache follows the same catalog change events as the executor's caches.
    const { bus, catalogEvents, catalog, runs, work } = executor;
    // As in an executor process: unexpected errors logged with their cause, answered INTERNAL.
    // The execution's request and its run are shared, not copied: neither side changes them once
    // handed over (the gateway only reads the run; the executor copies a run before it changes
    // it, and keeps a created run unchanged until its stream starts it), see direct.ts.
    // The same deadline as the gateway's calls to an executor of its own (client.ts).
    const inProcess = directTransport(work.routes, {
      interceptors: [errorInterceptor(logger)],
      defaultTimeoutMs: EXECUTOR_DEADLINE_MS,
    });
    const app = createGateway({
      catalog: serviceClient(CatalogService, catalog),
      runs: serviceClient(RunsService, runs),
      experiments: serviceClient(ExperimentsService, runs),
      executor: serviceClient(ExecutorService, inProcess),
      bus,
      catalogEvents,
      logger,
      options: gatewayOptions(config),
      tokenKey: tokenKeyFrom(config),
      metrics: (registry) => registerRouteMetrics(executor.router, registry),
      // Asked together: a probe waits for the slowest, not for the sum.
      isReady: async () =>
        (await Promise.all([executor.isReady(), peersServing([catalog, runs], "readiness")])).every(
          Boolean,
        ),
    });
    const url = await app.listen({ host: config.HOST, port: config.PORT });
    logger.info({ url }, "edge listening");
    // The executor for the runs service's experiments: the routes the gateway calls in memory.
    const internal =
      config.PIES_EXECUTOR_PORT > 0
        ? await serveConnect({
            name: "executor",
            host: config.HOST,
            port: config.PIES_EXECUTOR_PORT,
            logger,
            routes: work.routes,
            serviceNames: [ExecutorService.typeName],
            isReady: executor.isReady,
            internalToken: config.PIES_INTERNAL_TOKEN,
          }).catch(async (err: unknown) => {
            await app.close();
            throw err;
          })
        : undefined;
    return {
      url,
      async stop() {
        await closeGracefully(app, 10_000);
        await internal?.close();
        // Streamed runs already started finish and publish their end before NATS is drained.
        await executor.stop(config.PIES_PROVIDER_TIMEOUT_MS);
      },
    };
  } catch (err) {
    await executor.stop(0);
    throw err;
  }
}
