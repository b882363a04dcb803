import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { Kysely } from "kysely";
import { pino } from "pino";
import type { NatsConnection } from "@nats-io/transport-node";
import { newId } from "@pies/common";
import { jetstreamManager } from "@nats-io/jetstream";
import { connectNats, JetStreamRunRecords, recordsFromConfig, RunLog } from "@pies/common/bus";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import { createTestDatabase, createTestStream, type TestDatabase } from "@pies/testkit";
import { loadRunsConfig } from "../src/config.js";
import { migrations } from "../src/migrations/index.js";
import { startRecordWriter } from "../src/record-writer.js";
import type { RunsDatabase } from "../src/tables.js";
import { setTimeout as sleep } from "node:timers/promises";

// JetStream drops a record at the log's maximum age whether the runs store has written it or not,
// and the consumer then skips it without a word: a store that falls behind by more than
// PIES_RECORD_MAX_AGE_SECONDS loses runs silently. The writer says so before it happens, from half
// the maximum age on, on the real JetStream and PostgreSQL (a database without the runs schema:
// every write fails, as while PostgreSQL is down). The maximum age is made 4 s here.
const MAX_AGE_SECONDS = 4;
let testDb: TestDatabase;
const stream = createTestStream();
let nc: NatsConnection;
let db: Kysely<RunsDatabase>;
const lines: { level: number; msg: string; behindSeconds?: number; maxAgeSeconds?: number }[] = [];
const logger = pino(
  { level: "info" },
  { write: (line: string) => void lines.push(JSON.parse(line)) },
);

beforeAll(async () => {
  testDb = await createTestDatabase("runs_behind");
  db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 4 });
  nc = await connectNats(stream.url, "runs-behind-test");
});

afterAll(async () => {
  await nc?.close();
  await stream.remove();
  await db?.destroy();
  await testDb?.drop();
});

const behind = () => lines.filter((l) => l.msg.includes("behind the record log"));

describe("the record writer falling behind the log", () => {
  it("logs an error once its records are older than half the log's maximum age", async () => {
    const records = await JetStreamRunRecords.over(nc, {
      stream: `${stream.stream}_RECORDS`,
      subjectPrefix: stream.subjectPrefix,
      maxAgeSeconds: MAX_AGE_SECONDS,
    });
    const log = new RunLog(records);
    const run = create(RunSchema, {
      id: newId(),
      projectId: "p1",
      interactionId: "i1",
      status: RunStatus.COMPLETED,
    });
    await log.put(run);
    const writer = startRecordWriter(db, records, logger);
    try {
      // Failing, the writer holds the record and retries: past 2 s it says how far behind it is.
      const deadline = Date.now() + MAX_AGE_SECONDS * 1000;
      while (behind().length === 0 && Date.now() < deadline) await sleep(100);
      const [said] = behind();
      expect(said, "no log of the store falling behind").toBeDefined();
      expect(said!.level).toBe(50); // error
      expect(said!.maxAgeSeconds).toBe(MAX_AGE_SECONDS);
      expect(said!.behindSeconds).toBeGreaterThanOrEqual(MAX_AGE_SECONDS / 2);
      expect(said!.msg).toContain("PIES_RECORD_MAX_AGE_SECONDS");
      // The database back, the record the writer held is written.
      await migrateToLatest(db, "runs", migrations);
      const written = async () =>
        db.selectFrom("runs.runs").select("id").where("id", "=", run.id).executeTakeFirst();
      const until = Date.now() + 10_000;
      while (!(await written()) && Date.now() < until) await sleep(100);
      expect(await written()).toEqual({ id: run.id });
    } finally {
      await writer.stop();
    }
  }, 30_000);

  it("says nothing while it keeps up", async () => {
    lines.length = 0;
    await migrateToLatest(db, "runs", migrations);
    const records = await JetStreamRunRecords.over(nc, {
      stream: `${stream.stream}_RECORDS`,
      subjectPrefix: stream.subjectPrefix,
      maxAgeSeconds: MAX_AGE_SECONDS,
    });
    const log = new RunLog(records);
    const writer = startRecordWriter(db, records, logger);
    try {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const run = create(RunSchema, {
          id: newId(),
          projectId: "p1",
          interactionId: "i1",
          status: RunStatus.COMPLETED,
        });
        ids.push(run.id);
        await log.put(run);
        await sleep(1000);
      }
      const rows = await db.selectFrom("runs.runs").select("id").where("id", "in", ids).execute();
      expect(rows).toHaveLength(3);
      expect(behind()).toEqual([]);
    } finally {
      await writer.stop();
    }
  }, 30_000);

  it("is told from 30 min on by default: the log made from the default settings keeps 1 h", async () => {
    // Not 24 h: every run of the window is a subject nats-server holds in memory, ~35 GiB at
    // 2,000 runs/s for 24 h (docs/decisions/0002-record-log-subjects.md).
    const config = loadRunsConfig({
      DATABASE_URL: testDb.url,
      PIES_INTERNAL_TOKEN: "x".repeat(32),
      PIES_NATS_STREAM: `${stream.stream}D`,
      PIES_NATS_SUBJECT_PREFIX: `${stream.subjectPrefix}d`,
    });
    expect(config.PIES_RECORD_MAX_AGE_SECONDS).toBe(3600);
    await recordsFromConfig(nc, config);
    const jsm = await jetstreamManager(nc);
    try {
      const info = await jsm.streams.info(`${stream.stream}D_RECORDS`);
      expect(info.config.max_age).toBe(3600 * 1e9);
      expect(info.config.max_msgs_per_subject).toBe(1);
    } finally {
      await jsm.streams.delete(`${stream.stream}D_RECORDS`);
    }
  });
});
