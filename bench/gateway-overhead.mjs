// @ts-check
// What the gateway adds to a read: `GET /api/v1/runs/:id` through the gateway against the runs
// service called directly over Connect, and what authenticating a request costs (a JWT verified vs
// an API key found in the gateway's cache).
//
//   npm run bench:gateway   (or: npx tsc -b tsconfig.build.json && node bench/gateway-overhead.mjs)
//
// Three processes: a stub of the catalog and runs services (a real Connect HTTP/2 server,
// serveConnect, answering getRun at once with a stored run of ~1.3 KB of JSON, verifyApiKey with a
// member key), the real gateway (createGateway over Connect clients, HTTP/2, as deployed; the key
// cache on, as configured by default), and this one, the load generator (closed loop: each of
// `conc` workers sends its next request when the previous one is answered).
//
// Modes, each at each concurrency (GW_OVERHEAD_CONCURRENCY, default 1,64): a warm-up
// (GW_OVERHEAD_WARMUP_MS, 1500), then GW_OVERHEAD_MS (5000) measured:
//   direct          runs.getRun({projectId, id}) with a Connect client (HTTP/2, binary), as the
//                   gateway calls it;
//   gateway key     GET /api/v1/runs/:id with `Authorization: Bearer sk-…` (HTTP/1.1 keep-alive);
//   gateway jwt     the same with the JWT `POST /token/issue` exchanged the key for.
// `added p50 ms` = the row's p50 − direct p50 at the same concurrency (target at c=1: ≤ 0.3 ms);
// `p50 ratio` and `thr ratio` as in the main bench (bench/README.md).
//
// Then, in this process, the authentication of one request alone (Authenticator.authenticate, as
// the /api/v1 hook calls it): an API key in the cache (a SHA-256 of the key and an LRU look-up)
// against a JWT (HS256 verified by jose), µs per request over GW_OVERHEAD_AUTH_N (50,000) calls.
//
// GW_OVERHEAD_BUILD measures another build of gateway/src (a directory, e.g. under bench/results/,
// git-ignored), to compare two builds run by run on this shared machine.
import { fork } from "node:child_process";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { benchPrincipal, serveBenchGateway, serveBenchStub } from "./lib/bench-gateway.mjs";

/** @import { ChildProcess } from "node:child_process" */
/** @import { ConnectRouter } from "@connectrpc/connect" */

/**
 * One mode at one concurrency.
 * @typedef {object} Row
 * @property {string} mode
 * @property {number} conc
 * @property {number} n successful requests
 * @property {number} errors
 * @property {number} p50 ms (NaN without a successful request)
 * @property {number} p99
 * @property {number} rps
 * @property {number | undefined} gatewayCpuUs
 * @property {string} [firstError]
 */

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
/**
 * GW_OVERHEAD_BUILD: a build of gateway/src to measure (default gateway/dist; as in gateway.mjs).
 * @param {string} file
 */
const dist = (file) =>
  path.join(path.resolve(repoRoot, process.env.GW_OVERHEAD_BUILD ?? "gateway/dist"), file);
const API_KEY = `sk-${"A".repeat(43)}`;
const RUN_ID = "run_0123456789abcdef";
const role = process.argv.find((a) => a.startsWith("--role="))?.slice("--role=".length);

/**
 * A setting main() hands to the process it forks in a role.
 * @param {string} name
 */
function fromParent(name) {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set: run bench/gateway-overhead.mjs`);
  return value;
}

/** The catalog (key verification) and runs (getRun) services, answering at once. */
async function stub() {
  const { create } = await import("@bufbuild/protobuf");
  const { jsonBytes } = await import("@pies/common");
  const { CatalogService } = await import("@pies/proto/catalog");
  const { RunsService, RunSchema, RunStatus } = await import("@pies/proto/runs");
  const principal = await benchPrincipal();
  const at = { seconds: 1763942400n, nanos: 0 };
  const run = create(RunSchema, {
    id: RUN_ID,
    projectId: principal.projectId,
    accountId: principal.accountId,
    interactionId: "int_0123456789abcdef",
    interactionName: "Summarise",
    environmentId: "env_0123456789abcdef",
    environmentName: "test",
    modelId: "gpt-4o-mini",
    status: RunStatus.COMPLETED,
    parametersJson: jsonBytes({ text: "the quarterly report: revenue grew 12%, costs fell 3%." }),
    resultJson: jsonBytes("Revenue up 12%, costs down 3%, headcount flat."),
    promptJson: jsonBytes([{ role: "user", content: "Summarise the quarterly report: ..." }]),
    tags: ["bench"],
    config: { environmentId: "env_0123456789abcdef", model: "gpt-4o-mini" },
    source: {
      type: "api",
      label: "bench",
      principalType: "apikey",
      principalId: principal.apiKeyId,
      clientIp: "127.0.0.1",
    },
    tokenUse: { prompt: 24, result: 12, total: 36 },
    executionTime: 7n,
    provider: "openai_compatible",
    createdAt: at,
    updatedAt: at,
  });
  await serveBenchStub((/** @type {ConnectRouter} */ router) => {
    router.service(CatalogService, { verifyApiKey: async () => ({ principal }) });
    router.service(RunsService, { getRun: async () => ({ run }) });
  });
}

/** The real gateway against the stub. */
async function gateway() {
  await serveBenchGateway({
    build: path.dirname(dist("app.js")),
    stubUrl: fromParent("GW_OVERHEAD_STUB_URL"),
    // The rate limit on (as deployed, so its cost per request is measured) but never reached.
    rateLimitPerMinute: 100_000_000,
  });
}

/**
 * The gateway's CPU time so far (µs), asked over IPC.
 * @param {ChildProcess} child
 * @returns {Promise<number>}
 */
const cpuOf = (child) =>
  new Promise((resolve) => {
    child.once("message", (msg) => resolve(/** @type {{ cpuUs: number }} */ (msg).cpuUs));
    child.send("cpu");
  });

/**
 * Forks this file in `name`'s role; resolves once it tells its URL.
 * @param {string} name
 * @param {Record<string, string>} [env]
 * @returns {Promise<{ child: ChildProcess, url: string }>}
 */
function start(name, env = {}) {
  const child = fork(fileURLToPath(import.meta.url), [`--role=${name}`], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  return new Promise((resolve, reject) => {
    child.once("message", (msg) =>
      resolve({ child, url: /** @type {{ url: string }} */ (msg).url }),
    );
    child.once("exit", (code) => reject(new Error(`${name} exited (${code}) before it was ready`)));
  });
}

/**
 * Closed-loop load for `ms`: latencies (ms) of the successful requests, errors, wall time.
 * @param {() => Promise<void>} send
 * @param {number} conc
 * @param {number} ms
 */
async function measure(send, conc, ms) {
  /** @type {number[]} */
  const latencies = [];
  let errors = 0;
  /** @type {unknown} */
  let firstError;
  const until = performance.now() + ms;
  const started = performance.now();
  const worker = async () => {
    while (performance.now() < until) {
      const t0 = performance.now();
      try {
        await send();
        latencies.push(performance.now() - t0);
      } catch (err) {
        errors++;
        firstError ??= err;
      }
    }
  };
  await Promise.all(Array.from({ length: conc }, worker));
  return { latencies, errors, firstError, wallMs: performance.now() - started };
}

/**
 * @param {number[]} sorted
 * @param {number} p 0–1
 * @returns {number} NaN when empty
 */
const percentile = (sorted, p) =>
  sorted.length === 0
    ? NaN
    : /** @type {number} */ (sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]);

/**
 * @param {string} base
 * @param {string} authorization
 */
function httpGetter(base, authorization) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  const url = new URL(base);
  /** @returns {Promise<void>} */
  const send = () =>
    new Promise((resolve, reject) => {
      const req = http.request(
        {
          agent,
          host: url.hostname,
          port: url.port,
          method: "GET",
          path: `/api/v1/runs/${RUN_ID}`,
          headers: { authorization },
        },
        (res) => {
          /** @type {Buffer[]} */
          const chunks = [];
          res.on("data", (c) => chunks.push(c));
          res.on("end", () => {
            const body = Buffer.concat(chunks).toString();
            if (res.statusCode !== 200)
              reject(new Error(`${res.statusCode}: ${body.slice(0, 200)}`));
            else if (!body.includes(RUN_ID))
              reject(new Error(`unexpected body: ${body.slice(0, 200)}`));
            else resolve();
          });
        },
      );
      req.on("error", reject);
      req.end();
    });
  return { send, close: () => agent.destroy() };
}

/**
 * @param {string} base
 * @returns {Promise<string>}
 */
async function tokenOf(base) {
  const response = await fetch(new URL("/token/issue", base), {
    method: "POST",
    headers: { authorization: `Bearer ${API_KEY}` },
  });
  if (response.status !== 200) throw new Error(`token exchange: ${response.status}`);
  return /** @type {{ token: string }} */ (await response.json()).token;
}

/**
 * µs per call of Authenticator.authenticate, with a cached key and with a JWT.
 * @param {number} n
 */
async function authCost(n) {
  // The build measured (GW_OVERHEAD_BUILD), maybe of another version: its modules are typed any.
  const { Authenticator } = await import(dist("auth.js"));
  const { gatewayOptions, loadGatewaySettings } = await import(dist("config.js"));
  const { MemoryCatalogEvents } = await import("@pies/common/bus");
  const principal = await benchPrincipal();
  let verified = 0;
  const auth = new Authenticator({
    catalog: { verifyApiKey: async () => (verified++, { principal }) },
    catalogEvents: new MemoryCatalogEvents(),
    options: gatewayOptions(loadGatewaySettings({})),
    tokenKey: new Uint8Array(32).fill(1),
  });
  const { token } = await auth.tokens.issue(principal);
  // Wall time, and CPU time of this process (WebCrypto runs on libuv's threads: counted too).
  /** @param {string} authorization */
  const time = async (authorization) => {
    const request = () => ({ headers: { authorization }, query: {} });
    for (let i = 0; i < 5000; i++) await auth.authenticate(request());
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await auth.authenticate(request());
    const wallUs = ((performance.now() - t0) / n) * 1000;
    const cpu = process.cpuUsage(cpu0);
    return { wallUs, cpuUs: (cpu.user + cpu.system) / n };
  };
  const key = await time(`Bearer ${API_KEY}`);
  const jwt = await time(`Bearer ${token}`);
  auth.close();
  if (verified !== 1)
    throw new Error(`the key was verified ${verified} times, not once (cache off?)`);
  return { key, jwt };
}

async function main() {
  const concurrencies = (process.env.GW_OVERHEAD_CONCURRENCY ?? "1,64").split(",").map(Number);
  const ms = Number(process.env.GW_OVERHEAD_MS ?? 5000);
  const warmupMs = Number(process.env.GW_OVERHEAD_WARMUP_MS ?? 1500);
  const authN = Number(process.env.GW_OVERHEAD_AUTH_N ?? 50_000);
  const stubbed = await start("stub");
  const gw = await start("gateway", { GW_OVERHEAD_STUB_URL: stubbed.url });
  const { peerTransport, serviceClient } = await import("@pies/common/server");
  const { RunsService } = await import("@pies/proto/runs");
  const runs = serviceClient(RunsService, peerTransport(stubbed.url, "runs"));
  const principal = await benchPrincipal();
  const token = await tokenOf(gw.url);
  const byKey = httpGetter(gw.url, `Bearer ${API_KEY}`);
  const byJwt = httpGetter(gw.url, `Bearer ${token}`);
  /** @type {[string, () => Promise<void>][]} */
  const modes = [
    [
      "direct",
      async () => {
        const { run } = await runs.getRun({ projectId: principal.projectId, id: RUN_ID });
        if (run?.id !== RUN_ID) throw new Error("no run");
      },
    ],
    ["gateway key", byKey.send],
    ["gateway jwt", byJwt.send],
  ];
  /** @type {Row[]} */
  const rows = [];
  try {
    for (const conc of concurrencies) {
      for (const [mode, send] of modes) {
        await measure(send, conc, warmupMs);
        const cpuBefore = await cpuOf(gw.child);
        const result = await measure(send, conc, ms);
        const cpuAfter = await cpuOf(gw.child);
        const sorted = [...result.latencies].sort((a, b) => a - b);
        /** @type {Row} */
        const row = {
          mode,
          conc,
          n: sorted.length,
          errors: result.errors,
          p50: percentile(sorted, 0.5),
          p99: percentile(sorted, 0.99),
          rps: (sorted.length / result.wallMs) * 1000,
          // What the gateway spent per request (CPU is less at the mercy of a busy machine than
          // latency); none for direct calls, which do not go through it.
          gatewayCpuUs: mode === "direct" ? undefined : (cpuAfter - cpuBefore) / sorted.length,
        };
        if (result.firstError)
          row.firstError = String(
            /** @type {{ message?: string }} */ (result.firstError).message ?? result.firstError,
          );
        rows.push(row);
        console.error(
          `${mode} c=${conc}: p50 ${row.p50.toFixed(3)} ms, ${row.rps.toFixed(0)} req/s, ${row.errors} errors`,
        );
      }
    }
  } finally {
    byKey.close();
    byJwt.close();
    /** @param {ChildProcess} child */
    const exited = (child) => new Promise((resolve) => child.once("exit", resolve));
    const children = [gw.child, stubbed.child];
    const done = children.map(exited);
    for (const child of children) child.disconnect();
    await Promise.all(done);
  }
  const auth = await authCost(authN);

  const direct = new Map(rows.filter((r) => r.mode === "direct").map((r) => [r.conc, r]));
  const header = [
    "mode",
    "conc",
    "p50 ms",
    "p99 ms",
    "req/s",
    "added p50 ms",
    "p50 ratio",
    "thr ratio",
    "gateway CPU µs/req",
    "errors",
  ];
  const table = rows.map((r) => {
    // Every concurrency has its direct row.
    const base = /** @type {Row} */ (direct.get(r.conc));
    return [
      r.mode,
      String(r.conc),
      r.p50.toFixed(3),
      r.p99.toFixed(3),
      r.rps.toFixed(0),
      (r.p50 - base.p50).toFixed(3),
      (r.p50 / base.p50).toFixed(2),
      (r.rps / base.rps).toFixed(2),
      r.gatewayCpuUs === undefined ? "–" : r.gatewayCpuUs.toFixed(0),
      String(r.errors),
    ];
  });
  // A cell per header in every row, a width per header.
  const widths = header.map((h, i) =>
    Math.max(h.length, ...table.map((row) => /** @type {string} */ (row[i]).length)),
  );
  /** @param {string[]} cells */
  const line = (cells) =>
    `| ${cells.map((c, i) => c.padEnd(/** @type {number} */ (widths[i]))).join(" | ")} |`;
  console.log(
    `GET /runs/:id: the gateway against the runs service over Connect (${ms} ms per cell)`,
  );
  console.log(line(header));
  console.log(line(widths.map((w) => "-".repeat(w))));
  for (const row of table) console.log(line(row));
  for (const r of rows.filter((r) => r.firstError))
    console.log(`  ${r.mode} c=${r.conc}: ${r.firstError}`);
  const added = rows.find((r) => r.mode === "gateway key" && r.conc === 1);
  const direct1 = direct.get(1);
  if (added && direct1) {
    const value = added.p50 - direct1.p50;
    console.log(
      `added p50 at c=1 (API key): ${value.toFixed(3)} ms (target ≤ 0.3 ms: ${value <= 0.3 ? "met" : "missed"})`,
    );
  }
  console.log(`\nauthentication of one request, in process (${authN} calls each)`);
  console.log(`| credential          | wall µs/request | CPU µs/request | CPU ratio |`);
  console.log(`| ------------------- | --------------- | -------------- | --------- |`);
  /** @type {[string, { wallUs: number, cpuUs: number }][]} */
  const credentials = [
    ["API key (cache hit)", auth.key],
    ["JWT (HS256, jose)  ", auth.jwt],
  ];
  for (const [name, m] of credentials) {
    console.log(
      `| ${name} | ${m.wallUs.toFixed(2).padEnd(15)} | ${m.cpuUs.toFixed(2).padEnd(14)} | ${(m.cpuUs / auth.key.cpuUs).toFixed(2).padEnd(9)} |`,
    );
  }
  const failed = rows.some((r) => r.errors > 0);
  process.exitCode = failed ? 1 : 0;
}

if (role === "stub") await stub();
else if (role === "gateway") await gateway();
else await main();
