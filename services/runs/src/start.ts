import {
  createDatabase,
  createLogger,
  migrateToLatest,
  pingDatabase,
  serveConnect,
  type RunningServer,
} from "@pies/common";
import { RunsService } from "@pies/proto/runs";
import type { RunsConfig } from "./config.js";
import { migrations } from "./migrations/index.js";
import { runsRoutes } from "./service.js";
import type { RunsDatabase } from "./tables.js";

export interface RunsProcess {
  server: RunningServer;
  stop(): Promise<void>;
}

/** Migrates, then serves the runs store on its own port (the process of `main.ts`). */
export async function startRuns(config: RunsConfig): Promise<RunsProcess> {
  const logger = createLogger("runs", config.LOG_LEVEL);
  const db = createDatabase<RunsDatabase>({
    url: config.DATABASE_URL,
    poolMax: config.DATABASE_POOL_MAX,
    applicationName: "pies-runs",
  });
  await migrateToLatest(db, "runs", migrations);
  const server = await serveConnect({
    name: "runs",
    host: config.HOST,
    port: config.PORT,
    logger,
    routes: runsRoutes({ db }),
    serviceNames: [RunsService.typeName],
    isReady: () => pingDatabase(db),
  });
  return {
    server,
    async stop() {
      await server.close();
      await db.destroy();
    },
  };
}
