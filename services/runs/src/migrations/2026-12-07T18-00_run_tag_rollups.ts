import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

/**
 * A run's rollup keys, of the rows of `source`: one per level, its hour and its day of updated_at
 * (in UTC), with its status, model and whether it is top level; with `tags`, one per distinct tag
 * of the run, with its status and level (not its model). (As in 2026-11-25T00-00_run_rollups.)
 */
const keys = (source: string, weight: string, tags = false) => `
    select project_id, h.hours,
      (case when h.hours = 1 then date_trunc('hour', updated_at at time zone 'UTC')
            else date_trunc('day', updated_at at time zone 'UTC') end) at time zone 'UTC',
      ${tags ? "t.tag, status" : "status, model_id"}, parent_id is null, ${weight}
    from ${source} cross join (values (1::smallint), (24::smallint)) as h (hours)
    ${tags ? `cross join lateral (select distinct unnest(${source}.tags) as tag) as t` : ""}`;
const columns = "project_id, hours, bucket, status, model_id, top_level";
// Not by model: a tag and a model of 800 characters each (PIES_MAX_NAME_LENGTH) would not fit in
// a key of the index (2,704 bytes); a search with a model filter counts its tags over the runs.
const tagColumns = "project_id, hours, bucket, tag, status, top_level";
/** Adds each key's count, in key order (two writers lock the rows they share in the same order). */
const upsert = (table: string, cols: string, rows: string) => {
  const order = cols
    .split(", ")
    .map((_, i) => i + 1)
    .join(", ");
  return `
    insert into runs.${table} as r (${cols}, n)
    select * from (${rows}) as d order by ${order}
    on conflict (${cols}) do update set n = r.n + excluded.n`;
};
/** Both rollups' upserts of the keys of `source`'s rows, each weighing `weight`. */
const both = (source: string, weight: string) => `
      ${upsert("run_rollups", columns, `${keys(source, weight)} group by 1, 2, 3, 4, 5, 6`)};
      ${upsert("run_tag_rollups", tagColumns, `${keys(source, weight, true)} group by 1, 2, 3, 4, 5, 6`)}`;
/** Both rollups' upserts of what an update moved: its new rows' keys less its old rows'. */
const moved = (table: string, cols: string, tags: boolean) => {
  const n = cols.split(", ").length;
  const group = Array.from({ length: n }, (_, i) => i + 1).join(", ");
  const names = Array.from({ length: n }, (_, i) => `k${i}`);
  return upsert(
    table,
    cols,
    `select ${names.join(", ")}, sum(d) from (
      ${keys("new_runs", "1", tags)}
      union all
      ${keys("old_runs", "-1", tags)}
    ) as c (${names.join(", ")}, d)
    group by ${group} having sum(d) <> 0`,
  );
};

/** A run's rollup key at the hour (the day follows from it), with its tags, of `source`'s rows. */
const hourKey = (source: string, tags: boolean) => `
    select project_id, date_trunc('hour', updated_at at time zone 'UTC'), status, model_id,
      parent_id is null${tags ? ", tags" : ""}
    from ${source}`;

/** The rollups' trigger function: with the tags' rollup (`tags`) or without it (as before). */
const apply = (tags: boolean) => `
create or replace function runs.run_rollups_apply() returns trigger language plpgsql as $$
begin
  -- One lock for every change of the rollups, held to the end of the transaction (see
  -- 2026-11-25T00-00_run_rollups); only a statement that moves a run to or from a key takes it.
  if tg_op = 'INSERT' then
    if exists (select 1 from new_runs) then
      perform pg_advisory_xact_lock(hashtext('runs.run_rollups'));
      ${tags ? both("new_runs", "count(*)") : upsert("run_rollups", columns, `${keys("new_runs", "count(*)")} group by 1, 2, 3, 4, 5, 6`)};
    end if;
  elsif tg_op = 'DELETE' then
    if exists (select 1 from old_runs) then
      perform pg_advisory_xact_lock(hashtext('runs.run_rollups'));
      ${tags ? both("old_runs", "-count(*)") : upsert("run_rollups", columns, `${keys("old_runs", "-count(*)")} group by 1, 2, 3, 4, 5, 6`)};
    end if;
  elsif exists (${hourKey("new_runs", tags)}
    except all${hourKey("old_runs", tags)}) then
    perform pg_advisory_xact_lock(hashtext('runs.run_rollups'));
    ${moved("run_rollups", columns, false)};
    ${tags ? `${moved("run_tag_rollups", tagColumns, true)};` : ""}
  end if;
  return null;
end $$`;

export async function up(db: Kysely<any>): Promise<void> {
  // Runs counted by tag, as runs.run_rollups counts them by status and model (its key but the
  // model, and a tag): a project's tags facet adds up rows of this table instead of reading every run's tags,
  // which grows with the project (a run with a tag twice counts once, as the facet counts it).
  await sql`create table runs.run_tag_rollups (
    project_id text not null,
    hours smallint not null,
    bucket timestamptz not null,
    tag text not null,
    status text not null,
    top_level boolean not null,
    n bigint not null,
    primary key (project_id, hours, bucket, tag, status, top_level)
  )`.execute(db);
  // The runs there already, counted under a lock that holds the record writer back until this
  // transaction ends (its records wait in the record log, none lost), so that no run is counted
  // twice or missed; the function is in force for every write after.
  await sql`lock table runs.runs in share row exclusive mode`.execute(db);
  await sql.raw(apply(true)).execute(db);
  await sql
    .raw(
      `insert into runs.run_tag_rollups (${tagColumns}, n)
       ${keys("runs.runs", "count(*)", true)} group by 1, 2, 3, 4, 5, 6`,
    )
    .execute(db);
  await sql`analyze runs.run_tag_rollups`.execute(db);
  // The truncate trigger empties both.
  await sql`create or replace function runs.run_rollups_truncate() returns trigger language plpgsql as $$
begin
  truncate runs.run_rollups, runs.run_tag_rollups;
  return null;
end $$`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql.raw(apply(false)).execute(db);
  await sql`create or replace function runs.run_rollups_truncate() returns trigger language plpgsql as $$
begin
  truncate runs.run_rollups;
  return null;
end $$`.execute(db);
  await sql`drop table runs.run_tag_rollups`.execute(db);
}
