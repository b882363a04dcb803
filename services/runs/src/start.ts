import { startDatabaseService, type ServiceProcess } from "@pies/common/db";
import { RunsService } from "@pies/proto/runs";
import type { RunsConfig } from "./config.js";
import { migrations } from "./migrations/index.js";
import { runsRoutes } from "./service.js";
import { startSweeper } from "./sweeper.js";
import type { RunsDatabase } from "./tables.js";

export type RunsProcess = ServiceProcess;

/** Migrates, then serves the runs store on its own port (the process of `main.ts`). */
export function startRuns(config: RunsConfig): Promise<RunsProcess> {
  return startDatabaseService<RunsDatabase>({
    name: "runs",
    schema: "runs",
    migrations,
    serviceName: RunsService.typeName,
    config,
    routes: (db) => runsRoutes({ db }),
    background: (db, logger, faults) =>
      startSweeper(
        db,
        logger,
        {
          leaseSeconds: config.PIES_RUN_LEASE_SECONDS,
          intervalMs: config.PIES_SWEEP_INTERVAL_SECONDS * 1000,
        },
        faults,
      ),
  });
}
