#!/usr/bin/env node
// @ts-check
// What PostgreSQL and nats-server spend per recorded run: the four-process stack under closed-loop
// blocking load (bench/run.mjs's "pies blocking", the stack pinned to one CPU and the load to the
// other), with the CPU of one PostgreSQL cluster (its postmaster and every child: backends, WAL
// writer, checkpointer) and of one nats-server read from /proc around the measured phase, each
// per run written meanwhile; also the stack's processes per run, the NATS messages per run of each
// connection (from the server's monitoring port) and, optionally, pg_stat_statements' top
// statements. The shared servers count everybody's work: point it at a PostgreSQL cluster and a
// nats-server of its own (e.g. `initdb` + `pg_ctl start` on another port, `nats-server -js -p
// 14222 -m 18222`) with PIES_TEST_DATABASE_URL and PIES_TEST_NATS_URL, and name their processes:
//   RC_PG_PID=<postmaster pid>  RC_NATS_PID=<nats-server pid>  RC_NATS_MONITOR=http://127.0.0.1:18222
// Variants run alternated (A B, B A, ...), each on a fresh database, stream and stack; medians at
// the end. RC_VARIANTS (below), RC_ROUNDS=3, RC_CONCURRENCY=64, RC_WARMUP_MS=3000,
// RC_DURATION_MS=8000, RC_STATEMENTS=1 (the cluster preloads pg_stat_statements, and the
// extension is in template1).
import path from "node:path";
import pg from "pg";
import { createTestDatabase, createTestStream, repoRoot, startStack } from "@pies/testkit";
import { api as request } from "./lib/api.mjs";
import { clusterTicks, ticksOf as ticks, ticksSince } from "./lib/cpu.mjs";
import { startFakeInWorker } from "./lib/fake.mjs";
import { runCell } from "./lib/load.mjs";
import { modes } from "./lib/modes.mjs";
import { msgsPerRun, natsCounts } from "./lib/nats-monitor.mjs";
import { pinSelf, planPinning } from "./lib/pin.mjs";
import { median } from "./lib/stats.mjs";

/** @import { Stack } from "@pies/testkit" */
/** @import { MessageCounts } from "./lib/nats-monitor.mjs" */

/**
 * What onMeasure reads around the measured phase: at its start (`n` and `msgs` once `ready`
 * resolves: read while the load runs) and at its end.
 * @typedef {object} Phase
 * @property {number} started
 * @property {Map<number, number>} pgBefore
 * @property {number} natsBefore
 * @property {Promise<unknown>} ready
 * @property {number} n runs recorded at the start
 * @property {Record<string, MessageCounts> | undefined} msgs
 * @property {number} seconds
 * @property {number} pgTicks
 * @property {number} natsTicks
 * @property {Record<string, number>} procTicks by process name
 */

/**
 * @param {string} name
 * @param {number} fallback
 */
const num = (name, fallback) => Number(process.env[name] ?? fallback);
// RC_VARIANTS="label@/tree@K=V,K=V;label2@/tree2@": each variant a built tree (default: this one)
// and an environment for its processes.
const variants = (process.env.RC_VARIANTS ?? "this@@")
  .split(";")
  .filter(Boolean)
  .map((spec) => {
    const [label, root, pairs = ""] = spec.split("@");
    return {
      // split() yields at least one part.
      label: /** @type {string} */ (label),
      root: path.resolve(root || repoRoot),
      env: Object.fromEntries(
        pairs
          .split(",")
          .filter(Boolean)
          .map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)]),
      ),
    };
  });
const rounds = num("RC_ROUNDS", 3);
const concurrency = num("RC_CONCURRENCY", 64);
const warmupMs = num("RC_WARMUP_MS", 3000);
const durationMs = num("RC_DURATION_MS", 8000);
const pgPid = Number(process.env.RC_PG_PID);
const natsPid = Number(process.env.RC_NATS_PID);
const monitor = process.env.RC_NATS_MONITOR;
const showStatements = process.env.RC_STATEMENTS === "1";

const pinning = planPinning();
if (pinning.enabled) pinSelf(pinning.loadCpu);
const fakeKey = "sk-bench-upstream";
const fake = await startFakeInWorker({
  apiKey: fakeKey,
  latencyMs: 5,
  chunkDelayMs: 1,
  maxRecordedRequests: 0,
});

/**
 * One variant's figures, by name (printed as JSON).
 * @param {(typeof variants)[number]} variant
 * @returns {Promise<Record<string, unknown>>}
 */
async function measure(variant) {
  const db = await createTestDatabase("rc");
  const stream = createTestStream();
  /** @type {Stack} */
  let stack;
  try {
    stack = await startStack({
      databaseUrl: db.url,
      natsEnv: stream.env,
      env: { PIES_ALLOWED_ENDPOINTS: "loopback", ...variant.env },
      launcher: pinning.launcher,
      root: variant.root,
    });
  } catch (err) {
    await stream.remove();
    await db.drop();
    console.log(
      `(${variant.label}: the stack did not start, again: ${String(/** @type {Error} */ (err).message).slice(0, 200)})`,
    );
    return measure(variant);
  }
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    const key = stack.bootstrap.key;
    /**
     * @param {string} p
     * @param {unknown} body
     */
    const call = async (p, body) => (await request(stack.gatewayUrl, key, p, body)).json;
    const environment = await call("/environments", {
      name: "bench-upstream",
      provider: "openai_compatible",
      endpoint_url: fake.url,
      apiKey: fakeKey,
      default_model: "gpt-4o-mini",
    });
    const prompt = await call("/prompts", {
      name: "summarise",
      role: "user",
      content_type: "jst",
      content: "return `Summarise ${text}`",
      inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    });
    const interaction = await call("/interactions", {
      name: "Summary",
      environment: environment.id,
      prompts: [{ type: "template", template: prompt.id }],
    });
    const ctx = {
      pies: {
        gatewayUrl: stack.gatewayUrl,
        apiKey: key,
        interactionId: interaction.id,
        text: "the quarterly report: revenue grew 12%, costs fell 3%, and headcount stayed flat.",
      },
    };
    /** @returns {Promise<number>} */
    const count = async () =>
      (await client.query("select count(*)::int as n from runs.runs")).rows[0].n;
    /** @type {Phase | undefined} */
    let sample;
    const cell = await runCell({
      request: (signal) => modes["pies blocking"](ctx, signal),
      concurrency,
      warmupMs,
      durationMs,
      maxRequests: 1e9,
      requestTimeoutMs: 30_000,
      stop: new AbortController().signal,
      onMeasure: () => {
        const started = performance.now();
        const pgBefore = clusterTicks(pgPid);
        const natsBefore = ticks(natsPid);
        const procsBefore = stack.processes.map((p) => ticks(p.child.pid));
        // The rest is filled in below, as the phase starts and ends.
        const state = /** @type {Phase} */ ({ started, pgBefore, natsBefore });
        state.ready = Promise.all([
          count(),
          natsCounts(monitor),
          showStatements
            ? client.query("select pg_stat_statements_reset()").catch(() => undefined)
            : undefined,
        ]).then(([n, msgs]) => Object.assign(state, { n, msgs }));
        return () => {
          state.seconds = (performance.now() - started) / 1000;
          state.pgTicks = ticksSince(pgBefore, clusterTicks(pgPid));
          state.natsTicks = ticks(natsPid) - natsBefore;
          state.procTicks = Object.fromEntries(
            stack.processes.map((p, i) => [p.name, ticks(p.child.pid) - (procsBefore[i] ?? NaN)]),
          );
          sample = state;
          return undefined;
        };
      },
    });
    // runCell ends the measured phase (nothing stops it early here).
    if (!sample) throw new Error("the measured phase did not end");
    await sample.ready;
    const written = (await count()) - sample.n;
    const msgs = await natsCounts(monitor);
    const ok = cell.samples.filter((s) => s.ok).length;
    /** @type {Record<string, unknown>} */
    const result = {
      variant: variant.label,
      execPerSec: ok / sample.seconds,
      writtenPerSec: written / sample.seconds,
      errors: cell.samples.length - ok,
      pgUsPerRun: (sample.pgTicks * 1e4) / written,
      natsUsPerRun: (sample.natsTicks * 1e4) / written,
      pgPct: sample.pgTicks / sample.seconds,
      ...Object.fromEntries(
        Object.entries(sample.procTicks).map(([n, t]) => [`${n}Us`, (t * 1e4) / written]),
      ),
      natsPct: sample.natsTicks / sample.seconds,
    };
    if (msgs && sample.msgs) result.msgsPerRun = msgsPerRun(sample.msgs, msgs, written);
    if (showStatements) {
      const { rows } = await client
        .query(
          `select calls, rows, round(total_exec_time::numeric, 1) as exec_ms,
             round(total_plan_time::numeric, 1) as plan_ms, plans,
             shared_blks_hit + shared_blks_dirtied as blks, wal_records, wal_bytes,
             left(regexp_replace(query, '\\s+', ' ', 'g'), 110) as q
           from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())
           order by total_exec_time + total_plan_time desc limit 15`,
        )
        .catch((err) => ({ rows: [{ q: String(err.message) }] }));
      result.statements = rows;
    }
    return result;
  } finally {
    await client.end();
    await stack.stop();
    await stream.remove();
    await db.drop();
  }
}

const results = [];
for (let r = 0; r < rounds; r++) {
  for (const variant of r % 2 === 0 ? variants : [...variants].reverse()) {
    const res = await measure(variant);
    results.push(res);
    const { statements, msgsPerRun: msgs, ...rest } = res;
    console.log(
      JSON.stringify(
        Object.fromEntries(
          Object.entries(rest).map(([k, v]) => [
            k,
            typeof v === "number" ? Number(v.toFixed(1)) : v,
          ]),
        ),
      ),
    );
    if (msgs) console.log("  nats msgs per run:", JSON.stringify(msgs));
    if (statements) console.table(statements);
  }
}
console.log("\nmedians:");
for (const v of variants) {
  const rs = results.filter((r) => r.variant === v.label);
  /** @param {string} k */
  const m = (k) => median(rs.map((r) => Number(r[k]))).toFixed(1);
  console.log(
    `${v.label}: runs ${m("runsUs")} executor ${m("executorUs")} gateway ${m("gatewayUs")} µs/run, exec/s ${m("execPerSec")}, written/s ${m("writtenPerSec")}, PG ${m("pgUsPerRun")} µs/run (${m("pgPct")}% core), NATS ${m("natsUsPerRun")} µs/run (${m("natsPct")}% core)`,
  );
}
await fake.close();
