import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Kysely } from "kysely";
import type { NatsConnection } from "@nats-io/transport-node";
import { newId } from "@pies/common";
import { connectNats, recordsFromConfig, type RunRecord, type RunRecords } from "@pies/common/bus";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { createTestDatabase, createTestStream, type TestDatabase } from "@pies/testkit";
import { create, toBinary } from "@bufbuild/protobuf";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import { migrations } from "../src/migrations/index.js";
import { writeRecords } from "../src/record-writer.js";
import type { RunsDatabase } from "../src/tables.js";
import { setTimeout as sleep } from "node:timers/promises";

// A backlog of big records is written in batches bounded by bytes, not only by count: by count
// alone, ~500 records of 1 MiB made one JSON parameter past V8's string limit, and the writer
// retried that batch for ever. The bound is made small here so that small records show it.
let testDb: TestDatabase;
const stream = createTestStream();
let nc: NatsConnection;
let records: RunRecords;
let db: Kysely<RunsDatabase>;

beforeAll(async () => {
  testDb = await createTestDatabase("runs_bytes");
  db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 4 });
  await migrateToLatest(db, "runs", migrations);
  nc = await connectNats(stream.url, "runs-bytes-test");
  records = await recordsFromConfig(nc, {
    PIES_NATS_STREAM: stream.stream,
    PIES_NATS_SUBJECT_PREFIX: stream.subjectPrefix,
    PIES_RECORD_MAX_AGE_SECONDS: 600,
  });
});

afterAll(async () => {
  await nc?.close();
  await stream.remove();
  await db?.destroy();
  await testDb?.drop();
});

const BOUND = 100 * 1024;

describe("the record writer's batches", () => {
  it("bound a backlog of big records by bytes: all written, in several batches, none twice", async () => {
    const projectId = `project-${newId()}`;
    const run = (id: string, kib: number) =>
      toBinary(
        RunSchema,
        create(RunSchema, {
          id,
          projectId,
          interactionId: "i",
          status: RunStatus.COMPLETED,
          tags: ["x".repeat(kib * 1024)],
        }),
      );
    // Ten records of 30 KiB (three fit the bound) and one larger than the bound: a batch alone.
    const ids = Array.from({ length: 11 }, () => newId());
    const seqs = new Map<number, string>();
    for (const [i, id] of ids.entries()) {
      const seq = await records.put(id, run(id, i === 5 ? 150 : 30), { dedupId: newId() });
      seqs.set(seq, id);
    }
    const batches: RunRecord[][] = [];
    const errors: unknown[] = [];
    // The first write waits, so that the whole backlog has arrived when the next batches form.
    const consumer = records.consume(
      async (batch) => {
        batches.push(batch);
        if (batches.length === 1) await sleep(300);
        await writeRecords(db, batch);
      },
      { onError: (err) => errors.push(err), maxBatchBytes: BOUND },
    );
    try {
      await expect
        .poll(() => batches.flat().length, { timeout: 10_000 })
        .toBeGreaterThanOrEqual(ids.length);
      const rows = await db
        .selectFrom("runs.runs")
        .select("id")
        .where("project_id", "=", projectId)
        .execute();
      expect(rows.map((r) => r.id).sort()).toEqual([...ids].sort());
    } finally {
      await consumer.stop();
    }
    expect(errors).toEqual([]);
    // None twice, in log order, each batch within the bound unless it is one record.
    const delivered = batches.flat().map((r) => r.seq);
    expect(delivered).toEqual([...seqs.keys()]);
    for (const batch of batches) {
      const bytes = batch.reduce((n, r) => n + r.data.length, 0);
      if (batch.length > 1) expect(bytes).toBeLessThanOrEqual(BOUND);
    }
    expect(batches.length).toBeGreaterThanOrEqual(5);
    expect(batches.some((b) => b.length > 1)).toBe(true);
  });
});
