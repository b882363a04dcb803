import { sql, type Kysely } from "kysely";
import type { Logger } from "../logger.js";
import { isInProcessDatabase } from "./db.js";

/** An index's row in pg_index: none when it is not there, `valid` false while it is built. */
export const indexState = (schema: string, name: string) => sql<{ valid: boolean }>`
  select i.indisvalid as valid from pg_index i
  join pg_class c on c.oid = i.indexrelid
  join pg_namespace n on n.oid = c.relnamespace
  where n.nspname = ${schema} and c.relname = ${name}`;

/**
 * An index built outside the migrations, with CREATE INDEX CONCURRENTLY, so that building it on a
 * large table never blocks the writes to it. A migration runs in the migrator's transaction (where
 * CONCURRENTLY is refused) and a plain CREATE INDEX holds a lock that blocks every insert until it
 * commits: minutes on a table of millions of runs.
 */
export interface IndexBuild {
  /** Its name, unqualified: it lives in the service's schema. */
  name: string;
  /** The table, qualified with the service's schema (`runs.runs`). */
  table: string;
  /**
   * Constant SQL after `on <table>`: `using gin (parameters jsonb_path_ops)`. Given the (quoted)
   * schema of its first extension when it has one, to name its operator classes.
   */
  definition: (extensionSchema: string) => string;
  /** Extensions it needs: when one cannot be created (not available, no privilege), the index is
   * left out with a warning (queries must stay correct without it). */
  extensions?: string[];
  /** Indexes it supersedes, dropped (concurrently) once it is valid. */
  replaces?: string[];
  /**
   * Built in its place when one of its extensions cannot be had (an index it replaces, say, so
   * that a deployment without the extension keeps what it had).
   */
  otherwise?: Omit<IndexBuild, "extensions" | "otherwise">;
}

export interface IndexBuildReport {
  /** Built now. */
  built: string[];
  /** Already there and valid. */
  present: string[];
  /** Left out: their extension could not be had. */
  skipped: string[];
  /** Another process held the build lock: it builds them, this one did nothing. */
  busy: boolean;
  /** Indexes a built one replaces that could not be dropped yet (their table was busy). */
  left?: string[];
}

const quoteIdent = (s: string) => `"${s.replace(/"/g, '""')}"`;

/**
 * Builds the indexes that are missing, one by one, each with CREATE INDEX CONCURRENTLY on one
 * connection of its own, outside any transaction: writers go on inserting while it builds. An
 * index a cancelled or failed build left invalid is dropped and built again. Replicas starting
 * together do not queue: one takes a session advisory lock (`pg_try_advisory_lock`) and builds,
 * the others find it taken and go on without waiting (waiting on a lock inside a statement would
 * hold a snapshot that the concurrent build itself waits for). No migrator lock is held either,
 * for the same reason. `onBackend` is told the building connection's backend pid (to cancel it).
 */
export async function buildIndexes(
  db: Kysely<any>,
  schema: string,
  builds: readonly IndexBuild[],
  options: {
    logger?: Logger;
    /** The building connection's backend pid once it holds the build lock, null once it no
     * longer builds (the connection then goes back to the pool: never cancel it after). */
    onBackend?: (pid: number | null) => void;
    /** CREATE INDEX CONCURRENTLY (the default), or a plain CREATE INDEX (which blocks writes). */
    concurrently?: boolean;
    /** Checked before each statement: once aborted, no further statement is sent (the build
     * ends with the signal's reason). */
    signal?: AbortSignal;
  } = {},
): Promise<IndexBuildReport> {
  const { logger, signal } = options;
  const run = <T>(query: { execute(conn: Kysely<any>): Promise<T> }, conn: Kysely<any>) => {
    signal?.throwIfAborted();
    return query.execute(conn);
  };
  const concurrently = options.concurrently === false ? "" : " concurrently";
  const report: IndexBuildReport = { built: [], present: [], skipped: [], busy: false };
  if (builds.length === 0) return report;
  const lockKey = `pies.index-builds.${schema}`;
  return db.connection().execute(async (conn) => {
    const { rows } = await sql<{ ok: boolean; pid: number }>`
      select pg_try_advisory_lock(hashtextextended(${lockKey}, 0)) as ok,
             pg_backend_pid() as pid`.execute(conn);
    if (!rows[0]?.ok) {
      logger?.info({ schema }, "another process is building this schema's indexes");
      return { ...report, busy: true };
    }
    options.onBackend?.(Number(rows[0].pid));
    try {
      // A role's or database's default timeouts are for requests: they would cancel every build
      // of a large table (and a concurrent build waits, without blocking anyone, for the
      // transactions open when it began). Reset before the connection goes back to the pool.
      await run(sql`set statement_timeout = 0`, conn);
      await run(sql`set lock_timeout = 0`, conn);
      const extensionSchemas = new Map<string, string | null>();
      for (const wanted of builds) {
        let build: IndexBuild = wanted;
        const schemas: string[] = [];
        for (const extension of build.extensions ?? []) {
          if (!extensionSchemas.has(extension)) {
            signal?.throwIfAborted();
            extensionSchemas.set(extension, await ensureExtension(conn, extension));
          }
          const found = extensionSchemas.get(extension);
          if (!found) {
            logger?.warn(
              { index: build.name, extension },
              "index left out: its extension is not available (searches stay correct, slower)",
            );
            break;
          }
          schemas.push(quoteIdent(found));
        }
        if (schemas.length < (build.extensions ?? []).length) {
          report.skipped.push(build.name);
          if (!build.otherwise) continue;
          logger?.info(
            { index: build.name, instead: build.otherwise.name },
            "building the index it stands in for",
          );
          build = build.otherwise;
        }
        const extensionSchema = schemas[0] ?? "";
        const qualified = `${quoteIdent(schema)}.${quoteIdent(build.name)}`;
        if (await isPartitioned(conn, build.table)) {
          const built = await buildPartitionedIndex(conn, schema, build, {
            definition: build.definition(extensionSchema),
            concurrently,
            run,
            logger,
          });
          report[built ? "built" : "present"].push(build.name);
          for (const old of build.replaces ?? []) {
            // A partitioned index has no concurrent drop: a brief lock, tried again next time.
            await run(sql`set lock_timeout = '2s'`, conn);
            await run(
              sql.raw(`drop index if exists ${quoteIdent(schema)}.${quoteIdent(old)}`),
              conn,
            ).catch((err: unknown) => {
              logger?.warn({ err, index: old }, "an index it replaces is left: dropped later");
              report.left = [...(report.left ?? []), old];
            });
            await run(sql`set lock_timeout = 0`, conn);
          }
          continue;
        }
        const state = await run(indexState(schema, build.name), conn);
        const valid = state.rows[0]?.valid;
        if (valid) {
          report.present.push(build.name);
        } else {
          if (valid === false) {
            logger?.warn({ index: build.name }, "dropping an index an earlier build left invalid");
            await run(sql.raw(`drop index${concurrently} if exists ${qualified}`), conn);
          }
          const started = performance.now();
          logger?.info(
            { index: build.name },
            concurrently ? "building an index (concurrently)" : "building an index",
          );
          await run(
            sql.raw(
              // The index goes to its table's schema (a name here cannot be qualified).
              `create index${concurrently} ${quoteIdent(build.name)} on ${build.table} ${build.definition(extensionSchema)}`,
            ),
            conn,
          );
          logger?.info(
            { index: build.name, ms: Math.round(performance.now() - started) },
            "index built",
          );
          report.built.push(build.name);
        }
        for (const old of build.replaces ?? []) {
          await run(
            sql.raw(`drop index${concurrently} if exists ${quoteIdent(schema)}.${quoteIdent(old)}`),
            conn,
          );
        }
      }
      // An expression index has statistics of its own, which only ANALYZE gathers; the planner
      // needs them to judge how selective a condition on the expression is.
      const tables = new Set(
        builds.filter((b) => report.built.includes(b.name)).map((b) => b.table),
      );
      for (const table of tables) await run(sql.raw(`analyze ${table}`), conn);
      return report;
    } finally {
      options.onBackend?.(null);
      // A cancel sent just before may land on the first try: the lock must not stay with a
      // connection going back to the pool.
      const unlock = () =>
        sql`select pg_advisory_unlock(hashtextextended(${lockKey}, 0))`.execute(conn);
      await unlock().catch(unlock);
      await sql`reset statement_timeout`.execute(conn);
      await sql`reset lock_timeout`.execute(conn);
    }
  });
}

/** Whether `table` (qualified) is a partitioned table. */
async function isPartitioned(conn: Kysely<any>, table: string): Promise<boolean> {
  const { rows } = await sql<{ kind: string }>`
    select relkind as kind from pg_class where oid = to_regclass(${table})`.execute(conn);
  return rows[0]?.kind === "p";
}

/**
 * An index of a partitioned table, which PostgreSQL does not build concurrently: built on each
 * partition first (concurrently: writers go on), then made on the table alone (`on only`: a SHARE
 * lock on it, which inserts wait for, held for an instant but queued behind the transactions in
 * flight, so tried with a lock timeout and again at the next attempt), and the partitions' ones
 * attached to it, which makes it valid. A partition made later gets it when it is attached
 * (partitions.ts). Resolves true if it made anything.
 */
async function buildPartitionedIndex(
  conn: Kysely<any>,
  schema: string,
  build: IndexBuild,
  options: {
    definition: string;
    concurrently: string;
    run: <T>(query: { execute(conn: Kysely<any>): Promise<T> }, conn: Kysely<any>) => Promise<T>;
    logger?: Logger;
  },
): Promise<boolean> {
  const { run, logger, concurrently, definition } = options;
  const state = await run(indexState(schema, build.name), conn);
  if (state.rows[0]?.valid) return false;
  const parent = `${quoteIdent(schema)}.${quoteIdent(build.name)}`;
  /** The partitions that have no index attached to this one (all, before it exists). */
  const lacking = async () =>
    (
      await run(
        sql<{ partition: string }>`
          select c.relname as partition from pg_inherits i join pg_class c on c.oid = i.inhrelid
          where i.inhparent = to_regclass(${build.table}) and c.relkind = 'r'
            and not exists (
              select 1 from pg_inherits x join pg_index ix on ix.indexrelid = x.inhrelid
              where x.inhparent = to_regclass(${parent}) and ix.indrelid = c.oid)
          order by c.relname`,
        conn,
      )
    ).rows.map((r) => r.partition);
  /** The partition's index for this one, built unless it is there and valid; its name. */
  const childOf = async (partition: string) => {
    const name = `${partition}_${build.name}`.slice(0, 63);
    const child = await run(indexState(schema, name), conn);
    if (child.rows[0]?.valid === true) return name;
    if (child.rows[0]?.valid === false) {
      await run(
        sql.raw(`drop index${concurrently} if exists ${quoteIdent(schema)}.${quoteIdent(name)}`),
        conn,
      );
    }
    const started = performance.now();
    await run(
      sql.raw(
        `create index${concurrently} ${quoteIdent(name)} on ${quoteIdent(schema)}.${quoteIdent(partition)} ${definition}`,
      ),
      conn,
    );
    logger?.info(
      { index: build.name, partition, ms: Math.round(performance.now() - started) },
      "index built on a partition",
    );
    return name;
  };
  if (state.rows.length === 0) {
    for (const partition of await lacking()) await childOf(partition);
    await run(sql`set lock_timeout = '2s'`, conn);
    try {
      await run(
        sql.raw(
          `create index if not exists ${quoteIdent(build.name)} on only ${build.table} ${definition}`,
        ),
        conn,
      );
    } finally {
      await run(sql`set lock_timeout = 0`, conn);
    }
  }
  // Attached, each partition's (a partition made meanwhile has none yet: built now).
  for (const partition of await lacking()) {
    const name = await childOf(partition);
    await run(
      sql.raw(`alter index ${parent} attach partition ${quoteIdent(schema)}.${quoteIdent(name)}`),
      conn,
    );
  }
  return true;
}

/** The schema of an extension, created if needed; null when it cannot be had. */
async function ensureExtension(conn: Kysely<any>, name: string): Promise<string | null> {
  const find = async () =>
    (
      await sql<{ schema: string }>`
        select n.nspname as schema from pg_extension e
        join pg_namespace n on n.oid = e.extnamespace where e.extname = ${name}`.execute(conn)
    ).rows[0]?.schema ?? null;
  const existing = await find();
  if (existing) return existing;
  try {
    await sql.raw(`create extension if not exists ${quoteIdent(name)}`).execute(conn);
  } catch {
    // Not available on this server, or not allowed to this role: found by another process, or
    // not at all.
  }
  return find();
}

/** How long a service waits before trying an unfinished build again. */
export const INDEX_BUILD_RETRY_MS = 5 * 60_000;

/**
 * The builds in the background of a running service: its start does not wait for them (a build
 * on a large table takes minutes and writers go on meanwhile); `stop` sends no further statement
 * and cancels the one in progress (which leaves an invalid index, which the next build drops and
 * builds again). A failed build is logged and the service goes on without the index; an
 * unfinished one (failed, another process held the build lock and may have died or been
 * stopped, or an index a built one replaces could not be dropped) is tried again every `retryMs`
 * until one finds every index there or left out, and every replaced one gone.
 * `done` is the first attempt.
 */
export function startIndexBuilds(
  db: Kysely<any>,
  schema: string,
  builds: readonly IndexBuild[],
  logger: Logger,
  options: { retryMs?: number } = {},
): { done: Promise<IndexBuildReport | undefined>; stop(): Promise<void> } {
  const retryMs = options.retryMs ?? INDEX_BUILD_RETRY_MS;
  let backend: number | null = null;
  let timer: NodeJS.Timeout | undefined;
  const stopping = new AbortController();
  const attempt = (): Promise<IndexBuildReport | undefined> =>
    buildIndexes(db, schema, builds, {
      logger,
      onBackend: (pid) => (backend = pid),
      signal: stopping.signal,
    })
      .catch((err: unknown) => {
        if (!stopping.signal.aborted) {
          logger.error({ err, schema }, "building the schema's indexes failed");
        }
        return undefined;
      })
      .then((report) => {
        // Unfinished: failed, another process holds the lock, or an index it replaces is left.
        const unfinished = report === undefined || report.busy || (report.left?.length ?? 0) > 0;
        if (!stopping.signal.aborted && unfinished) {
          logger.info({ schema, retryMs }, "the schema's indexes will be tried again");
          timer = setTimeout(() => void (current = attempt()), retryMs);
          timer.unref();
        }
        return report;
      });
  let current = attempt();
  return {
    done: current,
    async stop() {
      stopping.abort(new Error("stopping"));
      clearTimeout(timer);
      // A statement sent just before the abort may reach the server after a cancel: cancel
      // again until the build ends (never once its connection is back in the pool).
      let ended = false;
      void current.finally(() => (ended = true));
      while (!ended && backend !== null) {
        const pid = backend;
        await sql`select pg_cancel_backend(${pid})`.execute(db).catch(() => undefined);
        await Promise.race([current, delay(100)]);
      }
      await current;
    },
  };
}

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms).unref());

/**
 * The builds of a service's start: in the background on a PostgreSQL server (startIndexBuilds).
 * An in-process database (PGlite, the embedded mode) runs a statement on this process's thread: a
 * build "in the background" would stall every request for as long as it takes (seconds on 100k
 * runs). There they are built first, with a plain CREATE INDEX (no other process writes), and
 * the start waits for them; a failed build is logged and the service goes on without the index.
 */
export async function prepareIndexBuilds(
  db: Kysely<any>,
  schema: string,
  builds: readonly IndexBuild[],
  logger: Logger,
): Promise<{ done: Promise<IndexBuildReport | undefined>; stop(): Promise<void> }> {
  if (!isInProcessDatabase(db)) return startIndexBuilds(db, schema, builds, logger);
  logger.info(
    { schema },
    "building the indexes before serving: the embedded database runs in this process",
  );
  const report = await buildIndexes(db, schema, builds, { logger, concurrently: false }).catch(
    (err: unknown) => {
      logger.error({ err, schema }, "building the schema's indexes failed");
      return undefined;
    },
  );
  return { done: Promise.resolve(report), stop: async () => {} };
}
