import { sql, type Kysely } from "kysely";
import type { Logger } from "@pies/common";
import type { RunsDatabase } from "./tables.js";

// runs.runs is range-partitioned by id, one partition a period of creation time (a week by
// default, or a day: PIES_RUN_PARTITION_DAYS, UTC): a run's id starts with 12 hex digits of its
// creation time in ms (ids.ts newId). See docs/decisions/0064-runs-partitioned-by-id.md and
// 0071-runs-partitions-a-week-wide.md.

export const DAY_MS = 86_400_000;

/** The 12 hex digits a run id made at `ms` starts with: every id made later sorts after it. */
export const idPrefix = (ms: number) => Math.max(0, Math.floor(ms)).toString(16).padStart(12, "0");

/** Whether an id was made by pies' scheme (its start is a time): others sort after every time. */
export const isTimeId = (id: string) => /^[0-9a-f]{12}/.test(id);

/** The start of the UTC day that holds `ms`. */
export const dayOf = (ms: number) => Math.floor(ms / DAY_MS) * DAY_MS;

/** A partition's width in days when the deployment does not set one (PIES_RUN_PARTITION_DAYS). */
export const DEFAULT_PARTITION_DAYS = 7;

/** Periods start on a Monday (1970-01-05, UTC), so a week-wide partition is a calendar week. */
const PERIOD_EPOCH_MS = 4 * DAY_MS;

/** The start of the period `days` wide that holds `ms`. */
export const periodOf = (ms: number, days: number) =>
  Math.floor((ms - PERIOD_EPOCH_MS) / (days * DAY_MS)) * days * DAY_MS + PERIOD_EPOCH_MS;

/** A partition's name: runs_pYYYYMMDD for the day it starts. */
export const partitionName = (dayMs: number) =>
  `runs_p${new Date(dayMs).toISOString().slice(0, 10).replaceAll("-", "")}`;

/** A partition of runs.runs: the ids it holds, [from, to); null for MINVALUE / MAXVALUE. */
export interface Partition {
  name: string;
  from: string | null;
  to: string | null;
  isDefault: boolean;
}

/** The partitions of runs.runs, the range ones in order of their ids. */
export async function listPartitions(db: Kysely<any>): Promise<Partition[]> {
  const { rows } = await sql<{ name: string; bound: string }>`
    select c.relname as name, pg_get_expr(c.relpartbound, c.oid) as bound
    from pg_inherits i join pg_class c on c.oid = i.inhrelid
    where i.inhparent = 'runs.runs'::regclass`.execute(db);
  const value = (v: string | undefined) => (v === undefined || /VALUE$/.test(v) ? null : v);
  return rows
    .map(({ name, bound }) => {
      // FOR VALUES FROM ('…') TO ('…'), MINVALUE / MAXVALUE unquoted; or DEFAULT.
      const m = /FROM \((?:'([^']*)'|(\w+))\) TO \((?:'([^']*)'|(\w+))\)/.exec(bound);
      return {
        name,
        from: m ? value(m[1] ?? m[2]) : null,
        to: m ? value(m[3] ?? m[4]) : null,
        isDefault: bound === "DEFAULT",
      };
    })
    .sort(
      (a, b) =>
        Number(a.isDefault) - Number(b.isDefault) ||
        ((a.from ?? "") < (b.from ?? "") ? -1 : (a.from ?? "") > (b.from ?? "") ? 1 : 0),
    );
}

/**
 * Whether runs.runs is still one table (before the migration that partitions it), with its rows.
 */
async function plainRunsTable(db: Kysely<any>): Promise<boolean> {
  const { rows } = await sql<{ kind: string }>`
    select c.relkind as kind from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'runs' and c.relname = 'runs'`.execute(db);
  return rows[0]?.kind === "r";
}

/** The constraint the partitioning migration reads (2026-12-07T06-00_runs_partitioned). */
const LEGACY_BOUND = "runs_legacy_bound";
/** How far ahead the legacy partition's bound lies: writers of the old version go on below it. */
const LEGACY_BOUND_DAYS = 7;

/**
 * Before the migration that partitions runs.runs: bounds the table's ids with a validated CHECK
 * constraint, online (adding it NOT VALID is a brief lock; validating reads the table without
 * blocking writers), so that the migration attaches the table as a partition without reading it
 * under its lock. The bound lies a week ahead: runs of that week still go to the legacy partition,
 * and replicas of the old version keep writing meanwhile. Nothing to do on a new database or once
 * partitioned. Ids of no time (sorting after every time) fail the validation: the constraint is
 * dropped and the migration checks the bound itself. `abandon` undoes it if the migration fails.
 */
export async function boundLegacyRuns(db: Kysely<any>, logger?: Logger, now = Date.now()) {
  // Dropping it waits 5 s at most for the table: a queued ACCESS EXCLUSIVE would stall everyone.
  const drop = (conn: Kysely<any>) =>
    conn.transaction().execute(async (tx) => {
      await sql`set local lock_timeout = '5s'`.execute(tx);
      if (await plainRunsTable(tx)) {
        await sql
          .raw(`alter table runs.runs drop constraint if exists ${LEGACY_BOUND}`)
          .execute(tx);
      }
    });
  const abandon = () => drop(db);
  if (!(await plainRunsTable(db))) return { abandon };
  // One replica bounds it; the others wait for it here, then find it bounded.
  await db.connection().execute(async (conn) => {
    await sql`select pg_advisory_lock(hashtext('runs.legacy-bound'))`.execute(conn);
    try {
      await boundOn(conn, drop, logger, now);
    } finally {
      await sql`select pg_advisory_unlock(hashtext('runs.legacy-bound'))`.execute(conn);
    }
  });
  return { abandon };
}

/** boundLegacyRuns's work, on one connection that holds its advisory lock. */
async function boundOn(
  conn: Kysely<any>,
  drop: (conn: Kysely<any>) => Promise<void>,
  logger: Logger | undefined,
  now: number,
) {
  if (!(await plainRunsTable(conn))) return;
  const { rows } = await sql<{ def: string; valid: boolean }>`
    select pg_get_constraintdef(c.oid) as def, c.convalidated as valid from pg_constraint c
    where c.conrelid = 'runs.runs'::regclass and c.conname = ${LEGACY_BOUND}`.execute(conn);
  const existing = rows[0];
  const bound = existing && /'([0-9a-f]{12})'/.exec(existing.def)?.[1];
  // A bound left by an earlier start is kept while it lies a day ahead or more.
  if (existing?.valid && bound && bound >= idPrefix(now + DAY_MS)) return;
  if (existing) await drop(conn);
  const cutover = idPrefix(dayOf(now) + LEGACY_BOUND_DAYS * DAY_MS);
  await sql`set lock_timeout = '5s'`.execute(conn);
  try {
    await sql
      .raw(
        `alter table runs.runs add constraint ${LEGACY_BOUND} check (id < '${cutover}') not valid`,
      )
      .execute(conn);
    await sql`set lock_timeout = 0`.execute(conn);
    await sql`set statement_timeout = 0`.execute(conn);
    const started = performance.now();
    await sql.raw(`alter table runs.runs validate constraint ${LEGACY_BOUND}`).execute(conn);
    logger?.info(
      { ms: Math.round(performance.now() - started), cutover },
      "runs.runs bounded for its partitioning",
    );
  } catch (err) {
    logger?.warn(
      { err },
      "runs.runs could not be bounded online: the partitioning migration checks it under its lock",
    );
    await drop(conn).catch(() => undefined);
  } finally {
    await sql`reset lock_timeout`.execute(conn);
    await sql`reset statement_timeout`.execute(conn);
  }
}

/** The days after today whose partitions are made ahead. */
export const PARTITION_DAYS_AHEAD = 3;

/**
 * Autovacuum of each partition, paced and regular (docs/decisions/0057-runs-autovacuum-paced.md):
 * set per partition, as a partitioned table has no storage of its own.
 */
const PARTITION_STORAGE = `with (
  autovacuum_vacuum_cost_delay = 20,
  autovacuum_analyze_scale_factor = 0,
  autovacuum_analyze_threshold = 50000)`;

/**
 * Makes the partitions, `days` wide (periods from a Monday), from the one that holds today (or
 * `from`) to the one that starts `daysAhead` days ahead; where partitions made before cover part
 * of a period (the legacy partition's last days, partitions of another width), its gaps only,
 * but none the retention would drop at once (`retentionDays`).
 * Each is made as a table of its own and attached, in a transaction of its own, which locks
 * runs.runs in SHARE UPDATE EXCLUSIVE mode only (reads and writes go on; CREATE TABLE … PARTITION
 * OF would lock them out), with the runs of its range moved out of the default partition first
 * (ids made by a clock ahead). Several replicas may make them at once: one does, under an
 * advisory lock, the others find them made.
 */
export async function makePartitions(
  db: Kysely<any>,
  options: {
    now?: number;
    from?: number;
    daysAhead?: number;
    /** A partition's width in days (DEFAULT_PARTITION_DAYS). */
    days?: number;
    /** The retention (PIES_RUN_RETENTION_DAYS; 0 or none: every run kept). */
    retentionDays?: number;
    logger?: Logger;
  } = {},
): Promise<string[]> {
  const now = options.now ?? Date.now();
  const days = options.days ?? DEFAULT_PARTITION_DAYS;
  const width = days * DAY_MS;
  const last = dayOf(now) + (options.daysAhead ?? PARTITION_DAYS_AHEAD) * DAY_MS;
  const dropped = droppedBelow(now, options.retentionDays ?? 0);
  const made: string[] = [];
  for (let period = periodOf(options.from ?? now, days); period <= last; period += width) {
    const from = idPrefix(period);
    const to = idPrefix(period + width);
    for (;;) {
      let name = "";
      const done = await db
        .transaction()
        .execute(async (tx) => {
          await sql`set local lock_timeout = '5s'`.execute(tx);
          await sql`select pg_advisory_xact_lock(hashtext('runs.partitions'))`.execute(tx);
          const partitions = await listPartitions(tx);
          const gap = gapsIn(partitions, from, to).find((g) => dropped === null || g.to > dropped);
          if (!gap) return true;
          name = partitionName(dayOf(parseInt(gap.from, 16)));
          await makePartition(tx, name, gap, partitions.find((p) => p.isDefault)?.name);
          return false;
        })
        .catch((err: unknown) => {
          // The default partition is locked while a partition is attached (ATTACH reads it): a
          // busy one leaves the period to the next pass (its runs wait in the default partition).
          if ((err as { code?: string }).code !== "55P03") throw err;
          options.logger?.warn(
            { partition: name || partitionName(period) },
            "runs partition not made yet: its table was busy",
          );
          return true;
        });
      if (done) break;
      made.push(name);
      options.logger?.info({ partition: name }, "runs partition made");
    }
  }
  return made;
}

/**
 * The id below which the retention drops partitions whole (applyRetention): an hour under its
 * floor, so that no record the writer let through under a clock a little behind lands in one
 * being dropped. Null when every run is kept (0 days).
 */
export function droppedBelow(now: number, retentionDays: number): string | null {
  return retentionDays > 0 ? idPrefix(now - retentionDays * DAY_MS - 3_600_000) : null;
}

/**
 * The ranges of [from, to) no partition covers: the whole period, or what partitions made before
 * left of it (the legacy partition's last days, partitions of another width, one skipped as busy
 * before the width changed), each from where the one before ends to where the next begins.
 */
export function gapsIn(
  partitions: Partition[],
  from: string,
  to: string,
): { from: string; to: string }[] {
  const covering = partitions
    .filter(
      (p) => !p.isDefault && (p.to === null || p.to > from) && (p.from === null || p.from < to),
    )
    .sort((a, b) => ((a.from ?? "") < (b.from ?? "") ? -1 : 1));
  const gaps: { from: string; to: string }[] = [];
  let cursor = from;
  for (const p of covering) {
    if (p.from !== null && p.from > cursor) gaps.push({ from: cursor, to: p.from });
    if (p.to === null) return gaps;
    if (p.to > cursor) cursor = p.to;
  }
  if (cursor < to) gaps.push({ from: cursor, to });
  return gaps;
}

/**
 * Makes the partition of one range (named for the day it starts), with the runs of that range
 * moved out of the default partition first (ids made by a clock ahead).
 */
async function makePartition(
  tx: Kysely<any>,
  name: string,
  range: { from: string; to: string },
  fallback: string | undefined,
): Promise<void> {
  await sql
    .raw(`create table runs."${name}" (like runs.runs including defaults) ${PARTITION_STORAGE}`)
    .execute(tx);
  if (fallback) {
    await sql
      .raw(
        `with moved as (delete from runs."${fallback}" where id >= '${range.from}' and id < '${range.to}' returning *)
         insert into runs."${name}" select * from moved`,
      )
      .execute(tx);
  }
  await sql
    .raw(
      `alter table runs.runs attach partition runs."${name}" for values from ('${range.from}') to ('${range.to}')`,
    )
    .execute(tx);
  await nameIndexesAfterParents(tx, name);
}

/**
 * Names a partition's indexes `<partition>_<index of runs.runs>` (PostgreSQL names the ones it
 * makes at the attach after their columns): a plan then names the index of runs.runs it used.
 */
export async function nameIndexesAfterParents(db: Kysely<any>, partition: string) {
  const { rows } = await sql<{ child: string; parent: string }>`
    select ci.relname as child, pi.relname as parent
    from pg_inherits inh
    join pg_class ci on ci.oid = inh.inhrelid
    join pg_class pi on pi.oid = inh.inhparent
    join pg_index x on x.indexrelid = ci.oid
    where x.indrelid = to_regclass(${`runs."${partition}"`}) and pi.relkind = 'I'`.execute(db);
  for (const { child, parent } of rows) {
    const name = `${partition}_${parent}`.slice(0, 63);
    if (name !== child)
      await sql.raw(`alter index runs."${child}" rename to "${name}"`).execute(db);
  }
}

/**
 * Drops the partitions whose every id lies below `floorId` (retention): each in a transaction
 * that first takes its runs out of the rollups (read with the partition locked against writes,
 * which the record writer refuses below the floor anyway), then locks runs.runs (ACCESS EXCLUSIVE,
 * waiting at most `lockTimeoutMs` for the statements in flight, then holding it for the drop), so
 * the rollups stay exact. A lock not had in time leaves the
 * partition to the next pass. Resolves with the partitions dropped.
 */
export async function dropPartitionsBelow(
  db: Kysely<RunsDatabase>,
  floorId: string,
  options: {
    lockTimeoutMs?: number;
    logger?: Logger;
    /**
     * Told of each drop: its time in all, and how long runs.runs was locked for it (from the
     * lock's request to the drop's end; the commit's flush, a moment more, not counted).
     */
    onDropped?: (drop: { name: string; ms: number; lockedMs: number }) => void;
  } = {},
): Promise<string[]> {
  const dropped: string[] = [];
  for (const p of await listPartitions(db)) {
    if (p.isDefault || p.to === null || p.to > floorId) continue;
    const started = performance.now();
    let lockedMs = 0;
    try {
      const done = await db.transaction().execute(async (tx) => {
        // One replica drops a partition; another finds it busy, or gone, and goes on.
        const { rows } = await sql<{ ok: boolean }>`
          select pg_try_advisory_xact_lock(hashtext('runs.partitions')) as ok`.execute(tx);
        if (!rows[0]?.ok) return false;
        if (!(await listPartitions(tx)).some((x) => x.name === p.name)) return false;
        // (Writers never write to it; a deletion in progress does: it goes first.)
        await sql`set local lock_timeout = '1s'`.execute(tx);
        // The day's runs grouped in memory: with the default 4 MB, PostgreSQL sorted a day of
        // 122,000 runs on disk to group them (1.0-1.1 s against 0.4-0.5 s hashed; 14 MB).
        await sql`set local work_mem = '64MB'`.execute(tx);
        await sql.raw(`lock table runs."${p.name}" in share mode`).execute(tx);
        // One read of the partition: its runs counted by hour, status, model, level and set of
        // tags; both rollups' keys (hours, and days summed from them) from those counts.
        const day = "date_trunc('day', bucket at time zone 'UTC') at time zone 'UTC'";
        const both = (from: string, keys: string) => `
             select project_id, 1::smallint as hours, bucket, ${keys}, -sum(n) as n
             from ${from} group by project_id, bucket, ${keys}
             union all
             select project_id, 24::smallint, ${day}, ${keys}, -sum(n)
             from ${from} group by project_id, ${day}, ${keys}`;
        for (const statement of [
          `create temp table expired_hours on commit drop as
           select project_id, date_trunc('hour', updated_at at time zone 'UTC') at time zone 'UTC' as bucket,
             status, model_id, parent_id is null as top_level, tags, count(*) as n
           from runs."${p.name}" group by 1, 2, 3, 4, 5, 6`,
          `create temp table expired_keys on commit drop as
           ${both("expired_hours", "status, model_id, top_level")}`,
          `create temp table expired_tag_keys on commit drop as
           ${both(
             `(select h.project_id, h.bucket, t.tag, h.status, h.top_level, h.n
               from expired_hours as h
               cross join lateral (select distinct unnest(h.tags) as tag) as t) as e`,
             "tag, status, top_level",
           )}`,
        ]) {
          await sql.raw(statement).execute(tx);
        }
        // Its runs out of the rollups first, before the table is locked: no writer writes these
        // old buckets (its runs are past the floor), so they need not wait for the rollup's lock,
        // and no reader sees the counts change before the drop (one transaction).
        await sql`
          insert into runs.run_rollups as r (project_id, hours, bucket, status, model_id, top_level, n)
          select * from expired_keys order by 1, 2, 3, 4, 5, 6
          on conflict (project_id, hours, bucket, status, model_id, top_level)
          do update set n = r.n + excluded.n`.execute(tx);
        await sql`
          insert into runs.run_tag_rollups as r (project_id, hours, bucket, tag, status, top_level, n)
          select * from expired_tag_keys order by 1, 2, 3, 4, 5, 6
          on conflict (project_id, hours, bucket, tag, status, top_level)
          do update set n = r.n + excluded.n`.execute(tx);
        await sql
          .raw(`set local lock_timeout = ${Math.max(1, options.lockTimeoutMs ?? 500)}`)
          .execute(tx);
        // The table alone (not every partition, as LOCK TABLE would): the drop locks its own.
        const asked = performance.now();
        await sql`lock table only runs.runs in access exclusive mode`.execute(tx);
        await sql.raw(`drop table runs."${p.name}"`).execute(tx);
        // The commit removes the partition's files only once it has released the locks
        // (PostgreSQL's CommitTransaction): that time is not the table's.
        lockedMs = performance.now() - asked;
        return true;
      });
      if (!done) continue;
      options.onDropped?.({ name: p.name, ms: performance.now() - started, lockedMs });
      dropped.push(p.name);
      options.logger?.info({ partition: p.name }, "runs partition dropped (retention)");
    } catch (err) {
      if ((err as { code?: string }).code !== "55P03") throw err;
      options.logger?.info({ partition: p.name }, "runs partition busy: dropped at the next pass");
    }
  }
  return dropped;
}
