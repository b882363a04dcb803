#!/usr/bin/env node
// @ts-check
// Experiments beside live traffic (issue 28): "while an experiment of 1,000 runs replays at its
// full concurrency, live blocking executions of another interaction in the same project keep p50
// within 1.2× and p99 within 2× of their figures without it".
//
// The four-process stack (startStack: catalog, runs, executor, gateway over real PostgreSQL on
// :5432 and NATS on :4222, a throw-away database and stream) against a fake OpenAI-compatible
// upstream in a worker thread that answers every call after BENCH_EXP_LATENCY_MS (200 ms). One
// project: an `openai_compatible` environment pointing at the fake, interaction A (replayed by the
// experiment) and interaction B (the live traffic), each one jst template over its data. A gets
// BENCH_EXP_RUNS (1,000) runs, executed for real through the API (BENCH_EXP_SEED_CONCURRENCY at a
// time) so that each has its input. Then, each phase measuring B's blocking executions
// (POST /api/v1/interactions/:id/execute) at a fixed arrival rate (BENCH_EXP_RATE a second, evenly
// spaced, open loop: a request is sent at its time whatever the others are doing) for
// BENCH_EXP_DURATION_MS after BENCH_EXP_WARMUP_MS not recorded:
//   baseline     B alone
//   experiment   B while POST /api/v1/experiments replays A's runs (parent: false) at
//                BENCH_EXP_CONCURRENCY (16, the most allowed) against `A@draft` with the config
//                override `model: slow-<BENCH_EXP_REPLAY_MS>`: the fake waits that much more
//                before answering a replay, so that 1,000 pairs at 16 last the whole phase (at the
//                upstream's 200 ms alone they would be done in about 13 s). The phase's window
//                starts once the experiment has pairs done; the experiment must still be running
//                when it ends, and end afterwards with every pair completed.
//   baseline after  B alone again (drift of the machine over the run)
//   fast experiment (BENCH_EXP_FAST=1, default) a second experiment of the same runs at 16 with no
//                override: replays at the upstream's own latency, several times the pairs a
//                second; B is measured from its first pair done to its last (a window of seconds,
//                not minutes: supplementary)
// Each phase's CPU (% of one core) per pies process, PostgreSQL, NATS, this process and the rest
// of the machine is read from /proc (bench/lib/cpu.mjs), with the machine's CPU pressure
// (/proc/pressure/cpu); the event-loop delay of this process, of the fake's thread and of the
// gateway, executor and runs processes (their metrics); the autovacuums and autoanalyzes of the
// bench's database that ended in the window; the load average before and after.
// Pinned as bench/run.mjs pins (BENCH_PIN=0: not): this process and the fake on the first CPU, the
// four pies processes on the second; PostgreSQL and NATS where the scheduler puts them.
//
// Settings (environment, all optional): BENCH_EXP_RUNS=1000 BENCH_EXP_CONCURRENCY=16
//   BENCH_EXP_LATENCY_MS=200 BENCH_EXP_REPLAY_MS (default: enough for the experiment to outlast
//   warm-up + window by a third) BENCH_EXP_RATE=20 BENCH_EXP_DURATION_MS=60000
//   BENCH_EXP_WARMUP_MS=5000 BENCH_EXP_SEED_CONCURRENCY=32 BENCH_EXP_FAST=1 BENCH_PIN=0
//   BENCH_PROFILE=1 (node --cpu-prof on BENCH_PROFILE_PROCESSES, default all four; the top frames
//   of each process in each phase's window) BENCH_PROFILE_TOP=15 BENCH_PROFILE_INTERVAL_US
//   BENCH_EXP_ENV="KEY=value,…" (more environment for the four processes, e.g. to try a setting)
// The table and the settings go to stdout as markdown, progress to stderr, everything to
// bench/results/latest-experiments.json. Exit code 1 when a target is missed or a check fails.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import {
  createTestDatabase,
  createTestStream,
  freePort,
  repoRoot,
  startStack,
} from "@pies/testkit";
import { api } from "./lib/api.mjs";
import { startCpuSample } from "./lib/cpu.mjs";
import { startFakeInWorker } from "./lib/fake.mjs";
import { send } from "./lib/http.mjs";
import { cpusOf, pinSelf, planPinning } from "./lib/pin.mjs";
import {
  addSelfTimes,
  formatTopFrames,
  listProfiles,
  loadProfile,
  topFrames,
} from "./lib/profile.mjs";
import { percentile } from "./lib/stats.mjs";

/** @import { Stack, TestDatabase, TestStream } from "@pies/testkit" */
/** @import { CpuSample } from "./lib/cpu.mjs" */

/**
 * @param {string} name
 * @param {number} fallback
 */
const int = (name, fallback) => {
  const raw = process.env[name];
  const value = raw === undefined || raw === "" ? fallback : Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name}: a non-negative integer`);
  return value;
};

const RUNS = int("BENCH_EXP_RUNS", 1000);
const CONCURRENCY = int("BENCH_EXP_CONCURRENCY", 16);
const LATENCY_MS = int("BENCH_EXP_LATENCY_MS", 200);
const RATE = int("BENCH_EXP_RATE", 20);
const DURATION_MS = int("BENCH_EXP_DURATION_MS", 60_000);
const WARMUP_MS = int("BENCH_EXP_WARMUP_MS", 5_000);
const SEED_CONCURRENCY = int("BENCH_EXP_SEED_CONCURRENCY", 32);
const FAST = process.env.BENCH_EXP_FAST !== "0";
// 1,000 pairs at 16 take RUNS / CONCURRENCY rounds of one replay each: each replay is given the
// time for the rounds to last the warm-up and the window, and a third more for what the first
// pairs and the stack's own time take from it.
const REPLAY_MS = int(
  "BENCH_EXP_REPLAY_MS",
  Math.max(
    0,
    Math.ceil(
      (((WARMUP_MS + DURATION_MS) * (4 / 3)) / Math.ceil(RUNS / Math.max(1, CONCURRENCY)) -
        LATENCY_MS) /
        100,
    ) * 100,
  ),
);
const REQUEST_TIMEOUT_MS = 30_000;
/** Live requests in flight at most: past it the arrival schedule is skipped and counted. */
const MAX_IN_FLIGHT = 512;
const PROFILE = process.env.BENCH_PROFILE === "1";
const PROFILE_TOP = int("BENCH_PROFILE_TOP", 15);
const PROFILE_INTERVAL_US = int("BENCH_PROFILE_INTERVAL_US", 0);
const PROFILED = (process.env.BENCH_PROFILE_PROCESSES ?? "catalog,runs,executor,gateway")
  .split(",")
  .map((p) => p.trim())
  .filter(Boolean);
const EXTRA_ENV = Object.fromEntries(
  (process.env.BENCH_EXP_ENV ?? "")
    .split(",")
    .filter((kv) => kv.includes("="))
    .map((kv) => [kv.slice(0, kv.indexOf("=")).trim(), kv.slice(kv.indexOf("=") + 1).trim()]),
);
const TARGET = { p50: 1.2, p99: 2 };
/** A phase in which this process's event loop stalled longer than this is marked disturbed. */
const DISTURBED_MS = 100;
/** Another built tree to run the four processes from (startStack's `root`), e.g. a worktree. */
const ROOT = process.env.BENCH_EXP_ROOT || undefined;
const MODEL = "gpt-4o-mini";

const nowUs = () => Number(process.hrtime.bigint() / 1000n);
const load = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
/** @param {unknown[]} args */
const log = (...args) =>
  console.error(`[experiments bench ${new Date().toISOString().slice(11, 19)}]`, ...args);

/**
 * One live request's outcome.
 * @typedef {{ ok: boolean, at: number, ms: number, status: number, error?: string,
 *   executionMs?: number }} Live
 */

/**
 * A phase's figures: B's live executions, the CPU, the load, and the experiment's if one ran.
 * @typedef {object} Phase
 * @property {string} name
 * @property {number} offered requests a second asked
 * @property {number} sent
 * @property {number} ok
 * @property {number} errors
 * @property {{ error: string, count: number }[]} errorKinds
 * @property {number} skipped arrivals not sent (MAX_IN_FLIGHT reached)
 * @property {number} lateMs the latest a request was sent after its time (this process's lag)
 * @property {{ p99: number, max: number }} loopDelayMs this process's event-loop delay over the
 *   window: a late answer is timed late (a loaded machine shows here first)
 * @property {number} windowMs
 * @property {number | undefined} p50
 * @property {number | undefined} p90
 * @property {number | undefined} p99
 * @property {number | undefined} max
 * @property {number | undefined} executionP50 the run's execution_time as the executor timed it
 *   (from its call to the provider to the answer)
 * @property {number | undefined} executionP99
 * @property {number | undefined} outsideP50 latency − execution_time: the time around the
 *   provider call (gateway, the executor's preparing and recording, the hops, this process)
 * @property {number | undefined} outsideP99
 * @property {{ second: number, max: number, executionMax: number } | undefined} worstSecond the
 *   second of the window (from its opening) with the slowest request
 * @property {number[][]} samples [ms after the window opened, latency ms, execution_time ms or
 *   -1, HTTP status] of each request of the window (the JSON only)
 * @property {number} throughput successful requests a second over the window
 * @property {CpuSample | undefined} cpu
 * @property {string} load before → after
 * @property {{ fromUs: number, toUs: number }} window
 * @property {Record<string, { p99: number, max: number } | undefined>} loops the event-loop delay
 *   (ms) over the window of the fake upstream's thread and of the gateway, executor and runs
 *   processes (their metrics' nodejs_eventloop_lag_*, reset at each scrape)
 * @property {number | undefined} cpuPressure the share of the window (%) in which some task of
 *   the machine waited for a CPU (/proc/pressure/cpu, `some`): the machine's contention
 * @property {Maintenance[]} maintenance autovacuums and autoanalyzes of the bench's database that
 *   ended in the window (pg_stat_user_tables)
 * @property {ExperimentFigures} [experiment]
 */

/**
 * @typedef {object} ExperimentFigures
 * @property {string} id
 * @property {number} doneAtStart pairs done when the window opened
 * @property {number} doneAtEnd pairs done when it closed
 * @property {boolean} covered still running when the window closed
 * @property {number} windowPairsPerSecond
 * @property {number | undefined} overallPairsPerSecond total / (ended_at − created_at)
 * @property {number | undefined} durationS ended_at − created_at
 * @property {string} status at the end
 * @property {Record<string, number>} progress at the end
 * @property {number | null | undefined} candidateP50 the comparison's candidate p50 latency (ms)
 * @property {string | undefined} replayModel
 * @property {number} maxRunning the most pairs seen `running` at once, polled every second
 */

/**
 * An error answer's message (its body's `message`, else the body), for grouping.
 * @param {string} text
 */
function errorOf(text) {
  try {
    const body = JSON.parse(text);
    if (typeof body?.message === "string") return `${body.code ?? ""} ${body.message}`.trim();
  } catch {
    // not JSON
  }
  return text.slice(0, 160);
}

/**
 * @typedef {{ table: string, what: "autovacuum" | "autoanalyze", atS: number | undefined }} Maintenance
 */

/**
 * Microseconds in which some task of the machine waited for a CPU, since boot (PSI); undefined
 * where the kernel does not keep it.
 */
function cpuPressureUs() {
  try {
    const some = /^some .*total=(\d+)$/m.exec(readFileSync("/proc/pressure/cpu", "utf8"));
    return some ? Number(some[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * @typedef {Map<string, { vacuums: number, analyzes: number, lastVacuum: Date | null,
 *   lastAnalyze: Date | null }>} TableStats
 */

/**
 * The autovacuum and autoanalyze counts of each table of the database `client` is on.
 * @param {pg.Client} client
 * @returns {Promise<TableStats>}
 */
async function tableStats(client) {
  // The statistics views keep a snapshot per transaction: a fresh one.
  await client.query("select pg_stat_clear_snapshot()");
  const { rows } = await client.query(
    `select schemaname || '.' || relname as name, autovacuum_count, autoanalyze_count,
       last_autovacuum, last_autoanalyze from pg_stat_user_tables`,
  );
  return new Map(
    rows.map((r) => [
      r.name,
      {
        vacuums: Number(r.autovacuum_count),
        analyzes: Number(r.autoanalyze_count),
        lastVacuum: r.last_autovacuum,
        lastAnalyze: r.last_autoanalyze,
      },
    ]),
  );
}

/**
 * The autovacuums and autoanalyzes that ended between two readings, the last one of each table
 * with its end in seconds after `from` (a wall-clock time).
 * @param {TableStats} before
 * @param {TableStats} after
 * @param {number} from
 * @returns {Maintenance[]}
 */
function maintenanceBetween(before, after, from) {
  /** @type {Maintenance[]} */
  const out = [];
  /** @param {Date | null} d */
  const at = (d) => (d ? Math.round((d.getTime() - from) / 100) / 10 : undefined);
  for (const [table, a] of after) {
    const b = before.get(table);
    if (a.vacuums > (b?.vacuums ?? 0))
      out.push({ table, what: "autovacuum", atS: at(a.lastVacuum) });
    if (a.analyzes > (b?.analyzes ?? 0)) {
      out.push({ table, what: "autoanalyze", atS: at(a.lastAnalyze) });
    }
  }
  return out.sort((x, y) => (x.atS ?? 0) - (y.atS ?? 0));
}

/**
 * Where each process's event-loop delay is read: the gateway's /metrics, the executor's and the
 * runs service's metrics ports (prom-client's default metrics, each prefixed pies_<name>_).
 * @typedef {{ fake: { loopDelay(): Promise<{ p99Ms: number, maxMs: number }> },
 *   metrics: Record<string, string> }} LoopProbes
 */

/**
 * The event-loop delay of the fake and of each pies process with metrics since the last reading
 * (a reading resets them).
 * @param {LoopProbes} probes
 * @returns {Promise<Record<string, { p99: number, max: number } | undefined>>}
 */
async function loopDelays(probes) {
  /** @type {Record<string, { p99: number, max: number } | undefined>} */
  const out = {};
  const fake = await probes.fake.loopDelay();
  out.fake = { p99: Math.round(fake.p99Ms), max: Math.round(fake.maxMs) };
  await Promise.all(
    Object.entries(probes.metrics).map(async ([name, url]) => {
      try {
        const text = await (await fetch(url, { signal: AbortSignal.timeout(5_000) })).text();
        /** @param {string} metric */
        const read = (metric) =>
          Number(
            new RegExp(
              `^pies_${name}_nodejs_eventloop_lag_${metric}_seconds(?:\\{[^}]*\\})? (\\S+)$`,
              "m",
            ).exec(text)?.[1],
          ) * 1000;
        const max = read("max");
        out[name] = Number.isFinite(max)
          ? { p99: Math.round(read("p99")), max: Math.round(max) }
          : undefined;
      } catch {
        out[name] = undefined;
      }
    }),
  );
  return out;
}

// --- Live load --------------------------------------------------------------------------------

/**
 * B's blocking executions at RATE a second, evenly spaced, from now until `until()` says stop
 * (checked at each arrival); each request's latency from its send. Resolves when the last answer
 * is in. `record(at)` says whether a request sent at `at` (performance.now()) is kept.
 * @param {{ gatewayUrl: string, key: string, interaction: string }} target
 * @param {() => boolean} until
 * @param {(at: number) => boolean} record
 */
async function liveLoad(target, until, record) {
  const url = `${target.gatewayUrl}/api/v1/interactions/${target.interaction}/execute`;
  const headers = { authorization: `Bearer ${target.key}`, "content-type": "application/json" };
  /** @type {Live[]} */
  const samples = [];
  /** @type {Set<Promise<void>>} */
  const inFlight = new Set();
  const interval = 1000 / RATE;
  const started = performance.now();
  let skipped = 0;
  let lateMs = 0;
  for (let i = 0; ; i++) {
    const due = started + i * interval;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    if (until()) break;
    const at = performance.now();
    lateMs = Math.max(lateMs, at - due);
    const keep = record(at);
    if (inFlight.size >= MAX_IN_FLIGHT) {
      if (keep) skipped++;
      continue;
    }
    const body = JSON.stringify({ data: { text: `customer message ${i}: where is my order?` } });
    const p = (async () => {
      /** @type {Live} */
      let sample;
      try {
        const r = await send(url, {
          method: "POST",
          headers,
          body,
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        const text = await r.text();
        const ms = performance.now() - at;
        if (r.status !== 200) {
          sample = {
            ok: false,
            at,
            ms,
            status: r.status,
            error: `${r.status} ${errorOf(text)}`,
          };
        } else {
          const run = JSON.parse(text);
          sample =
            run.status === "completed"
              ? { ok: true, at, ms, status: 200, executionMs: run.execution_time }
              : { ok: false, at, ms, status: 200, error: `run ${run.status}` };
        }
      } catch (err) {
        sample = {
          ok: false,
          at,
          ms: performance.now() - at,
          status: 0,
          error: err instanceof Error ? err.message : String(err),
        };
      }
      if (keep) samples.push(sample);
    })();
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  }
  await Promise.all(inFlight);
  return { samples, skipped, lateMs };
}

/**
 * Measures B for one phase: warm-up, then the window, while `during` (if any) runs beside it.
 * `opened()` and `closing()` are called as the window opens and closes (after the warm-up; with
 * `windowUntil` the window closes when it says so, else after DURATION_MS).
 * @param {string} name
 * @param {{ gatewayUrl: string, key: string, interaction: string }} target
 * @param {Stack} stack
 * @param {pg.Client} db a client on the bench's database (its autovacuums and autoanalyzes)
 * @param {LoopProbes} probes
 * @param {{ warmupMs?: number, opened?: () => Promise<void> | void,
 *   closing?: () => Promise<void> | void, windowUntil?: () => boolean }} [hooks]
 * @returns {Promise<Phase>}
 */
async function measurePhase(name, target, stack, db, probes, hooks = {}) {
  const loadBefore = load();
  const warmupMs = hooks.warmupMs ?? WARMUP_MS;
  const begin = performance.now();
  let windowFrom = Infinity;
  let windowTo = Infinity;
  /** @type {(() => CpuSample | undefined) | undefined} */
  let cpuEnd;
  /** @type {CpuSample | undefined} */
  let cpu;
  let fromUs = 0;
  let toUs = 0;
  let closed = false;
  /** @type {TableStats} */
  let statsBefore = new Map();
  /** @type {Maintenance[]} */
  let maintenance = [];
  let openedAtWall = 0;
  /** @type {Phase["loops"]} */
  let loops = {};
  /** @type {number | undefined} */
  let pressureFrom;
  /** @type {number | undefined} */
  let cpuPressure;
  const loopDelay = monitorEventLoopDelay({ resolution: 10 });
  const control = (async () => {
    await sleep(warmupMs);
    await hooks.opened?.();
    statsBefore = await tableStats(db);
    await loopDelays(probes);
    pressureFrom = cpuPressureUs();
    openedAtWall = Date.now();
    windowFrom = performance.now();
    fromUs = nowUs();
    loopDelay.reset();
    loopDelay.enable();
    cpuEnd = startCpuSample(
      stack.processes.map((p) => ({ name: p.name, child: { pid: p.child.pid } })),
    );
    if (hooks.windowUntil) {
      const until = hooks.windowUntil;
      while (!until()) await sleep(100);
    } else {
      await sleep(DURATION_MS);
    }
    windowTo = performance.now();
    toUs = nowUs();
    loopDelay.disable();
    cpu = cpuEnd();
    const pressureTo = cpuPressureUs();
    if (pressureFrom !== undefined && pressureTo !== undefined) {
      cpuPressure = Math.round(
        ((pressureTo - pressureFrom) / 1000 / (windowTo - windowFrom)) * 100,
      );
    }
    loops = await loopDelays(probes);
    await hooks.closing?.();
    maintenance = maintenanceBetween(statsBefore, await tableStats(db), openedAtWall);
    closed = true;
  })();
  const live = await liveLoad(
    target,
    () => closed || performance.now() >= windowTo,
    (at) => at >= windowFrom && at < windowTo,
  );
  await control;
  const windowMs = windowTo - windowFrom;
  const ok = live.samples.filter((s) => s.ok);
  const ms = ok.map((s) => s.ms).sort((a, b) => a - b);
  const exec = ok
    .map((s) => s.executionMs)
    .filter((v) => typeof v === "number")
    .sort((a, b) => a - b);
  const outside = ok
    .filter((x) => typeof x.executionMs === "number")
    .map((x) => x.ms - /** @type {number} */ (x.executionMs))
    .sort((x, y) => x - y);
  /** @type {Map<string, number>} */
  const kinds = new Map();
  for (const s of live.samples) {
    if (!s.ok) kinds.set(s.error ?? "?", (kinds.get(s.error ?? "?") ?? 0) + 1);
  }
  log(
    `${name}: ${ok.length} ok of ${live.samples.length} in ${(windowMs / 1000).toFixed(1)} s, ` +
      `p50 ${fmtMs(percentile(ms, 50))}, p99 ${fmtMs(percentile(ms, 99))} ` +
      `(phase ${((performance.now() - begin) / 1000).toFixed(1)} s)`,
  );
  return {
    name,
    offered: RATE,
    sent: live.samples.length,
    ok: ok.length,
    errors: live.samples.length - ok.length,
    errorKinds: [...kinds].map(([error, count]) => ({ error, count })),
    skipped: live.skipped,
    lateMs: Math.round(live.lateMs),
    loopDelayMs: {
      p99: Math.round(loopDelay.percentile(99) / 1e6),
      max: Math.round(loopDelay.max / 1e6),
    },
    windowMs: Math.round(windowMs),
    p50: percentile(ms, 50),
    p90: percentile(ms, 90),
    p99: percentile(ms, 99),
    max: ms.at(-1),
    executionP50: percentile(exec, 50),
    executionP99: percentile(exec, 99),
    outsideP50: percentile(outside, 50),
    outsideP99: percentile(outside, 99),
    worstSecond: worst(ok, windowFrom),
    samples: live.samples.map((x) => [
      Math.round(x.at - windowFrom),
      Math.round(x.ms * 10) / 10,
      x.executionMs ?? -1,
      x.status,
    ]),
    throughput: windowMs > 0 ? (ok.length * 1000) / windowMs : 0,
    cpu,
    load: `${loadBefore} → ${load()}`,
    window: { fromUs, toUs },
    maintenance,
    loops,
    cpuPressure,
  };
}

/**
 * The second of the window with the slowest request, and that request's execution_time.
 * @param {Live[]} ok
 * @param {number} windowFrom
 */
function worst(ok, windowFrom) {
  const slowest = ok.reduce(
    (/** @type {Live | undefined} */ w, x) => (w === undefined || x.ms > w.ms ? x : w),
    undefined,
  );
  return (
    slowest && {
      second: Math.floor((slowest.at - windowFrom) / 1000),
      max: Math.round(slowest.ms),
      executionMax: slowest.executionMs ?? -1,
    }
  );
}

// --- Setup ------------------------------------------------------------------------------------

/**
 * @param {string} gatewayUrl
 * @param {string} key
 * @param {string} pathname
 * @param {unknown} [body]
 */
async function call(gatewayUrl, key, pathname, body) {
  const r = await api(gatewayUrl, key, pathname, body);
  if (r.status >= 300) {
    throw new Error(`${body === undefined ? "GET" : "POST"} ${pathname}: ${r.status} ${r.text}`);
  }
  return r.json;
}

/**
 * The environment pointing at the fake and the two interactions, each over its own jst template.
 * @param {string} gatewayUrl
 * @param {string} key
 * @param {string} fakeUrl
 * @param {string} fakeKey
 */
async function catalog(gatewayUrl, key, fakeUrl, fakeKey) {
  const environment = await call(gatewayUrl, key, "/environments", {
    name: "bench-upstream",
    provider: "openai_compatible",
    endpoint_url: fakeUrl,
    apiKey: fakeKey,
    default_model: MODEL,
  });
  /**
   * @param {string} name
   * @param {string} content
   */
  const interaction = async (name, content) => {
    const prompt = await call(gatewayUrl, key, "/prompts", {
      name: `${name} prompt`,
      role: "user",
      content_type: "jst",
      content,
      inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    });
    const created = await call(gatewayUrl, key, "/interactions", {
      name,
      environment: environment.id,
      prompts: [{ type: "template", template: prompt.id }],
    });
    return /** @type {{ id: string, name: string }} */ ({ id: created.id, name });
  };
  return {
    a: await interaction("Summary", "return `Summarise this support ticket: ${text}`"),
    b: await interaction("Reply", "return `Draft a reply to: ${text}`"),
  };
}

/**
 * RUNS executions of A through the API, SEED_CONCURRENCY at a time, each with its own input;
 * then waits until the runs store holds them all (top-level runs of A).
 * @param {string} gatewayUrl
 * @param {string} key
 * @param {string} interaction
 */
async function seed(gatewayUrl, key, interaction) {
  const started = performance.now();
  let next = 0;
  let failed = 0;
  /** @type {string[]} */
  const errors = [];
  const worker = async () => {
    while (next < RUNS) {
      const i = next++;
      const r = await api(gatewayUrl, key, `/interactions/${interaction}/execute`, {
        data: { text: `ticket ${i}: the parcel for order ${1000 + i} arrived damaged` },
      });
      if (r.status !== 200 || r.json?.status !== "completed") {
        failed++;
        if (errors.length < 5) errors.push(`${r.status} ${r.text.slice(0, 200)}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, SEED_CONCURRENCY) }, worker));
  const ms = performance.now() - started;
  if (failed > 0) throw new Error(`${failed} seed executions failed: ${errors.join("; ")}`);
  // The runs are recorded through the record log: wait until the store has every one.
  const deadline = Date.now() + 60_000;
  for (;;) {
    const meta = await call(gatewayUrl, key, "/runs/search", {
      onlyMeta: true,
      exactTotal: true,
      filters: { interaction: [interaction], parent: false, status: "completed" },
    });
    const total = Number(meta.meta?.count?.total ?? meta.meta?.count?.lower_bound ?? 0);
    if (total >= RUNS) return { ms, recorded: total };
    if (Date.now() > deadline) throw new Error(`only ${total} of ${RUNS} seed runs recorded`);
    await sleep(500);
  }
}

// --- Experiments ------------------------------------------------------------------------------

/**
 * @param {string} gatewayUrl
 * @param {string} key
 * @param {{ id: string, name: string }} a
 * @param {string} name
 * @param {string | undefined} model the target's config override, if any
 */
async function createExperiment(gatewayUrl, key, a, name, model) {
  const experiment = await call(gatewayUrl, key, "/experiments", {
    name,
    source: { filters: { interaction: [a.id], parent: false }, limit: RUNS },
    target: { interaction: `${a.name}@draft`, ...(model ? { config: { model } } : {}) },
    concurrency: CONCURRENCY,
  });
  if (experiment.progress.total !== RUNS) {
    throw new Error(`the experiment selected ${experiment.progress.total} pairs, not ${RUNS}`);
  }
  return /** @type {string} */ (experiment.id);
}

/**
 * An experiment's state, polled every `everyMs` in the background: latest() is the last answer.
 * @param {string} gatewayUrl
 * @param {string} key
 * @param {string} id
 */
function watchExperiment(gatewayUrl, key, id, everyMs = 1000) {
  /** @type {any} */
  let latest;
  let stopped = false;
  let maxRunning = 0;
  const read = async () => {
    latest = await call(gatewayUrl, key, `/experiments/${id}?pairs_limit=0`);
    maxRunning = Math.max(maxRunning, latest.progress.running);
    return latest;
  };
  const loop = (async () => {
    while (!stopped) {
      try {
        await read();
        if (latest.status !== "running") return;
      } catch (err) {
        log(`reading experiment ${id} failed: ${err instanceof Error ? err.message : err}`);
      }
      await sleep(everyMs);
    }
  })();
  return {
    read,
    latest: () => latest,
    /** The most pairs seen running at once (its concurrency allows CONCURRENCY). */
    maxRunning: () => maxRunning,
    ended: () => latest !== undefined && latest.status !== "running",
    /** Until it has ended (or `timeoutMs`), then its last state. */
    async untilEnded(timeoutMs = 600_000) {
      const deadline = Date.now() + timeoutMs;
      while (!(latest && latest.status !== "running") && Date.now() < deadline) await sleep(200);
      stopped = true;
      await loop;
      return read();
    },
  };
}

/**
 * Runs `phaseName` with an experiment replaying beside it.
 * @param {object} o
 * @param {string} o.phaseName
 * @param {Stack} o.stack
 * @param {pg.Client} o.db
 * @param {LoopProbes} o.probes
 * @param {{ gatewayUrl: string, key: string, interaction: string }} o.live
 * @param {{ id: string, name: string }} o.a
 * @param {string | undefined} o.model
 * @param {boolean} o.wholeExperiment the window is the experiment's run (from its first pair
 *   done to its end) rather than DURATION_MS after the warm-up
 * @returns {Promise<Phase>}
 */
async function experimentPhase({ phaseName, stack, db, probes, live, a, model, wholeExperiment }) {
  const { gatewayUrl, key } = live;
  const id = await createExperiment(gatewayUrl, key, a, `bench ${phaseName}`, model);
  // Read every second, as its stream (GET /experiments/:id/stream) reads it for a watcher.
  const watch = watchExperiment(gatewayUrl, key, id, 1000);
  let doneAtStart = 0;
  let doneAtEnd = 0;
  let covered = false;
  let openedAt = 0;
  let closedAt = 0;
  log(`${phaseName}: experiment ${id}, ${RUNS} pairs at ${CONCURRENCY}, model ${model ?? MODEL}`);
  const phase = await measurePhase(phaseName, live, stack, db, probes, {
    // The window opens once pairs are being done (the first replays have started).
    warmupMs: wholeExperiment ? 0 : WARMUP_MS,
    async opened() {
      for (;;) {
        const s = await watch.read();
        if (s.progress.done > 0 || s.status !== "running") break;
        await sleep(wholeExperiment ? 50 : 200);
      }
      doneAtStart = (await watch.read()).progress.done;
      openedAt = performance.now();
    },
    windowUntil: wholeExperiment ? () => watch.ended() : undefined,
    async closing() {
      closedAt = performance.now();
      const s = await watch.read();
      doneAtEnd = s.progress.done;
      covered = s.status === "running";
    },
  });
  const end = await watch.untilEnded();
  const created = Date.parse(end.created_at);
  const ended = end.ended_at ? Date.parse(end.ended_at) : NaN;
  const durationS = Number.isFinite(ended) ? (ended - created) / 1000 : undefined;
  const windowS = (closedAt - openedAt) / 1000;
  phase.experiment = {
    id,
    doneAtStart,
    doneAtEnd,
    covered,
    windowPairsPerSecond: windowS > 0 ? (doneAtEnd - doneAtStart) / windowS : 0,
    overallPairsPerSecond: durationS ? end.progress.total / durationS : undefined,
    durationS,
    status: end.status,
    progress: end.progress,
    candidateP50: end.comparison?.candidate?.p50_latency_ms,
    replayModel: model,
    maxRunning: watch.maxRunning(),
  };
  log(
    `${phaseName}: experiment ${end.status}, ${end.progress.completed} completed, ` +
      `${end.progress.failed} failed, ${durationS?.toFixed(1)} s; window ${doneAtStart} → ` +
      `${doneAtEnd} pairs${covered ? " (still running at its end)" : " (ENDED within the window)"}`,
  );
  return phase;
}

// --- Report -----------------------------------------------------------------------------------

/** @param {number | undefined} v */
const fmtMs = (v) => (v === undefined ? "-" : `${v.toFixed(1)} ms`);
/** @param {number | undefined} v */
const fmtRatio = (v) => (v === undefined || !Number.isFinite(v) ? "-" : `×${v.toFixed(2)}`);

/**
 * @param {Phase[]} phases
 * @param {Phase} base the baseline before
 * @param {Phase} quiet the baseline (before or after) with the lower p99
 */
function table(phases, base, quiet) {
  const lines = [
    "| phase | B p50 | B p99 | B max | B req/s (offered) | B errors | p50 vs baseline | p99 vs baseline | p99 vs quieter baseline | experiment pairs/s (window) |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const p of phases) {
    const r50 = p.p50 !== undefined && base.p50 ? p.p50 / base.p50 : undefined;
    const r99 = p.p99 !== undefined && base.p99 ? p.p99 / base.p99 : undefined;
    const q99 = p.p99 !== undefined && quiet.p99 ? p.p99 / quiet.p99 : undefined;
    const mark = (/** @type {number | undefined} */ r, /** @type {number} */ t) =>
      p === base || r === undefined
        ? fmtRatio(r)
        : `${fmtRatio(r)} ${r <= t ? "(≤ ×" : "(**> ×"}${t}${r <= t ? ")" : "**)"}`;
    const name = disturbed(p) ? `${p.name} (disturbed)` : p.name;
    lines.push(
      `| ${name} | ${fmtMs(p.p50)} | ${fmtMs(p.p99)} | ${fmtMs(p.max)} | ` +
        `${p.throughput.toFixed(1)} (${p.offered}) | ${p.errors} | ${mark(r50, TARGET.p50)} | ` +
        `${mark(r99, TARGET.p99)} | ${p.experiment ? mark(q99, TARGET.p99) : fmtRatio(q99)} | ` +
        `${p.experiment ? p.experiment.windowPairsPerSecond.toFixed(1) : "-"} |`,
    );
  }
  return lines;
}

/**
 * Whether this process's event loop stalled for longer than DISTURBED_MS in the phase's window:
 * answers were timed late and the fake upstream (a thread of this process) answered late, so the
 * phase's tail is partly the instrument's (the machine is shared).
 * @param {Phase} p
 */
const disturbed = (p) => p.loopDelayMs.max > DISTURBED_MS;

/**
 * CPU (ms of one core) per pair the experiment cost each process: its CPU in the phase over the
 * baseline's, over the pairs done a second.
 * @param {Phase} p
 * @param {Phase} base
 */
function cpuPerPair(p, base) {
  const e = p.experiment;
  if (!e || !p.cpu || !base.cpu || e.windowPairsPerSecond <= 0) return undefined;
  const now = p.cpu.processPercent;
  const before = base.cpu.processPercent;
  return ["executor", "runs", "gateway", "postgres", "nats"]
    .filter((n) => now[n] !== undefined && before[n] !== undefined)
    .map(
      (n) =>
        `${n} ${((((now[n] ?? 0) - (before[n] ?? 0)) * 10) / e.windowPairsPerSecond).toFixed(1)} ms`,
    )
    .join(", ");
}

/** @param {Phase[]} phases */
function loopTable(phases) {
  const names = ["fake", "gateway", "executor", "runs"];
  const lines = [
    `| phase | bench (load generator) | ${names.join(" | ")} |`,
    `|---|---|${names.map(() => "---").join("|")}|`,
  ];
  /** @param {{ p99: number, max: number } | undefined} d */
  const cell = (d) => (d ? `${d.max} (${d.p99})` : "-");
  for (const p of phases) {
    lines.push(
      `| ${p.name} | ${cell(p.loopDelayMs)} | ${names.map((n) => cell(p.loops[n])).join(" | ")} |`,
    );
  }
  return lines;
}

/** @param {Phase[]} phases */
function cpuTable(phases) {
  const names = ["gateway", "executor", "runs", "catalog", "postgres", "nats", "bench", "other"];
  const lines = [
    `| phase | ${names.join(" | ")} | machine busy | CPU pressure |`,
    `|---|${names.map(() => "---").join("|")}|---|---|`,
  ];
  for (const p of phases) {
    const pc = p.cpu?.processPercent ?? {};
    lines.push(
      `| ${p.name} | ${names.map((n) => (pc[n] === undefined ? "-" : `${pc[n]}%`)).join(" | ")} | ` +
        `${p.cpu?.machineBusyPercent ?? "-"}% | ${p.cpuPressure ?? "-"}% |`,
    );
  }
  return lines;
}

/**
 * The top frames of each profiled process in each phase's window.
 * @param {string} dir
 * @param {Phase[]} phases
 */
function profileReport(dir, phases) {
  const files = listProfiles(dir).filter((f) => f.tid === 0);
  const lines = [`CPU profiles in ${path.relative(repoRoot, dir)} (main threads):`];
  /** @type {unknown[]} */
  const data = [];
  if (files.length === 0) return { lines: [...lines, "  none written"], data };
  const profiles = files.map((f) => ({ ...f, profile: loadProfile(f.file) }));
  for (const phase of phases) {
    for (const name of PROFILED) {
      const agg = { totalUs: 0, frames: new Map() };
      for (const p of profiles.filter((x) => x.process === name)) {
        addSelfTimes(p.profile, phase.window, agg);
      }
      const top = topFrames(agg, { limit: PROFILE_TOP, repoRoot });
      lines.push(
        "",
        `  ${name}, ${phase.name}: ${top.totalMs} ms sampled, busy ${top.busyPercent}%`,
        ...formatTopFrames(top),
      );
      data.push({ phase: phase.name, process: name, ...top });
    }
    // Around the slowest live request: the second before its, its own and the one after.
    const worst = phase.worstSecond;
    if (!phase.experiment || !worst) continue;
    const window = {
      fromUs: phase.window.fromUs + (worst.second - 1) * 1e6,
      toUs: phase.window.fromUs + (worst.second + 2) * 1e6,
    };
    for (const name of PROFILED) {
      const agg = { totalUs: 0, frames: new Map() };
      for (const p of profiles.filter((x) => x.process === name)) {
        addSelfTimes(p.profile, window, agg);
      }
      const top = topFrames(agg, { limit: 10, repoRoot });
      lines.push(
        "",
        `  ${name}, ${phase.name}, seconds ${worst.second - 1}–${worst.second + 1} (the slowest ` +
          `request, ${worst.max} ms, in second ${worst.second}): ${top.totalMs} ms sampled, busy ` +
          `${top.busyPercent}%`,
        ...formatTopFrames(top),
      );
      data.push({ phase: `${phase.name}, worst second`, process: name, ...top });
    }
  }
  return { lines, data };
}

// --- Main -------------------------------------------------------------------------------------

async function main() {
  const loadStart = load();
  // Before pinning: nproc counts the CPUs this process may use.
  let cpuModel = os.cpus()[0]?.model ?? "?";
  try {
    cpuModel += `, ${execFileSync("nproc", { encoding: "utf8" }).trim()} cores`;
  } catch {
    cpuModel += `, ${os.cpus().length} cores`;
  }
  const pinning = planPinning();
  const fakeKey = "sk-bench-upstream";
  if (pinning.enabled) pinSelf(pinning.loadCpu);
  log(pinning.note);
  const profileDir = PROFILE
    ? path.join(
        repoRoot,
        "bench/results",
        `profile-${new Date().toISOString().replace(/[:.]/g, "-")}`,
      )
    : undefined;
  const fake = await startFakeInWorker({
    apiKey: fakeKey,
    latencyMs: LATENCY_MS,
    maxRecordedRequests: 0,
  });
  /** @type {TestDatabase | undefined} */
  let database;
  /** @type {TestStream | undefined} */
  let stream;
  /** @type {Stack | undefined} */
  let stack;
  /** @type {pg.Client | undefined} */
  let client;
  /** @type {Phase[]} */
  const phases = [];
  /** @type {string[]} */
  const problems = [];
  /** @type {{ pinnedCpus?: Record<string, string | undefined>, seed?: { ms: number, recorded: number } }} */
  const info = {};
  try {
    database = await createTestDatabase("experimentsbench");
    stream = createTestStream();
    log("starting the stack (catalog, runs, executor, gateway)");
    const metricsPorts = { executor: await freePort(), runs: await freePort() };
    stack = await startStack({
      databaseUrl: database.url,
      natsEnv: stream.env,
      // The fake listens on loopback, which the deployed default refuses.
      env: { PIES_ALLOWED_ENDPOINTS: "loopback", ...EXTRA_ENV },
      launcher: pinning.launcher,
      root: ROOT,
      processEnv: {
        executor: { PIES_METRICS_PORT: String(metricsPorts.executor) },
        runs: { PIES_METRICS_PORT: String(metricsPorts.runs) },
      },
      processNodeArgs: profileDir
        ? Object.fromEntries(
            PROFILED.map((name) => [
              name,
              [
                "--cpu-prof",
                `--cpu-prof-dir=${path.join(profileDir, name)}`,
                ...(PROFILE_INTERVAL_US ? [`--cpu-prof-interval=${PROFILE_INTERVAL_US}`] : []),
              ],
            ]),
          )
        : undefined,
    });
    info.pinnedCpus = Object.fromEntries(stack.processes.map((p) => [p.name, cpusOf(p.child.pid)]));
    const { gatewayUrl } = stack;
    const key = stack.bootstrap.key;
    const { a, b } = await catalog(gatewayUrl, key, fake.url, fakeKey);
    log(`seeding ${RUNS} runs of A through the API, ${SEED_CONCURRENCY} at a time`);
    const seeded = await seed(gatewayUrl, key, a.id);
    info.seed = { ms: Math.round(seeded.ms), recorded: seeded.recorded };
    log(`seeded in ${(seeded.ms / 1000).toFixed(1)} s; ${seeded.recorded} recorded`);
    const live = { gatewayUrl, key, interaction: b.id };
    /** @type {LoopProbes} */
    const probes = {
      fake,
      metrics: {
        gateway: `${gatewayUrl}/metrics`,
        executor: `http://127.0.0.1:${metricsPorts.executor}/metrics`,
        runs: `http://127.0.0.1:${metricsPorts.runs}/metrics`,
      },
    };

    client = new pg.Client({ connectionString: database.url });
    await client.connect();
    const db = client;
    phases.push(await measurePhase("baseline", live, stack, db, probes));
    const replayModel = REPLAY_MS > 0 ? `slow-${REPLAY_MS}` : undefined;
    phases.push(
      await experimentPhase({
        phaseName: "experiment",
        stack,
        db,
        probes,
        live,
        a,
        model: replayModel,
        wholeExperiment: false,
      }),
    );
    phases.push(await measurePhase("baseline after", live, stack, db, probes));
    if (FAST) {
      phases.push(
        await experimentPhase({
          phaseName: "fast experiment",
          stack,
          db,
          probes,
          live,
          a,
          model: undefined,
          wholeExperiment: true,
        }),
      );
    }
  } catch (err) {
    problems.push(`the bench stopped: ${err instanceof Error ? err.stack : err}`);
    log(`the bench stopped: ${err instanceof Error ? err.message : err}`);
    if (stack) log(`recent stack output:\n${stack.output().split("\n").slice(-40).join("\n")}`);
  } finally {
    await client?.end().catch(() => {});
    if (stack) {
      const codes = await stack.stop().catch((err) => ({ error: String(err) }));
      log(`stack stopped: ${JSON.stringify(codes)}`);
    }
    await fake.close();
    await stream?.remove().catch((err) => log(`stream not removed: ${err}`));
    await database?.drop().catch((err) => log(`database not dropped: ${err}`));
  }

  // --- Checks and verdict
  const base = phases.find((p) => p.name === "baseline");
  const during = phases.find((p) => p.name === "experiment");
  for (const p of phases) {
    if (p.errors > 0) problems.push(`${p.name}: ${p.errors} live requests failed`);
    if (p.skipped > 0) problems.push(`${p.name}: ${p.skipped} arrivals skipped (in flight)`);
    const e = p.experiment;
    if (e) {
      if (e.status !== "completed" || e.progress.completed !== RUNS) {
        problems.push(
          `${p.name}: the experiment ended ${e.status} with ${e.progress.completed} of ${RUNS} pairs completed (${e.progress.failed} failed)`,
        );
      }
      if (e.maxRunning > CONCURRENCY) {
        problems.push(
          `${p.name}: ${e.maxRunning} pairs were running at once, more than its concurrency ${CONCURRENCY}`,
        );
      }
      if (p.name === "experiment" && !e.covered) {
        problems.push(
          `${p.name}: the experiment ended before the window did (raise BENCH_EXP_REPLAY_MS)`,
        );
      }
    }
  }
  const after = phases.find((p) => p.name === "baseline after");
  const quiet =
    base && after && after.p99 !== undefined && (base.p99 === undefined || after.p99 < base.p99)
      ? after
      : base;
  const q99 = quiet?.p99 && during?.p99 !== undefined ? during.p99 / quiet.p99 : undefined;
  const r50 = base?.p50 && during?.p50 !== undefined ? during.p50 / base.p50 : undefined;
  const r99 = base?.p99 && during?.p99 !== undefined ? during.p99 / base.p99 : undefined;
  // A live request that failed is worse than a slow one: none may fail beside the experiment.
  const met =
    r50 !== undefined &&
    r99 !== undefined &&
    r50 <= TARGET.p50 &&
    r99 <= TARGET.p99 &&
    during?.errors === 0;

  const lines = [
    `## Experiments beside live traffic (${new Date().toISOString()})`,
    "",
    `Node ${process.version}, ${cpuModel}. Load average (1, 5, 15 min) at the start: ${loadStart}; ` +
      `at the end: ${load()}. ${pinning.note}.`,
    "",
    ...(ROOT ? [`The four processes from another build: ${ROOT}.`, ""] : []),
    `Settings: upstream latency ${LATENCY_MS} ms a call (fake OpenAI-compatible, in a worker ` +
      `thread); ${RUNS} runs of A seeded through the API (${SEED_CONCURRENCY} at a time` +
      `${info.seed ? `, ${(info.seed.ms / 1000).toFixed(1)} s` : ""}); ` +
      `B's blocking executions at a fixed arrival rate of ${RATE}/s (open loop), ` +
      `${WARMUP_MS / 1000} s warm-up then ${DURATION_MS / 1000} s measured per phase; the ` +
      `experiment at concurrency ${CONCURRENCY} against A@draft with model ` +
      `${REPLAY_MS > 0 ? `slow-${REPLAY_MS} (the fake waits ${REPLAY_MS} ms more: a replay takes ` + `${LATENCY_MS + REPLAY_MS} ms upstream, so that ${RUNS} pairs outlast the window)` : MODEL}` +
      `${FAST ? `; the fast experiment: the same runs, no override (${LATENCY_MS} ms a replay), B measured from its first pair done to its end` : ""}` +
      `${Object.keys(EXTRA_ENV).length ? `; stack environment ${JSON.stringify(EXTRA_ENV)}` : ""}.`,
    "",
    ...(base ? table(phases, base, quiet ?? base) : ["(no baseline measured)"]),
    "",
    `The quieter baseline is the one of the two (before and after) with the lower p99. A phase is ` +
      `disturbed when this process's event loop stalled more than ${DISTURBED_MS} ms in it (the ` +
      `machine is shared): its answers were timed late and the fake upstream, a thread of this ` +
      `process, answered late, so part of its tail is the instrument's.`,
    "",
    `CPU during each phase's window (% of one core; postgres and nats count every user of the ` +
      `shared servers; CPU pressure: the share of the window in which some task of the machine ` +
      `waited for a CPU, /proc/pressure/cpu):`,
    "",
    ...cpuTable(phases),
    "",
    "Event-loop delay over each phase's window, max (p99) in ms: this process, the fake upstream's " +
      "thread, and the pies processes (their metrics). A stall in the fake or the bench is the " +
      "instrument's; one in a pies process, its own or its CPU's.",
    "",
    ...loopTable(phases),
    "",
  ];
  for (const p of phases) {
    lines.push(
      `- ${p.name}: ${p.ok} ok of ${p.sent} sent in ${(p.windowMs / 1000).toFixed(1)} s, p90 ` +
        `${fmtMs(p.p90)}; the runs' execution_time (the provider call) p50 ${fmtMs(p.executionP50)}, ` +
        `p99 ${fmtMs(p.executionP99)}; the time around it p50 ${fmtMs(p.outsideP50)}, p99 ` +
        `${fmtMs(p.outsideP99)}; the slowest request ${p.worstSecond?.max ?? "-"} ms (execution_time ` +
        `${p.worstSecond?.executionMax ?? "-"} ms) in second ${p.worstSecond?.second ?? "-"}; load ${p.load}, ` +
        `latest send ${p.lateMs} ms behind its time, this process's event-loop delay p99 ` +
        `${p.loopDelayMs.p99} ms (max ${p.loopDelayMs.max} ms)` +
        (p.maintenance.length
          ? `; ended in the window: ${p.maintenance.map((m) => `${m.what} of ${m.table} at ${m.atS ?? "?"} s`).join(", ")}`
          : "; no autovacuum or autoanalyze of the bench's database ended in the window") +
        (p.errorKinds.length
          ? `; errors: ${p.errorKinds.map((e) => `${e.count}× ${e.error}`).join("; ")}`
          : "") +
        (p.experiment
          ? `; experiment ${p.experiment.status}: ${p.experiment.progress.completed} completed, ` +
            `${p.experiment.progress.failed} failed of ${p.experiment.progress.total}, ` +
            `${p.experiment.durationS?.toFixed(1)} s from creation to end ` +
            `(${p.experiment.overallPairsPerSecond?.toFixed(1)} pairs/s), ` +
            `pairs done ${p.experiment.doneAtStart} → ${p.experiment.doneAtEnd} over the window ` +
            `(${p.experiment.windowPairsPerSecond.toFixed(1)}/s), ` +
            `${p.experiment.covered ? "still running when the window closed" : "ended within the window"}` +
            `, at most ${p.experiment.maxRunning} pairs seen running at once` +
            (base && cpuPerPair(p, base)
              ? `; CPU per pair over the baseline's: ${cpuPerPair(p, base)}`
              : "") +
            `, candidate p50 latency ${p.experiment.candidateP50 ?? "-"} ms`
          : "") +
        ".",
    );
  }
  lines.push(
    "",
    `Verdict: ${
      r50 === undefined || r99 === undefined
        ? "not measured"
        : `p50 ${fmtRatio(r50)} (target ≤ ×${TARGET.p50}): ${r50 <= TARGET.p50 ? "met" : "**missed**"}; ` +
          `p99 ${fmtRatio(r99)} (target ≤ ×${TARGET.p99}): ${r99 <= TARGET.p99 ? "met" : "**missed**"}; ` +
          `live requests failed beside the experiment: ${during?.errors ?? "-"} ` +
          `(${during?.errors === 0 ? "none: met" : "**missed**"}): target ${met ? "met" : "**missed**"}` +
          `; against the quieter baseline p99 ${fmtRatio(q99)}` +
          `${during && disturbed(during) ? "; the experiment phase was disturbed" : ""}` +
          `${base && disturbed(base) ? "; the baseline was disturbed" : ""}`
    }${problems.length ? `; ${problems.length} problem(s)` : ""}.`,
  );
  if (problems.length) lines.push("", "Problems:", ...problems.map((p) => `- ${p}`));
  /** @type {unknown} */
  let profiles;
  if (profileDir) {
    const report = profileReport(profileDir, phases);
    profiles = report.data;
    lines.push("", "```", ...report.lines, "```");
  }
  console.log(lines.join("\n"));
  const out = path.join(repoRoot, "bench/results/latest-experiments.json");
  await mkdir(path.dirname(out), { recursive: true });
  await writeFile(
    out,
    JSON.stringify(
      {
        date: new Date().toISOString(),
        settings: {
          RUNS,
          CONCURRENCY,
          LATENCY_MS,
          REPLAY_MS,
          RATE,
          DURATION_MS,
          WARMUP_MS,
          SEED_CONCURRENCY,
          FAST,
          EXTRA_ENV,
          ROOT,
        },
        loadStart,
        loadEnd: load(),
        pinning: pinning.note,
        ...info,
        phases,
        ratios: { p50: r50, p99: r99, p99QuieterBaseline: q99 },
        met,
        problems,
        profiles,
      },
      null,
      2,
    ),
  );
  log(`wrote ${path.relative(repoRoot, out)}`);
  return met && problems.length === 0 ? 0 : 1;
}

process.exit(await main());
