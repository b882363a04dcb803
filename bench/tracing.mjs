#!/usr/bin/env node
// @ts-check
// What tracing costs (npm run bench:tracing): the same blocking execution through two edges
// (gateway + executor in one process) on one stack (catalog, runs, PostgreSQL, NATS), one with
// tracing off (no OTEL_EXPORTER_OTLP_ENDPOINT: nothing installed) and one exporting every span
// to an OTLP sink on loopback, measured in alternating cells in one run; plus the only code that
// tracing off leaves on the request path (the `tracingEnabled()` checks), timed in a loop.
// Settings: BENCH_CONCURRENCY=1,16  BENCH_DURATION_MS=5000  BENCH_WARMUP_MS=1500  BENCH_ROUNDS=2
import { createServer } from "node:http";
import { performance } from "node:perf_hooks";
import { tracingEnabled } from "@pies/common";
import {
  createTestDatabase,
  createTestStream,
  freePort,
  startProcess,
  startStack,
} from "@pies/testkit";
import { api } from "./lib/api.mjs";
import { startFakeInWorker } from "./lib/fake.mjs";
import { runCell } from "./lib/load.mjs";
import { modes } from "./lib/modes.mjs";
import { percentile } from "./lib/stats.mjs";

/** @import { AddressInfo } from "node:net" */
/** @import { ManagedProcess, Stack } from "@pies/testkit" */

/**
 * @param {string} name
 * @param {number} fallback
 */
const int = (name, fallback) => Number(process.env[name] ?? fallback);
const concurrency = (process.env.BENCH_CONCURRENCY ?? "1,16").split(",").map(Number);
const durationMs = int("BENCH_DURATION_MS", 5000);
const warmupMs = int("BENCH_WARMUP_MS", 1500);
const rounds = int("BENCH_ROUNDS", 2);
/** @param {string} m */
const log = (m) => process.stderr.write(`[bench:tracing] ${m}\n`);

// An OTLP/HTTP sink that reads and drops what it is sent, counting the exports.
let exports = 0;
const sink = createServer((req, res) => {
  req.on("error", () => res.destroy());
  req.resume();
  req.on("end", () => {
    exports++;
    res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
});
await /** @type {Promise<void>} */ (new Promise((resolve) => sink.listen(0, "127.0.0.1", resolve)));
const sinkUrl = `http://127.0.0.1:${/** @type {AddressInfo} */ (sink.address()).port}`;

const fakeKey = "sk-bench-upstream";
const fake = await startFakeInWorker({ apiKey: fakeKey, latencyMs: 0, maxRecordedRequests: 0 });
const db = await createTestDatabase("bench_tracing");
const stream = createTestStream();
/** @type {ManagedProcess[]} */
const started = [];
/** @type {Stack | undefined} */
let stack;
try {
  log("starting the stack and two edges (tracing off, tracing on)");
  stack = await startStack({
    databaseUrl: db.url,
    natsEnv: stream.env,
    env: { PIES_ALLOWED_ENDPOINTS: "loopback" },
  });
  const running = stack;
  /**
   * @param {string} name
   * @param {Record<string, string>} env
   */
  const edge = async (name, env) => {
    const port = await freePort();
    const proc = startProcess(name, "embedded/dist/edge-main.js", {
      ...stream.env,
      HOST: "127.0.0.1",
      PORT: String(port),
      CATALOG_URL: running.catalogUrl,
      RUNS_URL: running.runsUrl,
      PIES_ALLOWED_ENDPOINTS: "loopback",
      ...env,
    });
    started.push(proc);
    const url = `http://127.0.0.1:${port}`;
    for (let i = 0; i < 300; i++) {
      if (
        await fetch(`${url}/readyz`).then(
          (r) => r.ok,
          () => false,
        )
      )
        break;
      await new Promise((r) => setTimeout(r, 100));
    }
    return url;
  };
  const key = stack.bootstrap.key;
  const environment = (
    await api(stack.gatewayUrl, key, "/environments", {
      name: "bench-upstream",
      provider: "openai_compatible",
      endpoint_url: fake.url,
      apiKey: fakeKey,
      default_model: "gpt-4o-mini",
    })
  ).json;
  const prompt = (
    await api(stack.gatewayUrl, key, "/prompts", {
      name: "summarise",
      role: "user",
      content_type: "jst",
      content: "return `Summarise ${text}`",
    })
  ).json;
  const interaction = (
    await api(stack.gatewayUrl, key, "/interactions", {
      name: "Traced",
      environment: environment.id,
      prompts: [{ type: "template", template: prompt.id }],
    })
  ).json;
  const targets = {
    off: await edge("edge-off", {}),
    on: await edge("edge-on", { OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl }),
  };
  /** @type {Record<string, { latencies: number[], wallMs: number, errors: number }>} */
  const results = {};
  const stop = new AbortController().signal;
  for (let round = 0; round < rounds; round++) {
    for (const c of concurrency) {
      for (const variant of /** @type {const} */ (["off", "on"])) {
        const ctx = {
          gatewayUrl: targets[variant],
          apiKey: key,
          interactionId: interaction.id,
          text: "the quarterly report",
        };
        const cell = await runCell({
          request: (signal) => modes["edge blocking"]({ edge: ctx }, signal),
          concurrency: c,
          warmupMs,
          durationMs,
          maxRequests: 100_000,
          requestTimeoutMs: 30_000,
          stop,
        });
        const ok = cell.samples.filter((s) => s.ok).map((s) => s.latencyMs);
        const errors = cell.samples.length - ok.length;
        const entry = (results[`${variant} c=${c}`] ??= { latencies: [], wallMs: 0, errors: 0 });
        entry.latencies.push(...ok);
        entry.wallMs += cell.wallMs;
        entry.errors += errors;
        log(`round ${round + 1} ${variant} c=${c}: ${ok.length} ok, ${errors} errors`);
      }
    }
  }
  /** @param {string} cell `<variant> c=<concurrency>`, measured in each round */
  const resultOf = (cell) => results[cell] ?? { latencies: [], wallMs: 0, errors: 0 };
  /**
   * @param {number | undefined} v undefined: no successful request to take it from
   * @param {number} digits
   */
  const fixed = (v, digits) => (v === undefined ? "-" : v.toFixed(digits));
  const rows = [];
  for (const c of concurrency) {
    const off = resultOf(`off c=${c}`);
    for (const variant of ["off", "on"]) {
      const r = resultOf(`${variant} c=${c}`);
      const sorted = [...r.latencies].sort((a, b) => a - b);
      const rps = r.latencies.length / (r.wallMs / 1000);
      const offRps = off.latencies.length / (off.wallMs / 1000);
      const p50 = percentile(sorted, 50);
      const offP50 = percentile(
        [...off.latencies].sort((a, b) => a - b),
        50,
      );
      rows.push(
        `| ${variant.padEnd(3)} | ${String(c).padStart(3)} | ${fixed(p50, 2).padStart(7)} | ${fixed(percentile(sorted, 99), 2).padStart(7)} | ${rps.toFixed(0).padStart(6)} | ${fixed(p50 === undefined || offP50 === undefined ? undefined : p50 - offP50, 2).padStart(9)} | ${(rps / offRps).toFixed(2).padStart(8)} | ${String(r.errors).padStart(6)} |`,
      );
    }
  }
  // The only work tracing off adds on the path: a check per publish and per record put.
  const n = 10_000_000;
  let count = 0;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) if (tracingEnabled()) count++;
  const checkNs = ((performance.now() - t0) * 1e6) / n;
  console.log(
    `\ntracing off vs on, blocking through the edge, zero-latency upstream, ${rounds} alternating rounds of ${durationMs} ms per cell\n`,
  );
  console.log("| tracing | c | p50 ms | p99 ms | req/s | Δp50 vs off ms | req/s vs off | errors |");
  console.log("|---|---|---|---|---|---|---|---|");
  for (const row of rows) console.log(row);
  console.log(
    `\nspans exported by the traced edge: ${exports} OTLP requests; tracing off leaves one tracingEnabled() check per NATS publish and record put on the path: ${checkNs.toFixed(2)} ns each (${count} of ${n} true here)`,
  );
} finally {
  for (const p of started) await p.stop();
  await stack?.stop();
  await stream.remove();
  await db.drop();
  await fake.close();
  sink.close();
}
