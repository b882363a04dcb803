import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompiledQuery, type Kysely } from "kysely";
import { setTimeout as sleep } from "node:timers/promises";
import { create, toBinary } from "@bufbuild/protobuf";
import type { NatsConnection } from "@nats-io/transport-node";
import { newId } from "@pies/common";
import { connectNats, recordsFromConfig, type RunRecord } from "@pies/common/bus";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import { createTestDatabase, createTestStream, type TestDatabase } from "@pies/testkit";
import { loadRunsConfig } from "../src/config.js";
import { migrations } from "../src/migrations/index.js";
import { writeRecords } from "../src/record-writer.js";
import { startRuns } from "../src/start.js";
import type { RunsDatabase } from "../src/tables.js";

// What a recorded run costs the store: the writer's upsert is a prepared statement (parsed and
// planned once per connection, not per batch), and under a steady flow of records the runs
// service writes fewer, larger batches (PIES_RECORD_BATCH_INTERVAL_MS apart).
let testDb: TestDatabase;

beforeAll(async () => {
  testDb = await createTestDatabase("runs_cost");
  const db = createDatabase({ url: testDb.url, poolMax: 1 });
  await migrateToLatest(db, "runs", migrations);
  await db.destroy();
});

afterAll(async () => {
  await testDb?.drop();
});

const record = (projectId: string, seq: number, status = RunStatus.COMPLETED): RunRecord => {
  const id = newId();
  return {
    runId: id,
    seq,
    data: toBinary(
      RunSchema,
      create(RunSchema, { id, projectId, interactionId: "i", modelId: "m", status, tags: ["t"] }),
    ),
  };
};

/** The project's rows as the writer left them (without the times the server sets). */
async function rowsOf(db: Kysely<RunsDatabase>, projectId: string) {
  const rows = await db
    .selectFrom("runs.runs")
    .selectAll()
    .where("project_id", "=", projectId)
    .orderBy("record_seq")
    .execute();
  return rows.map(({ heartbeat_at: _h, created_at: _c, updated_at: _u, ...row }) => row);
}

describe("the record writer's upsert", () => {
  it("is a prepared statement on its connection, and writes what the unnamed one writes", async () => {
    const written: Record<string, unknown>[][] = [];
    for (const prepared of [true, false]) {
      const db = createDatabase<RunsDatabase>({
        url: testDb.url,
        poolMax: 1,
        preparedStatements: prepared,
      });
      try {
        const projectId = `p-${newId()}`;
        // Two batches on the one connection: inserts, then an update of one run.
        const first = [record(projectId, 1), record(projectId, 2, RunStatus.PROCESSING)];
        await writeRecords(db, first);
        const ended = create(RunSchema, {
          id: first[1]!.runId,
          projectId,
          interactionId: "i",
          modelId: "m",
          status: RunStatus.FAILED,
        });
        await writeRecords(db, [{ runId: ended.id, seq: 3, data: toBinary(RunSchema, ended) }]);
        const { rows } = await db.executeQuery<{ name: string }>(
          CompiledQuery.raw("select name from pg_prepared_statements"),
        );
        // Named after its text too (preparedStatement).
        expect(rows.map((r) => r.name.replace(/_[0-9a-f]{12}$/, "_<text>"))).toEqual(
          prepared ? ["runs_record_upsert_<text>"] : [],
        );
        written.push(
          (await rowsOf(db, projectId)).map(({ id: _i, project_id: _p, ...row }) => row),
        );
      } finally {
        await db.destroy();
      }
    }
    expect(written[0]!.map((r) => r.status)).toEqual(["completed", "failed"]);
    expect(written[0]).toEqual(written[1]);
  });

  it("still writes after its connection lost its prepared statements", async () => {
    const db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 1 });
    try {
      const projectId = `p-${newId()}`;
      await writeRecords(db, [record(projectId, 1)]);
      await db.executeQuery(CompiledQuery.raw("deallocate all"));
      await writeRecords(db, [record(projectId, 2)]);
      expect((await rowsOf(db, projectId)).map((r) => r.record_seq)).toEqual([1, 2]);
    } finally {
      await db.destroy();
    }
  });
});

describe("the runs service's writer", () => {
  let nc: NatsConnection;
  const stream = createTestStream();

  afterAll(async () => {
    await nc?.close();
    await stream.remove();
  });

  it("writes a steady flow of records in batches PIES_RECORD_BATCH_INTERVAL_MS apart", async () => {
    const config = loadRunsConfig({
      HOST: "127.0.0.1",
      PORT: "0",
      DATABASE_URL: testDb.url,
      NATS_URL: stream.url,
      PIES_NATS_STREAM: stream.stream,
      PIES_NATS_SUBJECT_PREFIX: stream.subjectPrefix,
      PIES_INTERNAL_TOKEN: "t".repeat(32),
      PIES_RECORD_BATCH_INTERVAL_MS: "400",
      LOG_LEVEL: "silent",
    });
    const runs = await startRuns(config);
    const db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 1 });
    try {
      nc = await connectNats(stream.url, "runs-cost-test");
      const records = await recordsFromConfig(nc, config);
      const projectId = `p-${newId()}`;
      // A record every 25 ms for 1.5 s: about 16 per interval.
      const flowStarted = performance.now();
      for (let i = 0; i < 60; i++) {
        const { runId, data } = record(projectId, 0);
        await records.put(runId, data, { dedupId: runId });
        await sleep(25);
      }
      await expect
        .poll(async () => (await rowsOf(db, projectId)).length, { timeout: 10_000 })
        .toBe(60);
      const flowTook = performance.now() - flowStarted;
      // The rows of one batch share its transaction's time (heartbeat_at = now()). Every batch
      // started within flowTook, at least the interval apart: that bounds their number however
      // long the puts took (a busy machine). Without the interval, about one batch per record.
      const batches = await db
        .selectFrom("runs.runs")
        .select("heartbeat_at")
        .distinct()
        .where("project_id", "=", projectId)
        .execute();
      expect(batches.length).toBeLessThanOrEqual(Math.floor(flowTook / 400) + 1);
    } finally {
      await db.destroy();
      await runs.stop();
    }
  }, 30_000);
});
