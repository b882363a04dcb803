import { EndpointPolicy } from "@pies/common";
import { startDatabaseService, type ServiceProcess } from "@pies/common/db";
import { CatalogService } from "@pies/proto/catalog";
import type { CatalogConfig } from "./config.js";
import { migrations } from "./migrations/index.js";
import { SecretBox } from "./secrets.js";
import { catalogRoutes } from "./service.js";
import type { CatalogDatabase } from "./tables.js";

export type CatalogProcess = ServiceProcess;

/** Migrates, then serves the catalog on its own port (the process of `main.ts`). */
export function startCatalog(config: CatalogConfig): Promise<CatalogProcess> {
  const secrets = new SecretBox(config.PIES_SECRET_KEY);
  const endpoints = new EndpointPolicy(config.PIES_ALLOWED_ENDPOINTS);
  return startDatabaseService<CatalogDatabase>({
    name: "catalog",
    schema: "catalog",
    migrations,
    serviceName: CatalogService.typeName,
    config,
    routes: (db, logger) => catalogRoutes({ db, secrets, logger, endpoints }),
  });
}
