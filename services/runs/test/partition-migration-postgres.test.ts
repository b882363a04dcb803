import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { sql, type Kysely } from "kysely";
import pg from "pg";
import { createLogger, newId } from "@pies/common";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { createTestDatabase, seedRuns, type TestDatabase } from "@pies/testkit";
import { migrations } from "../src/migrations/index.js";
import {
  boundLegacyRuns,
  DAY_MS,
  idPrefix,
  listPartitions,
  makePartitions,
} from "../src/partitions.js";
import type { RunsDatabase } from "../src/tables.js";
import { expectRecount } from "./rollup-recount.js";

// A deployment's runs.runs as it was (one table) moves to partitions while a writer of the old
// version keeps inserting (docs/decisions/0064): bounded online first, then attached as the legacy
// partition by a migration that reads none of its rows under its lock. Nothing is lost, the
// rollup stays exact.
const PARTITIONING = "2026-12-07T06-00_runs_partitioned";
const logger = createLogger("test", "silent");
let testDb: TestDatabase;
let db: Kysely<RunsDatabase>;
/** One connection: what the migration reads is in its backend's statistics. */
let one: Kysely<RunsDatabase>;
let pool: pg.Pool;

beforeEach(async () => {
  testDb = await createTestDatabase("partmig");
  db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 4 });
  one = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 1 });
  pool = new pg.Pool({ connectionString: testDb.url, max: 3 });
  // On a connection closed after: a backend flushes its counts of scans up to ten seconds late,
  // but always as it exits, so these migrations' scans cannot land in a later reading.
  const migrator = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 1 });
  const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(migrator);
  await migrateToLatest(
    migrator,
    "runs",
    Object.fromEntries(Object.entries(migrations).filter(([name]) => name < PARTITIONING)),
  );
  await migrator.destroy();
  while (
    (await pool.query("select 1 from pg_stat_activity where pid = $1", [rows[0]!.pid])).rowCount
  )
    await new Promise((r) => setTimeout(r, 20));
});

afterEach(async () => {
  await pool?.end();
  await one?.destroy();
  await db?.destroy();
  await testDb?.drop();
});

/** Sequential scans of the table (by its oid: it is renamed), its backends' counts flushed. */
async function seqScans(oid: number): Promise<number> {
  await sql`select pg_stat_force_next_flush()`.execute(one);
  await sql`select 1`.execute(one);
  const { rows } = await sql<{ n: string }>`
    select seq_scan as n from pg_stat_user_tables where relid = ${oid}`.execute(db);
  return Number(rows[0]?.n ?? 0);
}

/** A writer of the version before: plain inserts of new runs, until `stop`. */
function oldWriter() {
  const written: string[] = [];
  let writing = true;
  const done = (async () => {
    const client = await pool.connect();
    try {
      while (writing) {
        const ids = Array.from({ length: 5 }, () => newId());
        await client.query(
          `insert into runs.runs (id, project_id, account_id, interaction_id, status)
           select unnest($1::text[]), 'writer', 'a', 'i', 'completed'`,
          [ids],
        );
        written.push(...ids);
        await new Promise((r) => setTimeout(r, 2));
      }
    } finally {
      client.release();
    }
  })();
  return {
    written,
    async stop() {
      writing = false;
      await done;
    },
  };
}

describe("the move to partitions", () => {
  it("is online: bounded first, attached without a read under lock, nothing lost", async () => {
    await seedRuns(pool, { count: 20_000, spanDays: 20 });
    const writer = oldWriter();
    try {
      while (writer.written.length < 50) await new Promise((r) => setTimeout(r, 10));
      const { rows } = await sql<{ oid: number }>`select 'runs.runs'::regclass::oid as oid`.execute(
        db,
      );
      const oid = Number(rows[0]!.oid);
      await boundLegacyRuns(one, logger);
      const scansBefore = await seqScans(oid);
      await migrateToLatest(one, "runs", migrations);
      // The migration read no row of the table: the validated bound stood for the scan.
      expect(await seqScans(oid)).toBe(scansBefore);
      await makePartitions(db, { logger, days: 1 });
      const during = writer.written.length;
      while (writer.written.length < during + 50) await new Promise((r) => setTimeout(r, 10));
    } finally {
      await writer.stop();
    }
    const { rows: counts } = await sql<{ n: number; found: number }>`
      select count(*)::int as n, count(*) filter (where id = any(${writer.written}))::int as found
      from runs.runs`.execute(db);
    expect(counts[0]).toEqual({ n: 20_000 + writer.written.length, found: writer.written.length });
    // The table as it was is the legacy partition, up to a week ahead: the old version's writers
    // keep going below that bound; the daily partitions start after it.
    const partitions = await listPartitions(db);
    const legacy = partitions.find((p) => p.name === "runs_legacy");
    expect(legacy?.from).toBeNull();
    expect(legacy!.to! >= idPrefix(Date.now() + 6 * DAY_MS)).toBe(true);
    expect(partitions.filter((p) => !p.isDefault && p.name !== "runs_legacy")).toEqual([]);
    await makePartitions(db, { now: Date.now() + 7 * DAY_MS, daysAhead: 0, days: 1 });
    const daily = (await listPartitions(db)).filter(
      (p) => !p.isDefault && p.name !== "runs_legacy",
    );
    expect(daily[0]?.from).toBe(legacy!.to);
    const { rows: where } = await sql<{ partition: string; n: number }>`
      select tableoid::regclass::text as partition, count(*)::int as n from runs.runs group by 1`.execute(
      db,
    );
    expect(where).toEqual([{ partition: "runs.runs_legacy", n: counts[0]!.n }]);
    await expectRecount(db);
  });

  it("without the bound (a new start on PGlite, say) checks it under its lock and moves the rest out", async () => {
    const today = Math.floor(Date.now() / DAY_MS) * DAY_MS;
    await seedRuns(pool, { count: 2_000, spanDays: 5 });
    // A run of today and one of an id of no time: past the cutover, out of the legacy partition.
    await pool.query(
      `insert into runs.runs (id, project_id, account_id, interaction_id, status)
       values ($1, 'p', 'a', 'i', 'completed'), ('run-1', 'p', 'a', 'i', 'completed')`,
      [newId(today + 60_000)],
    );
    await migrateToLatest(db, "runs", migrations);
    await makePartitions(db, { logger });
    const { rows } = await sql<{ partition: string; n: number }>`
      select tableoid::regclass::text as partition, count(*)::int as n from runs.runs
      group by 1 order by 1`.execute(db);
    const byPartition = Object.fromEntries(rows.map((r) => [r.partition, r.n]));
    expect(byPartition["runs.runs_default"]).toBe(1);
    expect(Object.values(byPartition).reduce((a, b) => a + b, 0)).toBe(2_002);
    const legacy = (await listPartitions(db)).find((p) => p.name === "runs_legacy");
    expect(legacy?.to).toBe(idPrefix(today));
    // The first partition a week wide (the default) starts at the legacy one's bound, mid-week
    // if today is, and ends with its calendar week.
    const next = (await listPartitions(db)).find((p) => p.from === legacy?.to);
    expect(next).toBeDefined();
    const end = parseInt(next!.to!, 16);
    expect(new Date(end).getUTCDay()).toBe(1);
    expect(end - today).toBeGreaterThan(0);
    expect(end - today).toBeLessThanOrEqual(7 * DAY_MS);
    await expectRecount(db);
  });
});
