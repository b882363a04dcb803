import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { sql, type Kysely } from "kysely";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { newId } from "@pies/common";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import {
  createTestDatabase,
  createTestStream,
  freePort,
  repoRoot,
  startProcess,
  type ManagedProcess,
  type TestDatabase,
  type TestStream,
} from "@pies/testkit";
import { pruneDeadRecords } from "../src/dead-records.js";
import { replayDeadRecords } from "../src/dead-records-replay.js";
import { migrations } from "../src/migrations/index.js";
import { DAY_MS, listPartitions, PARTITION_DAYS_AHEAD } from "../src/partitions.js";
import { writeRecords } from "../src/record-writer.js";
import type { RunsDatabase } from "../src/tables.js";

// The dead records (runs.dead_records: records the writer could not decode) on a real
// PostgreSQL: replayed by `pies-runs replay-dead-records` once they decode, bounded in rows and
// age, and counted in the runs service's metrics.
let testDb: TestDatabase;
let db: Kysely<RunsDatabase>;

beforeAll(async () => {
  testDb = await createTestDatabase("runs_dead");
  db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 4 });
  await migrateToLatest(db, "runs", migrations);
});

afterAll(async () => {
  await db?.destroy();
  await testDb?.drop();
});

beforeEach(async () => {
  await sql`truncate runs.dead_records`.execute(db);
});

const projectId = `project-${newId()}`;
const run = (id: string, init: MessageInitShape<typeof RunSchema> = {}) =>
  toBinary(
    RunSchema,
    create(RunSchema, { id, projectId, interactionId: "i", status: RunStatus.COMPLETED, ...init }),
  );
/** A run whose answer is not JSON: no decoder of this release reads it. */
const undecodable = (id: string) => run(id, { resultJson: Buffer.from("[[not json") });

/** Keeps records aside as the writer does, `daysAgo` old. */
async function keepDead(records: { seq: number; runId: string; data: Uint8Array }[], daysAgo = 0) {
  for (const r of records) {
    await sql`insert into runs.dead_records (record_seq, run_id, data, error, created_at)
      values (${r.seq}, ${r.runId}, ${Buffer.from(r.data)}, 'an older decoder failed',
              now() - make_interval(days => ${daysAgo}) + make_interval(secs => ${r.seq}))`.execute(
      db,
    );
  }
}

const deadSeqs = async () =>
  (
    await sql<{ record_seq: string }>`
      select record_seq from runs.dead_records order by record_seq`.execute(db)
  ).rows.map((r) => Number(r.record_seq));

const statusOf = async (id: string) =>
  (await db.selectFrom("runs.runs").select("status").where("id", "=", id).executeTakeFirst())
    ?.status;

describe("pies-runs replay-dead-records", () => {
  it("writes the dead records that now decode and deletes them; the others stay", async () => {
    const [good, bad] = [newId(), newId()];
    await keepDead([
      { seq: 101, runId: good, data: run(good) },
      { seq: 102, runId: bad, data: undecodable(bad) },
    ]);
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["services/runs/dist/cli.js", "replay-dead-records"],
      { cwd: repoRoot, env: { PATH: process.env.PATH ?? "", DATABASE_URL: testDb.url } },
    );
    const report = JSON.parse(stdout);
    expect(report).toMatchObject({ replayed: 1, undecodable: 1, kept: 1 });
    expect(report.examples).toEqual([
      { seq: 102, runId: bad, error: expect.stringMatching(/not JSON/) },
    ]);
    expect(await statusOf(good)).toBe("completed");
    expect(await statusOf(bad)).toBeUndefined();
    expect(await deadSeqs()).toEqual([102]);
  });

  it("leaves a run alone whose later record was written meanwhile", async () => {
    const id = newId();
    // The run's start was kept aside; its end, at sequence 6, was written by the writer.
    await keepDead([{ seq: 5, runId: id, data: run(id, { status: RunStatus.PROCESSING }) }]);
    await writeRecords(db, [{ runId: id, seq: 6, data: run(id) }]);
    expect(await replayDeadRecords(db)).toMatchObject({ replayed: 1, undecodable: 0 });
    expect(await statusOf(id)).toBe("completed");
    expect(await deadSeqs()).toEqual([]);
  });

  it("writes back no run past the retention, as the writer would not", async () => {
    const old = newId(Date.now() - 40 * 24 * 3600 * 1000);
    await keepDead([{ seq: 7, runId: old, data: run(old) }]);
    expect(await replayDeadRecords(db, { retentionDays: 30 })).toMatchObject({ replayed: 1 });
    expect(await statusOf(old)).toBeUndefined();
    expect(await deadSeqs()).toEqual([]);
  });
});

describe("the dead records' bounds", () => {
  it("keeps the newest PIES_DEAD_RECORDS_MAX, deleting in batches", async () => {
    const records = Array.from({ length: 1200 }, (_, i) => ({
      seq: i + 1,
      runId: `r${i}`,
      data: undecodable(`r${i}`),
    }));
    await keepDead(records);
    expect(await pruneDeadRecords(db, { maxRows: 100, maxAgeDays: 0 })).toBe(1100);
    const kept = await deadSeqs();
    expect(kept).toHaveLength(100);
    expect(kept[0]).toBe(1101);
    expect(await pruneDeadRecords(db, { maxRows: 100, maxAgeDays: 0 })).toBe(0);
  });

  it("deletes those older than PIES_DEAD_RECORDS_MAX_AGE_DAYS, and none by age at 0", async () => {
    await keepDead([{ seq: 1, runId: "old", data: undecodable("old") }], 40);
    await keepDead([{ seq: 2, runId: "new", data: undecodable("new") }], 1);
    expect(await pruneDeadRecords(db, { maxRows: 10, maxAgeDays: 0 })).toBe(0);
    expect(await pruneDeadRecords(db, { maxRows: 10, maxAgeDays: 30 })).toBe(1);
    expect(await deadSeqs()).toEqual([2]);
  });
});

describe("the runs service's metrics", () => {
  let stream: TestStream;
  let runs: ManagedProcess | undefined;

  afterAll(async () => {
    await runs?.stop();
    await stream?.remove();
  });

  it("prune the dead records at start and count them, and the record log, in /metrics; partitions as wide as configured", async () => {
    stream = createTestStream();
    await keepDead(
      Array.from({ length: 5 }, (_, i) => ({
        seq: 1000 + i,
        runId: `m${i}`,
        data: undecodable(`m${i}`),
      })),
    );
    const metricsPort = await freePort();
    runs = startProcess("runs-metrics", "services/runs/dist/main.js", {
      ...stream.env,
      HOST: "127.0.0.1",
      PORT: String(await freePort()),
      DATABASE_URL: testDb.url,
      PIES_METRICS_PORT: String(metricsPort),
      PIES_DEAD_RECORDS_MAX: "2",
      // Not the default width (a week): the process passes it to the partitions it makes.
      PIES_RUN_PARTITION_DAYS: "1",
    });
    const scrape = async () => {
      const response = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      return response.ok ? response.text() : "";
    };
    const value = (text: string, name: string) =>
      Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
    let text = "";
    await expect
      .poll(
        async () => {
          text = await scrape().catch(() => "");
          return value(text, "pies_runs_dead_records_deleted_total");
        },
        { timeout: 30_000, interval: 200 },
      )
      .toBe(3);
    expect(await deadSeqs()).toEqual([1003, 1004]);
    expect(value(text, "pies_runs_dead_records"), runs.output()).toBe(2);
    expect(value(text, "pies_record_log_messages")).toBe(0);
    expect(value(text, "pies_record_log_bytes")).toBe(0);
    expect(value(text, "pies_record_log_max_bytes")).toBe(4 * 1024 ** 3);
    expect(value(text, "pies_record_writer_pending")).toBe(0);
    expect(text).toContain("pies_runs_process_cpu_seconds_total");
    // Made before the writer started: today's and the days ahead, each a day wide.
    const made = (await listPartitions(db)).filter((p) => !p.isDefault);
    expect(made.length, runs.output()).toBe(PARTITION_DAYS_AHEAD + 1);
    for (const p of made) expect(parseInt(p.to!, 16) - parseInt(p.from!, 16)).toBe(DAY_MS);
  });
});
