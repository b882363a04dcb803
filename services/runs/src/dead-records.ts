import { sql, type Kysely } from "kysely";
import type { Logger } from "@pies/common";
import type { RunsDatabase } from "./tables.js";

/** How many dead records are kept (runs.dead_records: records the writer cannot decode). */
export interface DeadRecordBounds {
  /** The newest this many are kept (PIES_DEAD_RECORDS_MAX). */
  maxRows: number;
  /** None older than this many days (PIES_DEAD_RECORDS_MAX_AGE_DAYS; 0: no age bound). */
  maxAgeDays: number;
}

/** Rows one statement deletes: short statements, so that the writer's inserts never wait long. */
const BATCH = 500;
/** Statements one prune runs at most; a flood of dead records is cut down over several prunes. */
const MAX_STATEMENTS = 20;

/** The dead records kept now. */
export async function countDeadRecords(db: Kysely<RunsDatabase>): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from runs.dead_records`.execute(db);
  return rows[0]?.n ?? 0;
}

/**
 * Deletes the dead records past the bounds, oldest first (by when they were kept), `BATCH` rows a
 * statement and at most `MAX_STATEMENTS` statements; resolves with how many it deleted. Every
 * replica may prune at once: a row goes once.
 */
export async function pruneDeadRecords(
  db: Kysely<RunsDatabase>,
  bounds: DeadRecordBounds,
): Promise<number> {
  let deleted = 0;
  for (let statements = 0; statements < MAX_STATEMENTS; statements++) {
    const old =
      bounds.maxAgeDays > 0
        ? sql`created_at < now() - make_interval(days => ${bounds.maxAgeDays})`
        : sql`false`;
    const result = await sql`
      delete from runs.dead_records where record_seq in (
        select record_seq from runs.dead_records where ${old}
        union
        (select record_seq from runs.dead_records
         order by created_at desc, record_seq desc offset ${bounds.maxRows})
        limit ${BATCH})`.execute(db);
    const n = Number(result.numAffectedRows ?? 0);
    deleted += n;
    if (n < BATCH) break;
  }
  return deleted;
}

/** How often the dead records are pruned: they come rarely, and a prune is a few statements. */
const PRUNE_INTERVAL_MS = 60_000;

/**
 * Prunes the dead records at start and every minute until stopped, beside the sweeper; logs what
 * it deleted (and tells `onDeleted`, the metrics' counter). A failed prune is logged and tried
 * again at the next interval.
 */
export function startDeadRecordsPruner(
  db: Kysely<RunsDatabase>,
  logger: Logger,
  bounds: DeadRecordBounds,
  onDeleted?: (n: number) => void,
  intervalMs = PRUNE_INTERVAL_MS,
): { stop(): Promise<void> } {
  let running: Promise<unknown> = Promise.resolve();
  const prune = () => {
    running = pruneDeadRecords(db, bounds).then(
      (deleted) => {
        if (deleted === 0) return;
        onDeleted?.(deleted);
        logger.warn(
          { deleted, ...bounds },
          "deleted the oldest dead records, past PIES_DEAD_RECORDS_MAX or PIES_DEAD_RECORDS_MAX_AGE_DAYS",
        );
      },
      (err: unknown) => logger.warn({ err }, "dead records could not be pruned"),
    );
  };
  const first = setTimeout(prune, 0);
  const timer = setInterval(prune, intervalMs);
  first.unref();
  timer.unref();
  return {
    async stop() {
      clearTimeout(first);
      clearInterval(timer);
      await running;
    },
  };
}
