#!/usr/bin/env node
// @ts-check
// pies overhead benchmark: the same chat completion sent straight to a loopback fake OpenAI
// upstream ("direct"), through Portkey's gateway, the peer ("portkey"), through the full pies
// stack (gateway -> executor -> upstream, with runs in PostgreSQL and chunks over NATS: "pies"),
// and through pies' embedded mode (one process, PGlite, in-process bus: "embedded"), blocking and
// streamed, at several concurrencies. See bench/README.md. Loopback only. Settings (environment
// variables, all optional):
//   BENCH_CONCURRENCY=1,16,64  BENCH_WARMUP_MS=1500  BENCH_DURATION_MS=5000
//   BENCH_MAX_REQUESTS=100000 (per cell)  BENCH_REQUEST_TIMEOUT_MS=30000  BENCH_DEADLINE_MS=600000
//   BENCH_LATENCY_MS=5  BENCH_CHUNK_DELAY_MS=1  BENCH_MODES="direct blocking,pies blocking,..."
//   ("pies cached blocking", "embedded cached blocking": result cache hits; "pies one-request
//   streamed", "edge …", "embedded …": POST /runs answering with the run's event stream)
//   BENCH_PIN=0 (no CPU pinning)  BENCH_RUNS_WAIT_MS=30000  BENCH_PEER_START_MS=120000
//   BENCH_STREAM_EVENTS=0 (other runs' events stored in the stream first, as a deployment's holds)
//   BENCH_PROFILE=1 (CPU profiles of executor, gateway, embedded)  BENCH_PROFILE_INTERVAL_US
//   BENCH_PROFILE_NODE_ARGS (more node arguments for the profiled processes)  BENCH_PROFILE_TOP=15
import { mkdir, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { rmSync } from "node:fs";
import {
  createTestDatabase,
  createTestStream,
  fillEventStream,
  freePort,
  repoRoot,
  startProcess,
  startStack,
} from "@pies/testkit";
import { api as request } from "./lib/api.mjs";
import { startCpuSample } from "./lib/cpu.mjs";
import { startEmbedded } from "./lib/embedded.mjs";
import { startFakeInWorker } from "./lib/fake.mjs";
import { runCell } from "./lib/load.mjs";
import { modes } from "./lib/modes.mjs";
import { cpusOf, pinSelf, planPinning } from "./lib/pin.mjs";
import { portkeyScript, startPortkey } from "./lib/portkey.mjs";
import {
  addSelfTimes,
  formatTopFrames,
  listProfiles,
  loadProfile,
  topFrames,
} from "./lib/profile.mjs";
import { waitForRecordedRuns, waitForRunsViaApi } from "./lib/runs-check.mjs";
import {
  addRatios,
  formatCpuTable,
  formatPerExecutionTable,
  formatTable,
  perExecution,
  summarise,
} from "./lib/stats.mjs";

/** @import { ManagedProcess, Stack, TestDatabase, TestStream } from "@pies/testkit" */
/** @import { Embedded } from "./lib/embedded.mjs" */
/** @import { ModeContext, ModeName, PiesTarget, Sample } from "./lib/modes.mjs" */
/** @import { Pinning } from "./lib/pin.mjs" */
/** @import { RunsCount } from "./lib/runs-check.mjs" */
/** @import { Row } from "./lib/stats.mjs" */

/**
 * A row of the table and of latest.json: a cell's summary, with what else the run keeps of it.
 * @typedef {Row & { interruptedByStop: number, window?: { fromUs: number, toUs: number } }} CellRow
 */

/**
 * A runs store's check: the count the bench waited for, or why it could not count.
 * @typedef {(RunsCount & { abandoned: number, ok: boolean, error?: undefined })
 *   | { answered: number, abandoned: number, ok: false, error: string }} RunsCheck
 */

/** @typedef {{ answered: number, abandoned: number }} RunsSeen */

const here = path.dirname(fileURLToPath(import.meta.url));
/**
 * @param {string} name
 * @param {number} fallback
 */
const int = (name, fallback) => {
  const raw = process.env[name];
  const value = raw === undefined || raw === "" ? fallback : Number(raw);
  if (!Number.isInteger(value) || value < 0)
    throw new Error(`${name} must be a non-negative integer`);
  return value;
};

const config = {
  concurrency: (process.env.BENCH_CONCURRENCY ?? "1,16,64").split(",").map((c) => {
    const n = Number(c.trim());
    if (!Number.isInteger(n) || n < 1) throw new Error(`bad BENCH_CONCURRENCY entry ${c}`);
    return n;
  }),
  // Checked just below.
  modes: /** @type {ModeName[]} */ (
    (process.env.BENCH_MODES ?? Object.keys(modes).join(","))
      .split(",")
      .map((m) => m.trim())
      .filter(Boolean)
  ),
  warmupMs: int("BENCH_WARMUP_MS", 1500),
  durationMs: int("BENCH_DURATION_MS", 5000),
  maxRequests: int("BENCH_MAX_REQUESTS", 100_000),
  requestTimeoutMs: int("BENCH_REQUEST_TIMEOUT_MS", 30_000),
  deadlineMs: int("BENCH_DEADLINE_MS", 600_000),
  upstream: { latencyMs: int("BENCH_LATENCY_MS", 5), chunkDelayMs: int("BENCH_CHUNK_DELAY_MS", 1) },
  runsWaitMs: int("BENCH_RUNS_WAIT_MS", 30_000),
  streamEvents: int("BENCH_STREAM_EVENTS", 0),
  peerStartMs: int("BENCH_PEER_START_MS", 120_000),
  profile: process.env.BENCH_PROFILE === "1",
  profileIntervalUs: int("BENCH_PROFILE_INTERVAL_US", 0) || undefined,
  profileNodeArgs: (process.env.BENCH_PROFILE_NODE_ARGS ?? "").split(/\s+/).filter(Boolean),
  profileTop: int("BENCH_PROFILE_TOP", 15),
  model: "gpt-4o-mini",
  text: "the quarterly report: revenue grew 12%, costs fell 3%, and headcount stayed flat.",
  /** @type {Pinning | undefined} set below */
  pinning: undefined,
};
for (const m of config.modes) if (!modes[m]) throw new Error(`unknown mode "${m}" in BENCH_MODES`);
/** @param {string} mode */
const isPortkey = (mode) => mode.startsWith("portkey ");
/** @param {string} mode */
const isPies = (mode) => mode.startsWith("pies ");
/**
 * The edge (gateway and executor in one process) runs beside the stack, on its catalog and runs.
 * @param {string} mode
 */
const isEdge = (mode) => mode.startsWith("edge ");
/** @param {string} mode */
const isEmbedded = (mode) => mode.startsWith("embedded ");
/** The systems whose answers name runs, checked against their runs store at the end. */
const RUN_SYSTEMS = ["pies", "embedded"];
// The edge records into the stack's runs store: its runs are counted with the stack's.
/**
 * @param {string} mode
 * @returns {string}
 */
const systemOf = (mode) => (isEdge(mode) ? "pies" : /** @type {string} */ (mode.split(" ")[0]));
// The peer: Portkey, run by ../shared/peers/portkey.sh next to the repository, when it is there.
const peerScript = portkeyScript(repoRoot);
/** @type {string[]} */
const notes = [];
if (!peerScript && config.modes.some(isPortkey)) {
  notes.push(
    `Portkey modes skipped: ${path.resolve(repoRoot, "../shared/peers/portkey.sh")} not found`,
  );
  config.modes = config.modes.filter((m) => !isPortkey(m));
}
const pinning = planPinning();
config.pinning = pinning;

const startedAt = new Date();
const t0 = performance.now();
const elapsed = () => ((performance.now() - t0) / 1000).toFixed(1);
/** @param {string} message */
const log = (message) => process.stderr.write(`[bench ${elapsed()}s] ${message}\n`);

// One signal stops everything: the overall deadline, Ctrl-C / SIGTERM.
const stopper = new AbortController();
const stop = stopper.signal;
const deadline = setTimeout(() => {
  log(
    `overall deadline of ${config.deadlineMs} ms reached: stopping and reporting what was measured`,
  );
  stopper.abort(new Error("overall deadline reached"));
}, config.deadlineMs);
deadline.unref();
/** Kills what we started, at once (for exits that cannot wait for cleanup). */
function killAll() {
  for (const p of resources.stack?.processes ?? []) p.child.kill("SIGKILL");
  resources.edge?.child.kill("SIGKILL");
  resources.portkey?.kill();
  if (resources.embedded) {
    resources.embedded.kill();
    // Best effort: the process may not be gone yet.
    try {
      rmSync(resources.embedded.dataDir, { recursive: true, force: true });
    } catch {
      // left in the temporary directory
    }
  }
}
// Last resort if stopping or cleanup itself hangs: kill what we started and leave.
const guard = setTimeout(() => {
  log("cleanup did not finish within 60 s after the deadline: killing the pies processes");
  killAll();
  process.exit(3);
}, config.deadlineMs + 60_000);
guard.unref();

/**
 * What the run has started, each once it has (cleanup and killAll stop what is there).
 * @type {{
 *   fake?: Awaited<ReturnType<typeof startFakeInWorker>>,
 *   db?: TestDatabase,
 *   stream?: TestStream,
 *   stack?: Stack,
 *   portkey?: Awaited<ReturnType<typeof startPortkey>>,
 *   embedded?: Embedded,
 *   edge?: ManagedProcess,
 *   edgeUrl?: string,
 * }}
 */
const resources = {
  fake: undefined,
  db: undefined,
  stream: undefined,
  stack: undefined,
  portkey: undefined,
  embedded: undefined,
  edge: undefined,
  edgeUrl: undefined,
};
/** @typedef {{ step: string, ms: number, result?: unknown, error?: string }} CleanupStep */
/** @type {Promise<CleanupStep[]> | undefined} */
let cleaning;
/** Stops and removes everything started, once; resolves to [{ step, ms, result | error }]. */
function cleanup() {
  cleaning ??= (async () => {
    // stack.stop() stops gateway, executor, runs, catalog in that order (SIGTERM, SIGKILL after
    // 10 s); timing each process separately shows which one is slow to shut down.
    const stackSteps = [...(resources.stack?.processes ?? [])]
      .reverse()
      .map(
        (p) =>
          /** @type {[string, () => Promise<unknown>]} */ ([
            `stop ${p.name}`,
            async () => `exit ${await p.stop()}`,
          ]),
      );
    /** @type {[string, () => unknown][]} */
    const steps = [
      ["stop portkey", async () => resources.portkey && `exit ${await resources.portkey.stop()}`],
      // SIGTERM, SIGKILL after 10 s; then its temporary data directory is removed.
      ["stop edge", async () => resources.edge && `exit ${await resources.edge.stop(10_000)}`],
      [
        "stop embedded",
        async () => resources.embedded && `exit ${await resources.embedded.stop(10_000)}`,
      ],
      ...stackSteps,
      ["stack.stop()", () => resources.stack?.stop()],
      ["fake.close()", () => resources.fake?.close()],
      ["stream.remove()", () => resources.stream?.remove()],
      ["db.drop()", () => resources.db?.drop()],
    ];
    /** @type {CleanupStep[]} */
    const report = [];
    for (const [step, run] of steps) {
      const started = performance.now();
      try {
        const result = await run();
        const ms = Math.round(performance.now() - started);
        report.push({ step, ms, ...(result !== undefined ? { result } : {}) });
        if (ms > 2000) log(`cleanup: ${step} took ${ms} ms${result ? ` (${result})` : ""}`);
      } catch (thrown) {
        const err = /** @type {Error | undefined} */ (thrown);
        report.push({
          step,
          ms: Math.round(performance.now() - started),
          error: String(err?.message ?? err),
        });
        log(`cleanup ${step} failed: ${err?.message ?? err}`);
      }
    }
    return report;
  })();
  return cleaning;
}

let signalled = 0;
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => {
    signalled++;
    if (signalled > 1) {
      log(`${sig} again: killing the pies processes and exiting without full cleanup`);
      killAll();
      process.exit(130);
    }
    log(`${sig}: stopping; cleaning up (press again to force)`);
    stopper.abort(new Error(`interrupted by ${sig}`));
  });
}

/**
 * The set-up's requests: their JSON, or an error that says what failed.
 * @param {string} gatewayUrl
 * @param {string} key
 * @param {string} pathname
 * @param {unknown} [body]
 */
async function api(gatewayUrl, key, pathname, body) {
  const response = await request(gatewayUrl, key, pathname, body, stop);
  if (response.status >= 300) {
    throw new Error(`POST ${pathname}: HTTP ${response.status}: ${response.text}`);
  }
  return response.json;
}

/** Where the CPU profiles go (BENCH_PROFILE=1): a directory per process under bench/results. */
const profileDir = config.profile
  ? path.join(here, "results", `profile-${startedAt.toISOString().replace(/[:.]/g, "-")}`)
  : undefined;
/** The processes profiled for the rows of each system (BENCH_PROFILE_PROCESSES for pies). */
const PROFILED = {
  pies: (process.env.BENCH_PROFILE_PROCESSES ?? "executor,gateway").split(","),
  embedded: ["embedded"],
};

/**
 * The node arguments that profile the process `name` into its directory (when profiling).
 * @param {string} name
 */
function profileArgs(name) {
  return [
    "--cpu-prof",
    `--cpu-prof-dir=${path.join(/** @type {string} */ (profileDir), name)}`,
    ...(config.profileIntervalUs ? [`--cpu-prof-interval=${config.profileIntervalUs}`] : []),
    ...config.profileNodeArgs,
  ];
}

function profileNodeArgs() {
  if (!profileDir) return undefined;
  return Object.fromEntries(PROFILED.pies.map((name) => [name, profileArgs(name)]));
}

/**
 * The benchmark's catalog on one pies (the stack's gateway or the embedded process): an
 * `openai_compatible` environment pointing at the fake, the jst prompt template, the interaction.
 * Resolves to the interaction's id.
 * @param {string} gatewayUrl
 * @param {string} key
 * @param {string} fakeUrl
 * @param {string} fakeKey
 * @returns {Promise<string>}
 */
async function createInteraction(gatewayUrl, key, fakeUrl, fakeKey) {
  const environment = await api(gatewayUrl, key, "/environments", {
    name: "bench-upstream",
    provider: "openai_compatible",
    endpoint_url: fakeUrl,
    apiKey: fakeKey,
    default_model: config.model,
  });
  const prompt = await api(gatewayUrl, key, "/prompts", {
    name: "summarise",
    role: "user",
    content_type: "jst",
    content: "return `Summarise ${text}`",
    inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  });
  const interaction = await api(gatewayUrl, key, "/interactions", {
    name: "Summary",
    environment: environment.id,
    prompts: [{ type: "template", template: prompt.id }],
  });
  return interaction.id;
}

/**
 * Polls `url` until it answers 2xx; fails if `proc` exits or `timeoutMs` passes.
 * @param {string} url
 * @param {ManagedProcess} proc
 * @param {number} timeoutMs
 * @param {AbortSignal} signal
 */
async function waitForReady(url, proc, timeoutMs, signal) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && !signal.aborted) {
    if (proc.child.exitCode !== null) throw new Error(`${proc.name} exited:\n${proc.output()}`);
    if (
      await fetch(url).then(
        (r) => r.ok,
        () => false,
      )
    )
      return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`${url} was not ready within ${timeoutMs} ms:\n${proc.output()}`);
}

/** @returns {Promise<ModeContext>} */
async function setup() {
  const fakeKey = "sk-bench-upstream";
  if (pinning.enabled) {
    // Before the fake's worker thread starts, so that it inherits this CPU.
    pinSelf(pinning.loadCpu);
  }
  log(pinning.note);
  log("starting fake upstream");
  const fake = await startFakeInWorker({
    apiKey: fakeKey,
    latencyMs: config.upstream.latencyMs,
    chunkDelayMs: config.upstream.chunkDelayMs,
    maxRecordedRequests: 0,
  });
  resources.fake = fake;
  // The four-process stack, its database and stream only when a pies mode is measured.
  if (config.modes.some((m) => isPies(m) || isEdge(m))) {
    log("starting test database, test stream, the stack (catalog, runs, executor, gateway)");
    const db = (resources.db = await createTestDatabase("bench"));
    const stream = (resources.stream = createTestStream());
    resources.stack = await startStack({
      databaseUrl: db.url,
      natsEnv: stream.env,
      // The fake provider listens on loopback, which the deployed default refuses.
      env: { PIES_ALLOWED_ENDPOINTS: "loopback" },
      launcher: pinning.launcher,
      processNodeArgs: profileNodeArgs(),
    });
    if (config.streamEvents > 0) {
      log(`storing ${config.streamEvents} events of earlier runs in the stack's stream`);
      // As the soak's prefill: six events a run (five chunks and the end), all stored.
      await fillEventStream({
        url: stream.url,
        stream: stream.stream,
        subjectPrefix: stream.subjectPrefix,
        events: config.streamEvents,
      });
    }
  }
  if (config.modes.some(isEdge)) {
    log(
      "starting the edge (node embedded/dist/edge-main.js) on the stack's catalog, runs and NATS",
    );
    // Started above: an edge mode starts the stack too.
    const { stack, stream } = resources;
    if (!stack || !stream) throw new Error("the edge needs the stack");
    const port = await freePort();
    resources.edge = startProcess(
      "edge",
      "embedded/dist/edge-main.js",
      {
        ...stream.env,
        HOST: "127.0.0.1",
        PORT: String(port),
        CATALOG_URL: stack.catalogUrl,
        RUNS_URL: stack.runsUrl,
        PIES_ALLOWED_ENDPOINTS: "loopback",
      },
      profileDir ? profileArgs("edge") : [],
      pinning.launcher,
    );
    resources.edgeUrl = `http://127.0.0.1:${port}`;
    await waitForReady(`${resources.edgeUrl}/readyz`, resources.edge, 30_000, stop);
  }
  if (config.modes.some(isEmbedded)) {
    log("starting the embedded mode (node embedded/dist/main.js, PGlite, in-process bus)");
    resources.embedded = await startEmbedded({
      launcher: pinning.launcher,
      nodeArgs: profileDir ? profileArgs("embedded") : [],
      signal: stop,
    });
  }
  let portkeyUrl;
  // (Without the script the Portkey modes were left out above.)
  if (peerScript && config.modes.some(isPortkey)) {
    log(`starting Portkey (${peerScript})`);
    try {
      resources.portkey = await startPortkey({
        script: peerScript,
        port: await freePort(),
        launcher: pinning.launcher,
        timeoutMs: config.peerStartMs,
        signal: stop,
      });
      portkeyUrl = resources.portkey.url;
    } catch (err) {
      if (stop.aborted) throw err;
      // pies is still measured; the run counts as failed (exit code 2).
      peerFailed = `Portkey did not start, its modes skipped: ${/** @type {Error} */ (err).message}`;
      notes.push(/** @type {string} */ (peerFailed.split("\n")[0]));
      log(peerFailed);
      config.modes = config.modes.filter((m) => !isPortkey(m));
    }
  }
  /**
   * The same interaction on one pies, as the pies modes' ctx.
   * @param {string} gatewayUrl
   * @param {string} apiKey
   * @returns {Promise<PiesTarget>}
   */
  const target = async (gatewayUrl, apiKey) => ({
    gatewayUrl,
    apiKey,
    interactionId: await createInteraction(gatewayUrl, apiKey, fake.url, fakeKey),
    text: config.text,
  });
  const { stack, edge, edgeUrl, embedded } = resources;
  return {
    portkeyUrl,
    fakeUrl: fake.url,
    fakeKey,
    model: config.model,
    text: config.text,
    pies: stack && (await target(stack.gatewayUrl, stack.bootstrap.key)),
    // The edge runs on the stack (started with it above).
    edge:
      edge && stack && edgeUrl !== undefined
        ? await target(edgeUrl, stack.bootstrap.key)
        : undefined,
    embedded: embedded && (await target(embedded.url, embedded.apiKey)),
  };
}

/** @type {string | undefined} */
let peerFailed;

/**
 * The processes that serve a mode's requests: their CPU per successful request is summed as the
 * row's own.
 * @param {string} mode
 * @returns {string[]}
 */
function ownProcesses(mode) {
  if (isPortkey(mode)) return ["portkey"];
  if (isEmbedded(mode)) return ["embedded"];
  // Gateway and executor in one process, on the stack's catalog and runs.
  if (isEdge(mode)) return ["edge", "catalog", "runs"];
  if (isPies(mode)) return (resources.stack?.processes ?? []).map((p) => p.name);
  return [];
}

/**
 * Per system (the four-process stack, the embedded mode): executions the bench saw answered naming
 * a run (successful or not), and requests abandoned (stopped) before any answer, whose runs may
 * exist all the same.
 */
/** @type {Record<string, RunsSeen>} */
const runsSeen = Object.fromEntries(RUN_SYSTEMS.map((s) => [s, { answered: 0, abandoned: 0 }]));

/**
 * One request of `mode`, counting the runs pies answered.
 * @param {ModeName} mode
 * @param {ModeContext} ctx
 * @param {AbortSignal} signal
 * @returns {Promise<Sample>}
 */
async function send(mode, ctx, signal) {
  const sample = await modes[mode](ctx, signal);
  const seen = runsSeen[systemOf(mode)];
  if (seen) {
    if (sample.runId !== undefined) seen.answered++;
    else if (!sample.ok && signal.aborted) seen.abandoned++;
  }
  return sample;
}

/**
 * One request of each mode, so a broken setup fails loudly before the timed part.
 * @param {ModeContext} ctx
 */
async function smokeTest(ctx) {
  for (const mode of config.modes) {
    const sample = await send(mode, ctx, AbortSignal.any([stop, AbortSignal.timeout(30_000)]));
    if (!sample.ok) throw new Error(`smoke test of "${mode}" failed: ${sample.error}`);
  }
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);

function machine() {
  const cpus = os.cpus();
  return {
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
    arch: os.arch(),
    cpus: cpus.length,
    availableParallelism: os.availableParallelism?.(),
    cpuModel: cpus[0]?.model,
    totalMemMB: Math.round(os.totalmem() / 2 ** 20),
    loadavg: os.loadavg().map((v) => Number(v.toFixed(2))),
  };
}

async function main() {
  /** @type {ModeContext} */
  let ctx;
  try {
    ctx = await setup();
    await smokeTest(ctx);
  } catch (err) {
    log(`setup failed: ${/** @type {Error | undefined} */ (err)?.stack ?? err}`);
    if (resources.stack) log(`recent stack process logs:\n${resources.stack.output()}`);
    if (resources.embedded) log(`recent embedded process logs:\n${resources.embedded.output()}`);
    await cleanup();
    return 1;
  }
  log(
    `setup done; upstream ${ctx.fakeUrl}` +
      (ctx.pies ? `; gateway ${ctx.pies.gatewayUrl}, interaction ${ctx.pies.interactionId}` : "") +
      (ctx.embedded
        ? `; embedded ${ctx.embedded.gatewayUrl} (data ${resources.embedded?.dataDir}), ` +
          `interaction ${ctx.embedded.interactionId}`
        : ""),
  );

  /** @type {CellRow[]} */
  const rows = [];
  /** @type {{ mode: string, concurrency: number, error: string | undefined, count: number }[]} */
  const errorSamples = [];
  outer: for (const concurrency of config.concurrency) {
    for (const mode of config.modes) {
      if (stop.aborted) break outer;
      /** @param {AbortSignal} signal */
      const request = (signal) => send(mode, ctx, signal);
      /** @type {CellRow["window"]} */
      let window;
      const cell = await runCell({
        request,
        concurrency,
        warmupMs: config.warmupMs,
        durationMs: config.durationMs,
        maxRequests: config.maxRequests,
        requestTimeoutMs: config.requestTimeoutMs,
        stop,
        onMeasure: () => {
          const from = nowUs();
          /** @type {{ name: string, child: { pid?: number } }[]} */
          const processes = [...(resources.stack?.processes ?? [])];
          if (resources.embedded) processes.push(resources.embedded.process);
          if (resources.edge) processes.push(resources.edge);
          if (resources.portkey)
            processes.push({ name: "portkey", child: resources.portkey.child });
          const end = startCpuSample(processes);
          return () => {
            window = { fromUs: from, toUs: nowUs() };
            return end();
          };
        },
      });
      if (cell.samples.length === 0 && cell.stoppedEarly) {
        log(`${mode} c=${concurrency}: stopped before any request was measured; no row`);
        break outer;
      }
      const summary = summarise(cell.samples, cell.wallMs);
      const row = {
        mode,
        concurrency,
        ...summary,
        stoppedEarly: cell.stoppedEarly,
        interruptedByStop: cell.interrupted,
        cpu: cell.measured,
        perExecution: perExecution(cell.measured, summary.ok, ownProcesses(mode)),
        window,
      };
      rows.push(row);
      log(
        `${mode} c=${concurrency}: ${row.requests} requests, ${row.errors} errors, ` +
          `p50 ${row.p50Ms} ms, p99 ${row.p99Ms} ms, ${row.reqPerSec} req/s` +
          (row.ttfcP50Ms != null ? `, ttfc p50 ${row.ttfcP50Ms} ms` : "") +
          (row.phaseP50Ms ? ` (p50 breakdown: ${JSON.stringify(row.phaseP50Ms)})` : "") +
          (cell.stoppedEarly
            ? ` (stopped early: partial; ${cell.interrupted} in-flight request(s) abandoned)`
            : ""),
      );
      for (const kind of row.errorKinds) {
        log(`  error x${kind.count}: ${kind.error}`);
        if (errorSamples.length < 50) errorSamples.push({ mode, concurrency, ...kind });
      }
    }
  }
  addRatios(rows);

  // Every execution pies answered naming a run must be recorded, exactly once; recording may lag.
  // The stack's runs are counted with SQL in its database, the embedded mode's (PGlite inside the
  // process) through its API.
  /** @type {Record<string, RunsCheck>} */
  const runsChecks = {};
  for (const system of RUN_SYSTEMS) {
    if (signalled > 0 || !config.modes.some((m) => systemOf(m) === system)) continue;
    // One per system.
    const seen = /** @type {RunsSeen} */ (runsSeen[system]);
    log(`waiting for the ${system} runs store to hold ${seen.answered} run(s)`);
    /** @type {RunsCheck} */
    let check;
    try {
      // The system's modes ran: its store is there (the stack's database, the embedded's API).
      const counted =
        system === "pies"
          ? await waitForRecordedRuns({
              databaseUrl: /** @type {TestDatabase} */ (resources.db).url,
              expected: seen.answered,
              timeoutMs: config.runsWaitMs,
            })
          : await waitForRunsViaApi({
              .../** @type {PiesTarget} */ (ctx.embedded),
              expected: seen.answered,
              timeoutMs: config.runsWaitMs,
            });
      check = Object.assign(counted, {
        abandoned: seen.abandoned,
        ok: counted.recorded === counted.expected,
      });
    } catch (err) {
      check = {
        ...seen,
        ok: false,
        error: String(/** @type {Error | undefined} */ (err)?.message ?? err),
      };
    }
    runsChecks[system] = check;
  }
  const runsCheck = runsChecks.pies;
  const embeddedRunsCheck = runsChecks.embedded;

  const totalErrors = rows.reduce((n, r) => n + r.errors, 0);
  const piesErrors = rows.some((r) => isPies(r.mode) && r.errors > 0);
  const embeddedErrors = rows.some((r) => isEmbedded(r.mode) && r.errors > 0);
  // The processes run at LOG_LEVEL=warn, so these are their warnings and errors (last 200 lines).
  /** @param {string} text */
  const lastLines = (text) =>
    text
      .split("\n")
      .filter((l) => l.trim())
      .slice(-200);
  const stackLogs = piesErrors ? lastLines(resources.stack?.output() ?? "") : [];
  // Without the banner main.js prints on stdout (its URL, API key and a curl example): not a log.
  const banner = /\] (pies is running at |API key: |Try it:|  curl )/;
  const embeddedLogs = embeddedErrors
    ? lastLines(resources.embedded?.output() ?? "").filter((l) => !banner.test(l))
    : [];
  const finishedAt = new Date();
  const result = {
    timestamp: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
    totalSeconds: Number(((performance.now() - t0) / 1000).toFixed(1)),
    complete: !stop.aborted,
    stopReason: stop.aborted ? String(stop.reason?.message ?? stop.reason) : null,
    machine: machine(),
    config,
    notes,
    peerFailed: peerFailed ?? null,
    pinnedCpus: pinning.enabled
      ? Object.fromEntries(
          /** @type {[string, number | undefined][]} */ ([
            ["bench", process.pid],
            ...(resources.stack?.processes ?? []).map((p) => [p.name, p.child.pid]),
            ...(resources.embedded ? [["embedded", resources.embedded.process.child.pid]] : []),
            ...(resources.portkey ? [["portkey", resources.portkey.child.pid]] : []),
          ]).map(([name, pid]) => [name, cpusOf(pid) ?? null]),
        )
      : null,
    runsCheck: runsCheck ?? null,
    embeddedRunsCheck: embeddedRunsCheck ?? null,
    totalErrors,
    rows,
    errorSamples,
    stackLogs,
    embeddedLogs,
    /** @type {CleanupStep[] | undefined} set below, after the first write */
    cleanup: undefined,
    /** @type {ReturnType<typeof reportProfiles> | undefined} */
    profiles: undefined,
  };

  console.log("");
  console.log(formatTable(rows));
  console.log("");
  console.log(
    "added p50 = p50 - direct p50 (ms); p50 ratio = p50 / direct p50; thr ratio = req/s / direct req/s; " +
      "ttfc ratio = ttfc p50 / direct ttfc p50;\np50 vs portkey = p50 / portkey p50; " +
      "thr vs portkey = req/s / portkey req/s; ttfc vs portkey = ttfc p50 / portkey ttfc p50 " +
      "(pies, edge and embedded rows; same kind, same concurrency, same run)",
  );
  for (const [system, check] of Object.entries(runsChecks)) {
    const label = system === "pies" ? "runs recorded" : `runs recorded (${system})`;
    console.log(
      check.error !== undefined
        ? `${label}: could not be counted (${check.error}); ${check.answered} answered`
        : `${label}: ${check.recorded} of ${check.expected} answered` +
            ` (after ${(check.waitedMs / 1000).toFixed(1)} s; by status ${JSON.stringify(check.byStatus)})` +
            (check.ok ? "" : " MISMATCH") +
            (check.abandoned > 0
              ? `; ${check.abandoned} ${system} request(s) abandoned unanswered`
              : ""),
    );
  }
  if (signalled > 0) console.log("runs recorded: not checked (interrupted)");
  console.log(pinning.note);
  for (const note of notes) console.log(`note: ${note}`);
  console.log(
    "\nCPU during each measured phase (% of one core; bench = load generator + fake upstream; postgres/nats = all such processes; other = rest of the machine):",
  );
  console.log(formatCpuTable(rows));
  console.log(
    "\nCPU per successful request (ms: the process's CPU time during the measured phase / the requests that succeeded in it;" +
      "\nown = the mode's processes together: pies = the four, edge = edge + catalog + runs) and RSS at the phase's end (MiB):",
  );
  console.log(formatPerExecutionTable(rows));
  if (totalErrors > 0) {
    console.log(`\n${totalErrors} request(s) FAILED:`);
    for (const e of errorSamples)
      console.log(`  ${e.mode} c=${e.concurrency} x${e.count}: ${e.error}`);
    if (piesErrors) {
      console.log(
        stackLogs.length > 0
          ? `\nrecent stack process logs (warn and above):\n${stackLogs.join("\n")}`
          : "\nthe pies processes logged nothing at warn level or above",
      );
    }
    if (embeddedErrors) {
      console.log(
        embeddedLogs.length > 0
          ? `\nrecent embedded process logs (warn and above):\n${embeddedLogs.join("\n")}`
          : "\nthe embedded process logged nothing at warn level or above",
      );
    }
  }
  if (stop.aborted) console.log(`\nrun incomplete: ${result.stopReason}`);

  // Written before cleanup (so a hung cleanup loses nothing) and again after, with the total time.
  const out = path.join(here, "results", "latest.json");
  await mkdir(path.dirname(out), { recursive: true });
  await writeFile(out, JSON.stringify(result, null, 2) + "\n");
  result.cleanup = await cleanup();
  // The processes write their profiles as they exit, so only now.
  if (profileDir) result.profiles = reportProfiles(profileDir, rows);
  result.totalSeconds = Number(((performance.now() - t0) / 1000).toFixed(1));
  await writeFile(out, JSON.stringify(result, null, 2) + "\n");
  console.log(
    `\nwrote ${path.relative(process.cwd(), out) || out}; total ${result.totalSeconds} s`,
  );
  if (signalled > 0) return 130;
  const runsMismatch = Object.values(runsChecks).some((c) => !c.ok);
  return totalErrors > 0 || stop.aborted || peerFailed || runsMismatch ? 2 : 0;
}

/**
 * Prints, for each pies and embedded row's measured phase, the top frames by self time of each
 * profiled process of that system: its main thread, then its worker threads together. Returns the
 * same as data.
 * @param {string} profileDir
 * @param {CellRow[]} rows
 */
function reportProfiles(profileDir, rows) {
  const files = listProfiles(profileDir);
  console.log(`\nCPU profiles in ${path.relative(process.cwd(), profileDir)}:`);
  if (files.length === 0) {
    console.log("  none written (a process that is killed writes no profile)");
    return [];
  }
  const profiles = files.map((f) => ({ ...f, profile: loadProfile(f.file) }));
  const report = [];
  /**
   * @param {string} mode
   * @returns {string[] | undefined}
   */
  const profiled = (mode) =>
    isEdge(mode)
      ? ["edge"]
      : /** @type {Record<string, string[] | undefined>} */ (PROFILED)[systemOf(mode)];
  for (const row of rows.filter((r) => profiled(r.mode) && r.window)) {
    for (const name of profiled(row.mode) ?? []) {
      const mine = profiles.filter((p) => p.process === name);
      /** @type {[string, typeof mine][]} */
      const threads = [
        ["main thread", mine.filter((p) => p.tid === 0)],
        ["worker threads", mine.filter((p) => p.tid !== 0)],
      ];
      for (const [label, group] of threads) {
        if (group.length === 0) continue;
        const agg = { totalUs: 0, frames: new Map() };
        for (const p of group) addSelfTimes(p.profile, row.window, agg);
        const top = topFrames(agg, { limit: config.profileTop, repoRoot });
        const threads = label === "main thread" ? "" : ` x${group.length}`;
        console.log(
          `\n  ${name} ${label}${threads}, ${row.mode} c=${row.concurrency}: ` +
            `${top.totalMs} ms sampled, busy ${top.busyPercent}% (top ${top.frames.length} by self time)`,
        );
        for (const line of formatTopFrames(top)) console.log(line);
        report.push({ mode: row.mode, concurrency: row.concurrency, process: name, label, ...top });
      }
    }
  }
  return report;
}

let code;
try {
  code = await main();
} catch (err) {
  log(`failed: ${/** @type {Error | undefined} */ (err)?.stack ?? err}`);
  await cleanup();
  code = 1;
}
// Exit even if a stray handle (a keep-alive socket, a timer) would keep the loop alive; if cleanup
// itself hung, the deadline guard below still ends the process.
process.exit(code);
