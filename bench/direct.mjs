#!/usr/bin/env node
// @ts-check
// CPU per in-process call: the edge's gateway → executor Execute (and the embedded mode's every
// hop) through Connect's in-memory transport (createRouterTransport: what they used, binary
// protobuf), the same in JSON, and through directTransport (the handler called directly), with
// the server's errorInterceptor each way. The handler answers the bench's run (the request and the
// answer of `npm run bench`'s execution: data, prompt, result as JSON bytes), so what differs is
// only what the transport costs. One call at a time and 64 at once, rounds interleaved, the
// process's CPU time per call (steadier than wall time on a shared machine). Run it pinned:
//   npx tsc -b tsconfig.build.json && taskset -c 1 node bench/direct.mjs
// Settings (environment variables, all optional): DIRECT_BENCH_CALLS=5000 (per cell and round),
// DIRECT_BENCH_ROUNDS=3 (the median is reported).
import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { createClient, createRouterTransport } from "@connectrpc/connect";
import { createLogger, jsonBytes } from "@pies/common";
import { directTransport, errorInterceptor } from "@pies/common/server";
import { ExecuteRequestSchema, ExecutorService } from "@pies/proto/executor";
import { RunSchema, RunStatus } from "@pies/proto/runs";

/** @import { MessageInitShape } from "@bufbuild/protobuf" */
/** @import { ConnectRouter } from "@connectrpc/connect" */
/** @import { Run } from "@pies/proto/runs" */
/** @typedef {MessageInitShape<typeof ExecuteRequestSchema>} ExecuteRequestInit */

/**
 * @param {string} name
 * @param {number} fallback
 */
const int = (name, fallback) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer`);
  return value;
};
const calls = int("DIRECT_BENCH_CALLS", 5000);
const rounds = int("DIRECT_BENCH_ROUNDS", 3);
const text = "the quarterly report: revenue grew 12%, costs fell 3%, and headcount stayed flat.";

// The run an execution answers, as the executor builds it (ended, completed).
const now = timestampNow();
const messages = [{ role: "user", content: `Summarise ${text}` }];
const answered = () =>
  create(RunSchema, {
    id: "01a20b479bb5f0391e77b98a",
    projectId: "01a20b479bb5f0391e77b900",
    accountId: "01a20b479bb5f0391e77b901",
    interactionId: "01a20b479bb5f0391e77b902",
    interactionName: "Summarise",
    environmentId: "01a20b479bb5f0391e77b903",
    environmentName: "fake",
    provider: "openai_compatible",
    modelId: "gpt-4o-mini",
    status: RunStatus.COMPLETED,
    parametersJson: jsonBytes({ text }),
    promptJson: jsonBytes(messages),
    resultJson: jsonBytes("Revenue up 12%, costs down 3%, headcount flat."),
    config: { environmentId: "01a20b479bb5f0391e77b903", model: "gpt-4o-mini", temperature: 0.7 },
    source: { type: "api", label: "ci" },
    tokenUse: { prompt: 31, result: 12, total: 43 },
    executionTime: 6n,
    createdAt: now,
    updatedAt: now,
  });

/** @param {ConnectRouter} router */
const routes = (router) =>
  router.service(ExecutorService, {
    // A fresh run per call, as the executor answers.
    execute: async () => ({ run: answered() }),
  });
const logger = createLogger("bench", "silent");
const interceptors = [errorInterceptor(logger)];
const variants = {
  "Connect in memory, binary (before)": createRouterTransport(routes, {
    router: { interceptors },
  }),
  "Connect in memory, JSON": createRouterTransport(routes, {
    router: { interceptors },
    transport: { useBinaryFormat: false },
  }),
  "directTransport (after)": directTransport(routes, { interceptors }),
};
// The request the gateway builds (executeRequest), fresh per call.
/** @returns {ExecuteRequestInit} */
const request = () => ({
  interaction: { case: "interactionId", value: "01a20b479bb5f0391e77b902" },
  caller: {
    projectId: "01a20b479bb5f0391e77b900",
    accountId: "01a20b479bb5f0391e77b901",
    source: { type: "api", label: "ci" },
  },
  stream: false,
  data: { text },
  tags: [],
  parentRunId: "",
  config: { environmentId: "", model: "", formatter: "" },
});

/**
 * An Execute client: Connect's over a transport, or the handler called by hand.
 * @typedef {{ execute(request: ExecuteRequestInit, options?: { signal?: AbortSignal }): Promise<{ run?: Run }> }} ExecuteClient
 */

/**
 * CPU µs per call (user + system) of `n` calls, `conc` in flight.
 * @param {ExecuteClient} client
 * @param {number} n
 * @param {number} conc
 */
async function cell(client, n, conc) {
  const start = process.cpuUsage();
  let next = 0;
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (next++ < n) {
        // Its own signal, as the gateway's blocking call has (the caller going away).
        const { run } = await client.execute(request(), { signal: new AbortController().signal });
        if (run?.status !== RunStatus.COMPLETED) throw new Error("bad answer");
      }
    }),
  );
  const used = process.cpuUsage(start);
  return (used.user + used.system) / n;
}

/** @type {[string, ExecuteClient][]} */
const clients = [
  // The handler called by hand (its request made a message): the floor of any in-process call.
  [
    "the handler alone (floor)",
    {
      execute: async (/** @type {ExecuteRequestInit} */ req) => {
        create(ExecuteRequestSchema, req);
        return { run: answered() };
      },
    },
  ],
  ...Object.entries(variants).map(
    ([name, t]) =>
      /** @type {[string, ExecuteClient]} */ ([name, createClient(ExecutorService, t)]),
  ),
];
/** @type {Map<string, number[]>} */
const results = new Map();
for (const [, client] of clients) await cell(client, 2000, 8); // warm-up
for (let r = 0; r < rounds; r++) {
  for (const [name, client] of clients) {
    for (const conc of [1, 64]) {
      const key = `${name}\u0000${conc}`;
      if (!results.has(key)) results.set(key, []);
      results.get(key)?.push(await cell(client, calls, conc));
    }
  }
}
/** @param {number[]} xs */
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`CPU µs per Execute call (median of ${rounds} rounds of ${calls} calls)`);
console.log("| transport | c=1 | c=64 |\n| --- | --- | --- |");
for (const [name] of clients) {
  /** @param {number} c */
  const at = (c) => median(results.get(`${name}\u0000${c}`) ?? [])?.toFixed(1);
  console.log(`| ${name} | ${at(1)} | ${at(64)} |`);
}
