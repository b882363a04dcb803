import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { createLogger, DatabaseFaults, type Logger } from "@pies/common";
import {
  JetStreamRunEventBus,
  MemoryCatalogEvents,
  MemoryRunEventBus,
  MemoryRunRecords,
  catalogEventsFromConfig,
  recordsFromConfig,
  type CatalogEvents,
  type RunEventBus,
  type RunRecords,
} from "@pies/common/bus";
import { createDatabase, openPGliteWorker } from "@pies/common/db";
import type { Kysely } from "kysely";
import { seedAccount } from "@pies/catalog";
import { closeGracefully, gatewayOptions } from "@pies/gateway";
import type { EmbeddedConfig } from "./config.js";
import { createInMemoryPies, type InMemoryPies } from "./wiring.js";

export interface EmbeddedPies {
  url: string;
  apiKey: string;
  stop(): Promise<void>;
}

interface Credentials {
  apiKey: string;
}

/**
 * pies in one process (DESIGN.md §11): gateway, catalog, runs and executor wired with in-memory
 * Connect transports (full serialization, no ports), on an embedded PostgreSQL (PGlite) and an
 * in-process event bus, unless DATABASE_URL / NATS_URL point at real ones. The first start seeds an
 * account, a `default` project with a `test` environment, and an API key.
 */
export async function startEmbedded(config: EmbeddedConfig): Promise<EmbeddedPies> {
  const logger = createLogger("pies", config.LOG_LEVEL);
  const dataDir = path.resolve(config.PIES_DATA_DIR);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });

  // A lost pool connection counts as a fault for the sweeper, as in the runs service.
  const faults = new DatabaseFaults();
  const db: Kysely<any> = config.DATABASE_URL
    ? createDatabase({
        url: config.DATABASE_URL,
        applicationName: "pies-embedded",
        preparedStatements: config.DATABASE_PREPARED_STATEMENTS,
        logger,
        faults,
      })
    : createDatabase({
        // In a worker thread: statements (the record writer's batches above all) run beside the
        // event loop instead of stalling it. The extensions: the runs search's trigram index,
        // under the project (services/runs index-builds.ts).
        pglite: await openPGliteWorker(path.join(dataDir, "pg"), {
          extensions: ["pg_trgm", "btree_gin"],
          onFailure(err) {
            // Nothing can be stored any more: exit, rather than answer every request with an error.
            logger.fatal({ err }, "the embedded database stopped; exiting");
            process.exit(1);
          },
        }),
      });
  try {
    return await startOn(config, logger, dataDir, db, faults);
  } catch (err) {
    await db.destroy().catch(() => {});
    throw err;
  }
}

async function startOn(
  config: EmbeddedConfig,
  logger: Logger,
  dataDir: string,
  db: Kysely<any>,
  faults: DatabaseFaults,
): Promise<EmbeddedPies> {
  let bus: RunEventBus;
  let records: RunRecords;
  let catalogEvents: CatalogEvents;
  if (config.NATS_URL) {
    const jetstream = await JetStreamRunEventBus.fromConfig(
      { ...config, NATS_URL: config.NATS_URL },
      "pies-embedded",
      logger,
    );
    bus = jetstream;
    records = await recordsFromConfig(jetstream.connection, config, logger);
    // With NATS, other pies processes on it see this one's catalog changes, and the other way.
    catalogEvents = await catalogEventsFromConfig(jetstream.connection, config, logger);
  } else {
    bus = new MemoryRunEventBus({ maxAgeMs: config.PIES_STREAM_MAX_AGE_SECONDS * 1000 });
    records = new MemoryRunRecords();
    catalogEvents = new MemoryCatalogEvents();
  }

  const secretKey =
    config.PIES_SECRET_KEY ??
    (await localSecret(dataDir, "secret.key", () => randomBytes(32).toString("base64")));
  // Token exchange's signing key: kept in the data dir, so that tokens outlive a restart.
  const tokenKey = Buffer.from(
    config.PIES_JWT_SECRET ??
      (await localSecret(dataDir, "jwt.key", () => randomBytes(32).toString("base64"))),
    "base64",
  );
  const pies = await createInMemoryPies({
    db,
    bus,
    records,
    catalogEvents,
    secretKey,
    logger,
    executor: config,
    gateway: gatewayOptions(config),
    tokenKey,
    sweep: {
      leaseSeconds: config.PIES_RUN_LEASE_SECONDS,
      intervalMs: config.PIES_SWEEP_INTERVAL_SECONDS * 1000,
    },
    deadRecords: {
      maxRows: config.PIES_DEAD_RECORDS_MAX,
      maxAgeDays: config.PIES_DEAD_RECORDS_MAX_AGE_DAYS,
    },
    lifecycle: {
      retentionDays: config.PIES_RUN_RETENTION_DAYS,
      maintenanceIntervalMs: config.PIES_RUN_MAINTENANCE_SECONDS * 1000,
      partitionDays: config.PIES_RUN_PARTITION_DAYS,
    },
    faults,
  });
  const { app, catalog } = pies;
  const apiKey = await seed(catalog, dataDir);
  const address = await app.listen({ host: config.HOST, port: config.PORT });
  return {
    url: address,
    apiKey,
    async stop() {
      await closeGracefully(app, 10_000);
      await pies.stop(10_000);
      await catalogEvents.close();
      await bus.close();
      await db.destroy();
    },
  };
}

/**
 * On first start: an account `local` with project `default`, a `test` environment and an API key,
 * kept in `<data dir>/credentials.json` (mode 0600) so that later starts can print it again.
 */
async function seed(catalog: InMemoryPies["catalog"], dataDir: string): Promise<string> {
  const file = path.join(dataDir, "credentials.json");
  const existing = await readFile(file, "utf8").then(
    (text) => JSON.parse(text) as Credentials,
    () => undefined,
  );
  if (existing?.apiKey) return existing.apiKey;
  const { key } = await seedAccount(catalog, {
    account: "local",
    project: "default",
    key: "local",
  });
  await writeFile(file, JSON.stringify({ apiKey: key } satisfies Credentials, null, 2), {
    mode: 0o600,
  });
  return key;
}

async function localSecret(dataDir: string, name: string, make: () => string): Promise<string> {
  const file = path.join(dataDir, name);
  try {
    return (await readFile(file, "utf8")).trim();
  } catch {
    const value = make();
    await writeFile(file, value, { mode: 0o600 });
    return value;
  }
}
