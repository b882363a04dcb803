#!/usr/bin/env node
// @ts-check
// What PIES_NATS_REPLICAS=3 costs the record log's put, and how long a put waits when the log's
// leader dies. Starts a three-node JetStream cluster on loopback (testkit's startNatsCluster: its
// own store directories, removed at the end) and makes the log exactly as pies makes it
// (JetStreamRunRecords.over) once with one replica and once with three. For each:
//   - the put's latency one at a time (RR_SEQUENTIAL puts; p50, p99), through the real put
//     (RunLog.put of the bench's completed run, with its Nats-Msg-Id);
//   - throughput with RR_WINDOW puts in flight (RR_PUTS puts in all).
// Then, on the three-replica log under a paced flow of puts (one every 10 ms, each retried as the
// executor does, every 100 ms), the log's leader is killed (SIGKILL): how long the flow stalls (the
// longest gap between two acknowledged puts) and how many attempts failed meanwhile; and the
// records put before the kill are all read back (none lost). RR_KILLS rounds (each on a fresh
// cluster). Prints a markdown table.
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { connectNats, JetStreamRunRecords, RunLog } from "@pies/common/bus";
import { jetstreamManager } from "@nats-io/jetstream";
import { startNatsCluster } from "@pies/testkit";
import { benchRun } from "./lib/sample-run.mjs";
import { percentile } from "./lib/stats.mjs";

const SEQUENTIAL = Number(process.env.RR_SEQUENTIAL ?? 2000);
const PUTS = Number(process.env.RR_PUTS ?? 20000);
const WINDOW = Number(process.env.RR_WINDOW ?? 256);
const KILLS = Number(process.env.RR_KILLS ?? 3);

/** @param {number} n */
const round = (n) => Math.round(n * 100) / 100;

/**
 * @param {import("@nats-io/transport-node").NatsConnection} nc
 * @param {number} replicas
 */
async function logOf(nc, replicas) {
  const records = await JetStreamRunRecords.over(nc, {
    stream: `BENCH_R${replicas}_RECORDS`,
    subjectPrefix: `benchr${replicas}`,
    maxAgeSeconds: 3600,
    replicas,
  });
  return new RunLog(records);
}

/** @param {RunLog} log */
async function measure(log) {
  /** @type {number[]} */
  const latencies = [];
  for (let i = 0; i < SEQUENTIAL; i++) {
    const started = performance.now();
    await log.put(benchRun(i));
    latencies.push(performance.now() - started);
  }
  latencies.sort((a, b) => a - b);
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WINDOW }, async () => {
      while (next < PUTS) await log.put(benchRun(next++));
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return {
    p50: round(percentile(latencies, 50) ?? NaN),
    p99: round(percentile(latencies, 99) ?? NaN),
    perSecond: Math.round(PUTS / seconds),
  };
}

async function killRound() {
  const cluster = await startNatsCluster(3);
  const nc = await connectNats(cluster.url, "bench-records-replicas");
  try {
    const log = await logOf(nc, 3);
    const jsm = await jetstreamManager(nc);
    const leader = (await jsm.streams.info("BENCH_R3_RECORDS")).cluster?.leader;
    /** @type {string[]} */
    const acked = [];
    let failedAttempts = 0;
    let stopping = false;
    let last = performance.now();
    let longestGap = 0;
    const flow = (async () => {
      for (let i = 0; !stopping; i++) {
        const run = benchRun(i);
        for (;;) {
          try {
            await log.put(run);
            break;
          } catch {
            failedAttempts++;
            await sleep(100);
          }
        }
        const now = performance.now();
        longestGap = Math.max(longestGap, now - last);
        last = now;
        acked.push(run.id);
        await sleep(10);
      }
    })();
    await sleep(2000);
    longestGap = 0;
    failedAttempts = 0;
    const before = acked.length;
    await cluster.nodes.find((n) => n.name === leader)?.kill("SIGKILL");
    await sleep(15_000);
    stopping = true;
    await flow;
    let lost = 0;
    for (const id of acked) if (!(await log.last(id))) lost++;
    return {
      leader,
      gapMs: Math.round(longestGap),
      failedAttempts,
      before,
      acked: acked.length,
      lost,
    };
  } finally {
    await nc.close();
    await cluster.stop();
  }
}

const cluster = await startNatsCluster(3);
const rows = [];
try {
  const nc = await connectNats(cluster.url, "bench-records-replicas");
  for (const replicas of [1, 3])
    rows.push({ replicas, ...(await measure(await logOf(nc, replicas))) });
  await nc.close();
} finally {
  await cluster.stop();
}
const kills = [];
for (let i = 0; i < KILLS; i++) kills.push(await killRound());

console.log(
  `the record put on a 3-node loopback cluster: ${SEQUENTIAL} one at a time, ${PUTS} with ${WINDOW} in flight\n`,
);
console.log("| replicas | p50 ms | p99 ms | puts/s |\n|---|---|---|---|");
for (const r of rows) console.log(`| ${r.replicas} | ${r.p50} | ${r.p99} | ${r.perSecond} |`);
console.log(
  "\n| killed leader | longest stall ms | failed attempts | acked records | lost |\n|---|---|---|---|---|",
);
for (const k of kills)
  console.log(`| ${k.leader} | ${k.gapMs} | ${k.failedAttempts} | ${k.acked} | ${k.lost} |`);
