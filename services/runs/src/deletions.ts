import { sql, type Kysely, type RawBuilder } from "kysely";
import type { RunsDatabase } from "./tables.js";

/** Runs deleted per statement (and per lock of the record writer). */
export const DELETE_BATCH = 500;

/**
 * Deletes the runs `ids` names (a subquery of ids over runs.runs, `limit` given) in batches, each
 * a transaction that leaves a tombstone of every run it deletes (runs.deleted_runs), so that the
 * record writer never writes them again. Each batch locks runs.deleted_runs EXCLUSIVE: it waits for
 * the writer's batches in flight (which read tombstones FOR SHARE, record-writer.ts) and the
 * writer's next batch waits for it, then sees its tombstones: a record of a deleted run, however
 * late, is never written. The rollup's triggers keep it exact. Resolves with the number deleted.
 * `tombstones: false` (the retention, whose runs the writer refuses by their age): none left.
 */
export async function deleteRunsWhere(
  db: Kysely<RunsDatabase>,
  ids: (limit: number) => RawBuilder<unknown>,
  options: { batch?: number; tombstones?: boolean } = {},
): Promise<number> {
  const batch = options.batch ?? DELETE_BATCH;
  let deleted = 0;
  for (;;) {
    const n = await db.transaction().execute(async (tx) => {
      if (options.tombstones === false) {
        const gone = await sql`delete from runs.runs where id in (${ids(batch)})`.execute(tx);
        return Number(gone.numAffectedRows ?? 0);
      }
      await sql`lock table runs.deleted_runs in exclusive mode`.execute(tx);
      const { rows } = await sql<{ n: string }>`
        with gone as (delete from runs.runs where id in (${ids(batch)}) returning id),
        kept as (insert into runs.deleted_runs (id) select id from gone on conflict do nothing)
        select count(*) as n from gone`.execute(tx);
      return Number(rows[0]?.n ?? 0);
    });
    deleted += n;
    if (n < batch) return deleted;
  }
}

/**
 * Deletes one run by id, whether the store holds it yet or only the record log does (its
 * tombstone keeps the writer from writing it later). The caller has checked it is the project's.
 */
export async function deleteRunById(db: Kysely<RunsDatabase>, id: string): Promise<void> {
  await db.transaction().execute(async (tx) => {
    await sql`lock table runs.deleted_runs in exclusive mode`.execute(tx);
    await sql`insert into runs.deleted_runs (id) values (${id}) on conflict do nothing`.execute(tx);
    await sql`delete from runs.runs where id = ${id}`.execute(tx);
  });
}

/** Whether the run was deleted (it has a tombstone). */
export async function isDeleted(db: Kysely<RunsDatabase>, id: string): Promise<boolean> {
  const { rows } = await sql`select 1 from runs.deleted_runs where id = ${id}`.execute(db);
  return rows.length > 0;
}
