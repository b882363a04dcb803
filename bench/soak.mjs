#!/usr/bin/env node
// @ts-check
// pies soak: a sustained load of concurrent clients (half blocking executions, half streamed runs
// read to `close`, a share of whose clients reconnect) against pies on a PostgreSQL cluster and a
// NATS server of its own, from an event stream already holding an hour of the load's events, with
// optional faults spread over the run. Every interval it prints a row of what it measured (see
// bench/README.md); at the end the targets with pass/fail, a chart (SVG) and a JSON of every
// sample. Exit code 1 when a target is missed.
//   npm run soak -- [--duration 1800] [--clients 64] [--mode four|edge|embedded] [--faults]
//     [--reconnect-share 0.1667] [--prefill-seconds 3600 | --prefill-events N] [--interval 10]
//     [--warmup S]
//     [--out DIR] [--lease 5] [--node-args="A B"] [--env KEY=VALUE ...]
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { checkRuns, fillEventStream, Load } from "@pies/testkit";
import { rssMiB } from "./lib/cpu.mjs";
import { planPinning, pinSelf } from "./lib/pin.mjs";
import { soakChart } from "./lib/soak-chart.mjs";
import {
  columns,
  evaluateTargets,
  markdownHeader,
  markdownRow,
  planWindows,
  targetsTable,
} from "./lib/soak-report.mjs";
import {
  ClusterCpuMeter,
  CpuMeter,
  deadTuples,
  natsStateReader,
  OperationWindow,
  ReadyzProber,
} from "./lib/soak-sampler.mjs";
import { startTarget } from "./lib/soak-target.mjs";

/** @import { Fault, Operation } from "@pies/testkit" */
/** @import { Latencies, SoakSample } from "./lib/soak-report.mjs" */
/** @import { SoakTarget } from "./lib/soak-target.mjs" */

const USAGE = `npm run soak -- [options]
  --duration S          seconds of load (default 1800)
  --clients N           concurrent clients, half blocking, half streamed (default 64)
  --mode M              four | edge | embedded (default four)
  --faults              PostgreSQL and NATS restarts, SIGKILL of each process, spread over the run
  --reconnect-share R   share of streamed runs whose client reconnects (default 0.1667: 1 in 6)
  --prefill-seconds S   events stored before the load: S seconds at the load's rate (default 3600)
  --prefill-events N    or exactly N events (0: none)
  --calibrate S         seconds of load that measure the rate for --prefill-seconds (default 10)
  --interval S          seconds per row (default 10)
  --warmup S            seconds before the first window (default a sixth of the run, at most
                        300: V8 sizes the heap over the first minutes of a load)
  --out DIR             where the SVG chart and the JSON go (default a new temporary directory)
  --lease S             PIES_RUN_LEASE_SECONDS and TTL (default 5)
  --node-args="A B"     arguments to node for every pies process (e.g. "--trace-gc-nvp"); with
                        PIES_TEST_LOG_DIR set, each process's output goes to a file there
  --env KEY=VALUE       a setting for every pies process (repeatable; e.g. to compare two values)
BENCH_PIN=0 turns off CPU pinning (taskset: the bench on one CPU, pies' processes on another).`;

const { values: args } = parseArgs({
  options: {
    duration: { type: "string", default: "1800" },
    clients: { type: "string", default: "64" },
    mode: { type: "string", default: "four" },
    faults: { type: "boolean", default: false },
    "reconnect-share": { type: "string", default: String(1 / 6) },
    "prefill-seconds": { type: "string", default: "3600" },
    "prefill-events": { type: "string" },
    calibrate: { type: "string", default: "10" },
    interval: { type: "string", default: "10" },
    warmup: { type: "string" },
    out: { type: "string" },
    lease: { type: "string", default: "5" },
    "node-args": { type: "string", default: "" },
    env: { type: "string", multiple: true, default: [] },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(USAGE);
  process.exit(0);
}
/**
 * A numeric option, checked.
 * @param {"duration" | "clients" | "interval" | "warmup" | "lease" | "reconnect-share" | "prefill-seconds" | "prefill-events" | "calibrate"} name
 * @param {{ integer?: boolean, min?: number, max?: number }} [bounds]
 */
const number = (name, { integer = true, min = 1, max = Infinity } = {}) => {
  const n = Number(args[name]);
  if (!Number.isFinite(n) || (integer && !Number.isInteger(n)) || n < min || n > max) {
    throw new Error(`--${name} must be ${integer ? "an integer" : "a number"} in [${min}, ${max}]`);
  }
  return n;
};
const mode = args.mode;
const durationS = number("duration");
const clients = number("clients");
const intervalS = number("interval");
const leaseSeconds = number("lease");
// Seconds before the first window (default: a sixth of the run, at most 300; planWindows).
const warmupS =
  args.warmup === undefined ? undefined : number("warmup", { max: durationS - intervalS });
const reconnectShare = number("reconnect-share", { integer: false, min: 0, max: 1 });
const prefillSeconds = number("prefill-seconds", { min: 0 });
const prefillEvents =
  args["prefill-events"] === undefined ? undefined : number("prefill-events", { min: 0 });
const calibrateS = number("calibrate");
/** --env's settings, for every pies process. */
const settings = Object.fromEntries(
  args.env.map((setting) => {
    const at = setting.indexOf("=");
    if (at < 1) {
      console.error(`--env takes KEY=VALUE, not ${setting}\n\n${USAGE}`);
      process.exit(2);
    }
    return [setting.slice(0, at), setting.slice(at + 1)];
  }),
);
const stamp = new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
const outDir = args.out ?? mkdtempSync(path.join(os.tmpdir(), "pies-soak-"));
mkdirSync(outDir, { recursive: true });

const t0 = Date.now();
/** @param {string} message */
const log = (message) =>
  process.stderr.write(`[soak ${((Date.now() - t0) / 1000).toFixed(1)}s] ${message}\n`);
/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

let interrupted = false;
process.on("SIGINT", () => {
  if (interrupted) process.exit(130);
  interrupted = true;
  log("SIGINT: stopping the load and cleaning up (again to force)");
});

const pinning = planPinning();
if (pinning.enabled) pinSelf(pinning.loadCpu);

/**
 * A Load against the target, reporting each operation to `onOperation`.
 * @param {SoakTarget} target
 * @param {(operation: Operation) => void} [onOperation]
 */
const loadOf = (target, onOperation, n = clients, share = reconnectShare) =>
  new Load({
    gatewayUrl: target.gatewayUrl,
    key: target.key,
    blockingInteraction: target.blockingInteraction,
    streamedInteraction: target.streamedInteraction,
    clients: n,
    gatewayDown: target.gatewayDown,
    reconnectShare: share,
    onOperation,
  });

/**
 * The embedded mode's in-memory event bus filled as the NATS stream is before the load: with an
 * hour (--prefill-seconds) of the events this load stores, measured on it, or to the bus's bound
 * when that is less (the bus then forgets the oldest runs, as it will under the load). The load
 * itself fills it, with four times the clients, read from the gateway's /metrics; the bus starts
 * empty and, filling for the first quarter hour of a soak, made its memory grow then.
 * @param {SoakTarget} target
 * @returns {Promise<{ events: number, ms: number, rate: number | undefined, bytes: number }>}
 */
async function fillMemoryBus(target) {
  const held = async () => {
    const text = await (await fetch(`${target.gatewayUrl}/metrics`)).text();
    /** @param {string} name */
    const value = (name) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
    return { bytes: value("pies_event_bus_bytes"), maxBytes: value("pies_event_bus_max_bytes") };
  };
  const before = await held();
  if (!Number.isFinite(before.bytes))
    throw new Error("the gateway's /metrics shows no in-memory bus");
  log(
    `calibrating: ${clients} clients for ${calibrateS} s to measure the bytes the bus holds per s`,
  );
  const calibration = loadOf(target).start();
  const started = Date.now();
  let rate;
  try {
    await sleep(calibrateS * 1000);
    rate = ((await held()).bytes - before.bytes) / ((Date.now() - started) / 1000);
  } finally {
    await calibration.stop();
  }
  const goal = Math.min(rate * prefillSeconds, before.maxBytes * 0.98);
  log(
    `prefill: the bus to ${(goal / 2 ** 20).toFixed(1)} MiB (${(rate / 1024).toFixed(0)} KiB/s × ${prefillSeconds} s, at most its ${(before.maxBytes / 2 ** 20).toFixed(0)} MiB)`,
  );
  // Its clients are stopped whatever happens: a /metrics that fails leaves no load running.
  const filling = loadOf(target, undefined, clients * 4).start();
  const fillStarted = Date.now();
  let now;
  try {
    now = await held();
    while (now.bytes < goal && !interrupted) {
      await sleep(1000);
      now = await held();
    }
  } finally {
    await filling.stop();
  }
  const report = filling.snapshot();
  const ms = Date.now() - fillStarted;
  log(`prefill: ${(now.bytes / 2 ** 20).toFixed(1)} MiB held after ${(ms / 1000).toFixed(1)} s`);
  return { events: report.streams.closed, ms, rate: undefined, bytes: now.bytes };
}

/** @type {SoakTarget | undefined} */
let target;
/** @type {Awaited<ReturnType<typeof natsStateReader>> | undefined} */
let nats;
/** @type {ReadyzProber | undefined} */
let prober;
let failed = false;
// A throw outside the try below (in a listener or a timer) would end the soak at once, leaving
// PostgreSQL, NATS and pies running: what it started is stopped first.
let crashed = false;
/** @param {unknown} err */
const onCrash = async (err) => {
  log(`soak crashed: ${/** @type {Error | undefined} */ (err)?.stack ?? err}`);
  if (crashed) return;
  crashed = true;
  await prober?.stop().catch(() => {});
  await nats?.close().catch(() => {});
  await target?.stop().catch(() => {});
  process.exit(1);
};
process.on("uncaughtException", onCrash);
process.on("unhandledRejection", onCrash);
try {
  log(
    `mode ${mode}: starting PostgreSQL${mode === "embedded" ? "" : ", NATS"} and pies; ${pinning.note}`,
  );
  target = await startTarget(mode, {
    leaseSeconds,
    blockingModel: "test-latency-100",
    launcher: pinning.launcher,
    nodeArgs: args["node-args"].split(/\s+/).filter(Boolean),
    env: settings,
  });
  // (A target has both or neither.)
  if (target.nats && target.streams) {
    nats = await natsStateReader({ ...target.nats, streams: target.streams });
  }

  // The baseline the NATS figures must come back to after the load. Consumers: before any run
  // (pies' own durable ones exist from the start). Subscriptions: after a blocking run and a
  // streamed one that reconnects, since a NATS client makes some once, on first use (its request
  // inbox), and keeps them.
  const initial = await nats?.read();
  const smoke = loadOf(target, undefined, 2, 1).start();
  const smoked = () => {
    const { succeeded, reconnects } = smoke.snapshot();
    return succeeded >= 2 && reconnects.closed >= 1;
  };
  while (!smoked() && !interrupted) await sleep(50);
  await smoke.stop();
  await sleep(2000);
  const afterSmoke = await nats?.read();
  // (Both read when there is nats.)
  const baseline =
    initial && afterSmoke
      ? {
          events: initial.events,
          records: initial.records,
          subscriptions: afterSmoke.subscriptions,
        }
      : undefined;
  if (baseline) log(`baseline: ${JSON.stringify(baseline)}`);

  // The prefill: an hour (--prefill-seconds) of the events this load stores, measured on it.
  /** @type {{ events: number, ms: number, rate: number | undefined, bytes?: number }} */
  let prefill = { events: 0, ms: 0, rate: undefined };
  if (nats && target.nats && target.streams) {
    let events = prefillEvents;
    if (events === undefined && prefillSeconds > 0) {
      log(`calibrating: ${clients} clients for ${calibrateS} s to measure the events stored per s`);
      const before = (await nats.read()).events?.messages ?? 0;
      const calibration = loadOf(target).start();
      const started = Date.now();
      await sleep(calibrateS * 1000);
      const stored = ((await nats.read()).events?.messages ?? 0) - before;
      await calibration.stop();
      prefill.rate = stored / ((Date.now() - started) / 1000);
      events = Math.round(prefill.rate * prefillSeconds);
    }
    if (events !== undefined && events > 0) {
      log(
        `prefill: ${events} events (${prefill.rate ? `${prefill.rate.toFixed(0)}/s × ${prefillSeconds} s` : "as asked"})`,
      );
      const { ms } = await fillEventStream({
        url: target.nats.url,
        stream: target.streams.events,
        subjectPrefix: target.streams.subjectPrefix,
        events,
      });
      prefill = { ...prefill, events, ms };
      log(
        `prefill: stored in ${(ms / 1000).toFixed(1)} s (${((events / ms) * 1000).toFixed(0)}/s)`,
      );
    }
  } else if (!target.nats && prefillSeconds > 0 && prefillEvents === undefined) {
    prefill = await fillMemoryBus(target);
  }

  // The load, sampled every interval.
  const plan = planWindows(durationS, intervalS, warmupS);
  const operations = new OperationWindow();
  /** @type {Latencies} */
  let latencyWindow = { blocking: [], streamed: [] };
  const load = loadOf(target, (op) => {
    operations.add(op);
    if (op.ok && op.kind !== "reopen") latencyWindow[op.kind].push(op.latencyMs);
  });
  // Where the kubelet asks (PIES_PROBE_PORT, the chart's default).
  prober = new ReadyzProber(target.probeUrl);
  const cpu = new CpuMeter();
  const pgCpu = new ClusterCpuMeter();
  const processNames = target.processes().map((p) => p.name);
  const cols = columns(processNames);
  /** @type {SoakSample[]} */
  const samples = [];
  /** @type {Latencies[]} */
  const latencies = [];
  /** @type {string[]} */
  let faultsThisInterval = [];
  // What the closures below read (set above, never again).
  const soaked = target;
  const probes = prober;
  const servers = () => [
    ...soaked.processes(),
    ...(soaked.nats ? [{ name: "nats-server", pid: soaked.nats.pid() }] : []),
  ];
  /**
   * @param {string} phase
   * @param {number} t
   */
  const sample = async (phase, t) => {
    const percent = cpu.read(servers());
    /** @type {Record<string, number | undefined>} */
    const rss = {};
    for (const { name, pid } of soaked.processes()) rss[name] = rssMiB(pid);
    /** @type {SoakSample} */
    const s = {
      t,
      phase,
      ops: operations.take(),
      cpu: Object.fromEntries(processNames.map((n) => [n, percent[n]])),
      rss,
      nats: soaked.nats
        ? { cpu: percent["nats-server"], rss: rssMiB(soaked.nats.pid()) }
        : undefined,
      pgCpu: pgCpu.read(soaked.pg.pid()),
      ...(nats
        ? await nats.read().then(({ events, records, subscriptions }) => ({
            streams: { events, records },
            subscriptions,
          }))
        : {}),
      deadTuples: await deadTuples(soaked.pg.url),
      readyz: probes.take(),
      faults: faultsThisInterval,
    };
    faultsThisInterval = [];
    samples.push(s);
    latencies.push(latencyWindow);
    latencyWindow = { blocking: [], streamed: [] };
    console.log(markdownRow([...cols.map(([, of]) => of(s)), phase === "load" ? "" : phase]));
    return s;
  };

  log(
    `load: ${clients} clients for ${durationS} s, ${intervalS} s intervals, warm-up ${plan.warmup} and windows of ${plan.window} intervals` +
      `${args.faults ? ", with faults" : ""}; chart and JSON to ${outDir}`,
  );
  console.log(`\n${markdownHeader([...cols.map(([h]) => h), "note"])}`);
  cpu.read(servers());
  pgCpu.read(target.pg.pid());
  const started = Date.now();
  load.start();
  const faults = args.faults ? target.faults : [];
  const faultAt = faults.map(
    (_, i) => started + (durationS * 1000 * (i + 1)) / (faults.length + 1),
  );
  /** @type {{ name: string, at: number, ms: number }[]} */
  const applied = [];
  const faultLoop = (async () => {
    for (let i = 0; i < faults.length && !interrupted; i++) {
      while (Date.now() < /** @type {number} */ (faultAt[i]) && !interrupted) await sleep(100);
      if (interrupted) break;
      const { name, apply } = /** @type {Fault} */ (faults[i]);
      const before = Date.now();
      prober.faultStarted();
      try {
        await apply();
      } finally {
        prober.faultEnded();
      }
      applied.push({ name, at: (before - started) / 1000, ms: Date.now() - before });
      faultsThisInterval.push(name);
      log(`fault: ${name} (${Date.now() - before} ms)`);
    }
  })();
  for (let i = 1; i <= plan.intervals && !interrupted; i++) {
    const at = started + i * intervalS * 1000;
    while (Date.now() < at && !interrupted) await sleep(50);
    if (!interrupted) await sample("load", i * intervalS);
  }
  await faultLoop;
  log("stopping the load (clients finish their current operation)");
  const report = await load.stop();
  const loadSeconds = (Date.now() - started) / 1000;
  await sample("stopping", Math.round(loadSeconds));
  // ~10 s after the load: whatever streams left behind on the server is still there.
  await sleep(10_000);
  const after = await sample("after 10 s", Math.round((Date.now() - started) / 1000));
  await prober.stop();

  // Runs reach the store from the record log in batches: a record a killed runs replica held is
  // delivered again after the log's ack wait (10 s). So the check waits, bounded, for stuck runs
  // to be failed and for every answered run to be written.
  log(`waiting for the lease (${leaseSeconds} s) and the record log to settle the runs`);
  const deadline = Date.now() + (2 * leaseSeconds + 25) * 1000;
  let runs = await checkRuns(target.pg.url, report.completedRunIds);
  while ((runs.stuck > 0 || runs.lost.length > 0) && Date.now() < deadline && !interrupted) {
    await sleep(500);
    runs = await checkRuns(target.pg.url, report.completedRunIds);
  }
  const exits = target.unexpectedExits();
  const unexpected = Object.values(report.unexpectedErrors).reduce((a, b) => a + b, 0);

  const loadSamples = samples.filter((s) => s.phase === "load");
  const rows = evaluateTargets({
    samples: loadSamples,
    latencies: latencies.slice(0, loadSamples.length),
    plan,
    intervalS,
    baseline,
    after: after.streams && { ...after.streams, subscriptions: after.subscriptions },
    runs: { lost: runs.lost.length, stuck: runs.stuck },
    other: {
      "no unexpected error": { text: unexpected, pass: unexpected === 0 },
      "no process exited on its own": {
        text: exits.length ? JSON.stringify(exits) : 0,
        pass: exits.length === 0,
      },
      "load ran its full duration": { text: `${loadSeconds.toFixed(0)} s`, pass: !interrupted },
    },
  });
  /** @param {Record<string, number>} errors */
  const kinds = (errors) =>
    Object.entries(errors)
      .sort((a, b) => b[1] - a[1])
      .map(([kind, n]) => `${n} ${kind}`)
      .join(", ") || "none";
  console.log(
    `\n${mode}, ${clients} clients × ${loadSeconds.toFixed(0)} s; warm-up ${plan.warmup * intervalS} s, windows of ${plan.window * intervalS} s`,
  );
  console.log(
    prefill.bytes === undefined
      ? `prefill: ${prefill.events} events${prefill.rate ? ` (${prefill.rate.toFixed(0)} events/s measured × ${prefillSeconds} s)` : ""} in ${(prefill.ms / 1000).toFixed(1)} s`
      : `prefill: the in-memory bus filled to ${(prefill.bytes / 2 ** 20).toFixed(1)} MiB by the load (${prefill.events} streams read to close) in ${(prefill.ms / 1000).toFixed(1)} s`,
  );
  console.log(
    `faults: ${applied.map((f) => `${f.name} at ${f.at.toFixed(0)} s (${f.ms} ms)`).join("; ") || "none"}`,
  );
  console.log(
    `requests ${report.requests}, succeeded ${report.succeeded}; streams opened/closed/cut ${report.streams.opened}/${report.streams.closed}/${report.streams.cut}; ` +
      `reconnects ${JSON.stringify(report.reconnects)}; runs ${JSON.stringify(runs.byStatus)}`,
  );
  console.log(
    `errors expected during faults: ${kinds(report.expectedErrors)}; unexpected: ${kinds(report.unexpectedErrors)}`,
  );
  for (const [kind, example] of Object.entries(report.examples))
    console.log(`example of "${kind}": ${example}`);
  console.log(`\n${targetsTable(rows)}\n`);
  failed = rows.some((r) => !r.pass);

  const times = samples.map((s) => s.t);
  /**
   * @param {string} name
   * @param {(s: SoakSample) => number | undefined} of
   */
  const series = (name, of) => ({ name, values: samples.map(of) });
  const svg = soakChart({
    title: `pies soak: ${mode}, ${clients} clients, ${durationS} s${args.faults ? ", faults" : ""} (${stamp})`,
    times,
    bands: [
      { from: 0, to: plan.warmup * intervalS, label: "warm-up", color: "#ccc" },
      {
        from: plan.warmup * intervalS,
        to: (plan.warmup + plan.window) * intervalS,
        label: "first",
        color: "#9cf",
      },
      {
        from: (loadSamples.length - plan.window) * intervalS,
        to: loadSamples.length * intervalS,
        label: "last",
        color: "#9cf",
      },
    ],
    marks: [
      ...applied.map((f) => ({ at: f.at, label: f.name })),
      { at: loadSeconds, label: "load stops" },
    ],
    panels: [
      {
        title: `operations per ${intervalS} s`,
        unit: "ops",
        series: [
          series("total", (s) => s.ops.blocking.n + s.ops.streamed.n),
          series("blocking", (s) => s.ops.blocking.n),
          series("streamed", (s) => s.ops.streamed.n),
          series("reopened", (s) => s.ops.reopened),
        ],
      },
      {
        title: "p99 latency, /readyz max",
        unit: "ms",
        series: [
          series("blocking p99", (s) => s.ops.blocking.p99),
          series("streamed p99", (s) => s.ops.streamed.p99),
          series("/readyz max", (s) => s.readyz?.maxMs),
        ],
      },
      {
        title: "CPU (100 = one core)",
        unit: "%",
        series: [
          ...processNames.map((n) => series(n, (s) => s.cpu[n])),
          ...(target.nats ? [series("nats-server", (s) => s.nats?.cpu)] : []),
          series("postgres", (s) => s.pgCpu),
        ],
      },
      {
        title: "RSS",
        unit: "MiB",
        series: [
          ...processNames.map((n) => series(n, (s) => s.rss[n])),
          ...(target.nats ? [series("nats-server", (s) => s.nats?.rss)] : []),
        ],
      },
      ...(target.nats
        ? [
            {
              title: "NATS: consumers and subscriptions",
              unit: "count",
              series: [
                series("event stream consumers", (s) => s.streams?.events?.consumers),
                series("record stream consumers", (s) => s.streams?.records?.consumers),
                series("subscriptions", (s) => s.subscriptions),
              ],
            },
          ]
        : []),
      {
        title: "runs tables' dead tuples",
        unit: "tuples",
        series: [
          series("dead tuples", (s) =>
            s.deadTuples ? Object.values(s.deadTuples).reduce((a, b) => a + b, 0) : undefined,
          ),
        ],
      },
    ],
  });
  const base = path.join(outDir, `soak-${mode}-${stamp}`);
  writeFileSync(`${base}.svg`, svg);
  writeFileSync(
    `${base}.json`,
    JSON.stringify(
      {
        settings: {
          mode,
          clients,
          durationS,
          intervalS,
          faults: args.faults,
          reconnectShare,
          prefillSeconds,
          leaseSeconds,
          pinning: pinning.note,
        },
        plan,
        prefill,
        baseline,
        faults: applied,
        samples,
        report: {
          ...report,
          completedRunIds: undefined,
          runIds: undefined,
          latenciesMs: undefined,
        },
        runs: { ...runs, lost: runs.lost.slice(0, 20) },
        targets: rows,
      },
      null,
      1,
    ),
  );
  log(`chart: ${base}.svg; samples: ${base}.json`);
} catch (err) {
  failed = true;
  log(`soak failed: ${/** @type {Error | undefined} */ (err)?.stack ?? err}`);
} finally {
  log("cleaning up");
  await prober?.stop();
  await nats?.close().catch(() => {});
  await target?.stop();
}
process.exitCode = failed ? 1 : 0;
