// @ts-check
// CPU of the gateway per blocking execution (POST /api/v1/interactions/:id/execute).
//
//   npx tsc -b tsconfig.build.json && node bench/gateway.mjs [--cpu-prof]
//
// Three processes: the real gateway (createGateway, Connect clients over HTTP/2 as deployed), a
// stub of the catalog, runs and executor services (a real Connect HTTP/2 server, serveConnect,
// answering at once with a completed run), and this one (the load generator: keep-alive HTTP/1.1,
// closed loop). Only the gateway's CPU is measured, with process.cpuUsage() read in the gateway
// before and after each cell, divided by the requests of the cell. With taskset, the gateway is
// pinned to the second allowed CPU and the other two processes to the first.
//
// GW_BENCH_CONCURRENCY (1,16), GW_BENCH_REQUESTS per cell (4000), GW_BENCH_WARMUP requests before
// each cell (1500), GW_BENCH_ROUNDS (3: the cells are measured this many times, interleaved, and
// the median is reported). --cpu-prof writes a V8 CPU profile of the gateway
// (bench/results/gateway-profile-<time>/) and prints its top functions and packages by self time
// over the measured cells.
//
// GW_BENCH_BUILDS compares builds of the gateway in one run (the machine's load changes between
// runs; the numbers of one run compare): comma-separated directories holding a build of
// gateway/src (default gateway/dist), e.g. a copy of gateway/dist made before a change, under
// bench/results/ (git-ignored; its imports resolve from the repository's node_modules). One
// gateway process per build, all on the same CPU, measured in turn in each round (the order
// turns from round to round: use an even number of rounds with two builds).
import { fork, spawnSync } from "node:child_process";
import http from "node:http";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { benchPrincipal, serveBenchGateway, serveBenchStub } from "./lib/bench-gateway.mjs";
import { addSelfTimes, listProfiles, loadProfile, shortUrl } from "./lib/profile.mjs";

/** @import { ChildProcess } from "node:child_process" */
/** @import { ConnectRouter } from "@connectrpc/connect" */

/**
 * What a gateway answers when asked for its CPU (see serveBenchGateway).
 * @typedef {{ cpuUs: number, systemUs: number, atUs: number }} CpuReading
 */

/**
 * One gateway process measured: its build, and per concurrency each round's figures.
 * @typedef {object} Gateway
 * @property {ChildProcess} child
 * @property {URL} url
 * @property {string} build
 * @property {string} dir its profile's directory under the run's
 * @property {Map<number, number[]>} results CPU µs per request
 * @property {Map<number, number[]>} system of which in the kernel
 * @property {Map<number, [number, number][]>} windows the measured cells, µs (process.hrtime)
 */

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const API_KEY = `sk-${"A".repeat(43)}`;
const TEXT = "the quarterly report: revenue grew 12%, costs fell 3%, and headcount stayed flat.";
const role = process.argv.find((a) => a.startsWith("--role="))?.slice("--role=".length);

/**
 * A setting main() hands to the process it forks in a role.
 * @param {string} name
 */
function fromParent(name) {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set: run bench/gateway.mjs itself`);
  return value;
}

/** The catalog, runs and executor, answering at once over a real Connect HTTP/2 server. */
async function stub() {
  const { create } = await import("@bufbuild/protobuf");
  const { jsonBytes, jsonOf } = await import("@pies/common");
  const { CatalogService } = await import("@pies/proto/catalog");
  const { ExecutorService } = await import("@pies/proto/executor");
  const { RunsService, RunSchema, RunStatus } = await import("@pies/proto/runs");
  const principal = await benchPrincipal();
  let n = 0;
  const now = () => {
    const ms = Date.now();
    return { seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 };
  };
  await serveBenchStub((/** @type {ConnectRouter} */ router) => {
    router.service(CatalogService, { verifyApiKey: async () => ({ principal }) });
    router.service(RunsService, {});
    router.service(ExecutorService, {
      async execute(req) {
        const data = /** @type {{ text?: string } | undefined} */ (jsonOf(req.dataJson));
        const text = data?.text ?? "";
        return {
          run: create(RunSchema, {
            id: `run_${String(++n).padStart(16, "0")}`,
            projectId: req.caller?.projectId,
            accountId: req.caller?.accountId,
            interactionId: req.interaction.value,
            interactionName: "Summarise",
            environmentId: "env_0123456789abcdef",
            environmentName: "test",
            modelId: "gpt-4o-mini",
            status: RunStatus.COMPLETED,
            stream: false,
            parametersJson: req.dataJson,
            resultJson: jsonBytes("Revenue up 12%, costs down 3%, headcount flat."),
            promptJson: jsonBytes([{ role: "user", content: `Summarise ${text}` }]),
            tags: req.tags,
            config: { environmentId: "env_0123456789abcdef", model: "gpt-4o-mini" },
            source: req.caller?.source,
            tokenUse: { prompt: 24, result: 12, total: 36 },
            executionTime: 7n,
            provider: "openai_compatible",
            createdAt: now(),
            updatedAt: now(),
          }),
        };
      },
    });
  });
}

/** The real gateway against the stub; reports its CPU on request. */
async function gateway() {
  await serveBenchGateway({
    build: path.resolve(repoRoot, fromParent("GW_BENCH_BUILD")),
    stubUrl: fromParent("GW_BENCH_STUB_URL"),
    rateLimitPerMinute: 0,
  });
}

function pinning() {
  if (process.env.GW_BENCH_PIN === "0") return undefined;
  if (spawnSync("taskset", ["-V"], { stdio: "ignore" }).status !== 0) return undefined;
  const list = /** @type {string} */ (
    spawnSync("taskset", ["-c", "-p", String(process.pid)], { encoding: "utf8" })
      .stdout.split(":")
      .pop()
  ).trim();
  const cpus = list.split(",").flatMap((part) => {
    // split() yields at least one part.
    const [a, b] = /** @type {[number, number?]} */ (part.split("-").map(Number));
    return b === undefined ? [a] : Array.from({ length: b - a + 1 }, (_, i) => a + i);
  });
  return cpus.length >= 2 ? { load: cpus[0], gateway: cpus[1] } : undefined;
}

/**
 * Forks this file in `name`'s role; resolves once it tells its URL.
 * @param {string} name
 * @param {{ env?: Record<string, string>, execArgv?: string[], cpu?: number }} options
 * @returns {Promise<{ child: ChildProcess, url: string }>}
 */
function start(name, { env = {}, execArgv = [], cpu }) {
  const child = fork(fileURLToPath(import.meta.url), [`--role=${name}`], {
    env: { ...process.env, ...env },
    execArgv,
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  if (cpu !== undefined) {
    spawnSync("taskset", ["-a", "-p", "-c", String(cpu), String(child.pid)], { stdio: "ignore" });
  }
  return new Promise((resolve, reject) => {
    child.once("message", (msg) =>
      resolve({ child, url: /** @type {{ url: string }} */ (msg).url }),
    );
    child.once("exit", (code) => reject(new Error(`${name} exited (${code}) before it was ready`)));
  });
}

/**
 * @param {ChildProcess} child a gateway
 * @returns {Promise<CpuReading>}
 */
const ask = (child) =>
  new Promise((resolve) => {
    child.once("message", resolve);
    child.send("cpu");
  });

async function main() {
  const cellsOf = (process.env.GW_BENCH_CONCURRENCY ?? "1,16").split(",").map(Number);
  const requests = Number(process.env.GW_BENCH_REQUESTS ?? 4000);
  const warmup = Number(process.env.GW_BENCH_WARMUP ?? 1500);
  const rounds = Number(process.env.GW_BENCH_ROUNDS ?? 3);
  const profile = process.argv.includes("--cpu-prof");
  const pin = pinning();
  if (pin) {
    spawnSync("taskset", ["-a", "-p", "-c", String(pin.load), String(process.pid)], {
      stdio: "ignore",
    });
  }
  const profileDir = profile
    ? path.join(repoRoot, "bench/results", `gateway-profile-${Date.now()}`)
    : undefined;
  if (profileDir) mkdirSync(profileDir, { recursive: true });

  const builds = (process.env.GW_BENCH_BUILDS ?? "gateway/dist").split(",");
  const stubbed = await start("stub", { cpu: pin?.load });
  /** @type {Gateway[]} */
  const gateways = [];
  for (const [i, build] of builds.entries()) {
    const started = await start("gateway", {
      env: { GW_BENCH_STUB_URL: stubbed.url, GW_BENCH_BUILD: build },
      execArgv: profileDir
        ? ["--cpu-prof", `--cpu-prof-dir=${path.join(profileDir, `gateway-${i}`)}`]
        : [],
      cpu: pin?.gateway,
    });
    gateways.push({
      ...started,
      url: new URL(started.url),
      build,
      dir: `gateway-${i}`,
      results: new Map(cellsOf.map((c) => [c, []])),
      system: new Map(cellsOf.map((c) => [c, []])),
      windows: new Map(cellsOf.map((c) => [c, []])),
    });
  }
  const body = JSON.stringify({ data: { text: TEXT } });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  /**
   * @param {URL} url
   * @returns {Promise<void>}
   */
  const once = ({ hostname, port }) =>
    new Promise((resolve, reject) => {
      const req = http.request(
        {
          agent,
          host: hostname,
          port,
          method: "POST",
          path: "/api/v1/interactions/int_0123456789abcdef/execute",
          headers: {
            authorization: `Bearer ${API_KEY}`,
            "content-type": "application/json",
            "content-length": Buffer.byteLength(body),
          },
        },
        (res) => {
          /** @type {Buffer[]} */
          const chunks = [];
          res.on("data", (c) => chunks.push(c));
          res.on("end", () => {
            if (res.statusCode !== 200) {
              reject(new Error(`${res.statusCode}: ${Buffer.concat(chunks).toString()}`));
            } else resolve();
          });
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  /**
   * @param {URL} url
   * @param {number} conc
   * @param {number} n
   */
  const load = async (url, conc, n) => {
    let left = n;
    const worker = async () => {
      while (left > 0) {
        left--;
        await once(url);
      }
    };
    await Promise.all(Array.from({ length: conc }, worker));
  };

  try {
    for (let round = 0; round < rounds; round++) {
      for (const conc of cellsOf) {
        // Whichever build went first in a cell measured about a fifth higher at c=16 (two
        // comparisons of the same two builds, in both orders): the order turns round by round.
        const order = gateways.map(
          (_, i) => /** @type {Gateway} */ (gateways[(i + round) % gateways.length]),
        );
        for (const gw of order) {
          await load(gw.url, conc, warmup);
          const before = await ask(gw.child);
          const t0 = performance.now();
          await load(gw.url, conc, requests);
          const wallMs = performance.now() - t0;
          const after = await ask(gw.child);
          const us = (after.cpuUs - before.cpuUs) / requests;
          // Each map has a list per concurrency.
          /** @type {number[]} */ (gw.results.get(conc)).push(us);
          /** @type {number[]} */ (gw.system.get(conc)).push(
            (after.systemUs - before.systemUs) / requests,
          );
          /** @type {[number, number][]} */ (gw.windows.get(conc)).push([before.atUs, after.atUs]);
          console.error(
            `round ${round + 1} ${gw.build} c=${conc}: ${us.toFixed(0)} µs CPU/request, ${((requests / wallMs) * 1000).toFixed(0)} req/s`,
          );
        }
      }
    }
  } finally {
    agent.destroy();
    /** @param {ChildProcess} child */
    const exited = (child) => new Promise((resolve) => child.once("exit", resolve));
    const children = [...gateways.map((gw) => gw.child), stubbed.child];
    const done = children.map(exited);
    for (const child of children) child.disconnect();
    await Promise.all(done);
  }

  console.log(
    `gateway CPU per execute request, µs (${pin ? "pinned" : "not pinned"}; median and least of ${rounds} rounds, then each round)`,
  );
  for (const gw of gateways) {
    console.log(`  ${gw.build}`);
    for (const [conc, list] of gw.results) {
      // GW_BENCH_ROUNDS ≥ 1: a value in each list.
      const sorted = [...list].sort((a, b) => a - b);
      const median = /** @type {number} */ (sorted[Math.floor(sorted.length / 2)]);
      const system = /** @type {number} */ (
        [...(gw.system.get(conc) ?? [])].sort((a, b) => a - b)[Math.floor(sorted.length / 2)]
      );
      console.log(
        `    c=${String(conc).padEnd(3)} median ${median.toFixed(0).padStart(5)} (kernel ${system.toFixed(0)})  min ${/** @type {number} */ (sorted[0]).toFixed(0).padStart(5)}   (${list.map((v) => v.toFixed(0)).join(", ")})`,
      );
    }
  }
  if (profileDir) {
    for (const gw of gateways) {
      console.log(`\n${gw.build}`);
      printProfile(profileDir, gw.dir, gw.windows);
    }
  }
}

/**
 * Self time over the measured cells by function and by package.
 * @param {string} dir
 * @param {string} processDir
 * @param {Map<number, [number, number][]>} windows
 */
function printProfile(dir, processDir, windows) {
  const files = listProfiles(dir).filter((p) => p.tid === 0 && p.process === processDir);
  for (const [conc, list] of windows) {
    const agg = { totalUs: 0, frames: new Map() };
    for (const f of files) {
      const prof = loadProfile(f.file);
      for (const [fromUs, toUs] of list) addSelfTimes(prof, { fromUs, toUs }, agg);
    }
    const frames = [...agg.frames.values()].filter((f) => f.name !== "(idle)");
    const busy = frames.reduce((n, f) => n + f.selfUs, 0);
    /** @type {Map<string, number>} */
    const byPackage = new Map();
    for (const f of frames) {
      const where = packageOf(f);
      byPackage.set(where, (byPackage.get(where) ?? 0) + f.selfUs);
    }
    /** @param {number} us */
    const pct = (us) => `${((us / busy) * 100).toFixed(1).padStart(5)}%`;
    console.log(`\nprofile c=${conc}: busy ${(busy / 1000).toFixed(0)} ms sampled; by package:`);
    for (const [name, us] of [...byPackage].sort((a, b) => b[1] - a[1]).slice(0, 20)) {
      console.log(`  ${pct(us)}  ${name}`);
    }
    console.log(`top functions (self time):`);
    for (const f of frames.sort((a, b) => b.selfUs - a.selfUs).slice(0, 40)) {
      const where = f.url ? `${shortUrl(f.url, repoRoot)}${f.line ? `:${f.line}` : ""}` : "";
      console.log(`  ${pct(f.selfUs)}  ${f.name.slice(0, 40).padEnd(40)}  ${where}`);
    }
  }
}

/** @param {{ name: string, url: string }} frame */
function packageOf(frame) {
  const url = frame.url;
  if (!url) return frame.name.startsWith("(") ? frame.name : "(native)";
  if (url.startsWith("node:")) return `node:${url.slice(5).split("/")[0]}`;
  const u = url.replace(/^file:\/\//, "");
  const nm = u.lastIndexOf("/node_modules/");
  if (nm >= 0) {
    const rest = u.slice(nm + "/node_modules/".length).split("/");
    // split() yields at least one part.
    const first = /** @type {string} */ (rest[0]);
    const name = first.startsWith("@") ? `${first}/${rest[1]}` : first;
    if (name === "@pies") return `@pies/${rest[1]} ${rest.slice(2).join("/")}`;
    return name;
  }
  return u.startsWith(repoRoot) ? u.slice(repoRoot.length + 1) : u;
}

if (role === "stub") await stub();
else if (role === "gateway") await gateway();
else await main();
