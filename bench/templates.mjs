#!/usr/bin/env node
// @ts-check
// jst renders through JstSandbox (the executor's own pool, default limits, TEMPLATES_WORKERS (2)
// workers), no servers. Build first. For each template:
//  - renders/s, closed loop with `conc` renders in flight (1: a blocking execution's one render at
//    a time; 16: many executions at once), TEMPLATES_SECONDS (2) per run, TEMPLATES_ROUNDS (3)
//    runs after a warm-up: every run and the median, and the CPU time per render of the whole
//    process (all its threads; steadier than wall time on a machine shared with other work);
//  - p50 latency of one render when renders come 2 ms apart (as between the steps of an
//    execution), so a worker is idle in between.
// Pin it for steadier numbers: `taskset -c 1 node bench/templates.mjs`. An argument names another
// build's jst.js to measure instead (its worker must sit next to it), to compare two builds.
import path from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { pathToFileURL } from "node:url";

const seconds = Number(process.env.TEMPLATES_SECONDS ?? 2);
const rounds = Number(process.env.TEMPLATES_ROUNDS ?? 3);
const workers = Number(process.env.TEMPLATES_WORKERS ?? 2);
const module = process.argv[2]
  ? pathToFileURL(path.resolve(process.argv[2])).href
  : new URL("../services/executor/dist/templates/jst.js", import.meta.url).href;
/** @import { JstSandbox as Sandbox } from "../services/executor/dist/templates/jst.js" */
// This tree's build or another (its module typed as this tree's: the same API).
/** @type {{ JstSandbox: typeof Sandbox }} */
const { JstSandbox } = await import(module);

const CASES = [
  { name: "one-line literal", content: "return `Summarise ${text}`" },
  { name: "bare literal", content: "Summarise ${text} in ${count} words" },
  { name: "sandbox-only", content: 'return [1,2].map(x => x * 2).join(",") + text' },
];
const data = { text: "the quarterly report of a large company, in a few words", count: 20 };

let errors = 0;
/**
 * @param {Sandbox} sandbox
 * @param {string} content
 */
const render = (sandbox, content) =>
  sandbox.render(content, data, "bench").catch(() => {
    errors++;
  });

/**
 * @param {Sandbox} sandbox
 * @param {string} content
 * @param {number} conc
 * @param {number} ms
 */
async function loop(sandbox, content, conc, ms) {
  let done = 0;
  const end = performance.now() + ms;
  const worker = async () => {
    while (performance.now() < end) {
      await render(sandbox, content);
      done++;
    }
  };
  const start = performance.now();
  const cpu = process.cpuUsage();
  await Promise.all(Array.from({ length: conc }, worker));
  const used = process.cpuUsage(cpu);
  return {
    rate: done / ((performance.now() - start) / 1000),
    cpu: (used.user + used.system) / done,
  };
}

/**
 * @param {Sandbox} sandbox
 * @param {string} content
 * @param {number} count at least one
 */
async function spacedLatency(sandbox, content, count) {
  /** @type {number[]} */
  const us = [];
  for (let i = 0; i < count; i++) {
    await sleep(2);
    const start = performance.now();
    await render(sandbox, content);
    us.push((performance.now() - start) * 1000);
  }
  return /** @type {number} */ (us.sort((a, b) => a - b)[Math.floor(us.length / 2)]);
}

const sandbox = await JstSandbox.create({ timeoutMs: 100, memoryBytes: 16 * 1024 * 1024 }, workers);
try {
  console.log("case                 conc   renders/s (each run)            median   CPU µs/render");
  /** @param {number[]} values at least one (TEMPLATES_ROUNDS ≥ 1) */
  const median = (values) =>
    /** @type {number} */ ([...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]);
  for (const { name, content } of CASES) {
    for (const conc of [1, 16]) {
      await loop(sandbox, content, conc, 300);
      const runs = [];
      for (let i = 0; i < rounds; i++)
        runs.push(await loop(sandbox, content, conc, seconds * 1000));
      const rates = runs.map((r) => r.rate);
      const each = rates.map((r) => r.toFixed(0).padStart(8)).join(" ");
      const cpu = median(runs.map((r) => r.cpu)).toFixed(1);
      console.log(
        `${name.padEnd(20)} ${String(conc).padStart(4)}   ${each.padEnd(30)} ${median(rates).toFixed(0).padStart(8)}   ${cpu.padStart(8)}`,
      );
    }
    const p50 = await spacedLatency(sandbox, content, 300);
    console.log(`${name.padEnd(20)} p50 latency, renders 2 ms apart: ${p50.toFixed(0)} µs`);
  }
  if (errors > 0) console.log(`${errors} renders failed (a busy machine: the time limit)`);
} finally {
  await sandbox.close();
}
