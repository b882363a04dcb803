import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createClient, createRouterTransport } from "@connectrpc/connect";
import { Kysely, PostgresDialect, sql, type CompiledQuery } from "kysely";
import { MemoryRunRecords, RunLog } from "@pies/common/bus";
import { RunsService } from "@pies/proto/runs";
import pg from "pg";
import { createLogger } from "@pies/common";
import { buildIndexes, createDatabase, migrateToLatest, startIndexBuilds } from "@pies/common/db";
import { createTestDatabase, type TestDatabase } from "@pies/testkit";
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

const insertRun = (id: string) =>
  `insert into runs.runs (id, project_id, account_id, interaction_id, status, parameters)
   values ('${id}', 'p', 'a', 'i', 'completed', '{"customer": {"name": "Globex"}}')`;

async function indexState(): Promise<Record<string, boolean>> {
  const { rows } = await sql<{ name: string; valid: boolean }>`
    select c.relname as name, i.indisvalid as valid from pg_index i
    join pg_class c on c.oid = i.indexrelid join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'runs' and c.relname like 'runs\\_%\\_idx'`.execute(db);
  return Object.fromEntries(rows.map((r) => [r.name, r.valid]));
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
    const writer = await client();
    await writer.query("begin");
    await writer.query(insertRun("r-open"));
    const building = buildIndexes(db, "runs", indexBuilds);
    const observer = await client();
    for (let i = 0; ; i++) {
      // The build waits on a lock: the writer's transaction (concurrently) or its table (not).
      const { rows } = await observer.query(
        `select count(*)::int as n from pg_stat_activity where datname = current_database()
         and query ilike 'create index%' and wait_event_type = 'Lock'`,
      );
      if (rows[0].n > 0) break;
      if (i > 200) throw new Error("the build never waited for the writer");
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
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
    const query = `select id from runs.runs where parameters::text like '%"Globex"%'`;
    const plan = await observer.query(`explain ${query}`);
    expect(plan.rows.map((r) => r["QUERY PLAN"]).join("\n")).toContain("runs_parameters_trgm_idx");
    const { rows } = await observer.query(query);
    expect(rows.map((r) => r.id).sort()).toEqual(["r-during", "r-open"]);
  });

  it("are rebuilt when an earlier build left one invalid", async () => {
    // A concurrent build that fails (division by zero on a row) leaves an invalid index behind.
    const c = await client();
    await c.query(insertRun("r1"));
    await expect(
      c.query(
        "create index concurrently runs_parameters_trgm_idx on runs.runs ((1 / (length(id) - length(id))))",
      ),
    ).rejects.toThrow(/division by zero/);
    expect((await indexState()).runs_parameters_trgm_idx).toBe(false);
    const report = await buildIndexes(db, "runs", indexBuilds);
    expect(report.built).toContain("runs_parameters_trgm_idx");
    expect((await indexState()).runs_parameters_trgm_idx).toBe(true);
    const { rows } = await c.query(
      "select pg_get_indexdef('runs.runs_parameters_trgm_idx'::regclass) as def",
    );
    expect(rows[0].def).toContain("gin_trgm_ops");
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
      expect(await search()).toContain("parameters::text like $");
    } finally {
      await logged.destroy();
    }
  });

  it("are cancelled when the service stops mid-build, and built again at the next start", async () => {
    const writer = await client();
    await writer.query("begin");
    await writer.query(insertRun("r-open"));
    const builds = startIndexBuilds(db, "runs", indexBuilds, createLogger("test", "silent"));
    const observer = await client();
    for (let i = 0; ; i++) {
      const { rows } = await observer.query(
        `select count(*)::int as n from pg_stat_activity where datname = current_database()
         and query ilike 'create index%' and wait_event_type = 'Lock'`,
      );
      if (rows[0].n > 0) break;
      if (i > 200) throw new Error("the build never waited for the writer");
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
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
