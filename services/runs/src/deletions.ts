import { sql, type Kysely, type RawBuilder } from "kysely";
import type { RunsDatabase } from "./tables.js";

/** Runs deleted per statement (and per lock of the record writer). */
export const DELETE_BATCH = 500;

/**
 * Deletes the runs `ids` names (a subquery of ids over runs.runs, `limit` given) in batches, each
 * a statement of its own, leaving no tombstone: the retention's, whose runs the record writer
 * refuses by their age. The rollup's triggers keep it exact. Resolves with the number deleted.
 */
export async function deleteRunsWhere(
  db: Kysely<RunsDatabase>,
  ids: (limit: number) => RawBuilder<unknown>,
  options: { batch?: number } = {},
): Promise<number> {
  const batch = options.batch ?? DELETE_BATCH;
  let deleted = 0;
  for (;;) {
    const gone = await sql`delete from runs.runs where id in (${ids(batch)})`.execute(db);
    const n = Number(gone.numAffectedRows ?? 0);
    deleted += n;
    if (n < batch) return deleted;
  }
}

/** Experiments deleted per statement by the retention (each with up to 1,000 pairs). */
const EXPERIMENT_BATCH = 50;

/**
 * Deletes the experiments that copied a run (their pairs hold runs' inputs and results, DESIGN.md
 * §13): with `ids`, those whose pairs replayed, were replays of or judged one of these runs (a
 * deletion's, in its transaction: after its lock of runs.deleted_runs, so that an experiment made
 * meanwhile is either seen here or sees the tombstones, insertExperiment); with `floorId`, those
 * that replayed a run made before it, the project's only with `projectId`, and those that selected
 * none once they are as old (the retention's, in batches). Resolves with the number deleted.
 */
export async function deleteExperimentsOf(
  db: Kysely<RunsDatabase>,
  runs: { ids: readonly string[] } | { floorId: string; projectId?: string },
): Promise<number> {
  if ("ids" in runs) {
    const ids = sql`${runs.ids}::text[]`;
    const gone = await sql`delete from runs.experiments where id in (
      select experiment_id from runs.experiment_pairs where source_run_id = any(${ids})
      union select experiment_id from runs.experiment_pairs where run_id = any(${ids})
      union select experiment_id from runs.experiment_pairs where judge_run_id = any(${ids}))`.execute(
      db,
    );
    return Number(gone.numAffectedRows ?? 0);
  }
  const { floorId, projectId } = runs;
  const project = projectId ? sql`and project_id = ${projectId}` : sql``;
  let deleted = 0;
  for (;;) {
    const gone = await sql`delete from runs.experiments where id in (
      select id from runs.experiments
      where (id in (select experiment_id from runs.experiment_pairs where source_run_id < ${floorId})
        or (selected = skipped and id < ${floorId})) ${project}
      limit ${EXPERIMENT_BATCH})`.execute(db);
    const n = Number(gone.numAffectedRows ?? 0);
    deleted += n;
    if (n < EXPERIMENT_BATCH) return deleted;
  }
}

/**
 * Deletes the project's runs of these ids and leaves a tombstone of each (runs.deleted_runs), so
 * that the record writer never writes them again: in a transaction that holds runs.deleted_runs
 * EXCLUSIVE (5 s at most to get it), which waits for the writer's batches in flight (they read
 * tombstones FOR SHARE, record-writer.ts) and makes the writer's next batch wait for it and see its
 * tombstones. The ids are found before, outside the lock: the writer waits for the delete only.
 */
export async function deleteRunIds(
  db: Kysely<RunsDatabase>,
  projectId: string,
  ids: readonly string[],
): Promise<number> {
  if (ids.length === 0) return 0;
  return db.transaction().execute(async (tx) => {
    await sql`set local lock_timeout = '5s'`.execute(tx);
    await sql`lock table runs.deleted_runs in exclusive mode`.execute(tx);
    const { rows } = await sql<{ n: string }>`
      with gone as (
        delete from runs.runs where id = any(${ids}::text[]) and project_id = ${projectId}
        returning id),
      kept as (insert into runs.deleted_runs (id) select id from gone on conflict do nothing)
      select count(*) as n from gone`.execute(tx);
    await deleteExperimentsOf(tx, { ids });
    return Number(rows[0]?.n ?? 0);
  });
}

/**
 * Deletes every run `find` names, `batch` at a time (find: the ids of up to `limit` of them, as
 * they stand), with their tombstones (deleteRunIds). Resolves with the number deleted.
 */
export async function deleteMatching(
  db: Kysely<RunsDatabase>,
  projectId: string,
  find: (limit: number) => Promise<string[]>,
  options: { batch?: number } = {},
): Promise<number> {
  const batch = options.batch ?? DELETE_BATCH;
  let deleted = 0;
  for (;;) {
    const ids = await find(batch);
    deleted += await deleteRunIds(db, projectId, ids);
    if (ids.length < batch) return deleted;
  }
}

/**
 * Deletes one run by id, whether the store holds it yet or only the record log does (its
 * tombstone keeps the writer from writing it later). The caller has checked it is the project's.
 */
export async function deleteRunById(db: Kysely<RunsDatabase>, id: string): Promise<void> {
  await db.transaction().execute(async (tx) => {
    await sql`set local lock_timeout = '5s'`.execute(tx);
    await sql`lock table runs.deleted_runs in exclusive mode`.execute(tx);
    await sql`insert into runs.deleted_runs (id) values (${id}) on conflict do nothing`.execute(tx);
    await sql`delete from runs.runs where id = ${id}`.execute(tx);
    await deleteExperimentsOf(tx, { ids: [id] });
  });
}

/** Whether the run was deleted (it has a tombstone). */
export async function isDeleted(db: Kysely<RunsDatabase>, id: string): Promise<boolean> {
  const { rows } = await sql`select 1 from runs.deleted_runs where id = ${id}`.execute(db);
  return rows.length > 0;
}
