import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  Code,
  ConnectError,
  createClient,
  createRouterTransport,
  type Client,
} from "@connectrpc/connect";
import { CompiledQuery, Kysely, PostgresDialect, sql } from "kysely";
import pg from "pg";
import { createLogger, newId, toTimestamp } from "@pies/common";
import { MemoryRunRecords, RunLog } from "@pies/common/bus";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { createTestDatabase, seedRuns, type TestDatabase } from "@pies/testkit";
import { AnchorDirection, RunsService, RunStatus } from "@pies/proto/runs";
import { deleteRunById, deleteRunIds } from "../src/deletions.js";
import { insertExperiment } from "../src/experiments/store.js";
import { MAX_RUN_SPAN_MS, RECENT_WINDOW_MS } from "../src/filters.js";
import { migrations } from "../src/migrations/index.js";
import {
  DAY_MS,
  dayOf,
  idPrefix,
  listPartitions,
  makePartitions,
  partitionName,
} from "../src/partitions.js";
import { startRecordWriter, writeRecords } from "../src/record-writer.js";
import { applyRetention } from "../src/retention.js";
import { runsRoutes } from "../src/service.js";
import type { RunsDatabase } from "../src/tables.js";
import { expectRecount, runRecord } from "./rollup-recount.js";

// The runs' lifecycle on the real PostgreSQL server (DESIGN.md §8; docs/decisions/0064): daily
// partitions made ahead and pruned by bounded lists, the retention by partition and by project,
// deletion by id and by query that no late record undoes, the rollup exact through all of it.
let testDb: TestDatabase;
let db: Kysely<RunsDatabase>;
let pool: pg.Pool;
const queries: CompiledQuery[] = [];
let logged: Kysely<RunsDatabase>;
const logger = createLogger("test", "silent");
const NOW = Date.now();
const SEEDED = 3000;

beforeAll(async () => {
  testDb = await createTestDatabase("lifecycle");
  db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 6 });
  pool = new pg.Pool({ connectionString: testDb.url, max: 3 });
  logged = new Kysely<RunsDatabase>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: testDb.url, max: 2 }) }),
    log: (event) => {
      if (event.level === "query") queries.push(event.query);
    },
  });
  await migrateToLatest(db, "runs", migrations);
});

afterAll(async () => {
  await logged?.destroy();
  await pool?.end();
  await db?.destroy();
  await testDb?.drop();
});

/** The partitions a statement's plan reads (the default partition included). */
async function partitionsRead(query: CompiledQuery): Promise<string[]> {
  const { rows } = await db.executeQuery<Record<string, string>>(
    CompiledQuery.raw(`explain ${query.sql}`, [...query.parameters]),
  );
  const plan = rows.map((r) => r["QUERY PLAN"]).join("\n");
  return [
    ...new Set([...plan.matchAll(/ on (runs_p\d{8}|runs_default)\b/g)].map((m) => m[1]!)),
  ].sort();
}

describe("daily partitions", () => {
  it("are made ahead, each once, and the seeded runs land in their day's", async () => {
    const made = await makePartitions(db, {
      now: NOW,
      from: NOW - 30 * DAY_MS,
      daysAhead: 3,
      days: 1,
    });
    expect(made).toHaveLength(34);
    expect(made[0]).toBe(partitionName(dayOf(NOW - 30 * DAY_MS)));
    expect(
      await makePartitions(db, { now: NOW, from: NOW - 30 * DAY_MS, daysAhead: 3, days: 1 }),
    ).toEqual([]);
    await seedRuns(pool, {
      count: SEEDED,
      projects: ["p1", "p2"],
      end: new Date(NOW - 60_000),
      spanDays: 29,
    });
    const { rows } = await sql<{ partition: string; id: string }>`
      select tableoid::regclass::text as partition, id from runs.runs`.execute(db);
    expect(rows).toHaveLength(SEEDED);
    for (const r of rows) {
      const ms = parseInt(r.id.slice(0, 12), 16);
      expect(r.partition).toBe(`runs.${partitionName(dayOf(ms))}`);
    }
    await sql`analyze runs.runs`.execute(db);
    await expectRecount(db);
  });

  it("are pruned: a list bounded by updated_at reads only those that may hold a match", async () => {
    const runs = createClient(
      RunsService,
      createRouterTransport(runsRoutes({ db: logged, log: new RunLog(new MemoryRunRecords()) })),
    );
    const readBy = async (filters: Parameters<typeof runs.listRuns>[0]["filters"]) => {
      queries.length = 0;
      await runs.listRuns({ projectId: "p1", filters });
      const list = queries.find((q) => /^select .* from "runs"\."runs"/.test(q.sql));
      return partitionsRead(list!);
    };
    // The partitions from or up to a time's day, the default one beside them: which days a bound
    // reaches depends on the hour the test runs at (a list made later reads no more).
    const all = (await listPartitions(db)).map((p) => p.name);
    const ranged = all.filter((n) => n !== "runs_default");
    const from = (ms: number) => [
      ...ranged.filter((n) => n >= partitionName(dayOf(ms))),
      "runs_default",
    ];
    const upTo = (ms: number) => [
      ...ranged.filter((n) => n <= partitionName(dayOf(ms))),
      "runs_default",
    ];
    // Unbounded, the first page comes from the last days' (newestFirst, below).
    expect(all.length).toBeGreaterThan(30);
    const unbounded = await readBy({});
    expect(from(NOW - RECENT_WINDOW_MS)).toEqual(expect.arrayContaining(unbounded));
    expect(unbounded.length).toBeLessThan(15);
    // The last hour: runs created in the week before it at most (a run's span) and after.
    const recent = await readBy({ updatedAfter: toTimestamp(new Date(NOW - 3_600_000)) });
    expect(from(NOW - 3_600_000 - MAX_RUN_SPAN_MS)).toEqual(expect.arrayContaining(recent));
    expect(recent.length).toBeLessThan(14);
    // Before 20 days ago: the partitions up to that day (and the hour after, clocks apart).
    const old = await readBy({ updatedBefore: toTimestamp(new Date(NOW - 20 * DAY_MS)) });
    expect(old).toContain("runs_default");
    expect(upTo(NOW - 20 * DAY_MS + 3_600_000)).toEqual(expect.arrayContaining(old));
    expect(old.length).toBeLessThan(14);
    // Paging back with an anchor: as a bound before it.
    const paged = await readBy({
      anchorDate: toTimestamp(new Date(NOW - 25 * DAY_MS)),
      anchorDirection: AnchorDirection.BEFORE,
    });
    expect(upTo(NOW - 25 * DAY_MS + 3_600_000)).toEqual(expect.arrayContaining(paged));
    expect(paged.length).toBeLessThan(9);
    // The pruned answers are the unpruned ones.
    const after = toTimestamp(new Date(NOW - 2 * DAY_MS));
    const { runs: pruned } = await runs.listRuns({
      projectId: "p1",
      limit: 1000,
      filters: { updatedAfter: after },
    });
    const { rows } = await sql<{ id: string }>`select id from runs.runs
      where project_id = 'p1' and updated_at > ${new Date(NOW - 2 * DAY_MS)}
      order by updated_at desc, id desc`.execute(db);
    expect(pruned.map((r) => r.id)).toEqual(rows.map((r) => r.id));
    expect(rows.length).toBeGreaterThan(50);
  });
});

describe("a newest-first page", () => {
  it("is read from the last days' partitions when they hold it, from all of them otherwise", async () => {
    const runs = createClient(
      RunsService,
      createRouterTransport(runsRoutes({ db: logged, log: new RunLog(new MemoryRunRecords()) })),
    );
    const truth = async (limit: number, offset = 0) =>
      (
        await sql<{ id: string }>`select id from runs.runs where project_id = 'p1'
          order by updated_at desc, id desc limit ${limit} offset ${offset}`.execute(db)
      ).rows.map((r) => r.id);
    const listed = async (limit: number, offset = 0) => {
      queries.length = 0;
      const { runs: page } = await runs.listRuns({ projectId: "p1", limit, offset });
      const statements = queries.filter((q) => /^select .* from "runs"\."runs"/.test(q.sql));
      return { ids: page.map((r) => r.id), statements };
    };
    // The seed's last day holds some 50 of the project's runs: a page of 20 is theirs.
    const recent = await listed(20);
    expect(recent.ids).toEqual(await truth(20));
    expect(recent.statements).toHaveLength(1);
    expect(await partitionsRead(recent.statements[0]!)).not.toContain(
      partitionName(dayOf(NOW - 20 * DAY_MS)),
    );
    // A page reaching further back than the window can answer for: read again from a floor
    // as far back as the window's runs say the page needs, short of every partition.
    const all = (await listPartitions(db)).length;
    const deep = await listed(100, 400);
    expect(deep.ids).toEqual(await truth(100, 400));
    expect(deep.statements).toHaveLength(2);
    const deeper = await partitionsRead(deep.statements[1]!);
    expect(deeper.length).toBeGreaterThan(10);
    expect(deeper.length).toBeLessThan(all);
    // Nothing in the window (a term made before it): read over every partition next.
    queries.length = 0;
    const { runs: old } = await runs.searchRuns({ projectId: "p1", limit: 20, query: "lang:old" });
    expect(old).toHaveLength(0);
    const reads = queries.filter((q) => /^select .* from "runs"\."runs"/.test(q.sql));
    expect(reads).toHaveLength(2);
    expect(await partitionsRead(reads[1]!)).toHaveLength(all);
    // Searches too.
    queries.length = 0;
    const { runs: found } = await runs.searchRuns({ projectId: "p1", limit: 20, query: "lang:en" });
    const { rows } = await sql<{ id: string }>`select id from runs.runs
      where project_id = 'p1' and parameters @> '{"lang": "en"}'
      order by updated_at desc, id desc limit 20`.execute(db);
    expect(found.map((r) => r.id)).toEqual(rows.map((r) => r.id));
  });
});

describe("the retention", () => {
  it("drops the days' partitions past it, deletes the old runs of the default one, and keeps the rollup exact", async () => {
    const floor = NOW - 10 * DAY_MS;
    // A day's partition goes once the floor is an hour past its end: the one of that hour stays.
    const kept = dayOf(floor - 3_600_000);
    // A run of a day with no partition (before the first): in the default partition.
    await writeRecords(db, [
      runRecord(1, newId(NOW - 40 * DAY_MS), "p1", RunStatus.COMPLETED, {
        updatedAt: NOW - 40 * DAY_MS,
      }),
    ]);
    const before = await sql<{ n: number }>`select count(*)::int as n from runs.runs
      where id >= ${idPrefix(kept)}`.execute(db);
    const result = await applyRetention(db, { retentionDays: 10, now: NOW, logger });
    expect(result.dropped.length).toBeGreaterThanOrEqual(19);
    for (const name of result.dropped) expect(name < partitionName(kept)).toBe(true);
    expect(result.deleted).toBe(1);
    const left = await sql<{ n: number; oldest: string }>`
      select count(*)::int as n, min(id) as oldest from runs.runs`.execute(db);
    expect(left.rows[0]!.n).toBe(before.rows[0]!.n);
    expect(left.rows[0]!.oldest >= idPrefix(kept)).toBe(true);
    const partitions = (await listPartitions(db)).filter((p) => !p.isDefault);
    expect(partitions[0]!.name).toBe(partitionName(kept));
    await expectRecount(db);
    // Again: nothing more to do.
    expect(await applyRetention(db, { retentionDays: 10, now: NOW, logger })).toEqual({
      dropped: [],
      deleted: 0,
      experiments: 0,
    });
  });

  it("is where the record writer stops: a late record of a run past it is not written", async () => {
    const floorId = idPrefix(NOW - 10 * DAY_MS);
    const late = newId(NOW - 15 * DAY_MS);
    const recent = newId(NOW - 5 * DAY_MS);
    await writeRecords(
      db,
      [
        runRecord(1, late, "p1", RunStatus.COMPLETED, { updatedAt: NOW - 15 * DAY_MS }),
        runRecord(2, recent, "p1", RunStatus.COMPLETED, { updatedAt: NOW - 5 * DAY_MS }),
      ],
      logger,
      { floorId },
    );
    const { rows } = await sql<{ id: string }>`select id from runs.runs
      where id in (${late}, ${recent})`.execute(db);
    expect(rows.map((r) => r.id)).toEqual([recent]);
    await expectRecount(db);
  });

  it("of a project deletes its runs past its own retention, and no other project's", async () => {
    const count = (projectId: string, olderThan: number) =>
      sql<{ n: number }>`select count(*)::int as n from runs.runs where project_id = ${projectId}
        and updated_at < ${new Date(olderThan)}`
        .execute(db)
        .then((r) => r.rows[0]!.n);
    const cutoff = NOW - 3 * DAY_MS;
    const p1Before = await count("p1", NOW);
    expect(await count("p2", cutoff)).toBeGreaterThan(100);
    const result = await applyRetention(db, {
      retentionDays: 0,
      projectDays: new Map([["p2", 3]]),
      now: NOW,
      logger,
    });
    expect(result.dropped).toEqual([]);
    expect(result.deleted).toBeGreaterThan(100);
    expect(await count("p2", cutoff)).toBe(0);
    expect(await count("p2", NOW)).toBeGreaterThan(0);
    expect(await count("p1", NOW)).toBe(p1Before);
    await expectRecount(db);
  });
});

describe("deleting runs", () => {
  const records = new MemoryRunRecords();
  const log = new RunLog(records);
  let runs: Client<typeof RunsService>;
  beforeAll(() => {
    runs = createClient(RunsService, createRouterTransport(runsRoutes({ db, log })));
  });
  const stored = async (id: string) =>
    (await sql`select 1 from runs.runs where id = ${id}`.execute(db)).rows.length > 0;
  const untilStored = async (id: string) => {
    for (let i = 0; !(await stored(id)); i++) {
      if (i > 500) throw new Error(`run ${id} never stored`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const code = (p: Promise<unknown>) =>
    p.then(
      () => "ok",
      (err: unknown) => Code[ConnectError.from(err).code],
    );

  it("by id: gone for good, a late record does not bring it back, its children keep their parent", async () => {
    const writer = startRecordWriter(db, records, logger);
    try {
      const projectId = `del-${newId()}`;
      const base = { projectId, interactionId: "i", status: RunStatus.COMPLETED };
      const { run: parent } = await runs.createRun({ run: { ...base, id: newId() } });
      const { run: child } = await runs.createRun({
        run: { ...base, id: newId(), parentId: parent!.id },
      });
      await untilStored(child!.id);
      // Another project's key cannot delete it (as unknown as a run that never was).
      expect(await code(runs.deleteRun({ projectId: `other-${newId()}`, id: parent!.id }))).toBe(
        "NotFound",
      );
      await runs.deleteRun({ projectId, id: parent!.id });
      expect(await code(runs.getRun({ projectId, id: parent!.id }))).toBe("NotFound");
      expect(await code(runs.deleteRun({ projectId, id: parent!.id }))).toBe("NotFound");
      const { run: kept } = await runs.getRun({ projectId, id: child!.id });
      expect(kept!.parentId).toBe(parent!.id);
      // A late record of it (the log kept one; an executor still at it), however later.
      await writeRecords(db, [
        runRecord(1_000_000, parent!.id, projectId, RunStatus.FAILED, { updatedAt: Date.now() }),
      ]);
      expect(await stored(parent!.id)).toBe(false);
      const { runs: listed } = await runs.listRuns({ projectId });
      expect(listed.map((r) => r.id)).toEqual([child!.id]);
      await expectRecount(db);
    } finally {
      await writer.stop();
    }
  });

  it("by query: every stored match of the project, in batches, and none of another project", async () => {
    const projectId = `delq-${newId()}`;
    const other = `delq-other-${newId()}`;
    const marked = (p: string, n: number, marker: string) =>
      Array.from({ length: n }, (_, i) =>
        runRecord(i + 1, newId(), p, RunStatus.COMPLETED, {
          updatedAt: Date.now(),
          parametersJson: JSON.stringify({ customer: marker, n: i }),
        }),
      );
    await writeRecords(db, [
      ...marked(projectId, 1200, "Acme"),
      ...marked(projectId, 30, "Globex"),
      ...marked(other, 20, "Acme"),
    ]);
    const { deleted } = await runs.deleteRuns({ projectId, query: "customer:Acme" });
    expect(deleted).toBe(1200n);
    const total = async (p: string, query: string) =>
      (await runs.searchRuns({ projectId: p, query, onlyMeta: true })).meta!.total;
    expect(await total(projectId, "customer:Acme")).toBe(0n);
    expect(await total(projectId, "customer:Globex")).toBe(30n);
    expect(await total(other, "customer:Acme")).toBe(20n);
    // Filters alone too.
    const { deleted: rest } = await runs.deleteRuns({
      projectId,
      filters: { status: RunStatus.COMPLETED },
    });
    expect(rest).toBe(30n);
    await expectRecount(db);
  });

  it("waits for the record writer's batches in flight, so that none writes a run it deletes", async () => {
    const projectId = `race-${newId()}`;
    const id = newId();
    await writeRecords(db, [
      runRecord(1, id, projectId, RunStatus.PROCESSING, { updatedAt: Date.now() }),
    ]);
    const observer = await pool.connect();
    try {
      // A writer's batch of the run is in flight (its transaction open) when the deletion starts.
      let deleting: Promise<void> | undefined;
      await db.transaction().execute(async (tx) => {
        await writeRecords(tx, [
          runRecord(2, id, projectId, RunStatus.COMPLETED, { updatedAt: Date.now() }),
        ]);
        deleting = deleteRunById(db, id);
        for (let i = 0; ; i++) {
          const { rows } = await observer.query(
            `select count(*)::int as n from pg_stat_activity where datname = current_database()
             and query ilike 'lock table runs.deleted_runs%' and wait_event_type = 'Lock'`,
          );
          if (rows[0].n > 0) break;
          if (i > 400) throw new Error("the deletion never waited for the writer");
          await new Promise((r) => setTimeout(r, 10));
        }
      });
      await deleting;
      expect(await stored(id)).toBe(false);
      await writeRecords(db, [
        runRecord(3, id, projectId, RunStatus.COMPLETED, { updatedAt: Date.now() }),
      ]);
      expect(await stored(id)).toBe(false);
    } finally {
      observer.release();
    }
  });
});

describe("experiments, which copy the runs they replay", () => {
  /** An experiment of `projectId` made at `madeAt` whose pairs copied these runs. */
  const experiment = async (
    projectId: string,
    sources: string[],
    madeAt = Date.now(),
    status = "completed",
  ) => {
    const id = newId(madeAt);
    await insertExperiment(
      db,
      {
        id,
        project_id: projectId,
        name: "e",
        status,
        source: JSON.stringify({ query: "x" }) as never,
        target: JSON.stringify({ interaction: "i" }) as never,
        request: new Uint8Array(),
        concurrency: 1,
        selected: sources.length,
        skipped: 0,
      },
      sources.map((source, position) => ({
        position,
        source_run_id: source,
        input: JSON.stringify({ text: source }) as never,
        original: JSON.stringify({ summary: source }) as never,
        original_valid: true,
      })),
    );
    return id;
  };
  const left = async (ids: string[]) =>
    (
      await sql<{ id: string }>`select id from runs.experiments where id = any(${ids}::text[])
        order by id`.execute(db)
    ).rows.map((r) => r.id);

  it("go with a run deleted by id or by query, replayed or made by them; the others stay", async () => {
    const projectId = `exp-${newId()}`;
    const [a, b, c, d] = [newId(), newId(), newId(), newId()];
    const withA = await experiment(projectId, [a, b]);
    const withB = await experiment(projectId, [b]);
    const withC = await experiment(projectId, [c]);
    const withD = await experiment(projectId, [d]);
    await deleteRunById(db, a);
    expect(await left([withA, withB, withC])).toEqual([withB, withC].sort());
    await deleteRunIds(db, projectId, [b]);
    expect(await left([withA, withB, withC])).toEqual([withC]);
    const pairs = await sql<{ n: number }>`select count(*)::int as n from runs.experiment_pairs
      where experiment_id = any(${[withA, withB]}::text[])`.execute(db);
    expect(pairs.rows[0]!.n).toBe(0);
    // Its replay's run and its judge's run hold the same data.
    const [replay, judged] = [newId(), newId()];
    await sql`update runs.experiment_pairs set run_id = ${replay}
      where experiment_id = ${withC}`.execute(db);
    await sql`update runs.experiment_pairs set judge_run_id = ${judged}
      where experiment_id = ${withD}`.execute(db);
    await deleteRunById(db, replay);
    await deleteRunIds(db, projectId, [judged]);
    expect(await left([withC, withD])).toEqual([]);
  });

  it("made after their run was deleted leave it out, counted skipped", async () => {
    const projectId = `expd-${newId()}`;
    const [kept, deleted] = [newId(), newId()];
    await deleteRunById(db, deleted);
    const id = await experiment(projectId, [deleted, kept]);
    const { rows } = await sql<{ skipped: number; status: string }>`select skipped, status
      from runs.experiments where id = ${id}`.execute(db);
    expect(rows[0]).toEqual({ skipped: 1, status: "completed" });
    const pairs = await sql<{ source_run_id: string; position: number }>`select source_run_id,
      position from runs.experiment_pairs where experiment_id = ${id}`.execute(db);
    expect(pairs.rows).toEqual([{ source_run_id: kept, position: 0 }]);
    // All of them deleted: nothing to replay, ended at once.
    const none = await experiment(projectId, [deleted], Date.now(), "running");
    const ended = await sql<{ status: string; ended: boolean }>`select status,
      ended_at is not null as ended from runs.experiments where id = ${none}`.execute(db);
    expect(ended.rows[0]).toEqual({ status: "completed", ended: true });
  });

  it("go once a run they copied is past the retention, the deployment's or their project's", async () => {
    const projectId = `expr-${newId()}`;
    const shorter = `exps-${newId()}`;
    const old = newId(NOW - 20 * DAY_MS);
    const recent = newId(NOW - 2 * DAY_MS);
    const middle = newId(NOW - 5 * DAY_MS);
    const withOld = await experiment(projectId, [recent, old], NOW - DAY_MS);
    const withRecent = await experiment(projectId, [recent], NOW - DAY_MS);
    // One that selected nothing: it goes when it is as old.
    const emptyOld = await experiment(projectId, [], NOW - 15 * DAY_MS);
    const emptyNew = await experiment(projectId, [], NOW - DAY_MS);
    const shorterMiddle = await experiment(shorter, [middle], NOW - DAY_MS);
    // The same run's age in a project without a retention of its own: kept.
    const keptMiddle = await experiment(projectId, [middle], NOW - DAY_MS);
    const all = [withOld, withRecent, emptyOld, emptyNew, shorterMiddle, keptMiddle];
    const result = await applyRetention(db, {
      retentionDays: 10,
      projectDays: new Map([[shorter, 3]]),
      now: NOW,
      logger,
    });
    expect(result.experiments).toBe(3);
    expect(await left(all)).toEqual([withRecent, emptyNew, keptMiddle].sort());
  });
});
