import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import {
  checkRuns,
  createLoadInteractions,
  createTestDatabase,
  freePort,
  gatewayApi,
  Load,
  startNatsCluster,
  startStack,
  type LoadReport,
  type NatsCluster,
  type Stack,
  type TestDatabase,
} from "@pies/testkit";

// pies' four processes on a three-node NATS cluster (PIES_NATS_REPLICAS=3) under a load of
// blocking and streamed executions, while the node that leads the record log is killed (SIGKILL)
// and stays down. Executions may fail while the cluster elects new leaders, but only with an
// error their caller sees; every run answered as completed is stored, none is left created or
// processing once the lease has run out, and every stream ends. Short clocks, generous waits:
// CI runs this on a busy two-core machine.
const LEASE_SECONDS = 5;
const TTL_SECONDS = 10;
const CLIENTS = 6;
/** How long the load goes on with the node down. */
const DOWN_MS = 20_000;
const STREAMS = ["PIES_RUNS", "PIES_RUNS_RECORDS", "PIES_RUNS_RESULTS"];

let cluster: NatsCluster | undefined;
let db: TestDatabase | undefined;
let stack: Stack | undefined;
let nc: NatsConnection | undefined;
let interactions: { blocking: { id: string }; streamed: { id: string } };
/** The runs service's metrics port: the record log's state, read from the cluster. */
let runsMetricsPort: number;

beforeAll(async () => {
  [cluster, db] = await Promise.all([startNatsCluster(3), createTestDatabase("nats_cluster")]);
  runsMetricsPort = await freePort();
  stack = await startStack({
    databaseUrl: db.url,
    natsEnv: { ...cluster.env, PIES_NATS_REPLICAS: "3" },
    env: {
      PIES_RUN_HEARTBEAT_SECONDS: "1",
      PIES_RUN_LEASE_SECONDS: String(LEASE_SECONDS),
      PIES_SWEEP_INTERVAL_SECONDS: "1",
      PIES_SSE_HEARTBEAT_SECONDS: "1",
      PIES_RUN_TTL_SECONDS: String(TTL_SECONDS),
    },
    processEnv: { runs: { PIES_METRICS_PORT: String(runsMetricsPort) } },
  });
  const running = stack;
  interactions = await createLoadInteractions(
    running.gatewayUrl,
    running.bootstrap.key,
    running.bootstrap.environment,
    "test-latency-200",
    () => running.output(),
  );
  nc = await connect({ servers: cluster.nodes.map((n) => n.url) });
}, 180_000);

afterAll(async () => {
  // Every process, node, directory and database goes, also when a test failed.
  await nc?.close().catch(() => {});
  await stack?.stop().catch(() => {});
  await cluster?.stop();
  await db?.drop();
}, 120_000);

/** Resolves once the load has `n` more successes than now; throws after `timeoutMs`. */
async function successes(load: Load, n: number, what: string, timeoutMs = 90_000) {
  const target = load.snapshot().succeeded + n;
  const deadline = Date.now() + timeoutMs;
  while (load.snapshot().succeeded < target) {
    if (Date.now() > deadline) {
      throw new Error(
        `no ${n} successes within ${timeoutMs} ms ${what}: ${summary(load.snapshot())}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const summary = (report: LoadReport) =>
  JSON.stringify({
    ...report,
    completedRunIds: report.completedRunIds.length,
    runIds: report.runIds.length,
    latenciesMs: undefined,
  });

describe("pies on a three-node NATS cluster", () => {
  it("keeps every stream on three nodes, and the record writer's consumer with them", async () => {
    const jsm = await jetstreamManager(nc!);
    for (const name of STREAMS) {
      const info = await jsm.streams.info(name);
      expect(info.config.num_replicas, name).toBe(3);
      expect(info.cluster?.replicas?.length, name).toBe(2);
    }
    // Made without num_replicas (0): it takes the stream's.
    const writer = await jsm.consumers.info("PIES_RUNS_RECORDS", "runs-store");
    expect(writer.config.num_replicas ?? 0).toBe(0);
    expect(writer.cluster?.replicas?.length).toBe(2);
  });

  it("loses no answered run when the record log's leader is killed under load", async () => {
    const running = stack!;
    const api = gatewayApi(running.gatewayUrl, running.bootstrap.key);
    const load = new Load({
      gatewayUrl: running.gatewayUrl,
      key: running.bootstrap.key,
      blockingInteraction: interactions.blocking.id,
      streamedInteraction: interactions.streamed.id,
      clients: CLIENTS,
      errorEventsExpected: true,
    }).start();
    let report: LoadReport;
    let killed = "";
    let beforeKill: LoadReport;
    let recoveredMs = 0;
    try {
      await successes(load, CLIENTS * 2, "before the kill");
      const jsm = await jetstreamManager(nc!);
      killed = (await jsm.streams.info("PIES_RUNS_RECORDS")).cluster?.leader ?? "";
      const node = cluster!.nodes.find((n) => n.name === killed);
      expect(node, `the record log's leader ${killed}`).toBeDefined();
      beforeKill = load.snapshot();
      const killedAt = Date.now();
      await node!.kill("SIGKILL");
      await successes(load, CLIENTS, "after the kill");
      recoveredMs = Date.now() - killedAt;
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, DOWN_MS - recoveredMs)));
      await successes(load, CLIENTS * 2, "with the node down");
    } finally {
      report = await load.stop();
    }
    const failedDuringElection = Object.values(report.expectedErrors).reduce((a, b) => a + b, 0);
    console.log(
      `killed ${killed} (meta leader now ${await cluster!.metaLeader()}); first ${CLIENTS} ` +
        `successes ${recoveredMs} ms after; ${report.requests} requests, ${report.succeeded} ` +
        `succeeded (${report.succeeded - beforeKill!.succeeded} after the kill), ` +
        `${failedDuringElection} failed with an error the caller saw: ` +
        `${JSON.stringify(report.expectedErrors)}; streams ${JSON.stringify(report.streams)}`,
    );
    // The writer's pull, dropped and made anew when the node took it (record-writer.ts).
    const stalls = running
      .output()
      .split("\n")
      .filter((l) => l.includes("pulling anew"));
    console.log(`record writer's pull made anew ${stalls.length} times\n${stalls.join("\n")}`);
    const context = `${summary(report)}\n${running.output().split("\n").slice(-60).join("\n")}`;
    expect.soft(running.unexpectedExits(), context).toEqual([]);
    // Failures only as answers: never a hang (a timeout), a cut stream, or a 500.
    expect.soft(report.unexpectedErrors, context).toEqual({});
    expect.soft(report.streams.cut, context).toBe(0);
    expect.soft(report.streams.closed).toBeGreaterThan(0);

    // Every run answered as completed reads as completed through the API at once (from the
    // store, or from the record log before its batch is written).
    const notCompleted: string[] = [];
    const ids = [...report.completedRunIds];
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        for (let id = ids.pop(); id !== undefined; id = ids.pop()) {
          const response = await api(`/runs/${id}`);
          const run = response.ok ? ((await response.json()) as { status: string }) : undefined;
          if (run?.status !== "completed") notCompleted.push(`${id}: ${response.status}`);
        }
      }),
    );
    expect.soft(notCompleted, context).toEqual([]);

    // In the store too, and nothing left created or processing after the lease and the ttl (a
    // record held by the writer when its consumer moved comes again after the ack wait, 10 s).
    const deadline = Date.now() + (LEASE_SECONDS + TTL_SECONDS + 45) * 1000;
    let check = await checkRuns(db!.url, report.completedRunIds);
    while ((check.stuck > 0 || check.lost.length > 0) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      check = await checkRuns(db!.url, report.completedRunIds);
    }
    expect.soft(check.stuck, JSON.stringify(check.byStatus)).toBe(0);
    expect.soft(check.lost, context).toEqual([]);

    // The runs service reads the log's state from the cluster's new leaders: all written.
    const metrics = await (await fetch(`http://127.0.0.1:${runsMetricsPort}/metrics`)).text();
    const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(metrics)?.[1]);
    const records = value("pies_record_log_messages");
    console.log(
      `record log: ${records} records, ${value("pies_record_log_bytes")} bytes; ` +
        `writers pending ${value("pies_record_writer_pending")}`,
    );
    expect.soft(records).toBeGreaterThanOrEqual(report.completedRunIds.length);
    expect.soft(value("pies_record_writer_pending")).toBe(0);
    expect(report.completedRunIds.length).toBeGreaterThan(CLIENTS * 4);
  }, 360_000);
});
