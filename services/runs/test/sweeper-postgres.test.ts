import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { sql, type Kysely } from "kysely";
import type { NatsConnection } from "@nats-io/transport-node";
import { createLogger } from "@pies/common";
import { connectNats, recordsFromConfig, RunLog } from "@pies/common/bus";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import { createTestDatabase, createTestStream, type TestDatabase } from "@pies/testkit";
import { migrations } from "../src/migrations/index.js";
import { startRecordWriter } from "../src/record-writer.js";
import { sweepRuns, type SweepResult } from "../src/sweeper.js";
import type { RunsDatabase } from "../src/tables.js";

// Two runs replicas sweeping at once, on the real PostgreSQL and JetStream: each fails a run with a
// put to the record log that is conditional on the record it read, so of two sweepers that fail the
// same run exactly one succeeds. Each replica has its own pool and NATS connection, as separate
// processes would, and both write the log into the store through the one durable consumer.
let testDb: TestDatabase;
const stream = createTestStream();
const logger = createLogger("sweeper-test", "silent");
const replicas: { db: Kysely<RunsDatabase>; nc: NatsConnection; log: RunLog }[] = [];

const LEASE_SECONDS = 30;

beforeAll(async () => {
  testDb = await createTestDatabase("sweeper");
  for (let i = 0; i < 2; i++) {
    const db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 4 });
    if (i === 0) await migrateToLatest(db, "runs", migrations);
    const nc = await connectNats(stream.url, `sweeper-test-${i}`);
    const records = await recordsFromConfig(nc, {
      PIES_NATS_STREAM: stream.stream,
      PIES_NATS_SUBJECT_PREFIX: stream.subjectPrefix,
      PIES_RECORD_MAX_AGE_SECONDS: 600,
    });
    replicas.push({ db, nc, log: new RunLog(records) });
  }
});

afterAll(async () => {
  for (const { db, nc } of replicas) {
    await db.destroy();
    await nc.close();
  }
  await stream.remove();
  await testDb?.drop();
});

/** Both replicas' writers, until stopped. */
function startWriters() {
  const writers = replicas.map(({ db, log }) => startRecordWriter(db, log.records, logger));
  return { stop: () => Promise.all(writers.map((w) => w.stop())) };
}

/**
 * Inserts `count` runs of each kind the sweeper ends (streamed runs past their ttl, processing runs
 * past their lease) and of each kind it must leave alone (fresh ones, blocking created ones), all
 * under `project`.
 */
async function seed(project: string, count: number): Promise<void> {
  await sql`
    insert into runs.runs (id, project_id, account_id, interaction_id, status, stream, ttl,
                           created_at, heartbeat_at)
    select ${project} || '-' || kind || '-' || n, ${project}, 'a', 'i', status, stream, ttl,
           now() - make_interval(secs => age), now() - make_interval(secs => age)
    from generate_series(1, ${count}) as n,
      (values ('expired', 'created', true, 10, 60),
              ('orphaned', 'processing', false, 0, ${LEASE_SECONDS * 2}),
              ('fresh-stream', 'created', true, 600, 60),
              ('alive', 'processing', false, 0, 1),
              ('blocking', 'created', false, 0, 3600))
        as kinds(kind, status, stream, ttl, age)`.execute(replicas[0]!.db);
}

/** Whether the store still holds runs of `project` that a sweep would fail. */
async function candidatesLeft(project: string): Promise<boolean> {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from runs.runs where project_id = ${project} and (
      (status = 'created' and stream and created_at + make_interval(secs => ttl) < now()) or
      (status = 'processing' and heartbeat_at < now() - make_interval(secs => ${LEASE_SECONDS})))
  `.execute(replicas[0]!.db);
  return (rows[0]?.n ?? 0) > 0;
}

/**
 * Sweeps in small batches until the store holds no run to fail (the failures reach it through the
 * log, a moment after each sweep), adding up what this sweeper failed.
 */
async function sweepUntilDone(
  replica: (typeof replicas)[number],
  project: string,
): Promise<SweepResult> {
  const total = { expired: 0, orphaned: 0 };
  const deadline = Date.now() + 60_000;
  while ((await candidatesLeft(project)) && Date.now() < deadline) {
    const result = await sweepRuns(replica.db, replica.log, {
      leaseSeconds: LEASE_SECONDS,
      batch: 25,
    });
    total.expired += result.expired;
    total.orphaned += result.orphaned;
    if (result.expired === 0 && result.orphaned === 0) await new Promise((r) => setTimeout(r, 20));
  }
  return total;
}

/** How many runs of `project` end in each (kind, status, error code). */
async function outcome(project: string) {
  const { rows } = await sql<{ kind: string; status: string; code: string | null; n: number }>`
    select split_part(id, '-', 2) || case when id like '%-fresh-stream-%' then '-stream' else '' end
             as kind,
           status, error->>'code' as code, count(*)::int as n
    from runs.runs where project_id = ${project}
    group by 1, 2, 3 order by 1, 2, 3`.execute(replicas[0]!.db);
  return rows;
}

describe("two sweepers at once on PostgreSQL and JetStream", () => {
  it("fail every expired and orphaned run exactly once, miss none and touch no other", async () => {
    const project = "concurrent";
    const count = 400;
    await seed(project, count);
    const writers = startWriters();
    try {
      const [a, b] = (await Promise.all(replicas.map((r) => sweepUntilDone(r, project)))) as [
        SweepResult,
        SweepResult,
      ];
      // A run failed twice would be counted by both sweepers: the sums would exceed the runs.
      expect(a.expired + b.expired).toBe(count);
      expect(a.orphaned + b.orphaned).toBe(count);
    } finally {
      await writers.stop();
    }
    expect(await outcome(project)).toEqual([
      { kind: "alive", status: "processing", code: null, n: count },
      { kind: "blocking", status: "created", code: null, n: count },
      { kind: "expired", status: "failed", code: "stream_expired", n: count },
      { kind: "fresh-stream", status: "created", code: null, n: count },
      { kind: "orphaned", status: "failed", code: "executor_lost", n: count },
    ]);
  }, 90_000);

  it("leaves alone a run whose end is recorded but not yet written to the store", async () => {
    const project = "unwritten";
    await seed(project, 1);
    const [replica] = replicas;
    // The executor recorded the end while no writer ran: the store still says processing.
    const id = `${project}-orphaned-1`;
    const ended = create(RunSchema, {
      id,
      projectId: project,
      accountId: "a",
      interactionId: "i",
      status: RunStatus.COMPLETED,
    });
    await replica!.log.put(ended, 0);
    expect(await sweepRuns(replica!.db, replica!.log, { leaseSeconds: LEASE_SECONDS })).toEqual({
      expired: 1,
      orphaned: 0,
    });
    const writers = startWriters();
    try {
      await expect
        .poll(async () => (await outcome(project)).find((r) => r.kind === "orphaned"), {
          timeout: 10_000,
        })
        .toEqual({ kind: "orphaned", status: "completed", code: null, n: 1 });
    } finally {
      await writers.stop();
    }
  }, 30_000);
});
