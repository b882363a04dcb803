import type { ConnectRouter } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import { DatabaseFaults, EndpointPolicy, type Logger } from "@pies/common";
import {
  MemoryCatalogEvents,
  type CatalogEvents,
  type RunEventBus,
  type RunRecords,
} from "@pies/common/bus";
import { migrateToLatest, pingDatabase, prepareIndexBuilds } from "@pies/common/db";
import { directTransport, errorInterceptor, serviceClient } from "@pies/common/server";
import { catalogMigrations, catalogRoutes, SecretBox } from "@pies/catalog";
import {
  createExecutorDeps,
  registerRouteMetrics,
  startExecutorWork,
  type ExecutorSettings,
} from "@pies/executor";
import {
  boundLegacyRuns,
  makePartitions,
  projectRetention,
  runsIndexBuilds,
  runsMigrations,
  startMaintenance,
  runsRoutes,
  ExperimentRunner,
  startDeadRecordsPruner,
  startRunsStore,
  startSweeper,
  type DeadRecordBounds,
} from "@pies/runs";
import { CatalogService } from "@pies/proto/catalog";
import { ExecutorService } from "@pies/proto/executor";
import { ExperimentsService } from "@pies/proto/experiments";
import { RunsService } from "@pies/proto/runs";
import type { FastifyInstance } from "fastify";
import { createGateway, type GatewayOptions } from "@pies/gateway";

export interface InMemoryPies {
  app: FastifyInstance;
  catalog: ReturnType<typeof serviceClient<typeof CatalogService>>;
  /** Stops the background work (sweeper, pruner, heartbeats) after the runs in flight end. */
  stop(graceMs: number): Promise<void>;
}

/**
 * The gateway over the three services in this process, each hop a direct call of the callee's
 * handlers (directTransport: no serialization, no ports), on one database (two schemas) and the
 * given bus. Migrates first.
 */
export async function createInMemoryPies(options: {
  db: Kysely<any>;
  bus: RunEventBus;
  /** The record log (in memory, or JetStream when NATS_URL is set). */
  records: RunRecords;
  /** The catalog's change events: in this process unless given (NATS, with NATS_URL). */
  catalogEvents?: CatalogEvents;
  secretKey: string;
  logger: Logger;
  executor: ExecutorSettings;
  gateway: GatewayOptions;
  /** Signs the JWTs of token exchange. */
  tokenKey: Uint8Array;
  sweep: { leaseSeconds: number; intervalMs: number };
  /** How many dead records (undecodable) are kept; unbounded when not given (tests). */
  deadRecords?: DeadRecordBounds;
  /** How long runs are kept (days; 0: for ever) and how often the store's upkeep runs. */
  lifecycle?: { retentionDays: number; maintenanceIntervalMs: number; partitionDays?: number };
  /** Where the database's failures are noted (give the pool's too, as createDatabase's `faults`). */
  faults?: DatabaseFaults;
  /**
   * Tests: every message that crosses a hop is deep-frozen (`freezeMessages` of directTransport),
   * so that a service or the gateway changing a message it shares with the other side throws.
   */
  checkIsolation?: boolean;
}): Promise<InMemoryPies> {
  const { db, bus, logger, faults = new DatabaseFaults() } = options;
  const catalogEvents = options.catalogEvents ?? new MemoryCatalogEvents();
  // As in a service process: unexpected errors are logged with their cause, answered as INTERNAL;
  // a database that is down is UNAVAILABLE, and the sweeper waits a lease after it. The messages
  // are shared by caller and callee, not copied: safe because neither changes them (direct.ts).
  const local = (routes: (router: ConnectRouter) => void) =>
    directTransport(routes, {
      interceptors: [errorInterceptor(logger, faults)],
      freezeMessages: options.checkIsolation,
    });
  await migrateToLatest(db, "catalog", catalogMigrations);
  // As the runs service: its table bounded online first, the next days' partitions after.
  const bounded = await boundLegacyRuns(db, logger);
  await migrateToLatest(db, "runs", runsMigrations).catch(async (err: unknown) => {
    await bounded.abandon().catch(() => undefined);
    throw err;
  });
  const lifecycle = options.lifecycle ?? { retentionDays: 90, maintenanceIntervalMs: 600_000 };
  await makePartitions(db, {
    logger,
    days: lifecycle.partitionDays,
    retentionDays: lifecycle.retentionDays,
  });
  // The runs service's search indexes: built concurrently in the background on a PostgreSQL
  // server, as the service does; on PGlite (in this process) before serving.
  const indexes = await prepareIndexBuilds(db, "runs", runsIndexBuilds, logger);
  const catalogTransport = local(
    catalogRoutes({
      db,
      secrets: new SecretBox(options.secretKey),
      logger,
      endpoints: new EndpointPolicy(options.executor.PIES_ALLOWED_ENDPOINTS),
      events: catalogEvents,
    }),
  );
  const store = startRunsStore(db, options.records, logger, faults, {
    retentionDays: lifecycle.retentionDays,
  });
  const log = store.log;
  // Experiments replay through the executor below, made after the runs service it calls.
  const experiments: { runner?: ExperimentRunner } = {};
  const runsTransport = local(
    runsRoutes({ db, log, runner: { kick: () => experiments.runner?.kick() } }),
  );
  const executorDeps = await createExecutorDeps({
    catalog: catalogTransport,
    runs: runsTransport,
    bus,
    log,
    catalogEvents,
    logger,
    config: options.executor,
  });
  const executor = startExecutorWork(executorDeps, options.executor.PIES_RUN_HEARTBEAT_SECONDS);
  const executorClient = serviceClient(ExecutorService, local(executor.routes));
  const runner = new ExperimentRunner({ db, executor: executorClient, logger }).start();
  experiments.runner = runner;
  const sweeper = startSweeper(db, log, logger, options.sweep, faults);
  const pruner = options.deadRecords && startDeadRecordsPruner(db, logger, options.deadRecords);
  const catalog = serviceClient(CatalogService, catalogTransport);
  const maintenance = startMaintenance(db, {
    intervalMs: lifecycle.maintenanceIntervalMs,
    retentionDays: lifecycle.retentionDays,
    partitionDays: lifecycle.partitionDays,
    projectDays: () => projectRetention(catalog),
    logger,
  });
  void maintenance.runOnce();
  const app = createGateway({
    catalog,
    runs: serviceClient(RunsService, runsTransport),
    experiments: serviceClient(ExperimentsService, runsTransport),
    executor: executorClient,
    bus,
    catalogEvents,
    logger,
    options: options.gateway,
    tokenKey: options.tokenKey,
    metrics: (registry) => registerRouteMetrics(executorDeps.providers.router, registry),
    // Asked together: a probe waits for the slowest, not for the sum.
    isReady: async () =>
      (await Promise.all([pingDatabase(db), bus.ready(), options.records.ready()])).every(Boolean),
  });
  return {
    app,
    catalog,
    async stop(graceMs) {
      // An experiment's pairs in flight end first (their executions are the executor's).
      await runner.stop(graceMs);
      await executor.stop(graceMs);
      await pruner?.stop();
      await maintenance.stop();
      await sweeper.stop();
      await store.stop();
      await indexes.stop();
      if (!options.catalogEvents) await catalogEvents.close();
    },
  };
}
