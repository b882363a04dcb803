import { sql, type Insertable, type Kysely, type Selectable } from "kysely";
import type { JsonObject, JsonValue } from "@pies/common";
import type { ExperimentPairsTable, ExperimentsTable, RunsDatabase } from "../tables.js";

export type ExperimentRow = Selectable<ExperimentsTable>;
export type PairRow = Selectable<ExperimentPairsTable>;
export type NewPair = Omit<Insertable<ExperimentPairsTable>, "experiment_id">;

/** What a pair's replay recorded: its candidate side, comparison and judge. */
export interface PairOutcome {
  status: "completed" | "failed";
  run_id: string | null;
  candidate: JsonValue | null;
  candidate_valid: boolean;
  candidate_latency_ms: number | null;
  candidate_tokens: number | null;
  candidate_cost: number | null;
  exact_match: boolean;
  diff: JsonValue[] | null;
  error: JsonObject | null;
  judge_run_id: string | null;
  judge_score: number | null;
  judge_error: string | null;
}

/** Counts of an experiment's pairs by status, and the comparison over those that are done. */
export interface Summary {
  pending: number;
  running: number;
  completed: number;
  failed: number;
  cancelled: number;
  exact: number | null;
  originalValid: number | null;
  candidateValid: number | null;
  originalP50: number | null;
  candidateP50: number | null;
  originalTokens: number | null;
  candidateTokens: number | null;
  originalCost: number | null;
  candidateCost: number | null;
  judgeMean: number | null;
  judgeScored: number;
  judgeFailed: number;
}

const EXPERIMENTS = "runs.experiments" as const;
const PAIRS = "runs.experiment_pairs" as const;
/** Rows of one insert (PostgreSQL's 65,535 parameters over the pair's columns). */
const INSERT_BATCH = 500;

/** A project already runs as many experiments as it may at once. */
export class TooManyRunning extends Error {
  constructor(readonly max: number) {
    super(`a project runs at most ${max} experiments at once`);
  }
}

/**
 * The experiment and its pairs, in one transaction: an experiment is never seen half selected. A
 * running one is refused (TooManyRunning) when its project already runs `maxRunning`: counted
 * under a lock of the project's, so that two at once cannot both pass. A pair whose run was
 * deleted since the selection is left out (counted skipped): the tombstones are read FOR SHARE,
 * which a deletion's lock of runs.deleted_runs waits for, and the deletion then deletes this
 * experiment if it copies one of its runs (deleteExperimentsOf).
 */
export async function insertExperiment(
  db: Kysely<RunsDatabase>,
  row: Insertable<ExperimentsTable>,
  selected: NewPair[],
  maxRunning = Infinity,
): Promise<void> {
  await db.transaction().execute(async (tx) => {
    let pairs = selected;
    if (pairs.length > 0) {
      const { rows: deleted } = await sql<{ id: string }>`select id from runs.deleted_runs
        where id = any(${pairs.map((p) => p.source_run_id)}::text[]) for share`.execute(tx);
      const gone = new Set(deleted.map((d) => d.id));
      if (gone.size > 0) {
        pairs = pairs
          .filter((p) => !gone.has(p.source_run_id))
          .map((p, position) => ({ ...p, position }));
        const ended = pairs.length === 0 ? { status: "completed", ended_at: new Date() } : {};
        row = { ...row, skipped: row.skipped + selected.length - pairs.length, ...ended };
      }
    }
    if (row.status === "running" && Number.isFinite(maxRunning)) {
      await sql`select pg_advisory_xact_lock(hashtext(${`experiments:${row.project_id}`}))`.execute(
        tx,
      );
      const { n } = await tx
        .selectFrom(EXPERIMENTS)
        .select((eb) => eb.fn.countAll<string>().as("n"))
        .where("project_id", "=", row.project_id)
        .where("status", "=", "running")
        .executeTakeFirstOrThrow();
      if (Number(n) >= maxRunning) throw new TooManyRunning(maxRunning);
    }
    await tx.insertInto(EXPERIMENTS).values(row).execute();
    for (let i = 0; i < pairs.length; i += INSERT_BATCH) {
      await tx
        .insertInto(PAIRS)
        .values(pairs.slice(i, i + INSERT_BATCH).map((p) => ({ ...p, experiment_id: row.id })))
        .execute();
    }
  });
}

export function findExperiment(
  db: Kysely<RunsDatabase>,
  projectId: string,
  id: string,
): Promise<ExperimentRow | undefined> {
  return db
    .selectFrom(EXPERIMENTS)
    .selectAll()
    .where("project_id", "=", projectId)
    .where("id", "=", id)
    .executeTakeFirst();
}

/** A page of the project's experiments, newest first. */
export function listExperiments(
  db: Kysely<RunsDatabase>,
  projectId: string,
  limit: number,
  offset: number,
): Promise<ExperimentRow[]> {
  return db
    .selectFrom(EXPERIMENTS)
    .selectAll()
    .where("project_id", "=", projectId)
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .limit(limit)
    .offset(offset)
    .execute();
}

/** The summaries of the experiments, in one statement (a list's page asks for all of its own). */
export async function summaries(
  db: Kysely<RunsDatabase>,
  ids: string[],
): Promise<Map<string, Summary>> {
  if (ids.length === 0) return new Map();
  const done = sql`status in ('completed', 'failed')`;
  // Every figure as float8 or int (pg answers numeric and bigint as strings): the rows are the
  // summaries as they are.
  const { rows } = await sql<Summary & { id: string }>`
    select experiment_id as id,
      count(*) filter (where status = 'pending')::int as pending,
      count(*) filter (where status = 'running')::int as running,
      count(*) filter (where status = 'completed')::int as completed,
      count(*) filter (where status = 'failed')::int as failed,
      count(*) filter (where status = 'cancelled')::int as cancelled,
      avg(case when exact_match then 1.0 else 0.0 end) filter (where ${done})::float8 as exact,
      avg(case when original_valid then 1.0 else 0.0 end) filter (where ${done})::float8
        as "originalValid",
      avg(case when candidate_valid then 1.0 else 0.0 end) filter (where ${done})::float8
        as "candidateValid",
      percentile_cont(0.5) within group (order by original_latency_ms)
        filter (where ${done}) as "originalP50",
      percentile_cont(0.5) within group (order by candidate_latency_ms)
        filter (where ${done}) as "candidateP50",
      (sum(original_tokens) filter (where ${done}))::float8 as "originalTokens",
      (sum(candidate_tokens) filter (where ${done}))::float8 as "candidateTokens",
      sum(original_cost) filter (where ${done}) as "originalCost",
      sum(candidate_cost) filter (where ${done}) as "candidateCost",
      avg(judge_score) as "judgeMean",
      count(judge_score)::int as "judgeScored",
      count(judge_error)::int as "judgeFailed"
    from runs.experiment_pairs
    where experiment_id = any(${ids})
    group by experiment_id`.execute(db);
  return new Map(rows.map(({ id, ...summary }) => [id, summary]));
}

/** A page of the experiment's pairs in the selection's order; `changed`: those that differ. */
export function pairsPage(
  db: Kysely<RunsDatabase>,
  id: string,
  page: { limit: number; offset: number; changed: boolean },
): Promise<PairRow[]> {
  let q = db.selectFrom(PAIRS).selectAll().where("experiment_id", "=", id);
  if (page.changed) {
    q = q.where((eb) => eb.or([eb("exact_match", "=", false), eb("status", "=", "failed")]));
  }
  return q.orderBy("position").limit(page.limit).offset(page.offset).execute();
}

/** Asks a running experiment to stop; answers whether it was running. */
export async function requestCancel(
  db: Kysely<RunsDatabase>,
  projectId: string,
  id: string,
): Promise<boolean> {
  const r = await db
    .updateTable(EXPERIMENTS)
    .set({ cancel_requested: true, updated_at: new Date() })
    .where("project_id", "=", projectId)
    .where("id", "=", id)
    .where("status", "=", "running")
    .executeTakeFirst();
  return r.numUpdatedRows > 0n;
}

/**
 * A running experiment that no process holds (never claimed, or its owner's lease ran out), now
 * `owner`'s until `leaseMs` from now; the oldest first. Two processes never claim the same one.
 */
export async function claimExperiment(
  db: Kysely<RunsDatabase>,
  owner: string,
  leaseMs: number,
  except: string[],
): Promise<ExperimentRow | undefined> {
  const { rows } = await sql<ExperimentRow>`
    update runs.experiments set owner = ${owner},
      lease_until = now() + make_interval(secs => ${leaseMs / 1000}), updated_at = now()
    where id = (
      select id from runs.experiments
      where status = 'running' and (lease_until is null or lease_until < now())
        and not (id = any(${except}))
      order by created_at for update skip locked limit 1)
    returning *`.execute(db);
  return rows[0];
}

/**
 * Extends `owner`'s lease; answers whether a cancel was asked, or undefined when the experiment
 * is no longer `owner`'s (its lease ran out and another process claimed it, or it ended).
 */
export async function renewLease(
  db: Kysely<RunsDatabase>,
  id: string,
  owner: string,
  leaseMs: number,
): Promise<{ cancelRequested: boolean } | undefined> {
  const { rows } = await sql<{ cancel_requested: boolean }>`
    update runs.experiments set lease_until = now() + make_interval(secs => ${leaseMs / 1000})
    where id = ${id} and owner = ${owner} and status = 'running'
    returning cancel_requested`.execute(db);
  return rows[0] && { cancelRequested: rows[0].cancel_requested };
}

/** Lets another process claim the experiment at once (this one is stopping). */
export async function releaseLease(db: Kysely<RunsDatabase>, id: string, owner: string) {
  await db
    .updateTable(EXPERIMENTS)
    .set({ lease_until: null, owner: null })
    .where("id", "=", id)
    .where("owner", "=", owner)
    .execute();
}

/**
 * Marks up to `n` pending pairs running, in order, and answers them. The pairs are picked in a
 * CTE, read once: as a subquery of the update's WHERE, the planner may run the pick again for
 * each row it updates, and each run finds the next pending pairs (all of them, in the end).
 */
export async function takePending(
  db: Kysely<RunsDatabase>,
  id: string,
  n: number,
): Promise<PairRow[]> {
  const { rows } = await sql<PairRow>`
    with picked as (
      select position from runs.experiment_pairs
      where experiment_id = ${id} and status = 'pending'
      order by position limit ${n} for update skip locked)
    update runs.experiment_pairs p set status = 'running', attempts = p.attempts + 1,
      updated_at = now()
    from picked
    where p.experiment_id = ${id} and p.position = picked.position
    returning p.*`.execute(db);
  return rows.sort((a, b) => a.position - b.position);
}

/** The pairs a process left running (it died, or stopped before they ended). */
export function runningPairs(db: Kysely<RunsDatabase>, id: string): Promise<PairRow[]> {
  return db
    .selectFrom(PAIRS)
    .selectAll()
    .where("experiment_id", "=", id)
    .where("status", "=", "running")
    .orderBy("position")
    .execute();
}

/** Pairs put back to be replayed (their replay was cut off before it was recorded). */
export async function putBack(db: Kysely<RunsDatabase>, id: string, positions: number[]) {
  if (positions.length === 0) return;
  await db
    .updateTable(PAIRS)
    .set({ status: "pending", updated_at: new Date() })
    .where("experiment_id", "=", id)
    .where("position", "in", positions)
    .where("status", "=", "running")
    .execute();
}

/**
 * The runs of the experiment that replay this source run, newest first: what a process that died
 * (or a call cut) between a replay's start and its record in the pair leaves behind.
 */
export function replaysOf(
  db: Kysely<RunsDatabase>,
  projectId: string,
  experimentId: string,
  sourceRunId: string,
) {
  return db
    .selectFrom("runs.runs")
    .select(["id", "status", "result", "execution_time", "total_tokens", "cost_total"])
    .where("project_id", "=", projectId)
    .where("parent_id", "=", sourceRunId)
    .where("tags", "@>", sql<string[]>`array[${`experiment:${experimentId}`}]::text[]`)
    .orderBy("created_at", "desc")
    .execute();
}

/** Records a pair's replay, unless the pair is no longer running (another process has it). */
export async function finishPair(
  db: Kysely<RunsDatabase>,
  id: string,
  position: number,
  outcome: PairOutcome,
): Promise<void> {
  await db
    .updateTable(PAIRS)
    .set({
      ...outcome,
      candidate: JSON.stringify(outcome.candidate),
      diff: outcome.diff === null ? null : JSON.stringify(outcome.diff),
      error: outcome.error === null ? null : JSON.stringify(outcome.error),
      updated_at: new Date(),
    } as never)
    .where("experiment_id", "=", id)
    .where("position", "=", position)
    .where("status", "=", "running")
    .execute();
}

/** Ends the experiment: the pairs never started are cancelled with it. */
export async function endExperiment(
  db: Kysely<RunsDatabase>,
  id: string,
  owner: string,
  status: "completed" | "cancelled" | "failed",
  error?: string,
): Promise<void> {
  await db.transaction().execute(async (tx) => {
    const ended = await tx
      .updateTable(EXPERIMENTS)
      .set({
        status,
        error: error ?? null,
        ended_at: new Date(),
        updated_at: new Date(),
        owner: null,
        lease_until: null,
      })
      .where("id", "=", id)
      .where("owner", "=", owner)
      .where("status", "=", "running")
      .executeTakeFirst();
    if (ended.numUpdatedRows === 0n) return;
    await tx
      .updateTable(PAIRS)
      .set({ status: "cancelled", updated_at: new Date() })
      .where("experiment_id", "=", id)
      .where("status", "in", ["pending", "running"])
      .execute();
  });
}
