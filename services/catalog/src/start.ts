import {
  createDatabase,
  createLogger,
  migrateToLatest,
  pingDatabase,
  serveConnect,
  type RunningServer,
} from "@pies/common";
import { CatalogService } from "@pies/proto/catalog";
import type { CatalogConfig } from "./config.js";
import { migrations } from "./migrations/index.js";
import { SecretBox } from "./secrets.js";
import { catalogRoutes } from "./service.js";
import type { CatalogDatabase } from "./tables.js";

export interface CatalogProcess {
  server: RunningServer;
  stop(): Promise<void>;
}

/** Migrates, then serves the catalog on its own port (the process of `main.ts`). */
export async function startCatalog(config: CatalogConfig): Promise<CatalogProcess> {
  const logger = createLogger("catalog", config.LOG_LEVEL);
  const db = createDatabase<CatalogDatabase>({
    url: config.DATABASE_URL,
    poolMax: config.DATABASE_POOL_MAX,
    applicationName: "pies-catalog",
  });
  await migrateToLatest(db, "catalog", migrations);
  const server = await serveConnect({
    name: "catalog",
    host: config.HOST,
    port: config.PORT,
    logger,
    routes: catalogRoutes({ db, secrets: new SecretBox(config.PIES_SECRET_KEY), logger }),
    serviceNames: [CatalogService.typeName],
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
