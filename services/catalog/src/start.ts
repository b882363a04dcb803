import { createLogger, EndpointPolicy } from "@pies/common";
import { catalogEventsFromConfig, connectNats } from "@pies/common/bus";
import { startDatabaseService, type ServiceProcess } from "@pies/common/db";
import { CatalogService } from "@pies/proto/catalog";
import type { CatalogConfig } from "./config.js";
import { migrations } from "./migrations/index.js";
import { SecretBox } from "./secrets.js";
import { catalogRoutes } from "./service.js";
import type { CatalogDatabase } from "./tables.js";

export type CatalogProcess = ServiceProcess;

/**
 * Migrates, then serves the catalog on its own port (the process of `main.ts`). Each write it
 * answers is announced on NATS; readiness does not depend on NATS, as writes do not either.
 */
export async function startCatalog(config: CatalogConfig): Promise<CatalogProcess> {
  const secrets = new SecretBox(config.PIES_SECRET_KEY);
  const endpoints = new EndpointPolicy(config.PIES_ALLOWED_ENDPOINTS);
  const nc = await connectNats(config.NATS_URL, "pies-catalog");
  try {
    const events = await catalogEventsFromConfig(
      nc,
      config,
      createLogger("catalog", config.LOG_LEVEL),
      false,
    );
    const service = await startDatabaseService<CatalogDatabase>({
      name: "catalog",
      schema: "catalog",
      migrations,
      serviceName: CatalogService.typeName,
      config,
      routes: (db, logger) => catalogRoutes({ db, secrets, logger, endpoints, events }),
    });
    return {
      server: service.server,
      async stop() {
        await service.stop();
        await events.close();
        // Sends the events of the last writes before closing.
        if (!nc.isClosed()) await nc.drain();
      },
    };
  } catch (err) {
    await nc.close();
    throw err;
  }
}
