import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { PGlite } from "@electric-sql/pglite";
import { sql, type Kysely } from "kysely";
import { createLogger, DatabaseFaults, newId } from "@pies/common";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { RunsService, RunStatus } from "@pies/proto/runs";
import { MemoryRunRecords, RecordTooLarge, RunLog, type RunRecords } from "@pies/common/bus";
import { migrations } from "./migrations/index.js";
import { startRunsStore } from "./record-writer.js";
import { runsRoutes } from "./service.js";
import { leaseObserved, startSweeper, sweepRuns } from "./sweeper.js";
import type { RunsDatabase } from "./tables.js";

let db: Kysely<RunsDatabase>;
let runs: Client<typeof RunsService>;
let store: ReturnType<typeof startRunsStore>;

beforeAll(async () => {
  db = createDatabase<RunsDatabase>({ pglite: await PGlite.create() });
  await migrateToLatest(db, "runs", migrations);
  store = startRunsStore(db, new MemoryRunRecords(), createLogger("sweeper-test", "silent"));
  runs = createClient(RunsService, createRouterTransport(runsRoutes({ db, log: store.log })));
});

afterAll(async () => {
  await store.stop();
  await db.destroy();
});

const projectId = "project-sweep";

async function run(status: RunStatus, options: { stream?: boolean; ttl?: number } = {}) {
  const id = newId();
  await runs.createRun({
    run: {
      id,
      projectId,
      accountId: "a",
      interactionId: "i",
      status,
      stream: options.stream ?? false,
      ttl: options.ttl ?? 0,
    },
  });
  return id;
}

/** Moves a run's clocks into the past, as if `seconds` had gone by. */
async function age(id: string, seconds: number) {
  await sql`update runs.runs set created_at = created_at - make_interval(secs => ${seconds}),
            heartbeat_at = heartbeat_at - make_interval(secs => ${seconds}) where id = ${id}`.execute(
    db,
  );
}

const state = async (id: string) => {
  const { run } = await runs.getRun({ projectId, id });
  return { status: run!.status, code: run!.error?.code };
};

describe("the run sweeper", () => {
  it("fails streamed runs not opened within their ttl, and only those", async () => {
    const late = await run(RunStatus.CREATED, { stream: true, ttl: 30 });
    const fresh = await run(RunStatus.CREATED, { stream: true, ttl: 30 });
    await age(late, 31);
    await age(fresh, 10);
    const result = await sweepRuns(db, store.log, { leaseSeconds: 60 });
    expect(result.expired).toBeGreaterThanOrEqual(1);
    expect(await state(late)).toEqual({ status: RunStatus.FAILED, code: "stream_expired" });
    expect(await state(fresh)).toEqual({ status: RunStatus.CREATED, code: undefined });
  });

  it("fails processing runs whose executor stopped sending heartbeats", async () => {
    const orphan = await run(RunStatus.PROCESSING);
    const alive = await run(RunStatus.PROCESSING);
    const done = await run(RunStatus.COMPLETED);
    for (const id of [orphan, alive, done]) await age(id, 120);
    expect(await runs.heartbeatRuns({ runIds: [alive, done, "unknown"] })).toMatchObject({
      alive: 1,
    });
    await sweepRuns(db, store.log, { leaseSeconds: 60 });
    expect(await state(orphan)).toEqual({ status: RunStatus.FAILED, code: "executor_lost" });
    expect(await state(alive)).toEqual({ status: RunStatus.PROCESSING, code: undefined });
    expect(await state(done)).toEqual({ status: RunStatus.COMPLETED, code: undefined });
  });

  it("goes on to the next run when one is too large to record as failed", async () => {
    const big = await run(RunStatus.PROCESSING);
    const orphan = await run(RunStatus.PROCESSING);
    for (const id of [big, orphan]) await age(id, 120);
    const records: RunRecords = store.log.records;
    const refusing = new RunLog({
      put: (runId, data, options) =>
        runId === big
          ? Promise.reject(new RecordTooLarge(runId, 2_000_000, 1_000_000))
          : records.put(runId, data, options),
      last: (runId) => records.last(runId),
      consume: (write, options) => records.consume(write, options),
      ready: () => records.ready(),
    });
    const result = await sweepRuns(db, refusing, { leaseSeconds: 60 });
    expect(result.orphaned).toBeGreaterThanOrEqual(1);
    await expect
      .poll(() => state(orphan))
      .toEqual({
        status: RunStatus.FAILED,
        code: "executor_lost",
      });
    expect(await state(big)).toEqual({ status: RunStatus.PROCESSING, code: undefined });
  });

  it("starts the lease when a run moves to processing", async () => {
    const id = await run(RunStatus.CREATED, { stream: true, ttl: 300 });
    await age(id, 120);
    await runs.updateRun({
      projectId,
      id,
      update: { status: RunStatus.PROCESSING },
      expectedStatus: RunStatus.CREATED,
    });
    await sweepRuns(db, store.log, { leaseSeconds: 60 });
    expect((await state(id)).status).toBe(RunStatus.PROCESSING);
  });

  it("leaves processing runs alone in a sweep that may not fail orphans, but still expires", async () => {
    const orphan = await run(RunStatus.PROCESSING);
    const late = await run(RunStatus.CREATED, { stream: true, ttl: 30 });
    for (const id of [orphan, late]) await age(id, 120);
    const result = await sweepRuns(db, store.log, { leaseSeconds: 60, orphans: false });
    expect(result.orphaned).toBe(0);
    expect(await state(orphan)).toEqual({ status: RunStatus.PROCESSING, code: undefined });
    expect(await state(late)).toEqual({ status: RunStatus.FAILED, code: "stream_expired" });
  });
});

describe("the sweeper's grace after a start or a database fault", () => {
  it("lets a full lease pass since the start and since the last fault", () => {
    const lease = { leaseSeconds: 60 };
    const t = 1_000_000;
    expect(leaseObserved({ ...lease, now: t + 59_999, startedAt: t, lastFaultAt: 0 })).toBe(false);
    expect(leaseObserved({ ...lease, now: t + 60_000, startedAt: t, lastFaultAt: 0 })).toBe(true);
    expect(
      leaseObserved({ ...lease, now: t + 90_000, startedAt: t, lastFaultAt: t + 40_000 }),
    ).toBe(false);
    expect(
      leaseObserved({ ...lease, now: t + 100_000, startedAt: t, lastFaultAt: t + 40_000 }),
    ).toBe(true);
  });

  it("fails no orphan until a lease has passed since it started, nor after a database fault", async () => {
    const logger = createLogger("sweeper-test", "silent");
    const faults = new DatabaseFaults();
    const orphan = await run(RunStatus.PROCESSING);
    await age(orphan, 120);
    const sweeper = startSweeper(
      db,
      store.log,
      logger,
      { leaseSeconds: 2, intervalMs: 50 },
      faults,
    );
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    try {
      // Sweeps run every 50 ms; within the first lease after the start they leave it alone.
      await sleep(1200);
      expect((await state(orphan)).status).toBe(RunStatus.PROCESSING);
      // A fault (the service could not reach its database) starts the grace again: a lease has
      // passed since the start, not since the fault.
      faults.note();
      await sleep(1200);
      expect((await state(orphan)).status).toBe(RunStatus.PROCESSING);
      // A lease after the fault, a sweep fails it.
      for (let i = 0; i < 100 && (await state(orphan)).status === RunStatus.PROCESSING; i++) {
        await sleep(50);
      }
      expect(await state(orphan)).toEqual({ status: RunStatus.FAILED, code: "executor_lost" });
      expect(Date.now() - faults.lastAt).toBeGreaterThanOrEqual(2000);
    } finally {
      await sweeper.stop();
    }
  });
});
