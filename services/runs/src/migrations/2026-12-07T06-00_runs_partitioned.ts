import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.
//
// runs.runs becomes a table range-partitioned by `id` (docs/decisions/0064-runs-partitioned-by-id.md):
// a run's id starts with its creation time (12 hex digits of milliseconds), so a range of ids is a
// range of creation times, and a lookup or upsert by id reads one partition. The table as it was
// becomes the partition `runs.runs_legacy` (every id below the cutover) without being copied; the
// runs service makes the daily partitions after it, and `runs.runs_default` takes an id of no
// partition (not made by pies' id scheme, or before every partition). An empty table (a new
// database) is dropped instead of kept as a partition. Locks: the rename and the attach are catalog changes;
// the attach reads no row when the table carries a validated `runs_legacy_bound` constraint (the
// service adds and validates it, online, before migrating: partitions.ts boundLegacyRuns). Without
// one (a new database, PGlite, a service that could not add it) the bound is checked here, in the
// migration's lock: a scan of the table, instant when it is small.

/** The 12 hex digits of a time in ms, as a run id starts with it (ids.ts newId). */
const idPrefix = (ms: number) => ms.toString(16).padStart(12, "0");

const LEGACY_BOUND = "runs_legacy_bound";

/** The rollups' triggers on runs.runs (2026-11-25T00-00_run_rollups), on the table as it is. */
async function createRollupTriggers(db: Kysely<any>) {
  await sql`create trigger run_rollups_insert after insert on runs.runs
    referencing new table as new_runs
    for each statement execute function runs.run_rollups_apply()`.execute(db);
  await sql`create trigger run_rollups_update after update on runs.runs
    referencing old table as old_runs new table as new_runs
    for each statement execute function runs.run_rollups_apply()`.execute(db);
  await sql`create trigger run_rollups_delete after delete on runs.runs
    referencing old table as old_runs
    for each statement execute function runs.run_rollups_apply()`.execute(db);
  await sql`create trigger run_rollups_truncate after truncate on runs.runs
    for each statement execute function runs.run_rollups_truncate()`.execute(db);
}

export async function up(db: Kysely<any>): Promise<void> {
  const bound = await sql<{ def: string; valid: boolean }>`
    select pg_get_constraintdef(c.oid) as def, c.convalidated as valid from pg_constraint c
    where c.conrelid = 'runs.runs'::regclass and c.conname = ${LEGACY_BOUND}`.execute(db);
  const prepared = bound.rows[0];
  const checked = prepared?.valid ? /'([0-9a-f]{12})'/.exec(prepared.def)?.[1] : undefined;
  if (prepared && !checked)
    await sql.raw(`alter table runs.runs drop constraint ${LEGACY_BOUND}`).execute(db);
  // Without a validated bound: today's start (UTC), today's runs moved to their partition later.
  const day = 86_400_000;
  const cutover = checked ?? idPrefix(Math.floor(Date.now() / day) * day);

  // The table's indexes as they are (valid ones), to make each again on the new table by the same
  // definition: PostgreSQL then takes the legacy partition's own index for it instead of building.
  const indexes = await sql<{ name: string; def: string; primary: boolean }>`
    select c.relname as name, pg_get_indexdef(i.indexrelid) as def, i.indisprimary as primary
    from pg_index i join pg_class c on c.oid = i.indexrelid
    where i.indrelid = 'runs.runs'::regclass and i.indisvalid`.execute(db);
  const invalid = await sql<{ name: string }>`
    select c.relname as name from pg_index i join pg_class c on c.oid = i.indexrelid
    where i.indrelid = 'runs.runs'::regclass and not i.indisvalid`.execute(db);
  for (const { name } of invalid.rows) await sql.raw(`drop index runs."${name}"`).execute(db);

  await sql`alter table runs.runs rename to runs_legacy`.execute(db);
  // Named as the partitions' are: after the partition and the index of runs.runs they belong to.
  for (const { name } of indexes.rows) {
    await sql
      .raw(`alter index runs."${name}" rename to "${`runs_legacy_${name}`.slice(0, 63)}"`)
      .execute(db);
  }
  // The rollup's triggers move to the partitioned table: a statement there fires them with the
  // rows of every partition it touched.
  for (const t of ["insert", "update", "delete", "truncate"]) {
    await sql.raw(`drop trigger run_rollups_${t} on runs.runs_legacy`).execute(db);
  }

  await sql`create table runs.runs (like runs.runs_legacy including defaults)
    partition by range (id)`.execute(db);
  await sql`create table runs.runs_default partition of runs.runs default`.execute(db);
  // A table without runs (a new database) is not kept as a partition: the service makes them all.
  const empty =
    !checked && !(await sql`select 1 from runs.runs_legacy limit 1`.execute(db)).rows.length;
  if (empty) await sql`drop table runs.runs_legacy`.execute(db);
  else if (!checked) {
    // Rows at or past the cutover (today's runs, ids of no time) wait in the default partition.
    // One statement each: PGlite's queries take one.
    for (const statement of [
      `insert into runs.runs_default select * from runs.runs_legacy where id >= '${cutover}'`,
      `delete from runs.runs_legacy where id >= '${cutover}'`,
      `alter table runs.runs_legacy add constraint ${LEGACY_BOUND} check (id < '${cutover}')`,
    ]) {
      await sql.raw(statement).execute(db);
    }
  }
  if (!empty) {
    await sql
      .raw(
        `alter table runs.runs attach partition runs.runs_legacy
         for values from (minvalue) to ('${cutover}')`,
      )
      .execute(db);
  }

  await sql`alter table runs.runs add constraint runs_pkey primary key (id)`.execute(db);
  for (const { def, primary } of indexes.rows) if (!primary) await sql.raw(def).execute(db);

  // The default partition's indexes, which PostgreSQL named after their columns.
  const made = await sql<{ child: string; parent: string }>`
    select ci.relname as child, pi.relname as parent from pg_inherits inh
    join pg_class ci on ci.oid = inh.inhrelid join pg_class pi on pi.oid = inh.inhparent
    join pg_index x on x.indexrelid = ci.oid
    where x.indrelid = 'runs.runs_default'::regclass`.execute(db);
  for (const { child, parent } of made.rows) {
    await sql
      .raw(`alter index runs."${child}" rename to "${`runs_default_${parent}`.slice(0, 63)}"`)
      .execute(db);
  }

  await createRollupTriggers(db);

  // Deleted runs (DELETE /runs/:id, POST /runs/delete): the record writer writes no record of one,
  // so a late record does not bring it back. Kept until the retention drops the ids they name.
  await sql`create table runs.deleted_runs (
    id text primary key,
    deleted_at timestamptz not null default now()
  )`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  // Back to one table: every partition's rows copied into a plain table (a scan and a write of
  // all of them, under lock: for a database of a few runs, as tests make).
  await sql`drop table runs.deleted_runs`.execute(db);
  await sql`create table runs.runs_flat (like runs.runs including defaults)`.execute(db);
  await sql`insert into runs.runs_flat select * from runs.runs`.execute(db);
  const indexes = await sql<{ name: string; def: string; primary: boolean }>`
    select c.relname as name, pg_get_indexdef(i.indexrelid) as def, i.indisprimary as primary
    from pg_index i join pg_class c on c.oid = i.indexrelid
    where i.indrelid = 'runs.runs'::regclass`.execute(db);
  await sql`drop table runs.runs`.execute(db);
  await sql`alter table runs.runs_flat rename to runs`.execute(db);
  await sql`alter table runs.runs add constraint runs_pkey primary key (id)`.execute(db);
  for (const { def, primary } of indexes.rows) if (!primary) await sql.raw(def).execute(db);
  await createRollupTriggers(db);
  await sql`
    alter table runs.runs set (
      autovacuum_vacuum_cost_delay = 20,
      autovacuum_analyze_scale_factor = 0,
      autovacuum_analyze_threshold = 50000
    )
  `.execute(db);
}
