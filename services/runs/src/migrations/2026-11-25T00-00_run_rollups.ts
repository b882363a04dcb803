import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

/**
 * A run's rollup keys, of the rows of `source` (a transition table or runs.runs): one per level,
 * its hour and its day of updated_at (in UTC), with its status, model and whether it is top level.
 */
const keys = (source: string, weight: string) => `
    select project_id, h.hours,
      (case when h.hours = 1 then date_trunc('hour', updated_at at time zone 'UTC')
            else date_trunc('day', updated_at at time zone 'UTC') end) at time zone 'UTC',
      status, model_id, parent_id is null, ${weight}
    from ${source} cross join (values (1::smallint), (24::smallint)) as h (hours)`;
const columns = "project_id, hours, bucket, status, model_id, top_level";
/** Adds each key's count, in key order (two writers lock the rows they share in the same order). */
const upsert = (rows: string) => `
    insert into runs.run_rollups as r (${columns}, n)
    select * from (${rows}) as d order by 1, 2, 3, 4, 5, 6
    on conflict (${columns}) do update set n = r.n + excluded.n`;

export async function up(db: Kysely<any>): Promise<void> {
  // Runs counted by project, hour and day of updated_at, and the columns that facets and filters
  // use (status, model, top level or child), so that a project's facets over these add up rows of
  // this table instead of counting every run: the days a search covers whole, the hours of the days
  // a bound or boundary cuts, and the runs of the hours it cuts (runs.runs). The key is small on
  // purpose: each column added multiplies the rows per bucket. A count may be 0 (its runs moved
  // on): kept, as the next run of that key would insert it again; readers leave such rows out.
  await sql`create table runs.run_rollups (
    project_id text not null,
    hours smallint not null,
    bucket timestamptz not null,
    status text not null,
    model_id text not null,
    top_level boolean not null,
    n bigint not null,
    primary key (project_id, hours, bucket, status, model_id, top_level)
  )`.execute(db);
  // Kept exact by statement-level triggers, in the transaction of every change to runs.runs:
  // each statement's rows (a record writer's batch, a seeder's 50,000) counted by key once, the
  // old rows subtracted and the new added. An update that moves no run to another key (a
  // heartbeat) writes nothing. (A trigger with transition tables cannot name its columns.)
  await sql
    .raw(
      `create function runs.run_rollups_apply() returns trigger language plpgsql as $$
begin
  -- One lock for every change of the rollup, held to the end of the transaction: the record
  -- writer's upsert fires two triggers (its updates', then its inserts'), each upserting its keys
  -- in order, but not one order across both, so two writers crossed (one waiting on a key the
  -- other held from its first trigger) and deadlocked. Writers of the current hour share its
  -- rows anyway, and a writer's transaction is its one statement.
  -- Only a statement that moves a run to or from a key takes it: an upsert of no new run fires
  -- the insert trigger with none, a heartbeat the update trigger with no key changed.
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
  elsif exists (
    select 1 from new_runs n join old_runs o on o.id = n.id
    where (n.project_id, n.updated_at, n.status, n.model_id, n.parent_id is null)
      is distinct from (o.project_id, o.updated_at, o.status, o.model_id, o.parent_id is null)
  ) then
    perform pg_advisory_xact_lock(hashtext('runs.run_rollups'));
    ${upsert(`select p, h, b, s, m, t, sum(d) from (
      ${keys("new_runs", "1")}
      union all
      ${keys("old_runs", "-1")}
    ) as c (p, h, b, s, m, t, d)
    group by 1, 2, 3, 4, 5, 6 having sum(d) <> 0`)};
  end if;
  return null;
end $$`,
    )
    .execute(db);
  await sql`create trigger run_rollups_insert after insert on runs.runs
    referencing new table as new_runs
    for each statement execute function runs.run_rollups_apply()`.execute(db);
  await sql`create trigger run_rollups_update after update on runs.runs
    referencing old table as old_runs new table as new_runs
    for each statement execute function runs.run_rollups_apply()`.execute(db);
  await sql`create trigger run_rollups_delete after delete on runs.runs
    referencing old table as old_runs
    for each statement execute function runs.run_rollups_apply()`.execute(db);
  await sql`create function runs.run_rollups_truncate() returns trigger language plpgsql as $$
begin
  truncate runs.run_rollups;
  return null;
end $$`.execute(db);
  await sql`create trigger run_rollups_truncate after truncate on runs.runs
    for each statement execute function runs.run_rollups_truncate()`.execute(db);
  // The runs there already, counted after the triggers exist: creating them locks out writers
  // until this transaction ends, so no run is counted twice or missed.
  await sql
    .raw(
      `insert into runs.run_rollups (${columns}, n)
       ${keys("runs.runs", "count(*)")} group by 1, 2, 3, 4, 5, 6`,
    )
    .execute(db);
  // Its statistics from the start: without them the planner took the hours of a search's cut
  // days for a handful of rows and read every hour of the project instead of looking them up.
  await sql`analyze runs.run_rollups`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop trigger run_rollups_insert on runs.runs`.execute(db);
  await sql`drop trigger run_rollups_update on runs.runs`.execute(db);
  await sql`drop trigger run_rollups_delete on runs.runs`.execute(db);
  await sql`drop trigger run_rollups_truncate on runs.runs`.execute(db);
  await sql`drop function runs.run_rollups_apply()`.execute(db);
  await sql`drop function runs.run_rollups_truncate()`.execute(db);
  await sql`drop table runs.run_rollups`.execute(db);
}
