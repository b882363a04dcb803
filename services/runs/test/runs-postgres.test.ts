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
import type { NatsConnection } from "@nats-io/transport-node";
import { createLogger, newId, toTimestamp } from "@pies/common";
import { connectNats, recordsFromConfig, RunLog } from "@pies/common/bus";
import { buildIndexes, createDatabase, migrateToLatest } from "@pies/common/db";
import { createTestDatabase, createTestStream, type TestDatabase } from "@pies/testkit";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import {
  RunSchema,
  RunsService,
  RunStatus,
  type RunFilters,
  type RunFiltersSchema,
} from "@pies/proto/runs";
import { indexBuilds } from "../src/migrations/index-builds.js";
import { migrations } from "../src/migrations/index.js";
import { startRecordWriter, writeRecords } from "../src/record-writer.js";
import { runsRoutes } from "../src/service.js";
import type { RunsDatabase } from "../src/tables.js";

// The runs store on the real PostgreSQL server and JetStream: migrations, the record log written
// in batches, the conditional update under concurrency, and the indexes behind the list query.
let testDb: TestDatabase;
const stream = createTestStream();
let nc: NatsConnection;
let log: RunLog;
let writer: { stop(): Promise<void> } | undefined;
let db: Kysely<RunsDatabase>;
let runs: Client<typeof RunsService>;
let logged: Kysely<RunsDatabase>;
/** SQL of every query the service runs, in order (to EXPLAIN exactly what it sends). */
const queries: CompiledQuery[] = [];

type FiltersInit = Exclude<MessageInitShape<typeof RunFiltersSchema>, RunFilters>;

const INDEXES = [
  "runs_active_idx",
  "runs_environment_idx",
  "runs_interaction_idx",
  "runs_model_idx",
  "runs_parent_idx",
  "runs_pkey",
  "runs_project_parameters_idx",
  "runs_project_strings_trgm_idx",
  "runs_project_updated_cost_cover_idx",
  "runs_status_idx",
  "runs_tags_idx",
];

beforeAll(async () => {
  testDb = await createTestDatabase("runs");
  db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 25 });
  // The service over its own pool whose queries are recorded.
  const pool = new pg.Pool({ connectionString: testDb.url, max: 25 });
  pool.on("error", () => {}); // a session ended by the server while idle is not a test failure
  logged = new Kysely<RunsDatabase>({
    dialect: new PostgresDialect({ pool }),
    log: (event) => {
      if (event.level === "query") queries.push(event.query);
    },
  });
  await migrateToLatest(db, "runs", migrations);
  await buildIndexes(db, "runs", indexBuilds);
  nc = await connectNats(stream.url, "runs-test");
  log = new RunLog(
    await recordsFromConfig(nc, {
      PIES_NATS_STREAM: stream.stream,
      PIES_NATS_SUBJECT_PREFIX: stream.subjectPrefix,
      PIES_RECORD_MAX_AGE_SECONDS: 600,
    }),
  );
  runs = createClient(RunsService, createRouterTransport(runsRoutes({ db: logged, log })));
});

afterAll(async () => {
  await writer?.stop();
  await nc?.close();
  await stream.remove();
  await logged?.destroy();
  await db?.destroy();
  await testDb?.drop();
});

const rowOf = (id: string) =>
  db
    .selectFrom("runs.runs")
    .select(["status", "record_seq"])
    .where("id", "=", id)
    .executeTakeFirst();

async function indexNames(kysely: Kysely<any>): Promise<string[]> {
  const { rows } = await sql<{ indexname: string }>`
    select indexname from pg_indexes where schemaname = 'runs' and tablename = 'runs' order by indexname
  `.execute(kysely);
  return rows.map((r) => r.indexname);
}

async function appliedMigrations(kysely: Kysely<any>): Promise<string[]> {
  const { rows } = await sql<{
    name: string;
  }>`select name from runs.kysely_migration order by name`.execute(kysely);
  return rows.map((r) => r.name);
}

describe("migrations", () => {
  it("apply on a fresh database and are idempotent, as the index builds are", async () => {
    // beforeAll migrated the fresh database once and built its indexes.
    expect(await indexNames(db)).toEqual(INDEXES);
    expect(await appliedMigrations(db)).toEqual(Object.keys(migrations));
    await migrateToLatest(db, "runs", migrations);
    await migrateToLatest(db, "runs", migrations);
    expect(await buildIndexes(db, "runs", indexBuilds)).toEqual({
      built: [],
      present: indexBuilds.map((b) => b.name),
      skipped: [],
      busy: false,
    });
    expect(await indexNames(db)).toEqual(INDEXES);
    expect(await appliedMigrations(db)).toEqual(Object.keys(migrations));
  });

  it("succeed when two processes migrate the same fresh database at once (one builds the indexes)", async () => {
    const fresh = await createTestDatabase("runsmig");
    // Two processes: two pools.
    const a = createDatabase<RunsDatabase>({ url: fresh.url, poolMax: 2 });
    const b = createDatabase<RunsDatabase>({ url: fresh.url, poolMax: 2 });
    try {
      // The race is on the first creation of the schema: repeat it from scratch a few times.
      for (let round = 0; round < 8; round++) {
        await sql`drop schema if exists runs cascade`.execute(a);
        const results = await Promise.allSettled([
          migrateToLatest(a, "runs", migrations).then(() => buildIndexes(a, "runs", indexBuilds)),
          migrateToLatest(b, "runs", migrations).then(() => buildIndexes(b, "runs", indexBuilds)),
        ]);
        const failures = results.flatMap((r) =>
          r.status === "rejected" ? [`round ${round}: ${(r.reason as Error).message}`] : [],
        );
        expect(failures).toEqual([]);
        expect(await indexNames(a)).toEqual(INDEXES);
        expect(await appliedMigrations(b)).toEqual(Object.keys(migrations));
      }
    } finally {
      await a.destroy();
      await b.destroy();
      await fresh.drop();
    }
  });
});

describe("the record log and the store", () => {
  it("answers a recorded run before any writer has stored it (read-your-writes)", async () => {
    const projectId = `project-${newId()}`;
    const id = newId();
    await runs.createRun({
      run: { id, projectId, interactionId: "i", status: RunStatus.PROCESSING },
    });
    expect(await rowOf(id)).toBeUndefined();
    expect((await runs.getRun({ projectId, id })).run?.status).toBe(RunStatus.PROCESSING);
    // Another project's run is as unknown as one that never was.
    await expect(runs.getRun({ projectId: "project-other", id })).rejects.toMatchObject({
      code: Code.NotFound,
    });
    await runs.updateRun({ projectId, id, update: { status: RunStatus.COMPLETED } });
    expect((await runs.getRun({ projectId, id })).run?.status).toBe(RunStatus.COMPLETED);
    writer ??= startRecordWriter(db, log.records, createLogger("runs-test", "silent"));
    await expect.poll(async () => (await rowOf(id))?.status, { timeout: 10_000 }).toBe("completed");
  });

  it("writes batches that repeat or arrive out of order as the latest records say", async () => {
    const projectId = `project-${newId()}`;
    const record = (id: string, status: RunStatus, seq: number) => ({
      runId: id,
      seq,
      data: toBinary(RunSchema, create(RunSchema, { id, projectId, interactionId: "i", status })),
    });
    const [a, b, c] = [newId(), newId(), newId()];
    // a: its end comes before its start; b: the same batch twice; c: start and end in one batch.
    await writeRecords(db, [
      record(a, RunStatus.COMPLETED, 11),
      record(b, RunStatus.PROCESSING, 12),
    ]);
    await writeRecords(db, [
      record(a, RunStatus.PROCESSING, 10),
      record(b, RunStatus.PROCESSING, 12),
    ]);
    await writeRecords(db, [record(c, RunStatus.FAILED, 14), record(c, RunStatus.PROCESSING, 13)]);
    expect(await rowOf(a)).toEqual({ status: "completed", record_seq: 11 });
    expect(await rowOf(b)).toEqual({ status: "processing", record_seq: 12 });
    expect(await rowOf(c)).toEqual({ status: "failed", record_seq: 14 });
  });

  it("keeps a record it can never decode aside and writes the others, then goes on", async () => {
    const projectId = `project-${newId()}`;
    const put = (id: string, data: Uint8Array) =>
      log.records.put(id, data, { dedupId: `${id}-${newId()}` });
    const run = (id: string, init: MessageInitShape<typeof RunSchema> = {}) =>
      toBinary(
        RunSchema,
        create(RunSchema, {
          id,
          projectId,
          interactionId: "i",
          status: RunStatus.COMPLETED,
          ...init,
        }),
      );
    // A repaired run (attempts: the full decoder) whose answer is not JSON.
    const [a, bad, b, c] = [newId(), newId(), newId(), newId()];
    const badData = run(bad, {
      resultJson: Buffer.from("[[not json"),
      attempts: [{ number: 1 }, { number: 2 }],
    });
    await put(a, run(a));
    const badSeq = await put(bad, badData);
    await put(b, run(b));
    writer ??= startRecordWriter(db, log.records, createLogger("runs-test", "silent"));
    await expect.poll(async () => (await rowOf(b))?.status, { timeout: 10_000 }).toBe("completed");
    expect((await rowOf(a))?.status).toBe("completed");
    expect(await rowOf(bad)).toBeUndefined();
    const { rows } = await sql<{ run_id: string; data: Buffer; error: string }>`
      select run_id, data, error from runs.dead_records where record_seq = ${badSeq}`.execute(db);
    expect(rows).toHaveLength(1);
    const [kept] = rows;
    expect(kept?.run_id).toBe(bad);
    expect(new Uint8Array(kept!.data)).toEqual(badData);
    expect(kept?.error).toMatch(/not JSON/);
    // The writer went on: a later record is written too.
    await put(c, run(c));
    await expect.poll(async () => (await rowOf(c))?.status, { timeout: 10_000 }).toBe("completed");
    // Written again (a batch retried), the dead record is kept once.
    await writeRecords(db, [{ runId: bad, seq: badSeq, data: badData }]);
    const { rows: again } = await sql<{ n: string }>`
      select count(*) as n from runs.dead_records where record_seq = ${badSeq}`.execute(db);
    expect(Number(again[0]?.n)).toBe(1);
  });
});

describe("the conditional update under concurrency", () => {
  it("lets exactly one of 20 concurrent created → processing updates succeed", async () => {
    const projectId = `project-${newId()}`;
    for (let attempt = 0; attempt < 3; attempt++) {
      const { run } = await runs.createRun({
        run: { id: newId(), projectId, interactionId: "i", status: RunStatus.CREATED },
      });
      const results = await Promise.allSettled(
        Array.from({ length: 20 }, () =>
          runs.updateRun({
            projectId,
            id: run!.id,
            expectedStatus: RunStatus.CREATED,
            update: { status: RunStatus.PROCESSING },
          }),
        ),
      );
      const succeeded = results.filter((r) => r.status === "fulfilled");
      const failed = results.flatMap((r) => (r.status === "rejected" ? [r.reason as unknown] : []));
      expect(succeeded).toHaveLength(1);
      expect(failed).toHaveLength(19);
      for (const err of failed) {
        expect(err).toBeInstanceOf(ConnectError);
        expect(Code[(err as ConnectError).code]).toBe(Code[Code.FailedPrecondition]);
      }
      const { run: current } = await runs.getRun({ projectId, id: run!.id });
      expect(current!.status).toBe(RunStatus.PROCESSING);
    }
  });
});

describe("the list query", () => {
  const projectId = "project-explain";

  beforeAll(async () => {
    // 40,000 runs in 4 projects, 400 interactions, 4 statuses, 20 models and environments.
    await sql`
      insert into runs.runs
        (id, project_id, account_id, interaction_id, model_id, environment_id, status, parent_id, tags, updated_at)
      -- Ids as pies makes them: the creation time (here, the last update's) in ms, then random.
      select lpad(to_hex((extract(epoch from timestamptz '2026-01-01' + g * interval '1 second') * 1000)::bigint), 12, '0')
               || lpad(to_hex(g), 12, '0'),
             case when g % 4 = 0 then ${projectId} else 'project-other-' || (g % 4) end,
             'account',
             'interaction-' || (g % 400),
             'model-' || (g % 20),
             'env-' || (g % 23),
             (array['created', 'processing', 'completed', 'failed'])[1 + (g / 4) % 4],
             case when g % 10 = 0 then 'parent-' || (g % 1000) end,
             array['tag-' || (g % 50)],
             timestamptz '2026-01-01' + g * interval '1 second'
      from generate_series(1, 40000) g
    `.execute(db);
    await sql`analyze runs.runs`.execute(db);
  });

  /** The plan of the query ListRuns sends for these filters. */
  async function planOf(filters: FiltersInit): Promise<string> {
    queries.length = 0;
    const { runs: listed } = await runs.listRuns({ projectId, filters });
    expect(listed.length).toBeGreaterThan(0);
    // The last: a page the last days' partitions cannot answer is read over all of them after.
    const query = queries.findLast((q) => /^select .* from "runs"\."runs"/.test(q.sql));
    expect(query, queries.map((q) => q.sql).join("\n")).toBeDefined();
    const { rows } = await db.executeQuery<Record<string, string>>(
      CompiledQuery.raw(`explain ${query!.sql}`, [...query!.parameters]),
    );
    return rows.map((r) => r["QUERY PLAN"]).join("\n");
  }

  it.each([
    ["an interaction_ids filter", { interactionIds: ["interaction-8"] }, "runs_interaction_idx"],
    ["a status filter", { status: RunStatus.FAILED }, "runs_status_idx"],
    ["a models filter", { models: ["model-4"] }, "runs_model_idx"],
    ["an environment_ids filter", { environmentIds: ["env-4"] }, "runs_environment_idx"],
    ["a parent_id filter", { parentId: "parent-40" }, "runs_parent_idx"],
    ["no filter", {}, "runs_project_updated_cost_cover_idx"],
    ["top level only", { topLevelOnly: true }, "runs_project_updated_cost_cover_idx"],
    ["a tags filter", { tags: ["tag-8"] }, "runs_"],
    [
      "an anchor date",
      { anchorDate: toTimestamp("2026-01-01T05:00:00Z") },
      "runs_project_updated_cost_cover_idx",
    ],
  ] as const)("uses an index with %s", async (_name, filters, index) => {
    const plan = await planOf(filters as FiltersInit);
    expect(plan).toContain(index);
    expect(plan).not.toMatch(/Seq Scan/);
  });

  it("filters by tags on the real server too (any tag in common)", async () => {
    // Project-explain holds the runs with g % 4 = 0; tag-8 is on g % 50 = 8, tag-12 on g % 50 = 12.
    const { runs: one } = await runs.listRuns({
      projectId,
      limit: 1000,
      filters: { tags: ["tag-8"] },
    });
    expect(one).toHaveLength(400);
    expect(one.every((r) => r.tags.includes("tag-8"))).toBe(true);
    const { runs: two } = await runs.listRuns({
      projectId,
      limit: 1000,
      filters: { tags: ["tag-8", "tag-12", "tag-missing"] },
    });
    expect(two).toHaveLength(800);
  });
});
