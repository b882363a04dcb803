import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkRuns, Load, startFaultStack, type FaultStack, type LoadReport } from "@pies/testkit";

// The fault suite: pies' four processes on a PostgreSQL cluster and a NATS server of the test's
// own (never the shared ones), under a bounded load, while PostgreSQL restarts, NATS restarts, and
// each process in turn is killed (SIGKILL) and started again. Short clocks, so that the lease runs
// out within the test.
const LEASE_SECONDS = 3;
const TTL_SECONDS = 3;
const CLIENTS = 8;

let faulty: FaultStack | undefined;

beforeAll(async () => {
  faulty = await startFaultStack({
    leaseSeconds: LEASE_SECONDS,
    ttlSeconds: TTL_SECONDS,
    sseHeartbeatSeconds: 1,
    // Long enough that every fault finds executions in flight.
    blockingModel: "test-latency-200",
  });
}, 120_000);

afterAll(async () => {
  // Every process, server and directory goes, also when the test failed.
  await faulty?.stop();
});

/** Resolves once the load has `n` more successes than now: pies recovered by itself. */
async function recovered(load: Load, what: string, n = CLIENTS) {
  const target = load.snapshot().succeeded + n;
  const deadline = Date.now() + 30_000;
  while (load.snapshot().succeeded < target) {
    if (Date.now() > deadline) {
      throw new Error(`no recovery within 30 s after ${what}: ${JSON.stringify(load.snapshot())}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const describeReport = (report: LoadReport) =>
  JSON.stringify({
    ...report,
    completedRunIds: undefined,
    runIds: undefined,
    latenciesMs: undefined,
  });

describe("the fault suite", () => {
  it("survives PostgreSQL and NATS restarts and the loss of each process, losing no run", async () => {
    const { stack, pg, faults } = faulty!;
    const load = new Load({
      gatewayUrl: stack.gatewayUrl,
      key: stack.bootstrap.key,
      blockingInteraction: faulty!.blockingInteraction,
      streamedInteraction: faulty!.streamedInteraction,
      clients: CLIENTS,
      gatewayDown: faulty!.gatewayDown,
    }).start();
    let report: LoadReport;
    try {
      await recovered(load, "the start");
      for (const fault of faults) {
        await fault.apply();
        await recovered(load, fault.name);
      }
    } finally {
      report = await load.stop();
    }
    // The report, and what the processes logged apart from the 503s they answered.
    const logged = stack
      .output()
      .split("\n")
      .filter((line) => !line.includes('"code":14'))
      .slice(-80)
      .map((line) => line.slice(0, 1500));
    const context = `${describeReport(report)}\n${logged.join("\n")}`;
    // Soft: one failing promise does not hide whether the others held.
    expect.soft(stack.unexpectedExits(), context).toEqual([]);
    expect.soft(report.unexpectedErrors, context).toEqual({});
    expect.soft(report.streams.cut, context).toBe(0);
    expect.soft(report.streams.closed).toBeGreaterThan(0);
    expect.soft(report.completedRunIds.length).toBeGreaterThan(CLIENTS);

    // After the lease (and the ttl of streamed runs whose stream could not be opened) nothing is
    // left created or processing, and every run answered as completed is recorded so: runs reach
    // the store from the record log, and a record the killed runs replica held comes again after
    // the log's ack wait (10 s).
    const deadline = Date.now() + (LEASE_SECONDS + TTL_SECONDS + 20) * 1000;
    let check = await checkRuns(pg.url, report.completedRunIds);
    while ((check.stuck > 0 || check.lost.length > 0) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      check = await checkRuns(pg.url, report.completedRunIds);
    }
    expect.soft(check.stuck, JSON.stringify(check.byStatus)).toBe(0);
    expect.soft(check.lost, context).toEqual([]);
  }, 150_000);
});
