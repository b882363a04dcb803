#!/usr/bin/env node
// pies soak: a bounded load of concurrent clients (half blocking executions, half streamed runs read
// to `close`) against the four processes on a PostgreSQL cluster and a NATS server of its own, with
// optional faults (PostgreSQL restart, NATS restart, SIGKILL of each process in turn, spread over the
// run). Prints requests, errors by kind, runs answered vs recorded, stuck runs and latency.
// Target: 0 lost, 0 stuck, no unexpected error. Exit code 1 when a target is missed.
//   npm run soak -- [--clients 64] [--duration 60] [--faults] [--lease 5]
import { parseArgs } from "node:util";
import { checkRuns, Load, startFaultStack } from "@pies/testkit";
import { percentile } from "./lib/stats.mjs";

const { values: args } = parseArgs({
  options: {
    clients: { type: "string", default: "64" },
    duration: { type: "string", default: "60" },
    faults: { type: "boolean", default: false },
    lease: { type: "string", default: "5" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log("npm run soak -- [--clients 64] [--duration 60 (s)] [--faults] [--lease 5 (s)]");
  process.exit(0);
}
const positive = (name) => {
  const n = Number(args[name]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer`);
  return n;
};
const clients = positive("clients");
const durationMs = positive("duration") * 1000;
const leaseSeconds = positive("lease");

const t0 = Date.now();
const log = (message) =>
  process.stderr.write(`[soak ${((Date.now() - t0) / 1000).toFixed(1)}s] ${message}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

let interrupted = false;
process.on("SIGINT", () => {
  if (interrupted) process.exit(130);
  interrupted = true;
  log("SIGINT: stopping the load and cleaning up (again to force)");
});

let faulty;
let failed = false;
try {
  log("starting PostgreSQL, NATS and the four processes");
  faulty = await startFaultStack({
    leaseSeconds,
    ttlSeconds: leaseSeconds,
    sseHeartbeatSeconds: 5,
    blockingModel: "test-latency-100",
  });
  const { pg, stack } = faulty;
  const faults = args.faults ? faulty.faults : [];
  log(`load: ${clients} clients for ${durationMs / 1000} s${faults.length ? ", with faults" : ""}`);
  const load = new Load({
    gatewayUrl: stack.gatewayUrl,
    key: stack.bootstrap.key,
    blockingInteraction: faulty.blockingInteraction,
    streamedInteraction: faulty.streamedInteraction,
    clients,
    gatewayDown: faulty.gatewayDown,
  }).start();
  const started = Date.now();
  const applied = [];
  for (let i = 0; i < faults.length && !interrupted; i++) {
    const at = started + (durationMs * (i + 1)) / (faults.length + 1);
    while (Date.now() < at && !interrupted) await sleep(100);
    const { name, apply } = faults[i];
    const before = Date.now();
    await apply();
    applied.push(`${name} (${Date.now() - before} ms)`);
    log(`fault: ${name}`);
  }
  while (Date.now() < started + durationMs && !interrupted) await sleep(100);
  log("stopping the load (clients finish their current execution)");
  const report = await load.stop();
  const wallMs = Date.now() - started;

  // Runs reach the store from the record log in batches: a record a killed runs replica held is
  // delivered again after the log's ack wait (10 s). So the check waits, bounded, for stuck runs
  // to be failed and for every answered run to be written.
  log(`waiting for the lease (${leaseSeconds} s) and the record log to settle the runs`);
  const deadline = Date.now() + (2 * leaseSeconds + 25) * 1000;
  let check = await checkRuns(pg.url, report.completedRunIds);
  while ((check.stuck > 0 || check.lost.length > 0) && Date.now() < deadline && !interrupted) {
    await sleep(500);
    check = await checkRuns(pg.url, report.completedRunIds);
  }
  const exits = stack.unexpectedExits();

  const latencies = [...report.latenciesMs].sort((a, b) => a - b);
  const kinds = (errors) =>
    Object.entries(errors)
      .sort((a, b) => b[1] - a[1])
      .map(([kind, n]) => `${n} ${kind}`)
      .join(", ") || "none";
  const unexpected = Object.values(report.unexpectedErrors).reduce((a, b) => a + b, 0);
  const rows = [
    ["clients × duration", `${clients} × ${(wallMs / 1000).toFixed(1)} s`],
    ["faults", applied.join("; ") || "none"],
    ["requests", report.requests],
    ["succeeded", report.succeeded],
    ["errors, expected during faults", kinds(report.expectedErrors)],
    ["errors, unexpected", kinds(report.unexpectedErrors)],
    [
      "streams opened / closed / cut",
      `${report.streams.opened} / ${report.streams.closed} / ${report.streams.cut} (+${report.streams.cutWhileGatewayDown} by the gateway's kill)`,
    ],
    ["runs answered completed", report.completedRunIds.length],
    ["  recorded completed", report.completedRunIds.length - check.lost.length],
    ["  lost (answered completed, recorded otherwise)", check.lost.length],
    ["runs recorded, by status", JSON.stringify(check.byStatus)],
    ["stuck runs (created/processing)", check.stuck],
    ["processes that exited on their own", exits.length ? JSON.stringify(exits) : 0],
    [
      "latency p50 / p99 (ms)",
      `${percentile(latencies, 50)?.toFixed(0)} / ${percentile(latencies, 99)?.toFixed(0)}`,
    ],
    ["throughput (successes/s)", ((report.succeeded * 1000) / wallMs).toFixed(1)],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  console.log(`\n| ${"measure".padEnd(width)} | value |\n| ${"-".repeat(width)} | ----- |`);
  for (const [k, v] of rows) console.log(`| ${k.padEnd(width)} | ${v} |`);
  for (const [kind, example] of Object.entries(report.examples)) {
    console.log(`example of "${kind}": ${example}`);
  }
  if (check.lost.length) console.log(`lost runs: ${JSON.stringify(check.lost.slice(0, 5))}`);
  failed = check.lost.length > 0 || check.stuck > 0 || unexpected > 0 || exits.length > 0;
} catch (err) {
  failed = true;
  log(`soak failed: ${err?.stack ?? err}`);
} finally {
  log("cleaning up");
  await faulty?.stop();
}
process.exitCode = failed ? 1 : 0;
