import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createClient, createRouterTransport } from "@connectrpc/connect";
import { Kysely, PostgresDialect, sql, type CompiledQuery } from "kysely";
import { MemoryRunRecords, RunLog } from "@pies/common/bus";
import { RunsService } from "@pies/proto/runs";
import pg from "pg";
import { createLogger } from "@pies/common";
import { buildIndexes, createDatabase, migrateToLatest, startIndexBuilds } from "@pies/common/db";
import { createTestDatabase, type TestDatabase } from "@pies/testkit";
import { SEARCH_TEXT } from "../src/lucene.js";
import { indexBuilds } from "../src/migrations/index-builds.js";
import { migrations } from "../src/migrations/index.js";
import { runsRoutes } from "../src/service.js";

// The search indexes are built outside the migrations, concurrently, on the real PostgreSQL
// server: writers are not blocked while they build, a leftover of a failed build is rebuilt, and
// of processes starting together one builds while the others go on.
let testDb: TestDatabase;
let db: Kysely<any>;
const clients: pg.Client[] = [];

async function client(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: testDb.url });
  await c.connect();
  clients.push(c);
  return c;
}

const insertRun = (id: string, status = "completed") =>
  `insert into runs.runs (id, project_id, account_id, interaction_id, status, parameters)
   values ('${id}', 'p', 'a', 'i', '${status}', '{"customer": {"name": "Globex"}}')`;

async function indexState(): Promise<Record<string, boolean>> {
  const { rows } = await sql<{ name: string; valid: boolean }>`
    select c.relname as name, i.indisvalid as valid from pg_index i
    join pg_class c on c.oid = i.indexrelid join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'runs' and c.relname like 'runs\\_%\\_idx'`.execute(db);
  return Object.fromEntries(rows.map((r) => [r.name, r.valid]));
}

/** Index builds waiting on a lock (a writer's transaction, or the table), as `observer` sees. */
async function waitingBuilds(observer: pg.Client): Promise<number> {
  const { rows } = await observer.query(
    `select count(*)::int as n from pg_stat_activity where datname = current_database()
     and query ilike 'create index%' and wait_event_type = 'Lock'`,
  );
  return rows[0].n as number;
}

/** Resolves once an index build waits on a lock (fails after 5 s). */
async function untilBuildWaitsOnLock(observer: pg.Client): Promise<void> {
  for (let i = 0; (await waitingBuilds(observer)) === 0; i++) {
    if (i > 200) throw new Error("the build never waited for the writer");
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

beforeEach(async () => {
  testDb = await createTestDatabase("runsidx");
  db = createDatabase({ url: testDb.url, poolMax: 4 });
  await migrateToLatest(db, "runs", migrations);
});

afterEach(async () => {
  for (const c of clients.splice(0)) await c.end().catch(() => undefined);
  await db?.destroy();
  await testDb?.drop();
});

describe("the runs search indexes", () => {
  it("are not built by the migrations, but concurrently: inserts go on while a build waits", async () => {
    // The migrations leave them out (and keep the index the covering one replaces).
    const migrated = await indexState();
    expect(migrated.runs_project_updated_idx).toBe(true);
    for (const b of indexBuilds) expect(migrated[b.name]).toBeUndefined();

    // A writer's transaction is open: a concurrent build waits for it to end before it finishes,
    // and meanwhile holds a lock (SHARE UPDATE EXCLUSIVE) that inserts do not conflict with. A
    // plain CREATE INDEX would queue for a SHARE lock, and every insert after it behind it.
    // (Its update moves no run to another facet rollup key, as a heartbeat's: an open writer
    // that did would hold the rollup's lock, and every insert would wait for its commit.)
    const writer = await client();
    await writer.query(insertRun("r-open"));
    await writer.query("begin");
    await writer.query(`update runs.runs set heartbeat_at = now() where id = 'r-open'`);
    const building = buildIndexes(db, "runs", indexBuilds);
    const observer = await client();
    // The build waits on a lock: the writer's transaction (concurrently) or its table (not).
    await untilBuildWaitsOnLock(observer);
    const other = await client();
    await other.query("set statement_timeout = '3s'");
    await other.query(insertRun("r-during"));
    await writer.query("commit");
    const report = await building;
    expect(report).toEqual({
      built: indexBuilds.map((b) => b.name),
      present: [],
      skipped: [],
      busy: false,
    });
    const built = await indexState();
    for (const b of indexBuilds) expect(built[b.name]).toBe(true);
    // Replaced by the covering index of the same key.
    expect(built.runs_project_updated_idx).toBeUndefined();
    // Both runs are in the new indexes: a search for them through the trigram index finds them.
    await observer.query("set enable_seqscan = off");
    const query = `select id from runs.runs where ${SEARCH_TEXT} like '%"Globex"%'`;
    const plan = await observer.query(`explain ${query}`);
    expect(plan.rows.map((r) => r["QUERY PLAN"]).join("\n")).toContain(
      "runs_project_strings_trgm_idx",
    );
    const { rows } = await observer.query(query);
    expect(rows.map((r) => r.id).sort()).toEqual(["r-during", "r-open"]);
  });

  it("are rebuilt when an earlier build left one invalid", async () => {
    // A concurrent build that fails (division by zero on a row) leaves an invalid index behind:
    // on a partition (runs.runs is partitioned: its indexes are built partition by partition).
    const c = await client();
    await c.query(insertRun("r1"));
    await expect(
      c.query(
        "create index concurrently runs_default_runs_project_strings_trgm_idx on runs.runs_default ((1 / (length(id) - length(id))))",
      ),
    ).rejects.toThrow(/division by zero/);
    expect((await indexState()).runs_default_runs_project_strings_trgm_idx).toBe(false);
    const report = await buildIndexes(db, "runs", indexBuilds);
    expect(report.built).toContain("runs_project_strings_trgm_idx");
    expect((await indexState()).runs_project_strings_trgm_idx).toBe(true);
    const { rows } = await c.query(
      "select pg_get_indexdef('runs.runs_project_strings_trgm_idx'::regclass) as def",
    );
    expect(rows[0].def).toContain("gin_trgm_ops");
    expect((await indexState()).runs_default_runs_project_strings_trgm_idx).toBe(true);
  });

  it("replace the trigram indexes of the input data's whole text by the one of its strings, under the project", async () => {
    // The indexes earlier versions built: the input data's whole text (keys, numbers and JSON's
    // syntax too), every project's, then under the project.
    const c = await client();
    await c.query("create extension if not exists pg_trgm");
    await c.query("create extension if not exists btree_gin");
    await c.query(
      "create index runs_parameters_trgm_idx on runs.runs using gin ((parameters::text) gin_trgm_ops)",
    );
    await c.query(
      "create index runs_project_parameters_trgm_idx on runs.runs using gin (project_id, (parameters::text) gin_trgm_ops)",
    );
    const report = await buildIndexes(db, "runs", indexBuilds);
    expect(report.built).toContain("runs_project_strings_trgm_idx");
    const state = await indexState();
    expect(state.runs_parameters_trgm_idx).toBeUndefined();
    expect(state.runs_project_parameters_trgm_idx).toBeUndefined();
    expect(state.runs_project_strings_trgm_idx).toBe(true);
    const { rows } = await c.query(
      "select pg_get_indexdef('runs.runs_project_strings_trgm_idx'::regclass) as def",
    );
    expect(rows[0].def).toMatch(
      /using gin \(project_id, \(\(jsonb_path_query_array\(parameters, 'strict \$\.\*\*.*\)::text\) .*gin_trgm_ops\)/i,
    );
    // The project is in the index condition: only its rows are candidates (no recheck of others').
    await c.query(insertRun("r-globex"));
    await c.query(
      `insert into runs.runs (id, project_id, account_id, interaction_id, status, parameters)
       select 'r' || i, case when i % 2 = 0 then 'p' else 'other' end, 'a', 'i', 'completed',
              jsonb_build_object('customer', jsonb_build_object('name', 'Initech ' || i))
       from generate_series(1, 4000) as i`,
    );
    await c.query("analyze runs.runs");
    // A small table: the planner would rather scan it, or the project's btree indexes, which
    // are left out for the EXPLAIN (the transaction is rolled back).
    await c.query("begin");
    const { rows: others } = await c.query(
      `select indexrelid::regclass::text as name from pg_index
       where indrelid = 'runs.runs'::regclass and indexrelid::regclass::text <> 'runs.runs_pkey'
         and indexrelid::regclass::text <> 'runs.runs_project_strings_trgm_idx'`,
    );
    for (const o of others) await c.query(`drop index ${o.name}`);
    await c.query("set local enable_seqscan = off");
    const query = `select id from runs.runs where project_id = 'p' and ${SEARCH_TEXT} like '%"Globex"%'`;
    const plan = await c.query(`explain ${query}`);
    const found = await c.query(query);
    await c.query("rollback");
    const text = plan.rows.map((r) => r["QUERY PLAN"]).join("\n");
    expect(text).toContain("runs_project_strings_trgm_idx");
    expect(text).toMatch(
      /Index Cond: \(\(project_id = 'p'::text\) AND \(\(jsonb_path_query_array\(parameters, .*\)::text ~~ '%"Globex"%'::text\)\)/,
    );
    expect(found.rows.map((r) => r.id)).toEqual(["r-globex"]);
  });

  it("are left to the process that holds the build lock, without waiting for it", async () => {
    const holder = await client();
    await holder.query("select pg_advisory_lock(hashtextextended('pies.index-builds.runs', 0))");
    const started = performance.now();
    expect(await buildIndexes(db, "runs", indexBuilds)).toEqual({
      built: [],
      present: [],
      skipped: [],
      busy: true,
    });
    expect(performance.now() - started).toBeLessThan(2000);
    await holder.query("select pg_advisory_unlock(hashtextextended('pies.index-builds.runs', 0))");
    expect((await buildIndexes(db, "runs", indexBuilds)).built).toHaveLength(indexBuilds.length);
  });

  it("are what the search's trigram patterns wait for: none without the index, some with it", async () => {
    const queries: CompiledQuery[] = [];
    const pool = new pg.Pool({ connectionString: testDb.url, max: 2 });
    const logged = new Kysely<any>({
      dialect: new PostgresDialect({ pool }),
      log: (event) => {
        if (event.level === "query") queries.push(event.query);
      },
    });
    try {
      const runs = createClient(
        RunsService,
        createRouterTransport(
          runsRoutes({ db: logged, log: new RunLog(new MemoryRunRecords()), indexCheckMs: 0 }),
        ),
      );
      const c = await client();
      await c.query(insertRun("r1"));
      const search = async () => {
        queries.length = 0;
        const res = await runs.searchRuns({ projectId: "p", query: "customer.name:Glob*" });
        expect(res.runs.map((r) => r.id)).toEqual(["r1"]);
        return queries.map((q) => q.sql).join("\n");
      };
      expect(await search()).not.toContain("like");
      await buildIndexes(db, "runs", indexBuilds);
      expect(await search()).toContain(`${SEARCH_TEXT} like $`);
    } finally {
      await logged.destroy();
    }
  });

  it("are cancelled when the service stops mid-build, and built again at the next start", async () => {
    // (Its update moves no run to another facet rollup key, as a heartbeat's: an open writer
    // that did would hold the rollup's lock, and every insert would wait for its commit.)
    const writer = await client();
    await writer.query(insertRun("r-open"));
    await writer.query("begin");
    await writer.query(`update runs.runs set heartbeat_at = now() where id = 'r-open'`);
    const builds = startIndexBuilds(db, "runs", indexBuilds, createLogger("test", "silent"));
    const observer = await client();
    await untilBuildWaitsOnLock(observer);
    // The build waits for the open transaction; stopping does not.
    const started = performance.now();
    await builds.stop();
    expect(performance.now() - started).toBeLessThan(3000);
    expect(await builds.done).toBeUndefined();
    await writer.query("commit");
    const left = await indexState();
    expect(indexBuilds.some((b) => left[b.name] === true)).toBe(false);
    expect((await buildIndexes(db, "runs", indexBuilds)).built).toHaveLength(indexBuilds.length);
    const built = await indexState();
    for (const b of indexBuilds) expect(built[b.name]).toBe(true);
  });
});

describe("stopping the background builds", () => {
  const logger = createLogger("test", "silent");
  /** A writer's open transaction: a concurrent build waits for it, as long as it stays open. */
  async function openWriter() {
    const writer = await client();
    await writer.query("begin");
    await writer.query(insertRun(`r-${Math.random()}`));
    return writer;
  }
  const within = <T>(p: Promise<T>, ms: number) =>
    Promise.race([
      p.then(() => "stopped"),
      new Promise((resolve) => setTimeout(() => resolve("still running"), ms).unref()),
    ]);

  it("sends no further statement once stopped between statements", async () => {
    const writer = await openWriter();
    const builds = startIndexBuilds(db, "runs", indexBuilds, logger);
    // Stopped before any build statement is sent: none is, though the writer would hold each up.
    expect(await within(builds.stop(), 3000)).toBe("stopped");
    expect(await builds.done).toBeUndefined();
    await writer.query("commit");
    for (const b of indexBuilds) expect((await indexState())[b.name]).toBeUndefined();
  });

  it("cancels the statement in progress", async () => {
    const writer = await openWriter();
    const observer = await client();
    const builds = startIndexBuilds(db, "runs", indexBuilds, logger);
    await untilBuildWaitsOnLock(observer);
    expect(await within(builds.stop(), 3000)).toBe("stopped");
    expect(await waitingBuilds(observer)).toBe(0);
    await writer.query("commit");
    // The first index was left invalid (on the partition it was built on first), the others not
    // begun: the next build makes them all.
    const state = await indexState();
    expect(state[`runs_default_${indexBuilds[0]!.name}`]).toBe(false);
    expect(state[indexBuilds[0]!.name]).toBeUndefined();
    expect(state[indexBuilds[1]!.name]).toBeUndefined();
    expect((await buildIndexes(db, "runs", indexBuilds)).built).toHaveLength(indexBuilds.length);
  });
});

describe("unfinished builds", () => {
  const logger = createLogger("test", "silent");

  it("are tried again while another process held the build lock", async () => {
    const holder = await client();
    await holder.query("select pg_advisory_lock(hashtextextended('pies.index-builds.runs', 0))");
    const builds = startIndexBuilds(db, "runs", indexBuilds, logger, { retryMs: 200 });
    try {
      expect((await builds.done)?.busy).toBe(true);
      // The holder goes away (it died, or was stopped) without building them.
      await holder.query(
        "select pg_advisory_unlock(hashtextextended('pies.index-builds.runs', 0))",
      );
      for (let i = 0; ; i++) {
        const state = await indexState();
        if (indexBuilds.every((b) => state[b.name] === true)) break;
        if (i > 200) throw new Error("the build was never tried again");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } finally {
      await builds.stop();
    }
  });

  it("drop an index a built one replaces later when its table was busy at first", async () => {
    // An index of the input data alone, as before the one under the project replaced it.
    const c = await client();
    await c.query(
      "create index runs_parameters_idx on runs.runs using gin (parameters jsonb_path_ops)",
    );
    // A reader holds the table: the drop (ACCESS EXCLUSIVE) waits 2 s for it, then gives up.
    const reader = await client();
    await reader.query("begin");
    await reader.query("select 1 from runs.runs limit 1");
    const builds = startIndexBuilds(db, "runs", indexBuilds, logger, { retryMs: 200 });
    try {
      expect((await builds.done)?.left).toContain("runs_parameters_idx");
      expect((await indexState()).runs_parameters_idx).toBe(true);
      await reader.query("commit");
      for (let i = 0; (await indexState()).runs_parameters_idx !== undefined; i++) {
        if (i > 200) throw new Error("the replaced index was never dropped");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect((await indexState()).runs_project_parameters_idx).toBe(true);
    } finally {
      await builds.stop();
    }
  });

  it("are not cut by a default statement or lock timeout, which the connection keeps after", async () => {
    const c = await client();
    const { rows } = await c.query("select current_database() as name");
    const name = rows[0].name as string;
    await c.query(`alter database "${name}" set statement_timeout = '100ms'`);
    await c.query(`alter database "${name}" set lock_timeout = '100ms'`);
    // One connection, opened after: it has the defaults, and the build runs on it.
    const one = createDatabase({ url: testDb.url, poolMax: 1 });
    try {
      const writer = await client();
      await writer.query("begin");
      await writer.query(insertRun("r-open"));
      const building = buildIndexes(one, "runs", indexBuilds);
      // The build waits for the writer's transaction longer than either timeout.
      await new Promise((resolve) => setTimeout(resolve, 600));
      await writer.query("commit");
      expect((await building).built).toEqual(indexBuilds.map((b) => b.name));
      const shown = await sql<{ s: string; l: string }>`
        select current_setting('statement_timeout') as s,
               current_setting('lock_timeout') as l`.execute(one);
      expect(shown.rows[0]).toEqual({ s: "100ms", l: "100ms" });
    } finally {
      await one.destroy();
    }
  });
});
