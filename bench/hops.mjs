#!/usr/bin/env node
// @ts-check
// Where an execution's wall-clock time goes, hop by hop (npm run bench:hops): the
// four-process stack (or the edge, BENCH_HOPS_TARGET=edge) with tracing on, exporting every span
// to an OTLP/HTTP sink in this process, under closed-loop load at concurrency 1 against a
// zero-latency fake upstream. For each span name it prints the median duration and the median
// time not covered by its children ("self": the process's own work plus waits that no span
// covers), over the traces of the measured phase. The spans are the gateway's request, every
// Connect call (client and server side) and the record log's put; the provider call has no span
// of its own, so it is inside the executor's server span's self time (with the rendering).
// Span start times are anchored on each process's millisecond clock, so "starts at" is only
// good to ~1 ms across processes; durations and self times are exact.
// BENCH_HOPS_KIND=streamed traces streamed runs instead (POST /runs {stream:true}, then GET
// /runs/:id/stream read to close): both requests carry one traceparent, so that they are one
// trace under a client span, with the client's own marks as zero-length spans (`client: created`
// when POST answered, `client: headers` when the stream's headers came, `client: first chunk`);
// those marks are on this process's clock, so good to ~1 ms against the others' spans too.
// Settings: BENCH_HOPS_TARGET=stack|edge  BENCH_HOPS_KIND=blocking|streamed  BENCH_CONCURRENCY=1  BENCH_DURATION_MS=5000
//   BENCH_WARMUP_MS=1500  BENCH_PIN=0 (no pinning; by default the system under test is on one
//   CPU, the load and fake on the other)  BENCH_HOPS_KILL_RUNS=1 (the runs service stopped while
//   measuring: no record is stored, so the store's work does not share the CPU; the records wait
//   in JetStream)
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { performance } from "node:perf_hooks";
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
import { pinSelf, planPinning } from "./lib/pin.mjs";

/** @import { AddressInfo } from "node:net" */
/** @import { ManagedProcess, Stack } from "@pies/testkit" */
/** @import { PiesTarget, Sample } from "./lib/modes.mjs" */

/**
 * One span: as exported by a pies process, or a client's (this process's) own.
 * @typedef {object} Span
 * @property {string} service
 * @property {string} traceId
 * @property {string} spanId
 * @property {string} [parentSpanId]
 * @property {string} name
 * @property {bigint} start ns since the epoch
 * @property {bigint} end
 */

/**
 * The parts of an OTLP/HTTP JSON export read here.
 * @typedef {{ resourceSpans?: { resource?: { attributes?: OtlpAttribute[] }, scopeSpans?: { spans?: OtlpSpan[] }[] }[] }} OtlpTraces
 * @typedef {{ key: string, value?: { stringValue?: string } }} OtlpAttribute
 * @typedef {{ traceId: string, spanId: string, parentSpanId?: string, name: string, startTimeUnixNano: string, endTimeUnixNano: string }} OtlpSpan
 */

/**
 * @param {string} name
 * @param {number} fallback
 */
const int = (name, fallback) => Number(process.env[name] ?? fallback);
const target = process.env.BENCH_HOPS_TARGET ?? "stack";
if (!["stack", "edge"].includes(target)) throw new Error(`bad BENCH_HOPS_TARGET ${target}`);
const kind = process.env.BENCH_HOPS_KIND ?? "blocking";
if (kind !== "blocking" && kind !== "streamed") throw new Error(`bad BENCH_HOPS_KIND ${kind}`);
const concurrency = int("BENCH_CONCURRENCY", 1);
const durationMs = int("BENCH_DURATION_MS", 5000);
const warmupMs = int("BENCH_WARMUP_MS", 1500);
const pinning = planPinning();
/** @param {string} m */
const log = (m) => process.stderr.write(`[bench:hops] ${m}\n`);

// The OTLP/HTTP JSON sink: keeps every span with its service.
/** @type {Span[]} */
const spans = [];
const sink = createServer((req, res) => {
  /** @type {Buffer[]} */
  const chunks = [];
  req.on("error", () => res.destroy());
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    try {
      const body = /** @type {OtlpTraces} */ (JSON.parse(Buffer.concat(chunks).toString("utf8")));
      for (const rs of body.resourceSpans ?? []) {
        const service =
          rs.resource?.attributes?.find((a) => a.key === "service.name")?.value?.stringValue ?? "?";
        for (const ss of rs.scopeSpans ?? [])
          for (const s of ss.spans ?? [])
            spans.push({
              service: service.replace(/^pies-/, ""),
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId || undefined,
              name: s.name,
              start: BigInt(s.startTimeUnixNano),
              end: BigInt(s.endTimeUnixNano),
            });
      }
    } catch (err) {
      // JSON.parse's or BigInt's.
      log(`unreadable export: ${/** @type {Error} */ (err).message}`);
    }
    res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
});
await /** @type {Promise<void>} */ (new Promise((resolve) => sink.listen(0, "127.0.0.1", resolve)));
const sinkUrl = `http://127.0.0.1:${/** @type {AddressInfo} */ (sink.address()).port}`;

/** @param {number} bytes */
const hex = (bytes) => randomBytes(bytes).toString("hex");
/**
 * Nanoseconds since the epoch of a performance.now() reading.
 * @param {number} t
 */
const epochNs = (t) => BigInt(Math.round((performance.timeOrigin + t) * 1e6));

/**
 * One streamed run under a client span of its own (both requests are its children), with the
 * client's marks (created, headers, first chunk) as zero-length children, straight into the sink.
 * @param {PiesTarget} ctx
 * @param {AbortSignal} signal
 */
async function tracedStreamed(ctx, signal) {
  const traceId = hex(16);
  const spanId = hex(8);
  const started = performance.now();
  const sample = await modes["pies streamed"](
    { pies: { ...ctx, traceparent: `00-${traceId}-${spanId}-01` } },
    signal,
  );
  /**
   * @param {string} name
   * @param {number | undefined} ms
   */
  const at = (name, ms) => {
    if (ms === undefined) return;
    const t = epochNs(started + ms);
    spans.push({
      service: "client",
      traceId,
      spanId: hex(8),
      parentSpanId: spanId,
      name,
      start: t,
      end: t,
    });
  };
  at("created", sample.phases?.createMs);
  at("headers", sample.phases?.headersMs);
  at("first chunk", sample.ttfcMs);
  spans.push({
    service: "client",
    traceId,
    spanId,
    name: "streamed run",
    start: epochNs(started),
    end: epochNs(started + sample.latencyMs),
  });
  return sample;
}

// Before the fake's worker thread starts, so that it inherits this CPU.
if (pinning.enabled) pinSelf(pinning.loadCpu);
log(pinning.note);
const fakeKey = "sk-bench-upstream";
const fake = await startFakeInWorker({ apiKey: fakeKey, latencyMs: 0, maxRecordedRequests: 0 });
const db = await createTestDatabase("bench_hops");
const stream = createTestStream();
/** @type {Stack | undefined} */
let stack;
/** @type {ManagedProcess | undefined} */
let edgeProc;
try {
  stack = await startStack({
    databaseUrl: db.url,
    natsEnv: stream.env,
    env: { PIES_ALLOWED_ENDPOINTS: "loopback", OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl },
    launcher: pinning.launcher,
  });
  const key = stack.bootstrap.key;
  let gatewayUrl = stack.gatewayUrl;
  if (target === "edge") {
    const port = await freePort();
    edgeProc = startProcess(
      "edge",
      "embedded/dist/edge-main.js",
      {
        ...stream.env,
        HOST: "127.0.0.1",
        PORT: String(port),
        CATALOG_URL: stack.catalogUrl,
        RUNS_URL: stack.runsUrl,
        PIES_ALLOWED_ENDPOINTS: "loopback",
        OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl,
      },
      [],
      pinning.launcher,
    );
    gatewayUrl = `http://127.0.0.1:${port}`;
    for (let i = 0; i < 300; i++) {
      const ok = await fetch(`${gatewayUrl}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) break;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const environment = (
    await api(gatewayUrl, key, "/environments", {
      name: "bench-upstream",
      provider: "openai_compatible",
      endpoint_url: fake.url,
      apiKey: fakeKey,
      default_model: "gpt-4o-mini",
    })
  ).json;
  const prompt = (
    await api(gatewayUrl, key, "/prompts", {
      name: "summarise",
      role: "user",
      content_type: "jst",
      content: "return `Summarise ${text}`",
    })
  ).json;
  const interaction = (
    await api(gatewayUrl, key, "/interactions", {
      name: "Traced",
      environment: environment.id,
      prompts: [{ type: "template", template: prompt.id }],
    })
  ).json;
  const ctx = {
    gatewayUrl,
    apiKey: key,
    interactionId: interaction.id,
    text: "the quarterly report",
    fakeUrl: fake.url,
    fakeKey,
    model: "gpt-4o-mini",
  };
  const stop = new AbortController().signal;
  /**
   * @param {(signal: AbortSignal) => Promise<Sample>} request
   * @param {() => () => void} [onMeasure]
   */
  const cell = (request, onMeasure) =>
    runCell({
      request,
      concurrency,
      warmupMs,
      durationMs,
      maxRequests: 100_000,
      requestTimeoutMs: 30_000,
      stop,
      onMeasure,
    });
  if (process.env.BENCH_HOPS_KILL_RUNS === "1") await stack.kill("runs");
  const direct = await cell((signal) => modes[`direct ${kind}`](ctx, signal));
  let measuredFrom = 0n;
  const piesCell = await cell(
    (signal) =>
      kind === "streamed"
        ? tracedStreamed(ctx, signal)
        : modes["pies blocking"]({ pies: ctx }, signal),
    () => {
      measuredFrom = BigInt(Date.now()) * 1_000_000n;
      return () => {};
    },
  );
  // The batch processors export every 500 ms.
  await new Promise((r) => setTimeout(r, 1500));
  /**
   * @param {Sample[]} samples
   * @param {"latencyMs" | "ttfcMs"} field
   */
  const p50 = (samples, field = "latencyMs") =>
    percentile(
      samples
        .filter((s) => s.ok)
        .map((s) => s[field])
        .filter((v) => v !== undefined)
        .sort((a, b) => a - b),
      50,
    );
  const directP50 = p50(direct.samples);
  const piesP50 = p50(piesCell.samples);
  const errors = piesCell.samples.filter((s) => !s.ok).length;

  // Durations and self times per span name (service: name), over traces started when measured.
  /** @type {Map<string, Span[]>} */
  const byTrace = new Map();
  for (const s of spans) {
    let list = byTrace.get(s.traceId);
    if (!list) byTrace.set(s.traceId, (list = []));
    list.push(s);
  }
  /** @type {Map<string, { durations: number[], self: number[], depth: number, order: number[] }>} */
  const stats = new Map();
  let traces = 0;
  for (const list of byTrace.values()) {
    const root = list.find((s) => !s.parentSpanId);
    if (!root || root.start < measuredFrom) continue;
    traces++;
    const bySpan = new Map(list.map((s) => [s.spanId, s]));
    /** @type {Map<string, Span[]>} */
    const children = new Map();
    for (const s of list) {
      if (!s.parentSpanId) continue;
      let kids = children.get(s.parentSpanId);
      if (!kids) children.set(s.parentSpanId, (kids = []));
      kids.push(s);
    }
    for (const s of list) {
      const key = `${s.service}: ${s.name}`;
      const entry = stats.get(key) ?? { durations: [], self: [], depth: 0, order: [] };
      const dur = Number(s.end - s.start) / 1e6;
      // Self time: the span's duration minus the union of its children's intervals.
      const kids = (children.get(s.spanId) ?? []).map(
        (k) => /** @type {[bigint, bigint]} */ ([k.start, k.end]),
      );
      kids.sort((a, b) => (a[0] < b[0] ? -1 : 1));
      let covered = 0n;
      // The merged interval being extended (curStart is set whenever curEnd is).
      let curStart = 0n;
      /** @type {bigint | undefined} */
      let curEnd;
      for (const [a, b] of kids) {
        const lo = a < s.start ? s.start : a;
        const hi = b > s.end ? s.end : b;
        if (hi <= lo) continue;
        if (curEnd === undefined || lo > curEnd) {
          if (curEnd !== undefined) covered += curEnd - curStart;
          curStart = lo;
          curEnd = hi;
        } else if (hi > curEnd) curEnd = hi;
      }
      if (curEnd !== undefined) covered += curEnd - curStart;
      entry.durations.push(dur);
      entry.self.push(dur - Number(covered) / 1e6);
      entry.order.push(Number(s.start - root.start) / 1e6);
      let depth = 0;
      for (let /** @type {Span | undefined} */ p = s; p?.parentSpanId; depth++) {
        p = bySpan.get(p.parentSpanId);
      }
      entry.depth = depth;
      stats.set(key, entry);
    }
  }
  /** @param {number[]} xs at least one (every entry has a span) */
  const med = (xs) =>
    /** @type {number} */ (
      percentile(
        [...xs].sort((a, b) => a - b),
        50,
      )
    );
  /**
   * @param {number | undefined} v undefined: no successful request to take it from
   */
  const fixed = (v) => (v === undefined ? "-" : v.toFixed(2));
  /**
   * @param {number | undefined} a
   * @param {number | undefined} b
   */
  const added = (a, b) => fixed(a === undefined || b === undefined ? undefined : a - b);
  const rows = [...stats.entries()]
    .map(([name, e]) => ({ name, ...e, at: med(e.order) }))
    .sort((a, b) => a.at - b.at || a.depth - b.depth);
  console.log(
    `\nhops of a ${kind} execution through the ${target}, c=${concurrency}, zero-latency upstream, tracing on (${traces} traces)`,
  );
  console.log(
    `direct p50 ${fixed(directP50)} ms; pies p50 ${fixed(piesP50)} ms (tracing on), added ${added(piesP50, directP50)} ms; ${errors} errors`,
  );
  if (kind === "streamed") {
    const directTtfc = p50(direct.samples, "ttfcMs");
    const piesTtfc = p50(piesCell.samples, "ttfcMs");
    console.log(
      `ttfc: direct p50 ${fixed(directTtfc)} ms; pies p50 ${fixed(piesTtfc)} ms, added ${added(piesTtfc, directTtfc)} ms`,
    );
  }
  console.log("");
  console.log("| span | starts at p50 ms | spans/trace | duration p50 ms | p90 ms | self p50 ms |");
  console.log("|---|---|---|---|---|---|");
  for (const r of rows)
    console.log(
      `| ${"  ".repeat(r.depth)}${r.name} | ${r.at.toFixed(2)} | ${(r.durations.length / traces).toFixed(2)} | ${med(r.durations).toFixed(2)} | ${fixed(
        percentile(
          [...r.durations].sort((a, b) => a - b),
          90,
        ),
      )} | ${med(r.self).toFixed(2)} |`,
    );
} finally {
  await edgeProc?.stop();
  await stack?.stop();
  await stream.remove();
  await db.drop();
  await fake.close();
  sink.close();
}
