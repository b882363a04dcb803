#!/usr/bin/env node
// @ts-check
// GET /runs and POST /runs/search through two gateways on one database, sample by sample in turn:
// this tree's (the runs service renders the page, the gateway passes it through) and another
// build's (BENCH_AB_BASE: a built checkout of the commit to compare with, e.g. a worktree of
// main). Both sides have their own runs service and gateway; the catalog and executor are this
// stack's. One seeded database (BENCH_RUNS_N runs, four projects, the API key's one of them), the
// same key and queries on both sides; the CPU each side's gateway and runs service spent per
// request is read from /proc (clock ticks: a mean over the samples). Settings: BENCH_AB_BASE (required), BENCH_RUNS_N=1000000,
// BENCH_RUNS_SAMPLES=40.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import {
  createTestDatabase,
  createTestStream,
  freePort,
  gatewayApi,
  seedRuns,
  startProcess,
  startStack,
} from "@pies/testkit";
import { percentile } from "./lib/stats.mjs";

/** @import { ApiClient } from "@pies/testkit" */

/** @typedef {{ api: ApiClient, gateway: number | undefined, runs: number | undefined }} Side */
/** @typedef {{ p50: number | undefined, p99: number | undefined, gatewayCpuMs: number, runsCpuMs: number }} SideFigures */
/**
 * One case's line.
 * @typedef {{ label: string, same: boolean, bytes: number, load: string, base: SideFigures, new: SideFigures }} Row
 */

const base = process.env.BENCH_AB_BASE;
if (!base) throw new Error("BENCH_AB_BASE: the root of a built checkout to compare with");
const BASE = base;
const N = Number(process.env.BENCH_RUNS_N ?? 1_000_000);
const SAMPLES = Number(process.env.BENCH_RUNS_SAMPLES ?? 40);
/** @param {unknown[]} args */
const log = (...args) => console.error(`[ab ${new Date().toISOString().slice(11, 19)}]`, ...args);
// loadavg() has the 1, 5 and 15 minute averages.
const load = () => /** @type {number} */ (os.loadavg()[0]).toFixed(1);
const ticks = 100; // USER_HZ
/**
 * CPU milliseconds a process has spent (user + system).
 * @param {number | undefined} pid
 */
const cpuMs = (pid) => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticks;
};

/** @param {string} url */
async function waitReady(url) {
  for (let i = 0; i < 300; i++) {
    const ok = await fetch(url).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} never became ready`);
}

async function main() {
  const database = await createTestDatabase("passthru_ab");
  const stream = createTestStream();
  // The seeded `processing` runs would be failed by the sweepers (executor lost) a lease after the
  // start, changing the pages between the two sides' requests: a lease longer than the bench.
  const env = { PIES_RUN_LEASE_SECONDS: "86400" };
  const stack = await startStack({ databaseUrl: database.url, natsEnv: stream.env, env });
  const extra = [];
  try {
    // The other side: its runs service and gateway, on this stack's catalog and executor.
    const [runsPort, gatewayPort] = await Promise.all([freePort(), freePort()]);
    const common = { HOST: "127.0.0.1", ...stream.env, ...env };
    const baseRuns = startProcess("base-runs", path.resolve(BASE, "services/runs/dist/main.js"), {
      ...common,
      PORT: String(runsPort),
      DATABASE_URL: database.url,
    });
    extra.push(baseRuns);
    const baseGateway = startProcess("base-gateway", path.resolve(BASE, "gateway/dist/main.js"), {
      ...common,
      PORT: String(gatewayPort),
      CATALOG_URL: stack.catalogUrl,
      RUNS_URL: `http://127.0.0.1:${runsPort}`,
      EXECUTOR_URL: stack.executorUrl,
    });
    extra.push(baseGateway);
    await waitReady(`http://127.0.0.1:${gatewayPort}/readyz`);
    /** @param {string} name */
    const pidOf = (name) => {
      const found = stack.processes.find((p) => p.name === name);
      if (!found) throw new Error(`the stack has no ${name}`);
      return found.child.pid;
    };
    /** @type {{ base: Side, new: Side }} */
    const sides = {
      base: {
        api: gatewayApi(`http://127.0.0.1:${gatewayPort}`, stack.bootstrap.key),
        gateway: baseGateway.child.pid,
        runs: baseRuns.child.pid,
      },
      new: {
        api: gatewayApi(stack.gatewayUrl, stack.bootstrap.key),
        gateway: pidOf("gateway"),
        runs: pidOf("runs"),
      },
    };
    const project = stack.bootstrap.project;
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    log(`seeding ${N.toLocaleString("en-US")} runs, four projects`);
    const seedMs = await seedRuns(client, {
      count: N,
      projects: [project, "ab-p2", "ab-p3", "ab-p4"],
    });
    await client.query("vacuum analyze runs.runs");
    log(`seeded in ${(seedMs / 1000).toFixed(1)} s`);
    const { rows } = await client.query(
      "select parent_id from runs.runs where project_id = $1 and parent_id is not null limit 1",
      [project],
    );
    const parent = rows[0]?.parent_id;
    const { rows: span } = await client.query(
      "select min(updated_at) as lo, max(updated_at) as hi from runs.runs where project_id = $1",
      [project],
    );
    const lo = span[0].lo.getTime();
    const hi = span[0].hi.getTime() + 1;
    const anchor = new Date(lo + (hi - lo) / 2).toISOString();
    await client.end();

    /**
     * @param {Side} side
     * @param {string} method
     * @param {string} p
     * @param {unknown} [body]
     */
    const send = async (side, method, p, body) => {
      const res = await side.api(p, { method, body });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`${method} ${p}: ${res.status} ${text}`);
      return text;
    };
    /** @type {[label: string, method: string, path: string, body?: object][]} */
    const cases = [
      ["GET /runs (no filter)", "GET", "/runs"],
      ["GET /runs ?limit=10", "GET", "/runs?limit=10"],
      ["GET /runs ?interaction=", "GET", "/runs?interaction=int-5"],
      ["GET /runs ?model=", "GET", "/runs?model=o3-mini"],
      ["GET /runs ?environment=", "GET", "/runs?environment=env-1"],
      ["GET /runs ?status=failed", "GET", "/runs?status=failed"],
      ["GET /runs ?tag=", "GET", "/runs?tag=nightly"],
      ["GET /runs ?parent=false", "GET", "/runs?parent=false"],
      ["GET /runs ?parent=<id>", "GET", `/runs?parent=${parent}`],
      [
        "GET /runs ?anchorDate= (before)",
        "GET",
        `/runs?anchorDate=${anchor}&anchorDateDirection=before`,
      ],
      ["GET /runs ?status&model&tag", "GET", "/runs?status=completed&model=gpt-4o&tag=prod"],
      ["GET /runs ?limit=1000", "GET", "/runs?limit=1000"],
      ["search Lucene field term", "POST", "/runs/search", { query: "customer.name:Acme" }],
      ["search Lucene rare term", "POST", "/runs/search", { query: "customer.id:4242" }],
      ["search no query (page only)", "POST", "/runs/search", {}],
      [
        "search page + status facet",
        "POST",
        "/runs/search",
        { facets: { s: { type: "string", path: "status" } } },
      ],
    ];
    /** @type {Row[]} */
    const out = [];
    for (const [label, method, p, body] of cases) {
      // Both answer the same bytes (the pass-through keeps the old path's JSON).
      const [a, b] = [
        await send(sides.base, method, p, body),
        await send(sides.new, method, p, body),
      ];
      const same = a === b;
      for (let i = 0; i < 3; i++) {
        await send(sides.base, method, p, body);
        await send(sides.new, method, p, body);
      }
      /** @type {{ base: number[], new: number[] }} */
      const times = { base: [], new: [] };
      const cpu = { base: { gateway: 0, runs: 0 }, new: { gateway: 0, runs: 0 } };
      const loadBefore = load();
      for (let i = 0; i < SAMPLES; i++) {
        /** @type {("base" | "new")[]} */
        const order = i % 2 ? ["new", "base"] : ["base", "new"];
        for (const name of order) {
          const side = sides[name];
          const g = cpuMs(side.gateway);
          const r = cpuMs(side.runs);
          const started = performance.now();
          await send(side, method, p, body);
          times[name].push(performance.now() - started);
          cpu[name].gateway += cpuMs(side.gateway) - g;
          cpu[name].runs += cpuMs(side.runs) - r;
        }
      }
      // base and new are filled in below.
      const row = /** @type {Row} */ ({
        label,
        same,
        bytes: b.length,
        load: `${loadBefore}→${load()}`,
      });
      for (const name of /** @type {const} */ (["base", "new"])) {
        const sorted = times[name].sort((x, y) => x - y);
        row[name] = {
          p50: percentile(sorted, 50),
          p99: percentile(sorted, 99),
          gatewayCpuMs: cpu[name].gateway / SAMPLES,
          runsCpuMs: cpu[name].runs / SAMPLES,
        };
      }
      log(JSON.stringify(row));
      out.push(row);
    }
    /** @param {number | undefined} n undefined: no sample (BENCH_RUNS_SAMPLES=0) */
    const f = (n) => (n === undefined ? "-" : n.toFixed(1));
    const lines = [
      `## GET /runs and search, base vs pass-through, ${N.toLocaleString("en-US")} runs (${new Date().toISOString()})`,
      "",
      `${SAMPLES} samples each, alternated; CPU per request from /proc (10 ms ticks, averaged).`,
      "",
      "| case | bytes | same body | base p50 | new p50 | base p99 | new p99 | base gateway CPU ms | new gateway CPU ms | base runs CPU ms | new runs CPU ms | load |",
      "| --- | --: | :-: | --: | --: | --: | --: | --: | --: | --: | --: | --- |",
      ...out.map(
        (r) =>
          `| ${r.label} | ${r.bytes} | ${r.same ? "yes" : "NO"} | ${f(r.base.p50)} | ${f(r.new.p50)} | ${f(r.base.p99)} | ${f(r.new.p99)} | ${f(r.base.gatewayCpuMs)} | ${f(r.new.gatewayCpuMs)} | ${f(r.base.runsCpuMs)} | ${f(r.new.runsCpuMs)} | ${r.load} |`,
      ),
    ];
    console.log(lines.join("\n"));
  } finally {
    for (const p of extra.reverse()) await p.stop();
    await stack.stop();
    await stream.remove();
    if (process.env.BENCH_RUNS_KEEP === "1") log(`kept ${database.url}`);
    else await database.drop();
  }
}

await main();
