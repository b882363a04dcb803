#!/usr/bin/env node
// @ts-check
// What the record log's retained subjects cost nats-server. The record log keeps one subject per
// run (`<prefix>.record.<runId>`, max_msgs_per_subject 1) for PIES_RECORD_MAX_AGE_SECONDS: at
// 2,000 runs/s and the former default of 24 h that was ~170 M subjects. This script starts a
// nats-server of its own (`nats-server -js`, a fresh store under $TMPDIR, removed at the end),
// makes the stream exactly as pies makes it (JetStreamRunRecords.over, RS_MAX_AGE_SECONDS, 24 h
// unless set: the fill must end within it, or the first records expire), and fills it in
// steps with records of distinct runs (the bench's completed run, encoded as the executor puts
// it, with its Nats-Msg-Id), through the real put (RunLog.put), pipelined. At each step it reads:
//   - nats-server's RSS (/proc/<pid>/status), live after the fill, and again after a graceful
//     restart once the duplicate window has passed (what the retained subjects hold, without the
//     put path's buffers and the duplicate window's message ids);
//   - the store's size on disk (the files under its directory);
//   - the put's cost: nats-server's CPU ticks (/proc/<pid>/stat) over the step's fill, per put;
//   - a `last_by_subj` lookup (RunLog.last, what GET /runs/:id and the sweeper do), one at a time:
//     latency and nats-server CPU per lookup, for a run put just now, a random run of the stream,
//     a random run right after the restart (cold), and a run the log does not hold;
//   - the restart's time: from the spawn to the stream answering with every message.
// At the largest step it also restarts after SIGKILL (a crash: the index is rebuilt from the
// blocks). Settings: RS_STEPS=0,250000,1000000,2000000 (cumulative counts of runs),
// RS_WINDOW=2000 (puts in flight), RS_LOOKUPS=1000 (per kind), RS_SETTLE_MS=125000 (the wait past
// the 120 s duplicate window before the restart; 0 skips it), RS_CRASH=1, RS_OUT=<file.json>.
// Prints a markdown table and writes the raw figures as JSON when RS_OUT is set.
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { newId } from "@pies/common";
import { encodeRun, JetStreamRunRecords, RunLog } from "@pies/common/bus";
import { freePort } from "@pies/testkit";
import { processTicks } from "./lib/cpu.mjs";
import { benchRun } from "./lib/sample-run.mjs";
import { percentile } from "./lib/stats.mjs";

/** @import { ChildProcess } from "node:child_process" */
/** @import { NatsConnection } from "@nats-io/transport-node" */

/** @typedef {{ child: ChildProcess, exited: Promise<unknown>, startedAt: number }} Server */

/**
 * Ids of the runs put: a reservoir sample of at most 100,000 (the array), how many were put in all,
 * and the last 1000 (a ring).
 * @typedef {string[] & { total: number, recent: string[] }} Ids
 */

/** @typedef {Awaited<ReturnType<typeof lookup>>} Lookups */

/**
 * One step's figures: a row of the table (undefined where the step has none).
 * @typedef {object} Row
 * @property {number} runs
 * @property {number} fillSeconds
 * @property {number | undefined} putsPerSecond
 * @property {number | undefined} serverUsPerPut
 * @property {number} rssLiveMb
 * @property {number} diskMb
 * @property {Lookups} [lookupRecent]
 * @property {Lookups} [lookupRandom]
 * @property {Lookups} lookupMissing
 * @property {number} restartMs
 * @property {number | undefined} subjects
 * @property {number} rssRestartedMb
 * @property {Lookups} [lookupCold]
 * @property {number} rssAfterLookupsMb
 * @property {number} [crashRestartMs]
 * @property {number} [rssCrashRestartedMb]
 */

/**
 * @param {string} name
 * @param {number} fallback
 */
const num = (name, fallback) => Number(process.env[name] ?? fallback);
const steps = (process.env.RS_STEPS ?? "0,250000,1000000,2000000").split(",").map(Number);
const window = num("RS_WINDOW", 2000);
const lookups = num("RS_LOOKUPS", 1000);
const settleMs = num("RS_SETTLE_MS", 125_000);
const crash = process.env.RS_CRASH !== "0";
const STREAM = "PIES_RUNS_RECORDS";
const PREFIX = "pies";
const MAX_AGE_SECONDS = num("RS_MAX_AGE_SECONDS", 24 * 3600);
const TICK_MS = 10; // USER_HZ 100

const dir = mkdtempSync(path.join(os.tmpdir(), "pies-records-subjects-"));
const port = await freePort();
/** @type {Server} the one running now (a restart replaces it) */
let server;

/** @returns {Server} */
function launch() {
  const child = spawn(
    process.env.PIES_TEST_NATS_SERVER ?? "nats-server",
    ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", dir],
    { stdio: "ignore" },
  );
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.once("error", () => {});
  return { child, exited, startedAt: performance.now() };
}

/** @param {NodeJS.Signals} signal */
async function stopServer(signal) {
  if (server && server.child.exitCode === null && server.child.signalCode === null) {
    server.child.kill(signal);
    await server.exited;
  }
}

/** kB of the server's VmRSS. */
function rssKb() {
  const status = readFileSync(`/proc/${server.child.pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]);
}

const serverTicks = () => processTicks(server.child.pid) ?? NaN;

/** Bytes of the files under the store directory. */
function diskBytes(at = dir) {
  let total = 0;
  for (const entry of readdirSync(at, { withFileTypes: true })) {
    const p = path.join(at, entry.name);
    total += entry.isDirectory() ? diskBytes(p) : statSync(p).size;
  }
  return total;
}

/**
 * Connects once the server answers, and waits until the stream holds `messages` (ms since spawn).
 * @param {number} [messages]
 */
async function ready(messages) {
  for (;;) {
    try {
      const nc = await connect({ servers: `127.0.0.1:${port}`, reconnect: false });
      const jsm = await jetstreamManager(nc);
      for (;;) {
        const info = await jsm.streams.info(STREAM).catch(() => undefined);
        if (info && (messages === undefined || info.state.messages === messages)) {
          return { nc, jsm, ms: performance.now() - server.startedAt, info };
        }
        if (server.child.exitCode !== null) throw new Error("nats-server exited");
        if (!info && messages === undefined) return { nc, jsm, ms: NaN, info };
        await sleep(10);
      }
    } catch (err) {
      if (server.child.exitCode !== null) throw err;
      await sleep(10);
    }
  }
}

/**
 * The record log as pies makes it (its stream config) and the log in terms of runs.
 * @param {NatsConnection} nc
 */
async function open(nc) {
  const records = await JetStreamRunRecords.over(nc, {
    stream: STREAM,
    subjectPrefix: PREFIX,
    maxAgeSeconds: MAX_AGE_SECONDS,
  });
  return new RunLog(records);
}

/**
 * Puts `count` records of fresh runs, `window` at a time; the ids of the last 1000 and a sample.
 * @param {RunLog} log
 * @param {number} count
 * @param {Ids} ids
 */
async function fill(log, count, ids) {
  let next = 0;
  let failed = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      const run = benchRun(i);
      try {
        await log.put(run);
        // Reservoir of ids for random lookups.
        if (ids.length < 100_000) ids.push(run.id);
        else {
          const j = Math.floor(Math.random() * (ids.total + 1));
          if (j < ids.length) ids[j] = run.id;
        }
        ids.total++;
        ids.recent[ids.total % 1000] = run.id;
      } catch {
        failed++;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(window, count) }, worker));
  if (failed > 0) throw new Error(`${failed} puts failed`);
}

/**
 * `n` lookups, one at a time, of the ids `pick` gives: latency ms (p50, p99), server ms per lookup.
 * @param {RunLog} log
 * @param {number} n
 * @param {(i: number) => string} pick
 * @param {boolean} expectFound
 */
async function lookup(log, n, pick, expectFound) {
  /** @type {number[]} */
  const latencies = [];
  const t0 = serverTicks();
  for (let i = 0; i < n; i++) {
    const id = pick(i);
    const start = performance.now();
    const recorded = await log.last(id);
    latencies.push(performance.now() - start);
    if (Boolean(recorded) !== expectFound)
      throw new Error(`lookup of ${id}: found ${!expectFound}`);
  }
  const ticks = serverTicks() - t0;
  latencies.sort((a, b) => a - b);
  return {
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    serverUsPerLookup: (ticks * TICK_MS * 1000) / n,
  };
}

/** @param {string[]} list not empty */
const pickFrom = (list) => () =>
  /** @type {string} */ (list[Math.floor(Math.random() * list.length)]);

/** @type {Row[]} */
const rows = [];
/** @type {NatsConnection | undefined} */
let nc;
try {
  server = launch();
  let { nc: connection } = await ready();
  nc = connection;
  let log = await open(connection);
  /** @type {Ids} */
  const ids = Object.assign([], { total: 0, recent: [] });
  const sample = benchRun(0);
  const recordBytes = encodeRun(sample).length;
  let have = 0;
  for (const [stepIndex, target] of steps.entries()) {
    // The rest is filled in below.
    const row = /** @type {Row} */ ({ runs: target });
    const count = target - have;
    const t0 = serverTicks();
    const start = performance.now();
    if (count > 0) await fill(log, count, ids);
    row.fillSeconds = (performance.now() - start) / 1000;
    row.putsPerSecond = count > 0 ? count / row.fillSeconds : undefined;
    row.serverUsPerPut = count > 0 ? ((serverTicks() - t0) * TICK_MS * 1000) / count : undefined;
    have = target;
    row.rssLiveMb = rssKb() / 1024;
    row.diskMb = diskBytes() / 2 ** 20;
    const missing = () => newId();
    if (target > 0) {
      row.lookupRecent = await lookup(log, lookups, pickFrom(ids.recent.filter(Boolean)), true);
      row.lookupRandom = await lookup(log, lookups, pickFrom(ids), true);
    }
    row.lookupMissing = await lookup(log, lookups, missing, false);
    // Past the duplicate window, a graceful restart: the server holds what the subjects need.
    if (settleMs > 0 && target > 0) await sleep(settleMs);
    await connection.close();
    await stopServer("SIGTERM");
    server = launch();
    const back = await ready(target);
    nc = connection = back.nc;
    row.restartMs = back.ms;
    // ready(target) resolves once the stream answers (with every message).
    row.subjects = back.info?.state.num_subjects;
    row.rssRestartedMb = rssKb() / 1024;
    log = await open(connection);
    if (target > 0) row.lookupCold = await lookup(log, lookups, pickFrom(ids), true);
    row.rssAfterLookupsMb = rssKb() / 1024;
    if (crash && stepIndex === steps.length - 1 && target > 0) {
      await connection.close();
      await stopServer("SIGKILL");
      server = launch();
      const again = await ready(target);
      nc = connection = again.nc;
      row.crashRestartMs = again.ms;
      row.rssCrashRestartedMb = rssKb() / 1024;
    }
    rows.push(row);
    console.error(JSON.stringify(row));
  }

  // RS_STEPS names at least one step: there are rows.
  const base = /** @type {Row} */ (rows.find((r) => r.runs === 0) ?? rows[0]);
  const last = /** @type {Row} */ (rows[rows.length - 1]);
  /** @param {"rssRestartedMb" | "diskMb"} key */
  const perSubject = (key) =>
    last.runs > base.runs ? ((last[key] - base[key]) * 2 ** 20) / (last.runs - base.runs) : NaN;
  const memPerSubject = perSubject("rssRestartedMb");
  const diskPerSubject = perSubject("diskMb");
  /**
   * @param {number | undefined} v
   * @param {number} [d]
   */
  const f = (v, d = 0) => (v === undefined || Number.isNaN(v) ? "–" : v.toFixed(d));
  /** @param {Lookups | undefined} l */
  const lk = (l) => (l ? `${f(l.p50Ms, 2)} / ${f(l.p99Ms, 2)} / ${f(l.serverUsPerLookup)}` : "–");
  const lines = [
    `record: ${recordBytes} B of protobuf (bench/lib/sample-run.mjs), subject ${PREFIX}.record.<24-char id>, Nats-Msg-Id header`,
    "",
    "| runs (subjects) | fill puts/s | nats CPU µs/put | RSS live MB | RSS restarted MB | disk MB | restart ms | lookup just put p50/p99 ms / nats µs | random | random, cold after restart | missing |",
    "| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |",
    ...rows.map(
      (r) =>
        `| ${r.runs.toLocaleString("en")} (${(r.subjects ?? 0).toLocaleString("en")}) | ${f(r.putsPerSecond)} | ${f(r.serverUsPerPut, 1)} | ${f(r.rssLiveMb)} | ${f(r.rssRestartedMb)} | ${f(r.diskMb)} | ${f(r.restartMs)}${r.crashRestartMs ? ` (SIGKILL: ${f(r.crashRestartMs)})` : ""} | ${lk(r.lookupRecent)} | ${lk(r.lookupRandom)} | ${lk(r.lookupCold)} | ${lk(r.lookupMissing)} |`,
    ),
    "",
    `memory per retained subject (RSS after restart, ${base.runs} → ${last.runs}): ${f(memPerSubject)} B; disk: ${f(diskPerSubject)} B`,
  ];
  // What a window of that length holds (a retained subject per run, whatever the max age).
  for (const hours of [24, 1]) {
    for (const rate of [2000, 200]) {
      const subjects = rate * hours * 3600;
      lines.push(
        `${hours} h at ${rate} runs/s: ${(subjects / 1e6).toFixed(1)} M subjects → ~${f((memPerSubject * subjects) / 2 ** 30, 1)} GiB of nats-server memory at rest, ~${f((diskPerSubject * subjects) / 2 ** 30, 1)} GiB of disk`,
      );
    }
  }
  console.log(lines.join("\n"));
  if (process.env.RS_OUT) {
    writeFileSync(
      process.env.RS_OUT,
      JSON.stringify({ recordBytes, rows, memPerSubject, diskPerSubject }, null, 2),
    );
  }
} finally {
  await nc?.close().catch(() => {});
  await stopServer("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
}
