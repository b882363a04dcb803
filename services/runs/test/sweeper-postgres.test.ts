import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql, type Kysely } from "kysely";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { createTestDatabase, type TestDatabase } from "@pies/testkit";
import { migrations } from "../src/migrations/index.js";
import { sweepRuns, type SweepResult } from "../src/sweeper.js";
import type { RunsDatabase } from "../src/tables.js";

// The sweeper's claim on the real PostgreSQL server: every replica may sweep at once, because rows
// are claimed with `skip locked` and updated only while still in the state that qualified them.
// Each replica has its own pool here, as separate processes would.
let testDb: TestDatabase;
let replicaA: Kysely<RunsDatabase>;
let replicaB: Kysely<RunsDatabase>;

const LEASE_SECONDS = 30;

beforeAll(async () => {
  testDb = await createTestDatabase("sweeper");
  replicaA = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 4 });
  replicaB = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 4 });
  await migrateToLatest(replicaA, "runs", migrations);
});

afterAll(async () => {
  await replicaA?.destroy();
  await replicaB?.destroy();
  await testDb?.drop();
});

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
        as kinds(kind, status, stream, ttl, age)`.execute(replicaA);
}

/** Sweeps in small batches until a sweep finds nothing, adding up what it failed. */
async function sweepUntilDone(db: Kysely<RunsDatabase>): Promise<SweepResult & { sweeps: number }> {
  const total = { expired: 0, orphaned: 0, sweeps: 0 };
  for (;;) {
    const result = await sweepRuns(db, { leaseSeconds: LEASE_SECONDS, batch: 25 });
    total.sweeps++;
    if (result.expired === 0 && result.orphaned === 0) return total;
    total.expired += result.expired;
    total.orphaned += result.orphaned;
  }
}

/** How many runs of `project` end in each (kind, status, error code). */
async function outcome(project: string) {
  const { rows } = await sql<{ kind: string; status: string; code: string | null; n: number }>`
    select split_part(id, '-', 2) || case when id like '%-fresh-stream-%' then '-stream' else '' end
             as kind,
           status, error->>'code' as code, count(*)::int as n
    from runs.runs where project_id = ${project}
    group by 1, 2, 3 order by 1, 2, 3`.execute(replicaA);
  return rows;
}

describe("two sweepers at once on PostgreSQL", () => {
  it("fail every expired and orphaned run exactly once, miss none and touch no other", async () => {
    const project = "concurrent";
    const count = 400;
    await seed(project, count);

    const [a, b] = await Promise.all([sweepUntilDone(replicaA), sweepUntilDone(replicaB)]);

    // A run failed twice would be counted by both sweepers: the sums would exceed the runs.
    expect(a.expired + b.expired).toBe(count);
    expect(a.orphaned + b.orphaned).toBe(count);
    expect(await outcome(project)).toEqual([
      { kind: "alive", status: "processing", code: null, n: count },
      { kind: "blocking", status: "created", code: null, n: count },
      { kind: "expired", status: "failed", code: "stream_expired", n: count },
      { kind: "fresh-stream", status: "created", code: null, n: count },
      { kind: "orphaned", status: "failed", code: "executor_lost", n: count },
    ]);
  });

  it("skips the runs another sweeper holds instead of waiting for them", async () => {
    const project = "held";
    const count = 50;
    await seed(project, count);

    // Replica A is mid-sweep: it holds the row locks of ten expired and ten orphaned runs. A sweep
    // of replica B that waited for them would wait until this transaction ends: it is given 10 s.
    let sweptMeanwhile: SweepResult | "waited for the locks" | undefined;
    let sweep: Promise<SweepResult> | undefined;
    await replicaA.transaction().execute(async (trx) => {
      await sql`select id from runs.runs
                where id ~ ('^' || ${project} || '-(expired|orphaned)-([1-9]|10)$')
                for update`.execute(trx);
      sweep = sweepRuns(replicaB, { leaseSeconds: LEASE_SECONDS });
      let timer: NodeJS.Timeout | undefined;
      sweptMeanwhile = await Promise.race([
        sweep,
        new Promise<"waited for the locks">((resolve) => {
          timer = setTimeout(() => resolve("waited for the locks"), 10_000);
        }),
      ]);
      clearTimeout(timer);
    });
    await sweep; // ends once the locks are gone, whichever way the race went
    expect(sweptMeanwhile).toEqual({ expired: count - 10, orphaned: count - 10 });

    // Once the lock is gone the next sweep takes the runs it skipped.
    expect(await sweepRuns(replicaB, { leaseSeconds: LEASE_SECONDS })).toEqual({
      expired: 10,
      orphaned: 10,
    });
    expect(await sweepRuns(replicaA, { leaseSeconds: LEASE_SECONDS })).toEqual({
      expired: 0,
      orphaned: 0,
    });
  }, 30_000);
});
