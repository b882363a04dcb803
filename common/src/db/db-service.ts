import type { ConnectRouter } from "@connectrpc/connect";
import type { Kysely, Migration } from "kysely";
import { createDatabase, migrateToLatest, pingDatabase } from "./db.js";
import { startIndexBuilds, type IndexBuild } from "./index-builds.js";
import { createLogger } from "../logger.js";
import { serveConnect, type RunningServer } from "../server/server.js";
import { DatabaseFaults } from "../unavailable.js";

export interface DatabaseServiceSettings {
  HOST: string;
  PORT: number;
  DATABASE_URL: string;
  DATABASE_POOL_MAX: number;
  DATABASE_PREPARED_STATEMENTS: boolean;
  LOG_LEVEL: string;
  PIES_INTERNAL_TOKEN: string;
}

export interface ServiceProcess {
  server: RunningServer;
  stop(): Promise<void>;
}

/**
 * A service that owns a PostgreSQL schema (catalog, runs): opens the pool, migrates its schema,
 * serves its routes with health (ready while the database answers), and closes in that order's
 * reverse.
 */
export async function startDatabaseService<DB>(options: {
  name: string;
  schema: string;
  migrations: Record<string, Migration>;
  /** Indexes built concurrently in the background once serving (see buildIndexes). */
  indexBuilds?: readonly IndexBuild[];
  serviceName: string;
  config: DatabaseServiceSettings;
  routes: (
    db: Kysely<DB>,
    logger: ReturnType<typeof createLogger>,
  ) => (router: ConnectRouter) => void;
  /**
   * Work on the database before the migrations run (made ready for them online) and after (before
   * serving). `before` may answer what to undo if the migrations fail.
   */
  beforeMigrations?: (
    db: Kysely<DB>,
    logger: ReturnType<typeof createLogger>,
  ) => Promise<{ abandon(): Promise<void> } | void>;
  afterMigrations?: (db: Kysely<DB>, logger: ReturnType<typeof createLogger>) => Promise<void>;
  /** What else must answer for the service to be ready (besides its database). */
  isReady?: () => Promise<boolean>;
  /** Work the service does on its own (a sweeper, say): started once serving, stopped first. */
  background?: (
    db: Kysely<DB>,
    logger: ReturnType<typeof createLogger>,
    faults: DatabaseFaults,
  ) => { stop(): Promise<void> };
}): Promise<ServiceProcess> {
  const { config } = options;
  const logger = createLogger(options.name, config.LOG_LEVEL);
  const faults = new DatabaseFaults();
  const db = createDatabase<DB>({
    url: config.DATABASE_URL,
    poolMax: config.DATABASE_POOL_MAX,
    preparedStatements: config.DATABASE_PREPARED_STATEMENTS,
    applicationName: `pies-${options.name}`,
    logger,
    faults,
  });
  try {
    const prepared = await options.beforeMigrations?.(db, logger);
    try {
      await migrateToLatest(db, options.schema, options.migrations);
    } catch (err) {
      await prepared?.abandon().catch(() => undefined);
      throw err;
    }
    await options.afterMigrations?.(db, logger);
    const server = await serveConnect({
      name: options.name,
      host: config.HOST,
      port: config.PORT,
      logger,
      routes: options.routes(db, logger),
      serviceNames: [options.serviceName],
      isReady: async () => (await pingDatabase(db)) && (await (options.isReady?.() ?? true)),
      databaseFaults: faults,
      internalToken: config.PIES_INTERNAL_TOKEN,
    });
    const background = options.background?.(db, logger, faults);
    const indexes = startIndexBuilds(db, options.schema, options.indexBuilds ?? [], logger);
    return {
      server,
      async stop() {
        await indexes.stop();
        await background?.stop();
        await server.close();
        await db.destroy();
      },
    };
  } catch (err) {
    await db.destroy();
    throw err;
  }
}
