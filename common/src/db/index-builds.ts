import { sql, type Kysely } from "kysely";
import type { Logger } from "../logger.js";

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
   * schema of `extension` when there is one, to name its operator classes.
   */
  definition: (extensionSchema: string) => string;
  /** An extension it needs: when it cannot be created (not available, no privilege), the index is
   * left out with a warning (queries must stay correct without it). */
  extension?: string;
  /** Indexes it supersedes, dropped (concurrently) once it is valid. */
  replaces?: string[];
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
  options: { logger?: Logger; onBackend?: (pid: number) => void; signal?: AbortSignal } = {},
): Promise<IndexBuildReport> {
  const { logger } = options;
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
      const extensionSchemas = new Map<string, string | null>();
      for (const build of builds) {
        // Stopped between two statements (a cancel reaches only a statement in progress).
        options.signal?.throwIfAborted();
        let extensionSchema = "";
        if (build.extension) {
          if (!extensionSchemas.has(build.extension)) {
            extensionSchemas.set(build.extension, await ensureExtension(conn, build.extension));
          }
          const found = extensionSchemas.get(build.extension);
          if (!found) {
            logger?.warn(
              { index: build.name, extension: build.extension },
              "index left out: its extension is not available (searches stay correct, slower)",
            );
            report.skipped.push(build.name);
            continue;
          }
          extensionSchema = quoteIdent(found);
        }
        const qualified = `${quoteIdent(schema)}.${quoteIdent(build.name)}`;
        const state = await sql<{ valid: boolean }>`
          select i.indisvalid as valid from pg_index i
          join pg_class c on c.oid = i.indexrelid
          join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = ${schema} and c.relname = ${build.name}`.execute(conn);
        const valid = state.rows[0]?.valid;
        if (valid) {
          report.present.push(build.name);
        } else {
          if (valid === false) {
            logger?.warn({ index: build.name }, "dropping an index an earlier build left invalid");
            await sql.raw(`drop index concurrently if exists ${qualified}`).execute(conn);
          }
          const started = performance.now();
          logger?.info({ index: build.name }, "building an index (concurrently)");
          await sql
            .raw(
              // The index goes to its table's schema (a name here cannot be qualified).
              `create index concurrently ${quoteIdent(build.name)} on ${build.table} ${build.definition(extensionSchema)}`,
            )
            .execute(conn);
          logger?.info(
            { index: build.name, ms: Math.round(performance.now() - started) },
            "index built",
          );
          report.built.push(build.name);
        }
        for (const old of build.replaces ?? []) {
          await sql
            .raw(`drop index concurrently if exists ${quoteIdent(schema)}.${quoteIdent(old)}`)
            .execute(conn);
        }
      }
      // An expression index has statistics of its own, which only ANALYZE gathers; the planner
      // needs them to judge how selective a condition on the expression is.
      const tables = new Set(
        builds.filter((b) => report.built.includes(b.name)).map((b) => b.table),
      );
      for (const table of tables) await sql.raw(`analyze ${table}`).execute(conn);
      return report;
    } finally {
      await sql`select pg_advisory_unlock(hashtextextended(${lockKey}, 0))`.execute(conn);
    }
  });
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

/**
 * The builds in the background of a running service: its start does not wait for them (a build
 * on a large table takes minutes and writers go on meanwhile); `stop` cancels one in progress (it
 * leaves an invalid index, which the next start drops and builds again). A failed build is logged
 * and the service goes on without the index.
 */
export function startIndexBuilds(
  db: Kysely<any>,
  schema: string,
  builds: readonly IndexBuild[],
  logger: Logger,
): { done: Promise<IndexBuildReport | undefined>; stop(): Promise<void> } {
  let backend: number | undefined;
  let finished = false;
  let stopping = false;
  const stopped = new AbortController();
  const done = buildIndexes(db, schema, builds, {
    logger,
    onBackend: (pid) => (backend = pid),
    signal: stopped.signal,
  })
    .catch((err: unknown) => {
      if (!stopping) logger.error({ err, schema }, "building the schema's indexes failed");
      return undefined;
    })
    .finally(() => (finished = true));
  return {
    done,
    async stop() {
      stopping = true;
      stopped.abort();
      if (!finished && backend !== undefined) {
        await sql`select pg_cancel_backend(${backend})`.execute(db).catch(() => undefined);
      }
      await done;
    },
  };
}
