#!/usr/bin/env node
// @ts-check
// One internal call between two processes, alone (npm run bench:connect-hop): the gateway's
// ExecutorService/Execute with the bench's request and a completed run as its answer, from this
// process to a server process, both pinned to the same CPU as pies' processes are in the bench
// (BENCH_PIN=0: not pinned), closed loop at concurrency 1. Client and server side each either
// connect-node's (createConnectTransport; connectNodeAdapter) or pies' lean unary path
// (peerTransport: unary-client.ts; serveConnect: unary-server.ts), plus a bare node:http2
// request of the same bytes as the floor. The variants are measured in turn, in blocks of
// HOP_BLOCK calls, HOP_ROUNDS rounds, so that the machine's load falls on all alike; each row
// gives the latency percentiles and the CPU per call of either process (process.cpuUsage, the
// server's read over IPC at the edges of each block).
//   HOP_ROUNDS=20  HOP_BLOCK=100  HOP_VARIANTS=a,b (by name)  HOP_FORMAT=json|binary
import { fork, spawnSync } from "node:child_process";
import http2 from "node:http2";
import { fileURLToPath } from "node:url";
import { create, toJsonString, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { createClient } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport } from "@connectrpc/connect-node";
import { createLogger, jsonBytes } from "@pies/common";
import {
  errorInterceptor,
  internalAuthInterceptor,
  internalCredentialInterceptor,
  peerTransport,
  peerUnavailableInterceptor,
  serveConnect,
  serviceClient,
} from "@pies/common/server";
import { ExecuteRequestSchema, ExecuteResponseSchema, ExecutorService } from "@pies/proto/executor";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import { planPinning } from "./lib/pin.mjs";

/** @import { Http2Server } from "node:http2" */
/** @import { AddressInfo } from "node:net" */
/** @import { ConnectRouter } from "@connectrpc/connect" */

/** @typedef {{ lean: string, connectNode: string, bare: string }} ServerUrls */

const TOKEN = "bench-internal-token";
const binary = process.env.HOP_FORMAT === "binary";
/** @param {string} n */
const id = (n) => `01a20bd4bc963a5e7e7252${n}`;
const source = {
  type: "api",
  label: "bench",
  principalType: "apikey",
  principalId: id("k1"),
  clientIp: "127.0.0.1",
};
const request = create(ExecuteRequestSchema, {
  interaction: { case: "interactionId", value: id("i1") },
  caller: { accountId: id("a1"), projectId: id("p1"), source },
  dataJson: jsonBytes({ text: "the quarterly report" }),
  config: {},
});
const answer = create(ExecuteResponseSchema, {
  run: create(RunSchema, {
    id: id("r1"),
    projectId: id("p1"),
    accountId: id("a1"),
    interactionId: id("i1"),
    interactionName: "Traced",
    environmentId: id("e1"),
    environmentName: "bench-upstream",
    modelId: "gpt-4o-mini",
    status: RunStatus.COMPLETED,
    parametersJson: jsonBytes({ text: "the quarterly report" }),
    resultJson: jsonBytes("This is the fake upstream's answer, about as long as the bench's one."),
    promptJson: jsonBytes([{ role: "user", content: "Summarise the quarterly report" }]),
    config: { environmentId: id("e1"), model: "gpt-4o-mini" },
    source,
    tokenUse: { prompt: 12, result: 20, total: 32 },
    executionTime: 2n,
    provider: "openai_compatible",
    createdAt: timestampFromMs(Date.now()),
    updatedAt: timestampFromMs(Date.now()),
  }),
});

/** @param {ConnectRouter} router */
const routes = (router) =>
  router.service(ExecutorService, {
    execute: async () => answer,
  });

if (process.argv[2] === "--server") {
  // The server process: the lean path (serveConnect), connect-node's adapter alone, a bare one.
  const logger = createLogger("bench", "silent");
  const lean = await serveConnect({
    name: "bench",
    host: "127.0.0.1",
    port: 0,
    logger,
    serviceNames: [],
    isReady: async () => true,
    internalToken: TOKEN,
    routes,
  });
  /**
   * @param {Http2Server} server
   * @returns {Promise<string>}
   */
  const listen = (server) =>
    new Promise((resolve) =>
      server.listen(0, "127.0.0.1", () =>
        resolve(`http://127.0.0.1:${/** @type {AddressInfo} */ (server.address()).port}`),
      ),
    );
  const connectNode = await listen(
    http2.createServer(
      connectNodeAdapter({
        interceptors: [internalAuthInterceptor(TOKEN), errorInterceptor(logger)],
        compressMinBytes: Number.MAX_SAFE_INTEGER,
        routes,
      }),
    ),
  );
  const body = binary
    ? toBinary(ExecuteResponseSchema, answer)
    : Buffer.from(toJsonString(ExecuteResponseSchema, answer));
  const bareServer = http2.createServer();
  bareServer.on("stream", (stream) => {
    /** @type {Buffer[]} */
    const chunks = [];
    stream.on("data", (/** @type {Buffer} */ c) => chunks.push(c));
    stream.on("end", () => {
      stream.respond({ ":status": 200 });
      stream.end(body);
    });
  });
  const bare = await listen(bareServer);
  /** @param {unknown} message to the client, which forked this process with IPC */
  const toParent = (message) => {
    if (!process.send) throw new Error("not forked by connect-hop.mjs: no IPC channel");
    process.send(message);
  };
  process.on("message", (m) => {
    if (m === "cpu") toParent({ cpu: process.cpuUsage() });
    if (m === "exit") process.exit(0);
  });
  /** @type {ServerUrls} */
  const urls = { lean: lean.url, connectNode, bare };
  toParent({ urls });
} else {
  const pinning = planPinning();
  if (pinning.enabled) {
    // This process and the server on the system-under-test CPU, as pies' processes.
    spawnSync("taskset", ["-a", "-p", "-c", String(pinning.sutCpu), String(process.pid)], {
      stdio: "ignore",
    });
  }
  const server = fork(fileURLToPath(import.meta.url), ["--server"]);
  /** @type {{ urls: ServerUrls }} */
  const { urls } = await new Promise((resolve) => server.once("message", resolve));
  /** @returns {Promise<NodeJS.CpuUsage>} */
  const serverCpu = () =>
    new Promise((resolve) => {
      server.once("message", (m) => resolve(/** @type {{ cpu: NodeJS.CpuUsage }} */ (m).cpu));
      server.send("cpu");
    });
  /** @param {string} baseUrl */
  const connectNodeClient = (baseUrl) =>
    createClient(
      ExecutorService,
      // What peerTransport was before the lean path: the same options and interceptors.
      createConnectTransport({
        baseUrl,
        httpVersion: "2",
        useBinaryFormat: binary,
        defaultTimeoutMs: 45 * 60_000,
        acceptCompression: [],
        pingIntervalMs: 30_000,
        pingIdleConnection: true,
        idleConnectionTimeoutMs: 5 * 60_000,
        interceptors: [
          peerUnavailableInterceptor("executor"),
          internalCredentialInterceptor(TOKEN),
        ],
      }),
    );
  /** @param {string} baseUrl */
  const leanClient = (baseUrl) =>
    serviceClient(ExecutorService, peerTransport(baseUrl, binary ? "catalog" : "executor", TOKEN));
  const bareBody = binary
    ? toBinary(ExecuteRequestSchema, request)
    : Buffer.from(toJsonString(ExecuteRequestSchema, request));
  const bareSession = http2.connect(urls.bare);
  const bareCall = () =>
    new Promise((resolve, reject) => {
      const req = bareSession.request({
        ":method": "POST",
        ":path": "/pies.executor.v1.ExecutorService/Execute",
      });
      /** @type {Buffer[]} */
      const chunks = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => resolve(Buffer.concat(chunks)));
      req.on("error", reject);
      req.end(bareBody);
    });
  const all = {
    "connect-node > connect-node (before)": () => {
      const c = connectNodeClient(urls.connectNode);
      return () => c.execute(request);
    },
    "lean > connect-node": () => {
      const c = leanClient(urls.connectNode);
      return () => c.execute(request);
    },
    "connect-node > lean": () => {
      const c = connectNodeClient(urls.lean);
      return () => c.execute(request);
    },
    "lean > lean (now)": () => {
      const c = leanClient(urls.lean);
      return () => c.execute(request);
    },
    "bare node:http2, same bytes": () => bareCall,
  };
  const variants = /** @type {(keyof typeof all)[]} */ (Object.keys(all));
  const names = process.env.HOP_VARIANTS
    ? process.env.HOP_VARIANTS.split(",").map((n) => {
        const found = variants.find((k) => k.startsWith(n));
        if (!found) throw new Error(`no variant ${n}`);
        return found;
      })
    : variants;
  // The variants named (each is looked up only by a name in `names`).
  const calls = /** @type {Record<keyof typeof all, () => Promise<unknown>>} */ (
    Object.fromEntries(names.map((n) => [n, all[n]()]))
  );
  const stats =
    /** @type {Record<keyof typeof all, { lat: number[], client: number, server: number, n: number }>} */ (
      Object.fromEntries(
        names.map((n) => [n, { lat: /** @type {number[]} */ ([]), client: 0, server: 0, n: 0 }]),
      )
    );
  const rounds = Number(process.env.HOP_ROUNDS ?? 20);
  const block = Number(process.env.HOP_BLOCK ?? 100);
  for (const n of names) for (let i = 0; i < 300; i++) await calls[n]();
  /** @param {NodeJS.CpuUsage} c */
  const us = (c) => c.user + c.system;
  for (let r = 0; r < rounds; r++)
    for (const n of r % 2 ? [...names].reverse() : names) {
      const s0 = await serverCpu();
      const c0 = process.cpuUsage();
      for (let i = 0; i < block; i++) {
        const t = process.hrtime.bigint();
        await calls[n]();
        stats[n].lat.push(Number(process.hrtime.bigint() - t) / 1e6);
      }
      const c1 = process.cpuUsage();
      const s1 = await serverCpu();
      stats[n].client += us(c1) - us(c0);
      stats[n].server += us(s1) - us(s0);
      stats[n].n += block;
    }
  /**
   * @param {number[]} xs at least one
   * @param {number} p 0–1
   */
  const pct = (xs, p) =>
    /** @type {number} */ ([...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)]);
  console.log(
    `\nExecutorService/Execute between two processes, ${binary ? "binary" : "JSON"}, c=1, ${pinning.enabled ? `both on CPU ${pinning.sutCpu}` : "not pinned"}; ${rounds} rounds of ${block} calls per variant\n`,
  );
  console.log("| client > server | p50 ms | p90 ms | client CPU µs/call | server CPU µs/call |");
  console.log("|---|---|---|---|---|");
  for (const n of names) {
    const s = stats[n];
    console.log(
      `| ${n} | ${pct(s.lat, 0.5).toFixed(3)} | ${pct(s.lat, 0.9).toFixed(3)} | ${(s.client / s.n).toFixed(0)} | ${(s.server / s.n).toFixed(0)} |`,
    );
  }
  server.send("exit");
  bareSession.close();
  process.exit(0);
}
