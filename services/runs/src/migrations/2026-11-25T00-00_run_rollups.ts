import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

/** A run's rollup key, of a transition table's row (its hour of updated_at, in UTC). */
const key = `project_id, date_trunc('hour', updated_at at time zone 'UTC') at time zone 'UTC',
    status, model_id, parent_id is null`;

export async function up(db: Kysely<any>): Promise<void> {
  // Runs counted by project, hour of updated_at and the columns that facets and filters use
  // (status, model, top level or child), so that a project's facets over these count the rows of
  // this table instead of every run. The key is small on purpose: each column added multiplies
  // the rows per hour. A count may be 0 (its runs moved on): kept, as the next run of that key
  // would insert it again; readers leave such rows out.
  await sql`create table runs.run_rollups (
    project_id text not null,
    bucket timestamptz not null,
    status text not null,
    model_id text not null,
    top_level boolean not null,
    n bigint not null,
    primary key (project_id, bucket, status, model_id, top_level)
  )`.execute(db);
  // Kept exact by statement-level triggers, in the transaction of every change to runs.runs:
  // each statement's rows (a record writer's batch, a seeder's 50,000) counted by key once, the
  // old rows subtracted and the new added, upserted in key order (two writers lock the rows they
  // share in the same order). An update that moves no run to another key (a heartbeat) nets to
  // nothing and writes nothing.
  await sql
    .raw(
      `create function runs.run_rollups_apply() returns trigger language plpgsql as $$
begin
  if tg_op = 'INSERT' then
    insert into runs.run_rollups as r (project_id, bucket, status, model_id, top_level, n)
    select ${key}, count(*) from new_runs group by 1, 2, 3, 4, 5 order by 1, 2, 3, 4, 5
    on conflict (project_id, bucket, status, model_id, top_level) do update set n = r.n + excluded.n;
  elsif tg_op = 'DELETE' then
    insert into runs.run_rollups as r (project_id, bucket, status, model_id, top_level, n)
    select ${key}, -count(*) from old_runs group by 1, 2, 3, 4, 5 order by 1, 2, 3, 4, 5
    on conflict (project_id, bucket, status, model_id, top_level) do update set n = r.n + excluded.n;
  else
    insert into runs.run_rollups as r (project_id, bucket, status, model_id, top_level, n)
    select p, b, s, m, t, sum(d) from (
      select ${key}, 1 from new_runs
      union all
      select ${key}, -1 from old_runs
    ) as c (p, b, s, m, t, d)
    group by 1, 2, 3, 4, 5 having sum(d) <> 0 order by 1, 2, 3, 4, 5
    on conflict (project_id, bucket, status, model_id, top_level) do update set n = r.n + excluded.n;
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
      `insert into runs.run_rollups (project_id, bucket, status, model_id, top_level, n)
       select ${key}, count(*) from runs.runs group by 1, 2, 3, 4, 5`,
    )
    .execute(db);
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
