import { createLogger } from "@pies/common";
import { connectNats, recordsFromConfig, RunLog } from "@pies/common/bus";
import { startDatabaseService, type ServiceProcess } from "@pies/common/db";
import { RunsService } from "@pies/proto/runs";
import type { RunsConfig } from "./config.js";
import { indexBuilds } from "./migrations/index-builds.js";
import { migrations } from "./migrations/index.js";
import { startRecordWriter } from "./record-writer.js";
import { runsRoutes } from "./service.js";
import { startSweeper } from "./sweeper.js";
import type { RunsDatabase } from "./tables.js";

export type RunsProcess = ServiceProcess;

/**
 * Migrates, then serves the runs store on its own port (the process of `main.ts`), writes the
 * record log into PostgreSQL and sweeps for runs that nothing will end.
 */
export async function startRuns(config: RunsConfig): Promise<RunsProcess> {
  const nc = await connectNats(config.NATS_URL, "pies-runs");
  try {
    const log = new RunLog(
      await recordsFromConfig(nc, config, createLogger("runs", config.LOG_LEVEL)),
    );
    const service = await startDatabaseService<RunsDatabase>({
      name: "runs",
      schema: "runs",
      migrations,
      indexBuilds,
      serviceName: RunsService.typeName,
      config,
      routes: (db) => runsRoutes({ db, log }),
      isReady: () => log.records.ready(),
      background: (db, logger, faults) => {
        const writer = startRecordWriter(db, log.records, logger, faults, {
          batchIntervalMs: config.PIES_RECORD_BATCH_INTERVAL_MS,
        });
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
        return {
          async stop() {
            await sweeper.stop();
            await writer.stop();
          },
        };
      },
    });
    return {
      server: service.server,
      async stop() {
        await service.stop();
        await nc.drain();
      },
    };
  } catch (err) {
    await nc.close();
    throw err;
  }
}
