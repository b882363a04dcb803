#!/usr/bin/env node
// jst renders per second through JstSandbox (the executor's own pool, default limits and two
// workers), no servers. Build first. Each case: a warm-up, then TEMPLATES_SECONDS (2) of closed
// loop with `conc` renders in flight (1: a blocking execution's one render at a time; 16: many
// executions at once). Pin it for steadier numbers: `taskset -c 1 node bench/templates.mjs`.
// TEMPLATES_ROUNDS (3) runs each case that many times and prints every run and the median.
import { performance } from "node:perf_hooks";
import { JstSandbox } from "../services/executor/dist/templates/jst.js";

const seconds = Number(process.env.TEMPLATES_SECONDS ?? 2);
const rounds = Number(process.env.TEMPLATES_ROUNDS ?? 3);

const CASES = [
  { name: "one-line literal", content: "return `Summarise ${text}`" },
  { name: "bare literal", content: "Summarise ${text} in ${count} words" },
  {
    name: "sandbox-only",
    content: 'return [1,2].map(x => x * 2).join(",") + text',
  },
];
const data = { text: "the quarterly report of a large company, in a few words", count: 20 };

async function loop(sandbox, content, conc, ms) {
  let done = 0;
  const end = performance.now() + ms;
  const worker = async () => {
    while (performance.now() < end) {
      await sandbox.render(content, data, "bench");
      done++;
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: conc }, worker));
  return done / ((performance.now() - start) / 1000);
}

const sandbox = await JstSandbox.create({ timeoutMs: 100, memoryBytes: 16 * 1024 * 1024 }, 2);
try {
  console.log("case                 conc   renders/s (each run)            median");
  for (const { name, content } of CASES) {
    for (const conc of [1, 16]) {
      await loop(sandbox, content, conc, 300);
      const runs = [];
      for (let i = 0; i < rounds; i++)
        runs.push(await loop(sandbox, content, conc, seconds * 1000));
      const median = [...runs].sort((a, b) => a - b)[Math.floor(runs.length / 2)];
      console.log(
        `${name.padEnd(20)} ${String(conc).padStart(4)}   ${runs
          .map((r) => r.toFixed(0).padStart(8))
          .join(" ")
          .padEnd(30)} ${median.toFixed(0).padStart(8)}`,
      );
    }
  }
} finally {
  await sandbox.close();
}
