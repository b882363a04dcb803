import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

/**
 * A run's rollup keys, of the rows of `source` (a transition table): one per level, its hour and
 * its day of updated_at (in UTC), with its status, model and whether it is top level. (As in
 * 2026-11-25T00-00_run_rollups.)
 */
const keys = (source: string, weight: string) => `
    select project_id, h.hours,
      (case when h.hours = 1 then date_trunc('hour', updated_at at time zone 'UTC')
            else date_trunc('day', updated_at at time zone 'UTC') end) at time zone 'UTC',
      status, model_id, parent_id is null, ${weight}
    from ${source} cross join (values (1::smallint), (24::smallint)) as h (hours)`;
const columns = "project_id, hours, bucket, status, model_id, top_level";
const upsert = (rows: string) => `
    insert into runs.run_rollups as r (${columns}, n)
    select * from (${rows}) as d order by 1, 2, 3, 4, 5, 6
    on conflict (${columns}) do update set n = r.n + excluded.n`;

/** The rollup's trigger function, an update changing the rollup when `moves` is true. */
const apply = (moves: string) => `
create or replace function runs.run_rollups_apply() returns trigger language plpgsql as $$
begin
  -- One lock for every change of the rollup, held to the end of the transaction (see
  -- 2026-11-25T00-00_run_rollups); only a statement that moves a run to or from a key takes it.
  if tg_op = 'INSERT' then
    if exists (select 1 from new_runs) then
      perform pg_advisory_xact_lock(hashtext('runs.run_rollups'));
      ${upsert(`${keys("new_runs", "count(*)")} group by 1, 2, 3, 4, 5, 6`)};
    end if;
  elsif tg_op = 'DELETE' then
    if exists (select 1 from old_runs) then
      perform pg_advisory_xact_lock(hashtext('runs.run_rollups'));
      ${upsert(`${keys("old_runs", "-count(*)")} group by 1, 2, 3, 4, 5, 6`)};
    end if;
  elsif ${moves} then
    perform pg_advisory_xact_lock(hashtext('runs.run_rollups'));
    ${upsert(`select p, h, b, s, m, t, sum(d) from (
      ${keys("new_runs", "1")}
      union all
      ${keys("old_runs", "-1")}
    ) as c (p, h, b, s, m, t, d)
    group by 1, 2, 3, 4, 5, 6 having sum(d) <> 0`)};
  end if;
  return null;
end $$`;

/** A run's rollup key at the hour (the day follows from it), of the rows of `source`. */
const hourKey = (source: string) => `
    select project_id, date_trunc('hour', updated_at at time zone 'UTC'), status, model_id,
      parent_id is null
    from ${source}`;

export async function up(db: Kysely<any>): Promise<void> {
  // An update changes the rollup only if it changes the keys of its runs: their project, hour of
  // updated_at (the day follows from the hour), status, model or level. Compared on updated_at
  // itself, every later record of a run (each one sets updated_at) took the rollup's one lock and
  // ran its upsert, though one in the same hour and status moves no count. The keys are compared
  // as multisets (an update has as many new rows as old, so the new ones less the old ones, each
  // as often as it occurs, is empty exactly when nothing moves): one pass over each side, where
  // comparing each run's old and new row joined on its id had the planner loop over every pair of
  // a batch (no statistics on transition tables), which cost more than the lock it saved.
  await sql
    .raw(apply(`exists (${hourKey("new_runs")}\n    except all${hourKey("old_runs")})`))
    .execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql
    .raw(
      apply(`exists (
    select 1 from new_runs n join old_runs o on o.id = n.id
    where (n.project_id, n.updated_at, n.status, n.model_id, n.parent_id is null)
      is distinct from (o.project_id, o.updated_at, o.status, o.model_id, o.parent_id is null)
  )`),
    )
    .execute(db);
}
