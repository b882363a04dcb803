import { createLogger } from "@pies/common";
import { connectNats, recordsFromConfig, RunLog } from "@pies/common/bus";
import { startDatabaseService, type ServiceProcess } from "@pies/common/db";
import {
  peerTransport,
  serveMetrics,
  serviceClient,
  type MetricsServer,
} from "@pies/common/server";
import { CatalogService } from "@pies/proto/catalog";
import { ExecutorService } from "@pies/proto/executor";
import { RunsService } from "@pies/proto/runs";
import type { RunsConfig } from "./config.js";
import { ExperimentRunner } from "./experiments/runner.js";
import { countDeadRecords, startDeadRecordsPruner } from "./dead-records.js";
import { createRunsMetrics } from "./metrics.js";
import { indexBuilds } from "./migrations/index-builds.js";
import { migrations } from "./migrations/index.js";
import { boundLegacyRuns, makePartitions } from "./partitions.js";
import { startRecordWriter } from "./record-writer.js";
import { projectRetention, startMaintenance } from "./retention.js";
import { runsRoutes } from "./service.js";
import { startSweeper } from "./sweeper.js";
import type { RunsDatabase } from "./tables.js";

export interface RunsProcess extends ServiceProcess {
  /** GET /metrics, when PIES_METRICS_PORT asks for it. */
  metrics: MetricsServer | undefined;
}

/**
 * Migrates, then serves the runs store on its own port (the process of `main.ts`), writes the
 * record log into PostgreSQL, sweeps for runs that nothing will end, keeps the dead records within
 * their bounds, and serves its metrics on PIES_METRICS_PORT when set.
 */
export async function startRuns(config: RunsConfig): Promise<RunsProcess> {
  const logger = createLogger("runs", config.LOG_LEVEL);
  const nc = await connectNats(config.NATS_URL, "pies-runs");
  let metrics: MetricsServer | undefined;
  try {
    const records = await recordsFromConfig(nc, config, logger);
    let runner: ExperimentRunner | undefined;
    const log = new RunLog(records);
    // The database's count once it is open (before, a scrape leaves the gauge out).
    let countDead: () => Promise<number> = () => Promise.reject(new Error("not started"));
    const runsMetrics = createRunsMetrics({
      deadRecords: () => countDead(),
      recordLog: () => records.state(),
    });
    metrics =
      config.PIES_METRICS_PORT > 0
        ? await serveMetrics(runsMetrics.registry, config.HOST, config.PIES_METRICS_PORT, (err) =>
            logger.error({ err }, "the metrics server failed"),
          )
        : undefined;
    const service = await startDatabaseService<RunsDatabase>({
      name: "runs",
      schema: "runs",
      migrations,
      indexBuilds,
      serviceName: RunsService.typeName,
      config,
      beforeMigrations: (db, logger) => boundLegacyRuns(db, logger),
      // The partitions of the next days before the writer starts.
      afterMigrations: async (db, logger) =>
        void (await makePartitions(db, {
          logger,
          days: config.PIES_RUN_PARTITION_DAYS,
          retentionDays: config.PIES_RUN_RETENTION_DAYS,
        })),
      routes: (db, logger) => {
        runner = new ExperimentRunner({
          db,
          executor: serviceClient(
            ExecutorService,
            peerTransport(config.EXECUTOR_URL, "executor", config.PIES_INTERNAL_TOKEN),
          ),
          logger,
          leaseMs: config.PIES_EXPERIMENT_LEASE_SECONDS * 1000,
        });
        return runsRoutes({ db, log, runner });
      },
      isReady: () => log.records.ready(),
      background: (db, logger, faults) => {
        countDead = () => countDeadRecords(db);
        const writer = startRecordWriter(db, log.records, logger, faults, {
          batchIntervalMs: config.PIES_RECORD_BATCH_INTERVAL_MS,
          retentionDays: config.PIES_RUN_RETENTION_DAYS,
        });
        const catalog = serviceClient(
          CatalogService,
          peerTransport(config.CATALOG_URL, "catalog", config.PIES_INTERNAL_TOKEN),
        );
        const maintenance = startMaintenance(db, {
          intervalMs: config.PIES_RUN_MAINTENANCE_SECONDS * 1000,
          retentionDays: config.PIES_RUN_RETENTION_DAYS,
          partitionDays: config.PIES_RUN_PARTITION_DAYS,
          projectDays: () => projectRetention(catalog),
          logger,
        });
        void maintenance.runOnce();
        const sweeper = startSweeper(
          db,
          log,
          logger,
          {
            leaseSeconds: config.PIES_RUN_LEASE_SECONDS,
            intervalMs: config.PIES_SWEEP_INTERVAL_SECONDS * 1000,
          },
          faults,
        );
        const pruner = startDeadRecordsPruner(
          db,
          logger,
          {
            maxRows: config.PIES_DEAD_RECORDS_MAX,
            maxAgeDays: config.PIES_DEAD_RECORDS_MAX_AGE_DAYS,
          },
          (n) => runsMetrics.deadRecordsDeleted.inc(n),
        );
        // Experiments replay once the service serves (their runs' executor asks it for parents).
        runner?.start();
        return {
          async stop() {
            // The pairs in flight end first: their executions go on through the drain.
            await runner?.stop(config.PIES_EXPERIMENT_STOP_GRACE_SECONDS * 1000);
            await pruner.stop();
            await maintenance.stop();
            await sweeper.stop();
            await writer.stop();
          },
        };
      },
    });
    const served = metrics;
    return {
      server: service.server,
      metrics: served,
      async stop() {
        await served?.close();
        await service.stop();
        await nc.drain();
      },
    };
  } catch (err) {
    await metrics?.close();
    await nc.close();
    throw err;
  }
}
