#!/usr/bin/env node
// @ts-check
// The record path alone: this process puts run records into the JetStream record log at a fixed
// rate (RunLog.put, as the executor does, one per run), and a runs service process (its
// main.js, the way the stack runs it) writes them into PostgreSQL. Reads the CPU of one
// PostgreSQL cluster (postmaster and children) and one nats-server from /proc around the measured
// phase: the servers' cost per recorded run. Point it at servers of its own with
// PIES_TEST_DATABASE_URL and PIES_TEST_NATS_URL, and name them:
//   RW_PG_PID=<postmaster pid>  RW_NATS_PID=<nats-server pid>  RW_NATS_MONITOR=http://...:8222
// RW_ROOTS="/a,/b" (runs service trees, alternated) or RW_ENVS="A=;B=PIES_X=1,PIES_Y=2"
// (variants of environment for the one tree), RW_ROUNDS=3, RW_RATE=1300 (records/s),
// RW_WARMUP_MS=3000, RW_DURATION_MS=8000, RW_STATEMENTS=1 (pg_stat_statements' top statements),
// RW_PIN_RUNS=<cpu> (taskset the runs service).
import path from "node:path";
import pg from "pg";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { JetStreamRunRecords, RunLog } from "@pies/common/bus";
import {
  createTestDatabase,
  createTestStream,
  freePort,
  repoRoot,
  startProcess,
} from "@pies/testkit";
import { clusterTicks, ticksOf as ticks, ticksSince } from "./lib/cpu.mjs";
import { msgsPerRun, natsCounts } from "./lib/nats-monitor.mjs";
import { benchRun } from "./lib/sample-run.mjs";
import { median } from "./lib/stats.mjs";

/**
 * @param {string} name
 * @param {number} fallback
 */
const num = (name, fallback) => Number(process.env[name] ?? fallback);
const roots = (process.env.RW_ROOTS ?? repoRoot).split(",").map((r) => path.resolve(r));
const envSpecs = (process.env.RW_ENVS ?? "").split(";").filter(Boolean);
/** @type {Variant[]} */
const variants =
  envSpecs.length > 0
    ? envSpecs.map((spec) => {
        const at = spec.indexOf("=");
        const pairs = at < 0 ? "" : spec.slice(at + 1);
        return {
          label: at < 0 ? spec : spec.slice(0, at),
          // split() yields at least one root.
          root: /** @type {string} */ (roots[0]),
          env: Object.fromEntries(
            pairs
              .split(",")
              .filter(Boolean)
              .map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)]),
          ),
        };
      })
    : roots.map((root, i) => ({ label: String.fromCharCode(65 + i), root, env: {} }));
const rounds = num("RW_ROUNDS", 3);
const rate = num("RW_RATE", 1300);
const warmupMs = num("RW_WARMUP_MS", 3000);
const durationMs = num("RW_DURATION_MS", 8000);
const pgPid = Number(process.env.RW_PG_PID);
const natsPid = Number(process.env.RW_NATS_PID);
const monitor = process.env.RW_NATS_MONITOR;
const showStatements = process.env.RW_STATEMENTS === "1";

/** @typedef {{ label: string, root: string, env: Record<string, string> }} Variant */

/**
 * What a variant measured (one line of the output).
 * @typedef {object} Result
 * @property {string} variant
 * @property {number} putPerSec
 * @property {number} writtenPerSec
 * @property {number} failed
 * @property {number} pgUsPerRun
 * @property {number} natsUsPerRun
 * @property {number} runsUsPerRun
 * @property {Record<string, string>} [msgsPerRun]
 * @property {unknown[]} [statements] pg_stat_statements' top ones (RW_STATEMENTS=1)
 * @property {number} [lost]
 */

/**
 * A run as the executor records a fast blocking execution: one completed record.
 * @param {Variant} variant
 * @returns {Promise<Result>}
 */
async function measure(variant) {
  const db = await createTestDatabase("rw");
  const stream = createTestStream();
  const port = await freePort();
  const runs = startProcess(
    "runs",
    path.join(variant.root, "services/runs/dist/main.js"),
    {
      ...stream.env,
      HOST: "127.0.0.1",
      PORT: String(port),
      DATABASE_URL: db.url,
      ...variant.env,
    },
    [],
    process.env.RW_PIN_RUNS ? ["taskset", "-c", process.env.RW_PIN_RUNS] : [],
  );
  const nc = await connect({ servers: stream.url, name: "rw-producer" });
  const client = new pg.Client({ connectionString: db.url });
  // The producer's put timer: cleared after the measured window, and in any case before closing.
  /** @type {NodeJS.Timeout | undefined} */
  let timer;
  try {
    // Ready: the writer consumes (its durable consumer is there).
    const jsm = await jetstreamManager(nc);
    for (let i = 0; ; i++) {
      const ok = await jsm.consumers.info(`${stream.stream}_RECORDS`, "runs-store").then(
        () => true,
        () => false,
      );
      if (ok) break;
      if (runs.child.exitCode !== null || i > 300)
        throw new Error(`runs did not start:\n${runs.output()}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    await client.connect();
    const log = new RunLog(
      await JetStreamRunRecords.over(nc, {
        stream: `${stream.stream}_RECORDS`,
        subjectPrefix: stream.subjectPrefix,
        maxAgeSeconds: 24 * 3600,
      }),
    );
    // Puts at `rate`: every millisecond the ones due, each in its own callback (as executions end).
    let sent = 0;
    let failed = 0;
    let i = 0;
    const t0 = performance.now();
    timer = setInterval(() => {
      const due = Math.floor(((performance.now() - t0) / 1000) * rate);
      while (sent < due) {
        sent++;
        void log.put(benchRun(i++)).catch(() => failed++);
      }
    }, 1);
    await new Promise((r) => setTimeout(r, warmupMs));
    const count = async () =>
      (await client.query("select count(*)::int as n from runs.runs")).rows[0].n;
    if (showStatements) await client.query("select pg_stat_statements_reset()").catch(() => {});
    const n0 = await count();
    const msgs0 = await natsCounts(monitor);
    const started = performance.now();
    const pg0 = clusterTicks(pgPid);
    const nats0 = ticks(natsPid);
    const runs0 = ticks(runs.child.pid);
    await new Promise((r) => setTimeout(r, durationMs));
    const pgTicks = ticksSince(pg0, clusterTicks(pgPid));
    const natsTicks = ticks(natsPid) - nats0;
    const runsTicks = ticks(runs.child.pid) - runs0;
    const seconds = (performance.now() - started) / 1000;
    const written = (await count()) - n0;
    const msgs1 = await natsCounts(monitor);
    clearInterval(timer);
    /** @type {Result} */
    const result = {
      variant: variant.label,
      putPerSec: rate,
      writtenPerSec: written / seconds,
      failed,
      pgUsPerRun: (pgTicks * 1e4) / written,
      natsUsPerRun: (natsTicks * 1e4) / written,
      runsUsPerRun: (runsTicks * 1e4) / written,
      ...(msgs0 && msgs1 && { msgsPerRun: msgsPerRun(msgs0, msgs1, written) }),
    };
    if (showStatements) {
      const { rows } = await client
        .query(
          `select calls, rows, round((total_exec_time / greatest(calls, 1) * 1000)::numeric) as exec_us,
             round((total_plan_time / greatest(plans, 1) * 1000)::numeric) as plan_us, plans,
             round(wal_records::numeric / greatest(rows, 1), 1) as wal_per_row,
             round(wal_bytes::numeric / greatest(rows, 1)) as wal_b_per_row,
             left(regexp_replace(query, '\\s+', ' ', 'g'), 80) as q
           from pg_stat_statements
           where dbid = (select oid from pg_database where datname = current_database())
           order by total_exec_time + total_plan_time desc limit 8`,
        )
        .catch((err) => ({ rows: [{ q: String(err.message) }] }));
      result.statements = rows;
    }
    // Let the writer catch up before stopping: everything put was written.
    for (let k = 0; k < 100 && (await count()) < sent - failed; k++)
      await new Promise((r) => setTimeout(r, 100));
    result.lost = sent - failed - (await count());
    return result;
  } finally {
    clearInterval(timer);
    await client.end().catch(() => {});
    await nc.close();
    await runs.stop();
    await stream.remove();
    await db.drop();
  }
}

/** @type {Result[]} */
const results = [];
for (let r = 0; r < rounds; r++) {
  for (const variant of r % 2 === 0 ? variants : [...variants].reverse()) {
    const res = await measure(variant);
    results.push(res);
    const { statements, ...rest } = res;
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
    if (statements) console.table(statements);
  }
}
console.log("\nmedians:");
for (const v of variants) {
  const rs = results.filter((r) => r.variant === v.label);
  /** @param {"writtenPerSec" | "pgUsPerRun" | "natsUsPerRun" | "runsUsPerRun"} k */
  const m = (k) => median(rs.map((r) => r[k])).toFixed(1);
  console.log(
    `${v.label}: written/s ${m("writtenPerSec")}, PG ${m("pgUsPerRun")} µs/run, NATS ${m("natsUsPerRun")} µs/run, runs ${m("runsUsPerRun")} µs/run  [${rs.map((r) => `${r.pgUsPerRun.toFixed(0)}/${r.natsUsPerRun.toFixed(0)}`).join(" ")}]`,
  );
}
