import { availableParallelism, cpus } from "node:os";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  checkRuns,
  consumerNames,
  fillEventStream,
  Load,
  natsSubscriptions,
  startFaultStack,
  streamCounts,
  type FaultStack,
  type LoadReport,
} from "@pies/testkit";

// Steady state, short (issue 22; `npm run soak` is the long one): the four processes on a
// PostgreSQL cluster and a NATS server of the test's own, an event stream already holding tens of
// thousands of earlier runs' events, and a mixed load — half blocking executions, half streamed runs
// read to `close`, a quarter of whose clients reconnect (after close with the Last-Event-ID of a
// middle event, or none for the whole run again; or dropping mid-stream and resuming). Streams that
// reconnect leave the gateway's live path for the bus's replay: what they leave on the server must
// go when they end, and the throughput must hold.
//
// It runs in a vitest project of its own, after every other (vitest.config.ts, groupOrder), so that
// no other test file shares the machine during its windows; the two windows it compares are then
// measured under the same conditions, and their machine-wide CPU is in the message if they differ.
const CLIENTS = 24;
const RECONNECT_SHARE = 1 / 4;
const PREFILL_EVENTS = 50_000;
const LEASE_SECONDS = 5;
const WARMUP_S = 15;
const WINDOW_S = 30;
/** Between the two windows: time for what piles up to show. */
const MIDDLE_S = 20;
const LOAD_S = WARMUP_S + WINDOW_S + MIDDLE_S + WINDOW_S;
/** How long what the streams left may take to go after the load stops. */
const SETTLE_MS = 15_000;

let faulty: FaultStack | undefined;
let nc: NatsConnection | undefined;
let jsm: JetStreamManager;

beforeAll(async () => {
  faulty = await startFaultStack({
    leaseSeconds: LEASE_SECONDS,
    ttlSeconds: LEASE_SECONDS,
    sseHeartbeatSeconds: 5,
    blockingModel: "test-latency-100",
  });
  nc = await connect({ servers: faulty.nats.url, name: "steady-state-test" });
  jsm = await jetstreamManager(nc);
}, 120_000);

afterAll(async () => {
  // The servers go with their data (streams, databases), also when the test failed.
  await nc?.close();
  await faulty?.stop();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The machine's busy share of its CPUs since `before` (from os.cpus()), in %. */
function machineBusy(before: ReturnType<typeof cpus>) {
  let busy = 0;
  let total = 0;
  cpus().forEach((cpu, i) => {
    const a = before[i]!.times;
    const b = cpu.times;
    const all = (t: typeof a) => t.user + t.nice + t.sys + t.idle + t.irq;
    total += all(b) - all(a);
    busy += all(b) - all(a) - (b.idle - a.idle);
  });
  return total > 0 ? Math.round((busy / total) * 100) : NaN;
}

const summary = (report: LoadReport) =>
  JSON.stringify({
    ...report,
    completedRunIds: undefined,
    runIds: undefined,
    latenciesMs: undefined,
  });

describe("steady state under a mixed load with reconnecting clients", () => {
  it(
    "leaves no consumer or subscription behind, loses no run and holds its throughput",
    async () => {
      const { stack, pg, nats } = faulty!;
      const streams = {
        events: nats.env.PIES_NATS_STREAM!,
        records: `${nats.env.PIES_NATS_STREAM}_RECORDS`,
      };
      const read = async () => {
        const counts = await streamCounts(jsm, [streams.events, streams.records]);
        return {
          events: counts[streams.events]?.consumers,
          records: counts[streams.records]?.consumers,
          subscriptions: await natsSubscriptions(nats.monitorUrl),
        };
      };
      const load = (clients: number, reconnectShare: number, onOperation?: (at: number) => void) =>
        new Load({
          gatewayUrl: stack.gatewayUrl,
          key: stack.bootstrap.key,
          blockingInteraction: faulty!.blockingInteraction,
          streamedInteraction: faulty!.streamedInteraction,
          clients,
          reconnectShare,
          onOperation: (op) => {
            if (op.ok && op.kind !== "reopen") onOperation?.(op.endedAt);
          },
        });

      // The baseline. Consumers: before any run (pies' durable ones exist from the start).
      // Subscriptions: after a blocking run and a streamed one that reconnects, since a NATS client
      // makes some once, on first use (its request inbox), and keeps them.
      const initial = await read();
      const smoke = load(2, 1).start();
      const smoked = () => {
        const { succeeded, reconnects } = smoke.snapshot();
        return succeeded >= 2 && reconnects.closed >= 1;
      };
      while (!smoked()) await sleep(50);
      await smoke.stop();
      await sleep(1000);
      const baseline = { ...initial, subscriptions: (await read()).subscriptions };
      expect(baseline.events).toBeDefined();
      expect(baseline.records).toBeDefined();

      await fillEventStream({
        url: nats.url,
        stream: streams.events,
        subjectPrefix: nats.env.PIES_NATS_SUBJECT_PREFIX!,
        events: PREFILL_EVENTS,
      });

      // The load, and the operations that ended in each window.
      const ended: number[] = [];
      const running = load(CLIENTS, RECONNECT_SHARE, (at) => ended.push(at)).start();
      const started = Date.now();
      const windows = [WARMUP_S, LOAD_S - WINDOW_S].map((from) => ({
        from: started + from * 1000,
        to: started + (from + WINDOW_S) * 1000,
        busy: NaN,
      }));
      for (const window of windows) {
        while (Date.now() < window.from) await sleep(100);
        const before = cpus();
        while (Date.now() < window.to) await sleep(100);
        window.busy = machineBusy(before);
      }
      const report = await running.stop();
      const [first, last] = windows.map(
        (w) => ended.filter((at) => at >= w.from && at < w.to).length / WINDOW_S,
      );

      // What the streams left on the server goes once they have ended (bounded wait).
      const settleBy = Date.now() + SETTLE_MS;
      let after = await read();
      const settled = () =>
        after.events! <= baseline.events! &&
        after.records! <= baseline.records! &&
        after.subscriptions <= baseline.subscriptions;
      while (!settled() && Date.now() < settleBy) {
        await sleep(500);
        after = await read();
      }
      const left = await consumerNames(jsm, streams.events);

      // Runs reach the store from the record log in batches: wait, bounded, for every answered run.
      const runsBy = Date.now() + (2 * LEASE_SECONDS + 25) * 1000;
      let runs = await checkRuns(pg.url, report.completedRunIds);
      while ((runs.stuck > 0 || runs.lost.length > 0) && Date.now() < runsBy) {
        await sleep(500);
        runs = await checkRuns(pg.url, report.completedRunIds);
      }

      const context = [
        `baseline ${JSON.stringify(baseline)}, ${SETTLE_MS / 1000} s after the load ${JSON.stringify(after)}`,
        `event stream consumers listed: ${left.length} (${left.slice(0, 5).join(", ")}…)`,
        `throughput first ${first!.toFixed(1)}/s, last ${last!.toFixed(1)}/s; machine busy ${windows[0]!.busy}% / ${windows[1]!.busy}% of ${availableParallelism()} CPUs`,
        `load: ${summary(report)}`,
      ].join("\n");
      // Every assertion reports (soft), so that one failing does not hide the others.
      expect
        .soft(after.events, `event stream consumers back to baseline\n${context}`)
        .toBeLessThanOrEqual(baseline.events!);
      expect
        .soft(left.length, `event stream consumers listed\n${context}`)
        .toBeLessThanOrEqual(baseline.events!);
      expect
        .soft(after.records, `record stream consumers back to baseline\n${context}`)
        .toBeLessThanOrEqual(baseline.records!);
      expect
        .soft(after.subscriptions, `NATS subscriptions back to baseline\n${context}`)
        .toBeLessThanOrEqual(baseline.subscriptions);
      expect.soft(runs.lost, "runs answered completed but not recorded so").toEqual([]);
      expect.soft(runs.stuck, "runs left created or processing").toBe(0);
      expect.soft(report.unexpectedErrors, `unexpected errors\n${context}`).toEqual({});
      expect.soft(stack.unexpectedExits(), "processes that exited on their own").toEqual([]);
      // The reconnects happened, so that the replay path was exercised at all.
      expect
        .soft(report.reconnects.closed, `reconnected streams closed\n${context}`)
        .toBeGreaterThan(20);
      expect.soft(first, `throughput in the first window\n${context}`).toBeGreaterThan(0);
      expect
        .soft(last, `throughput last 30 s ≥ 80% of the first 30 s\n${context}`)
        .toBeGreaterThanOrEqual(0.8 * first!);
    },
    // Load, then up to SETTLE_MS and the runs' wait, with room for a slow machine.
    (LOAD_S + 90) * 1000,
  );
});
