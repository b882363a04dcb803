#!/usr/bin/env node
// @ts-check
// Fairness between projects: the execute latency of one project ("victim") alone, then while
// another project ("noisy") keeps FAIRNESS_NOISY (12) executions of an endless jst template in
// flight. The real stack as four processes (like bench/run.mjs: PostgreSQL on :5432, NATS on
// :4222, throw-away database and stream), the `test` provider, loopback only. Build first.
// Settings: FAIRNESS_NOISY=12 FAIRNESS_REQUESTS=60 (victim requests per phase).
import { execFile } from "node:child_process";
import { performance } from "node:perf_hooks";
import { promisify } from "node:util";
import { createTestDatabase, createTestStream, repoRoot, startStack } from "@pies/testkit";
import { api } from "./lib/api.mjs";
import { percentile } from "./lib/stats.mjs";

const noisyCount = Number(process.env.FAIRNESS_NOISY ?? 12);
const requests = Number(process.env.FAIRNESS_REQUESTS ?? 60);

/** @typedef {{ key: string, interactionId: string }} Tenant */

/**
 * A project's key and an interaction of one jst template on its `test` environment.
 * @param {string} gatewayUrl
 * @param {string} key
 * @param {string} content
 * @returns {Promise<Tenant>}
 */
async function tenant(gatewayUrl, key, content) {
  const [environment] = (await api(gatewayUrl, key, "/environments")).json;
  const prompt = await api(gatewayUrl, key, "/prompts", {
    name: "p",
    role: "user",
    content_type: "jst",
    content,
  });
  const interaction = await api(gatewayUrl, key, "/interactions", {
    name: "I",
    environment: environment.id,
    prompts: [{ type: "template", template: prompt.json.id }],
  });
  if (interaction.status >= 300) throw new Error(JSON.stringify(interaction.json));
  return { key, interactionId: interaction.json.id };
}

/**
 * @param {string} gatewayUrl
 * @param {Tenant} t
 * @param {Record<string, unknown>} data
 */
const execute = (gatewayUrl, t, data) =>
  api(gatewayUrl, t.key, `/interactions/${t.interactionId}/execute`, { data });

/**
 * Sequential executes of the victim: latency percentiles (ms) of the successful ones.
 * @param {string} gatewayUrl
 * @param {Tenant} victim
 */
async function measure(gatewayUrl, victim) {
  for (let i = 0; i < 5; i++) await execute(gatewayUrl, victim, { text: "warm-up" });
  const ms = [];
  let errors = 0;
  for (let i = 0; i < requests; i++) {
    const start = performance.now();
    const r = await execute(gatewayUrl, victim, { text: `request ${i}` });
    if (r.status === 200) ms.push(performance.now() - start);
    else errors++;
  }
  ms.sort((x, y) => x - y);
  return { p50: percentile(ms, 50), p99: percentile(ms, 99), errors };
}

const db = await createTestDatabase("fairness");
const stream = createTestStream();
const stack = await startStack({ databaseUrl: db.url, natsEnv: stream.env });
try {
  const { gatewayUrl } = stack;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ["services/catalog/dist/cli.js", "bootstrap", "--name", "victim"],
    { cwd: repoRoot, env: { PATH: process.env.PATH ?? "", DATABASE_URL: db.url } },
  );
  // A member call: the victim's render goes through the sandbox's workers, where the noisy
  // project's are (a template literal over data keys alone would skip them).
  const victim = await tenant(
    gatewayUrl,
    JSON.parse(stdout).key,
    "return `Summarise ${text.trim()}`",
  );
  const noisy = await tenant(gatewayUrl, stack.bootstrap.key, "while (true) {} return 1");

  const alone = await measure(gatewayUrl, victim);
  let flooding = true;
  /** @type {Record<number, number>} */
  const statuses = {};
  const flood = Array.from({ length: noisyCount }, async () => {
    while (flooding) {
      const { status } = await execute(gatewayUrl, noisy, {});
      statuses[status] = (statuses[status] ?? 0) + 1;
    }
  });
  // Let the noisy project fill the pool before measuring.
  while (Object.values(statuses).reduce((a, b) => a + b, 0) < noisyCount) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const loaded = await measure(gatewayUrl, victim);
  flooding = false;
  await Promise.all(flood);

  /** @param {number | undefined} v undefined when every request of the row failed */
  const ms = (v) => (v === undefined ? "-" : v.toFixed(1));
  /**
   * @param {string} name
   * @param {Awaited<ReturnType<typeof measure>>} r
   */
  const row = (name, r) =>
    `${name.padEnd(34)} ${ms(r.p50).padStart(8)} ${ms(r.p99).padStart(8)} ${String(r.errors).padStart(7)}`;
  console.log(`victim execute latency (ms), ${requests} sequential requests per row`);
  console.log(`${"".padEnd(34)} ${"p50".padStart(8)} ${"p99".padStart(8)} ${"errors".padStart(7)}`);
  console.log(row("alone", alone));
  console.log(row(`with ${noisyCount} endless templates elsewhere`, loaded));
  console.log(`noisy project's answers by status: ${JSON.stringify(statuses)}`);
} finally {
  await stack.stop();
  await stream.remove();
  await db.drop();
}
