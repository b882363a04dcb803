import {
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type CompiledQuery,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type Kysely,
  type QueryResult,
} from "kysely";
import type { PGliteHandle } from "./pglite-worker.js";

/**
 * Kysely dialect over one PGlite instance (in this thread, or in a worker thread: pglite-worker.ts).
 * PGlite is a single connection, so this driver hands it
 * out to one Kysely connection at a time: a transaction holds it from BEGIN to COMMIT and no other
 * query can slip in between (kysely-pglite's driver shares the connection without such a lock).
 */
export class PGliteDialect implements Dialect {
  constructor(private readonly pglite: PGliteHandle) {}
  createAdapter() {
    return new PostgresAdapter();
  }
  createDriver(): Driver {
    return new PGliteDriver(this.pglite);
  }
  createIntrospector(db: Kysely<any>) {
    return new PostgresIntrospector(db);
  }
  createQueryCompiler() {
    return new PostgresQueryCompiler();
  }
}

class PGliteDriver implements Driver {
  private tail: Promise<void> = Promise.resolve();
  private readonly releases = new WeakMap<DatabaseConnection, () => void>();

  constructor(private readonly pglite: PGliteHandle) {}

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const previous = this.tail;
    this.tail = previous.then(() => held);
    await previous;
    const connection = new PGliteConnection(this.pglite);
    this.releases.set(connection, release);
    return connection;
  }

  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await this.pglite.exec("BEGIN");
    void connection;
  }
  async commitTransaction(): Promise<void> {
    await this.pglite.exec("COMMIT");
  }
  async rollbackTransaction(): Promise<void> {
    await this.pglite.exec("ROLLBACK");
  }
  async releaseConnection(connection: DatabaseConnection): Promise<void> {
    this.releases.get(connection)?.();
    this.releases.delete(connection);
  }
  async destroy(): Promise<void> {
    await this.tail;
    await this.pglite.close();
  }
}

class PGliteConnection implements DatabaseConnection {
  constructor(private readonly pglite: PGliteHandle) {}

  async executeQuery<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    const result = await this.pglite.query<R>(compiled.sql, [...compiled.parameters]);
    const affected = result.affectedRows;
    return {
      rows: result.rows,
      ...(affected !== undefined ? { numAffectedRows: BigInt(affected) } : {}),
    };
  }

  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error("streaming queries are not supported on PGlite");
  }
}
