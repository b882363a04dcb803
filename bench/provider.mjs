#!/usr/bin/env node
// @ts-check
// CPU per provider call: the executor's clients against a zero-latency fake upstream (OpenAI's wire,
// and Anthropic's and Gemini's), beside the openai and Anthropic SDKs and bare undici, blocking and
// streamed, one call at a time and 16 at once.
// Run it pinned, the fake goes to the other CPU:
//   npm run build && taskset -c 1 node bench/provider.mjs   (npm run bench:provider, unpinned)
// Settings (environment variables, all optional): PROVIDER_BENCH_CALLS=3000 (per cell and round),
// PROVIDER_BENCH_WARMUP=500, PROVIDER_BENCH_ROUNDS=3 (interleaved; the median is reported),
// PROVIDER_BENCH_VARIANTS=sdk,executor,floor (also anthropic, anthropic-sdk, google, and virtual
// and failover: a virtual environment whose first entry answers, or refuses connections)
// PROVIDER_BENCH_FAKE_CPU=0
// PROVIDER_BENCH_CELLS=blocking:1,blocking:16,streamed:1,streamed:16
// To see where one variant's time goes: PROVIDER_BENCH_VARIANTS=executor PROVIDER_BENCH_CELLS=
// blocking:16 PROVIDER_BENCH_ROUNDS=1 taskset -c 1 node --cpu-prof bench/provider.mjs
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { performance } from "node:perf_hooks";
import { create } from "@bufbuild/protobuf";
import { EndpointPolicy } from "@pies/common";
import { EnvironmentSchema, RoutedEnvironmentSchema } from "@pies/proto/catalog";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { Agent, fetch as undiciFetch, request } from "undici";
import { guardedAgent } from "../services/executor/dist/providers/guarded-fetch.js";
import { AnthropicClient } from "../services/executor/dist/providers/anthropic.js";
import { GoogleClient } from "../services/executor/dist/providers/google.js";
import { OpenAIClient } from "../services/executor/dist/providers/openai.js";
import { Router } from "../services/executor/dist/providers/router.js";

/** @import { RequestInfo as UndiciRequestInfo, RequestInit as UndiciRequestInit } from "undici" */
/** @import { ChatMessage } from "../services/executor/dist/templates/render.js" */

/**
 * A way to call the upstream: `call` resolves to the answer's content.
 * @typedef {{ call(streamed: boolean): Promise<string>, close(): Promise<void> }} Variant
 */

/**
 * @param {string} name
 * @param {number} fallback
 */
const int = (name, fallback) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be an integer`);
  return value;
};
const calls = int("PROVIDER_BENCH_CALLS", 3000);
const warmup = int("PROVIDER_BENCH_WARMUP", 500);
const rounds = int("PROVIDER_BENCH_ROUNDS", 3);
const fakeCpu = process.env.PROVIDER_BENCH_FAKE_CPU ?? "0";
const variantNames = (process.env.PROVIDER_BENCH_VARIANTS ?? "sdk,executor,floor").split(",");
const cells = (process.env.PROVIDER_BENCH_CELLS ?? "blocking:1,blocking:16,streamed:1,streamed:16")
  .split(",")
  .map((c) => {
    const [mode, n] = c.split(":");
    if ((mode !== "blocking" && mode !== "streamed") || !(Number(n) >= 1))
      throw new Error(`bad cell ${c}`);
    return { streamed: mode === "streamed", concurrency: Number(n) };
  });

/** The fake upstream in a process of its own, on the other CPU. */
async function startFake() {
  const script = `
    import { startFakeOpenAI } from "@pies/testkit";
    const fake = await startFakeOpenAI({ maxRecordedRequests: 0 });
    process.stdout.write(fake.url + "\\n");
    process.stdin.on("end", () => fake.close().then(() => process.exit(0)));
    process.stdin.resume();`;
  const child = spawn(
    "taskset",
    ["-c", fakeCpu, process.execPath, "--input-type=module", "-e", script],
    {
      stdio: ["pipe", "pipe", "inherit"],
    },
  );
  const url = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      if (out.includes("\n")) resolve(out.trim());
    });
    child.once("exit", (code) => reject(new Error(`fake upstream exited with ${code}`)));
  });
  return { url, close: () => child.stdin.end() };
}

const fake = await startFake();
/** @type {ChatMessage[]} */
const messages = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Summarise the quick brown fox jumps over the lazy dog" },
];
const completion = { model: "gpt-4o-mini", messages };
/** The fake's origin: the endpoint of the Anthropic and Gemini clients (they add their paths). */
const origin = String(fake.url).replace(/\/v1$/, "");
const policy = new EndpointPolicy("loopback");
const environment = create(EnvironmentSchema, {
  id: "env-bench",
  provider: "openai_compatible",
  endpointUrl: fake.url,
});
/** The routes of the virtual environments: the OpenAI environment. */
const routes = [create(RoutedEnvironmentSchema, { environment })];
/** A port nothing listens on (taken, then freed): connections to it are refused. */
const closedPort = await new Promise((resolve) => {
  const server = createServer().listen(0, "127.0.0.1", () => {
    const { port } = /** @type {import("node:net").AddressInfo} */ (server.address());
    server.close(() => resolve(port));
  });
});
/**
 * Each variant: { call(streamed): Promise<content>, close() }.
 * @type {Record<string, () => Variant>}
 */
const variants = {
  // The openai SDK as its documentation has it, with undici's fetch over the guarded pool: what the
  // executor used before its own client (then over a lean fetch of its own, since removed).
  sdk() {
    const agent = guardedAgent(policy);
    const client = new OpenAI({
      apiKey: "sk-bench",
      baseURL: fake.url,
      timeout: 30_000,
      maxRetries: 2,
      // The SDK calls it as the global fetch; undici's takes the same arguments, in its own types.
      fetch: (input, init) =>
        undiciFetch(/** @type {UndiciRequestInfo} */ (input), {
          .../** @type {UndiciRequestInit} */ (init),
          dispatcher: agent,
        }),
    });
    /** @param {boolean} streamed */
    const call = async (streamed) => {
      if (!streamed) {
        const answer = await client.chat.completions.create(completion);
        return answer.choices[0]?.message?.content ?? "";
      }
      const stream = await client.chat.completions.create({
        ...completion,
        stream: true,
        stream_options: { include_usage: true },
      });
      let content = "";
      for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? "";
      return content;
    };
    return { call, close: () => agent.close() };
  },
  // The floor: undici.request and JSON.parse, no client.
  floor() {
    const agent = new Agent();
    const url = `${fake.url}/chat/completions`;
    return {
      async call(streamed) {
        const { statusCode, body } = await request(url, {
          method: "POST",
          dispatcher: agent,
          headers: { "content-type": "application/json", authorization: "Bearer sk-bench" },
          body: JSON.stringify(streamed ? { ...completion, stream: true } : completion),
        });
        const text = await body.text();
        if (statusCode !== 200) throw new Error(`status ${statusCode}`);
        if (!streamed) return JSON.parse(text).choices[0].message.content;
        let content = "";
        for (const line of text.split("\n")) {
          if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
          content += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? "";
        }
        return content;
      },
      close: () => agent.close(),
    };
  },
  // The executor's Anthropic client: the same HTTP client as OpenAI's, Anthropic's wire.
  anthropic() {
    const agent = guardedAgent(policy);
    const client = new AnthropicClient(
      create(EnvironmentSchema, { id: "env-a", provider: "anthropic", endpointUrl: origin }),
      "sk-bench",
      { timeoutMs: 30_000, maxRetries: 2, agent },
    );
    return { call: (streamed) => viaClient(client, streamed), close: () => agent.close() };
  },
  // The Anthropic SDK as its documentation has it, over the guarded pool (as `sdk` for OpenAI).
  "anthropic-sdk"() {
    const agent = guardedAgent(policy);
    const client = new Anthropic({
      apiKey: "sk-bench",
      baseURL: origin,
      timeout: 30_000,
      maxRetries: 2,
      fetch: (input, init) =>
        undiciFetch(/** @type {UndiciRequestInfo} */ (input), {
          .../** @type {UndiciRequestInit} */ (init),
          dispatcher: agent,
        }),
    });
    const system = messages.find((m) => m.role === "system")?.content;
    const params = {
      model: "claude-bench",
      max_tokens: 1024,
      ...(system ? { system } : {}),
      messages: messages
        .filter((m) => m.role !== "system")
        .map((m) => ({ role: /** @type {"user"} */ ("user"), content: m.content })),
    };
    /** @param {{ type: string, text?: string }[]} blocks */
    const textOf = (blocks) => blocks.map((b) => (b.type === "text" ? b.text : "")).join("");
    /** @param {boolean} streamed */
    const call = async (streamed) => {
      if (!streamed) return textOf((await client.messages.create(params)).content);
      const stream = await client.messages.create({ ...params, stream: true });
      let content = "";
      for await (const event of stream) {
        if (event.type === "content_block_delta" && event.delta.type === "text_delta")
          content += event.delta.text;
      }
      return content;
    };
    return { call, close: () => agent.close() };
  },
  // The executor's Gemini client.
  google() {
    const agent = guardedAgent(policy);
    const client = new GoogleClient(
      create(EnvironmentSchema, { id: "env-g", provider: "google", endpointUrl: origin }),
      "sk-bench",
      { timeoutMs: 30_000, maxRetries: 2, agent },
    );
    return { call: (streamed) => viaClient(client, streamed), close: () => agent.close() };
  },
  // A virtual environment of one entry, the same OpenAI environment: the router's own cost.
  virtual() {
    const agent = guardedAgent(policy);
    const member = new OpenAIClient(environment, "sk-bench", {
      timeoutMs: 30_000,
      maxRetries: 2,
      agent,
    });
    const router = new Router({ client: () => member });
    const routed = virtualOver([`${environment.id}::gpt-4o-mini`]);
    return {
      call: (streamed) => viaClient(router.client(routed, routes, []), streamed),
      close: () => agent.close(),
    };
  },
  // Its first entry refuses connections (a closed port), the second answers: every call fails
  // over (the breaker is kept closed, so that every call pays it).
  failover() {
    const agent = guardedAgent(policy);
    const refused = create(EnvironmentSchema, {
      id: "env-refused",
      provider: "openai_compatible",
      endpointUrl: `http://127.0.0.1:${closedPort}/v1`,
    });
    const clients = new Map([
      [
        refused.id,
        new OpenAIClient(refused, "sk-bench", { timeoutMs: 30_000, maxRetries: 2, agent }),
      ],
      [
        environment.id,
        new OpenAIClient(environment, "sk-bench", { timeoutMs: 30_000, maxRetries: 2, agent }),
      ],
    ]);
    const router = new Router(
      { client: (env) => /** @type {OpenAIClient} */ (clients.get(env.id)) },
      { failures: Number.POSITIVE_INFINITY, coolDownMs: 0 },
    );
    const routed = virtualOver(
      [`${refused.id}::gpt-4o-mini`, `${environment.id}::gpt-4o-mini`],
      [1e9, 1],
    );
    const withRefused = [...routes, create(RoutedEnvironmentSchema, { environment: refused })];
    return {
      call: (streamed) => viaClient(router.client(routed, withRefused, []), streamed),
      close: () => agent.close(),
    };
  },
  // What the executor uses: its OpenAIClient over the guarded pool.
  executor() {
    const agent = guardedAgent(policy);
    const client = new OpenAIClient(environment, "sk-bench", {
      timeoutMs: 30_000,
      maxRetries: 2,
      agent,
    });
    return { call: (streamed) => viaClient(client, streamed), close: () => agent.close() };
  },
};

/**
 * A virtual environment with failover over `models` ("<environment id>::<model>"), by `weights`.
 * @param {string[]} models
 * @param {number[]} [weights]
 */
function virtualOver(models, weights = []) {
  return create(EnvironmentSchema, {
    id: "env-virtual",
    provider: "virtual_lb",
    configJson: new TextEncoder().encode(
      JSON.stringify({
        failover: true,
        entries: models.map((model, i) => ({ model, weight: weights[i] ?? 1 })),
      }),
    ),
  });
}

/**
 * @param {{ complete: OpenAIClient["complete"] }} client
 * @param {boolean} streamed
 */
async function viaClient(client, streamed) {
  const result = await client.complete(completion, streamed ? { onChunk: () => {} } : {});
  return result.content;
}

/** @param {number[]} values at least one */
const median = (values) =>
  /** @type {number} */ (values.sort((a, b) => a - b)[Math.floor(values.length / 2)]);

/**
 * `total` calls, `concurrency` at a time: µs of CPU per call and calls/s.
 * @param {Variant} variant
 * @param {boolean} streamed
 * @param {number} concurrency
 * @param {number} total
 */
async function cell(variant, streamed, concurrency, total) {
  let next = 0;
  /** @type {number[]} */
  const times = [];
  const worker = async () => {
    while (next++ < total) {
      const began = performance.now();
      const content = await variant.call(streamed);
      times.push(performance.now() - began);
      if (!content.startsWith("echo: ")) throw new Error(`unexpected content ${content}`);
    }
  };
  const cpu = process.cpuUsage();
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - start) / 1000;
  const used = process.cpuUsage(cpu);
  return {
    cpuUs: (used.user + used.system) / total,
    perSecond: total / seconds,
    p50Ms: median(times),
  };
}

const made = Object.fromEntries(
  variantNames.map((name) => {
    const make = variants[name];
    if (!make) throw new Error(`no variant ${name} (PROVIDER_BENCH_VARIANTS)`);
    return [name, make()];
  }),
);
/** @type {Map<string, Awaited<ReturnType<typeof cell>>[]>} */
const results = new Map();
try {
  for (const [, variant] of Object.entries(made)) {
    for (const { streamed, concurrency } of cells)
      await cell(variant, streamed, concurrency, warmup);
  }
  for (let round = 0; round < rounds; round++) {
    for (const { streamed, concurrency } of cells) {
      for (const [name, variant] of Object.entries(made)) {
        const key = `${name}|${streamed ? "streamed" : "blocking"}|${concurrency}`;
        const result = await cell(variant, streamed, concurrency, calls);
        results.set(key, [...(results.get(key) ?? []), result]);
      }
    }
  }
} finally {
  await Promise.all(Object.values(made).map((v) => v.close()));
  fake.close();
}

console.log(
  `${calls} calls per cell, median of ${rounds} rounds; µs CPU per call (calls/s, p50 latency)`,
);
const header = [
  "variant",
  ...cells.map((c) => `${c.streamed ? "streamed" : "blocking"} c=${c.concurrency}`),
];
const rows = variantNames.map((name) => [
  name,
  ...cells.map(({ streamed, concurrency }) => {
    const runs = results.get(`${name}|${streamed ? "streamed" : "blocking"}|${concurrency}`) ?? [];
    const cpu = median(runs.map((r) => r.cpuUs));
    const rate = median(runs.map((r) => r.perSecond));
    const p50 = median(runs.map((r) => r.p50Ms));
    return `${cpu.toFixed(0)} µs (${rate.toFixed(0)}/s, p50 ${p50.toFixed(2)} ms)`;
  }),
]);
for (const row of [header, header.map(() => "---"), ...rows]) console.log(`| ${row.join(" | ")} |`);
