import { createHash } from "node:crypto";
// kysely 0.28 (the line that supports Node 20) exports the Migrator from its main entry.
import {
  Kysely,
  Migrator,
  PostgresDialect,
  sql,
  type Migration,
  type MigrationProvider,
} from "kysely";
import pg from "pg";
import { PGliteDialect } from "./pglite-dialect.js";
import type { PGliteHandle } from "./pglite-worker.js";
import type { Logger } from "../logger.js";
import type { DatabaseFaults } from "../unavailable.js";

// int8 (counts, sums) as numbers: pies never counts past 2^53.
pg.types.setTypeParser(20, (v) => Number(v));

export type DatabaseOptions =
  | {
      url: string;
      poolMax?: number;
      applicationName?: string;
      /** Where lost connections are logged (at warn); silent without. */
      logger?: Logger;
      /** Told of every lost connection. */
      faults?: DatabaseFaults;
      /**
       * Run the statements made with preparedStatement as named prepared statements (default
       * true); off behind a pooler that does not keep them (DATABASE_PREPARED_STATEMENTS).
       */
      preparedStatements?: boolean;
    }
  | { pglite: PGliteHandle };

/** The databases createDatabase made over PGlite. */
const inProcess = new WeakSet<Kysely<any>>();

/** Whether the database runs in this process (PGlite): a long statement stalls the event loop. */
export function isInProcessDatabase(db: Kysely<any>): boolean {
  return inProcess.has(db);
}

/** The statements that preparedStatement named: their name, by their text. */
const preparedNames = new Map<string, string>();

/**
 * Names a statement that a process runs often enough to have PostgreSQL parse, analyse and plan it
 * once per connection rather than at every run (the record writer's upsert: a statement of some
 * fifty expressions whose preparing cost more of PostgreSQL's CPU than a row's insert with every
 * index: docs/decisions/0019-prepared-upsert-and-batch-interval.md). Returns the text, to run as
 * any other (`CompiledQuery.raw(text, params)`): over a pool made with `preparedStatements` (the
 * default) it is sent as a named statement, prepared on each connection the first time it runs
 * there; elsewhere (PGlite, or prepared statements off) it is an unnamed one, as before.
 */
export function preparedStatement(name: string, text: string): string {
  for (const [known, n] of preparedNames)
    if (n.startsWith(`${name}_`) && known !== text) {
      throw new Error(`prepared statement ${name} named twice`);
    }
  // Named after its text too: a server connection that a pooler shares with a process of another
  // release, which prepared the statement of that name as it was then, never runs that one.
  preparedNames.set(
    text,
    `${name}_${createHash("sha256").update(text).digest("hex").slice(0, 12)}`,
  );
  return text;
}

/**
 * The SQLSTATEs of a named statement that the connection and node-postgres disagree on: 26000
 * (the server has no statement of that name: `DEALLOCATE ALL`, or a pooler in transaction mode
 * that sent the statement to another server connection) and 42P05 (the server has one that
 * node-postgres does not know of, so it parses it again).
 */
const LOST = new Set(["26000", "42P05"]);
const isLost = (err: unknown) => LOST.has((err as { code?: unknown } | null)?.code as string);

/**
 * A pool's named statements: on until a statement is found lost twice in a row on a connection,
 * then sent unnamed for the rest of the pool's life (a pooler that does not keep them). The logger
 * is told once.
 */
interface Preparing {
  on: boolean;
  logger?: Logger;
}

/**
 * A pg client class that sends the statements named by preparedStatement as named statements
 * (node-postgres parses one on a connection the first time it runs there, then only binds and
 * executes it). It is how kysely runs a query (`query(text, parameters)`) that is looked up; every
 * other call is pg's own.
 *
 * node-postgres believes a statement it parsed on a connection is there for the connection's
 * life, so one lost (26000 or 42P05) failed every later run of it on that connection. Here the
 * statement is forgotten on both sides and run once more, prepared again (in a transaction block,
 * which the failure aborted, at the caller's next run); lost again before a named statement
 * succeeds on the connection, the pool sends its statements unnamed from then on, with one error
 * logged.
 */
function preparingClient(preparing: Preparing): typeof pg.Client {
  return class PreparingClient extends pg.Client {
    override query(config: any, values?: any, callback?: any): any {
      if (preparing.on && typeof config === "string" && callback === undefined) {
        const name = preparedNames.get(config);
        if (name !== undefined) return this.prepared(name, config, values);
      }
      return super.query(config, values, callback);
    }

    /** Whether the last named statement run here was lost (and no other ran since). */
    private lostLast = false;

    private async prepared(name: string, text: string, values: unknown[] | undefined) {
      for (;;) {
        if (!preparing.on) return super.query(text, values);
        try {
          const result = await super.query({ name, text, values });
          this.lostLast = false;
          return result;
        } catch (err) {
          if (!isLost(err)) throw err;
          await this.forget(name, err);
          if (this.lostLast && preparing.on) {
            preparing.on = false;
            preparing.logger?.error(
              { err, statement: name },
              "prepared statements are lost between the statements of a connection (a pooler " +
                "in transaction mode that does not keep them?): sent unnamed from now on; set " +
                "DATABASE_PREPARED_STATEMENTS=false to say so",
            );
          }
          this.lostLast = true;
          // In a transaction block the failure aborted the transaction: it is its caller's to
          // run again (prepared again, or unnamed). Outside one it did nothing: run again here.
          if (this.getTransactionStatus() !== "I") throw err;
        }
      }
    }

    /**
     * Forgets a lost statement: node-postgres parses it again next time, and one the server has
     * that node-postgres did not know of (42P05) is deallocated first (behind a pooler the
     * `deallocate` may meet another server connection: then it fails, and is let fail).
     */
    private async forget(name: string, err: unknown) {
      const connection = (this as unknown as { connection: PgConnection }).connection;
      delete connection.parsedStatements[name];
      delete connection.submittedNamedStatements[name];
      if ((err as { code?: string }).code === "42P05" && this.getTransactionStatus() === "I") {
        await super.query(`deallocate "${name}"`).catch(() => {});
      }
    }
  };
}

/** The part of node-postgres's connection (pg 8) that keeps the statements parsed on it. */
interface PgConnection {
  parsedStatements: Record<string, string>;
  submittedNamedStatements: Record<string, string>;
}

/** A Kysely instance over a pg pool (one per process, never per request) or an embedded PGlite. */
export function createDatabase<DB>(options: DatabaseOptions): Kysely<DB> {
  if ("pglite" in options) {
    const db = new Kysely<DB>({ dialect: new PGliteDialect(options.pglite) });
    inProcess.add(db);
    return db;
  }
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.poolMax ?? 10,
    application_name: options.applicationName ?? "pies",
    idleTimeoutMillis: 30_000,
    ...(options.preparedStatements !== false && {
      Client: preparingClient({ on: true, logger: options.logger }),
    }),
  });
  const lost = (err: Error) => {
    options.faults?.note();
    options.logger?.warn({ err }, "a database connection was lost");
  };
  // The pool listens on a client only while it is idle (and re-emits on itself); a checked-out
  // client (kysely holds one for a whole transaction) had no listener, so a PostgreSQL restart
  // under load was an unhandled 'error' event that ended the process. Every client gets one for
  // its whole life: the query in progress fails and the client is discarded on release.
  pool.on("connect", (client) => client.on("error", lost));
  pool.on("error", () => {}); // already logged by the client's own listener

  return new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
}

/** True when the database answers a trivial query within the timeout. */
export async function pingDatabase(db: Kysely<any>, timeoutMs = 2000): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      sql`select 1`.execute(db).then(() => true),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
    ]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs a service's migrations (its own schema, its own migration table) to the latest, each in a
 * transaction of its own: kysely's migrateToLatest runs every pending one in one transaction, so
 * a lock one takes (a rename) would be held through the next one's work (a scan of the table).
 * The migrator takes a lock, so every replica may call this at start.
 */
export async function migrateToLatest(
  db: Kysely<any>,
  schema: string,
  migrations: Record<string, Migration>,
): Promise<void> {
  const provider: MigrationProvider = { getMigrations: async () => migrations };
  // The migrator creates the schema itself, tolerating a replica that does so at the same moment
  // (a plain `create schema if not exists` is not safe under concurrency).
  const migrator = new Migrator({ db, provider, migrationTableSchema: schema });
  for (;;) {
    const { error, results } = await migrator.migrateUp();
    if (error) {
      const failed = results?.find((r) => r.status === "Error")?.migrationName;
      throw new Error(`migration ${failed ?? "(unknown)"} of schema ${schema} failed`, {
        cause: error,
      });
    }
    if (!results?.some((r) => r.status === "Success")) return;
  }
}

/**
 * `tags && $1::text[]`: the row carries any of the tags (a GIN index on `tags` serves it). One
 * array parameter, as kysely would expand an array operand into a list of scalars.
 */
export const hasAnyTag = (tags: readonly string[]) =>
  sql<boolean>`tags && ${sql.val(tags)}::text[]`;
