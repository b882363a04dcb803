import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "@pies/common";
import { MemoryCatalogEvents, MemoryRunEventBus } from "@pies/common/bus";
import { createGateway } from "./app.js";
import { gatewayOptions, loadGatewaySettings } from "./config.js";
import type { GatewayDeps } from "./deps.js";
import { startProbeServer } from "./probe-server.js";
import { Readiness } from "./readiness.js";

/** The probe thread failing after its start: not expected in these tests. */
const onError = (err: unknown) => {
  throw err;
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `fn` until it is true (generous: CI may share the machine). */
async function until(fn: () => Promise<boolean>, ms = 20_000) {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await sleep(25);
  }
}

const get = async (port: number, path: string) => {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: (await res.json()) as Record<string, string> };
};

/** Whether something accepts connections on the port. */
const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.once("connect", () => (socket.destroy(), resolve(true)));
    socket.once("error", () => resolve(false));
  });

let stops: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const stop of stops.reverse()) await stop();
  stops = [];
});

describe("the probe server", () => {
  it("answers from the last check, and 503 once a dependency goes away", async () => {
    let up = true;
    const readiness = new Readiness(async () => up, 50);
    stops.push(() => readiness.stop());
    const probes = await startProbeServer({ host: "127.0.0.1", port: 0, readiness, onError });
    stops.push(() => probes.close());

    await until(async () => (await get(probes.port, "/readyz")).status === 200);
    expect(await get(probes.port, "/readyz")).toEqual({ status: 200, body: { status: "ready" } });
    expect(await get(probes.port, "/healthz")).toEqual({ status: 200, body: { status: "ok" } });
    expect((await get(probes.port, "/metrics")).status).toBe(404);

    up = false;
    await until(async () => (await get(probes.port, "/readyz")).status === 503);
    expect((await get(probes.port, "/readyz")).body).toEqual({ status: "not ready" });
    // Not ready is not dead: liveness holds.
    expect((await get(probes.port, "/healthz")).status).toBe(200);
  });

  it("answers at once while the main thread is busy, and 503 when it stays stuck", async () => {
    const readiness = new Readiness(async () => true, 20);
    stops.push(() => readiness.stop());
    const limits = { readyStaleMs: 400, aliveStaleMs: 800, beatMs: 20 };
    const probes = await startProbeServer({
      host: "127.0.0.1",
      port: 0,
      readiness,
      limits,
      onError,
    });
    stops.push(() => probes.close());
    await until(async () => (await get(probes.port, "/readyz")).status === 200);

    // The main thread blocks; a child process asks the probes meanwhile (this thread cannot: it
    // is the one blocked), until both say 503, and writes what it saw to a file, whose existence
    // ends the block (checked synchronously, without the event loop).
    const dir = mkdtempSync(path.join(tmpdir(), "pies-probe-"));
    stops.push(() => rmSync(dir, { recursive: true, force: true }));
    const seen = path.join(dir, "seen.json");
    const asker = spawn(
      process.execPath,
      [
        "-e",
        `(async () => {
           const out = {};
           for (const path of ["/readyz", "/healthz"]) {
             for (let i = 0; i < 1200 && out[path] === undefined; i++) {
               const res = await fetch("http://127.0.0.1:${probes.port}" + path);
               if (res.status === 503) out[path] = await res.json();
               else await new Promise((r) => setTimeout(r, 25));
             }
           }
           require("node:fs").writeFileSync(${JSON.stringify(seen)}, JSON.stringify(out));
         })();`,
      ],
      { stdio: "ignore" },
    );
    const exited = new Promise((resolve) => asker.once("exit", resolve));
    const end = Date.now() + 60_000;
    while (!existsSync(seen) && Date.now() < end) {
      // busy: neither beats nor checks leave this thread
    }
    await exited;
    // Answered by the probe thread while this one was stuck: past both limits, 503.
    expect(JSON.parse(readFileSync(seen, "utf8"))).toEqual({
      "/readyz": { status: "not ready" },
      "/healthz": { status: "unresponsive" },
    });
    // Free again: ready again.
    await until(async () => (await get(probes.port, "/readyz")).status === 200);
  });

  it("is opened and closed with the gateway, its thread and port released", async () => {
    const port = await freePort();
    const app = createGateway({
      catalog: {} as GatewayDeps["catalog"],
      runs: {} as GatewayDeps["runs"],
      executor: {} as GatewayDeps["executor"],
      experiments: {} as GatewayDeps["experiments"],
      bus: new MemoryRunEventBus(),
      catalogEvents: new MemoryCatalogEvents(),
      logger: createLogger("test", "silent"),
      options: { ...gatewayOptions(loadGatewaySettings({})), probe: { host: "127.0.0.1", port } },
      tokenKey: new Uint8Array(32),
      isReady: async () => true,
    });
    await app.listen({ host: "127.0.0.1", port: 0 });
    try {
      await until(async () => (await get(port, "/readyz")).status === 200);
      expect((await get(port, "/healthz")).status).toBe(200);
    } finally {
      await app.close();
    }
    expect(await listening(port)).toBe(false);
  });

  it("fails the gateway's start when its port is taken", async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    stops.push(() => new Promise<void>((resolve) => taken.close(() => resolve())));
    const port = (taken.address() as net.AddressInfo).port;
    const readiness = new Readiness(async () => true);
    stops.push(() => readiness.stop());
    await expect(startProbeServer({ host: "127.0.0.1", port, readiness, onError })).rejects.toThrow(
      /EADDRINUSE/,
    );
  });
});

/** A port nothing listens on (taken and given back). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
