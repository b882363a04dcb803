// @ts-check
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { freePort, startProcess } from "@pies/testkit";

/** @import { ManagedProcess } from "@pies/testkit" */

/**
 * The embedded process, once it has printed its URL and key.
 * @typedef {object} Embedded
 * @property {string} url the origin (without /api/v1)
 * @property {string} apiKey the key it seeded
 * @property {string} dataDir its PIES_DATA_DIR
 * @property {ManagedProcess} process
 * @property {() => string} output
 * @property {() => boolean} kill SIGKILL at once
 * @property {(graceMs?: number) => Promise<number | NodeJS.Signals | null>} stop SIGTERM, SIGKILL
 *   after graceMs; then the data directory goes. Resolves with the exit code or signal.
 */

/**
 * pies' embedded mode (`node embedded/dist/main.js`, what `npm start` runs): gateway, catalog,
 * runs and executor in one process, on PGlite in a fresh temporary PIES_DATA_DIR and the
 * in-process event bus (no DATABASE_URL, no NATS_URL), on a free port, under `launcher` (e.g.
 * `taskset -c 1`) with `nodeArgs` (e.g. `--cpu-prof`). It prints its URL and the API key it seeded
 * once it listens; this resolves then, within `timeoutMs`, to
 * { url, apiKey, dataDir, process, output(), stop(), kill() }. url is the origin (without
 * /api/v1). stop() sends SIGTERM, SIGKILL after `graceMs`, then removes the data directory; kill()
 * sends SIGKILL at once (for exits that cannot wait; the directory stays). On failure the process
 * is stopped, the directory removed, and the error carries the process's output. `env` adds to its
 * environment (e.g. DATABASE_URL: a real PostgreSQL instead of PGlite).
 * @param {object} options
 * @param {string[]} [options.launcher]
 * @param {string[]} [options.nodeArgs]
 * @param {number} [options.timeoutMs]
 * @param {AbortSignal} [options.signal]
 * @param {Record<string, string>} [options.env]
 * @returns {Promise<Embedded>}
 */
export async function startEmbedded({
  launcher = [],
  nodeArgs = [],
  timeoutMs = 60_000,
  signal,
  env = {},
}) {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), "pies-bench-embedded-"));
  const port = await freePort();
  const managed = startProcess(
    "embedded",
    "embedded/dist/main.js",
    {
      HOST: "127.0.0.1",
      PORT: String(port),
      PIES_DATA_DIR: dataDir,
      // The fake provider listens on loopback (the embedded default too, set here all the same).
      PIES_ALLOWED_ENDPOINTS: "loopback",
      LOG_LEVEL: "warn",
      ...env,
    },
    nodeArgs,
    launcher,
  );
  /** @type {Promise<number | NodeJS.Signals | null> | undefined} */
  let stopping;
  const embedded = {
    /** Set once it has started. */
    url: "",
    /** Set once it has started. */
    apiKey: "",
    dataDir,
    process: managed,
    output: managed.output,
    kill: () => managed.child.kill("SIGKILL"),
    stop(graceMs = 10_000) {
      stopping ??= (async () => {
        const code = await managed.stop(graceMs);
        await rm(dataDir, { recursive: true, force: true });
        return code ?? managed.child.signalCode;
      })();
      return stopping;
    },
  };
  try {
    const stdout = /** @type {import("node:stream").Readable} */ (managed.child.stdout);
    /** @type {{ url: string, apiKey: string }} */
    const { url, apiKey } = await new Promise((resolve, reject) => {
      let text = "";
      /**
       * @template T
       * @param {(value: T) => void} fn
       * @param {T} value
       */
      const done = (fn, value) => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        stdout.off("data", onData);
        fn(value);
      };
      const timer = setTimeout(
        () => done(reject, new Error(`the embedded process did not start within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const onAbort = () =>
        done(reject, new Error(`stopped while the embedded process started: ${signal?.reason}`));
      signal?.addEventListener("abort", onAbort, { once: true });
      // main.js writes "pies is running at <url>/api/v1" and "API key: <key>" to stdout.
      /** @param {Buffer} chunk */
      const onData = (chunk) => {
        text += chunk.toString();
        const running = /pies is running at (\S+)/.exec(text)?.[1];
        const key = /API key: (sk-[A-Za-z0-9]+)/.exec(text)?.[1];
        if (running && key)
          done(resolve, { url: running.replace(/\/api\/v1\/?$/, ""), apiKey: key });
      };
      stdout.on("data", onData);
      void managed.exited.then((code) =>
        done(
          reject,
          new Error(`the embedded process exited (${code ?? managed.child.signalCode})`),
        ),
      );
    });
    embedded.url = url;
    embedded.apiKey = apiKey;
    return embedded;
  } catch (err) {
    await embedded.stop(2_000);
    throw new Error(`${/** @type {Error} */ (err).message}\n${managed.output()}`);
  }
}
