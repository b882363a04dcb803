// @ts-check
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";

/**
 * Portkey's open-source AI gateway, the peer pies is measured against, run by the shared script
 * `../shared/peers/portkey.sh PORT` (next to the repository). See /work/shared/peers/README.md.
 */

/**
 * The script's path relative to the repository root, when it exists there; otherwise undefined.
 * @param {string} repoRoot
 */
export function portkeyScript(repoRoot) {
  const script = path.resolve(repoRoot, "../shared/peers/portkey.sh");
  return existsSync(script) ? script : undefined;
}

/**
 * Starts Portkey on 127.0.0.1:`port` (under `launcher`, e.g. `taskset -c 1`) in a process group of
 * its own, and resolves once it answers HTTP, within `timeoutMs` (its first start installs it, which
 * takes a while). Resolves to { url, child, output(), stop(), kill() }: stop() sends SIGTERM to the
 * group and SIGKILL after `graceMs`; kill() sends SIGKILL to the group at once (for exit paths that
 * cannot wait). On failure the group is killed and the error carries Portkey's last output lines.
 * @param {object} options
 * @param {string} options.script
 * @param {number} options.port
 * @param {string[]} [options.launcher]
 * @param {number} options.timeoutMs
 * @param {AbortSignal} [options.signal]
 */
export async function startPortkey({ script, port, launcher = [], timeoutMs, signal }) {
  const argv = [...launcher, "bash", script, String(port)];
  const child = spawn(/** @type {string} */ (argv[0]), argv.slice(1), {
    detached: true, // its own process group: the script, npm on first use, node
    stdio: ["ignore", "pipe", "pipe"],
  });
  /** @type {string[]} */
  const lines = [];
  /** @param {Buffer} chunk */
  const keep = (chunk) => {
    lines.push(...chunk.toString().split("\n").filter(Boolean));
    if (lines.length > 200) lines.splice(0, lines.length - 200);
  };
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  /** @type {number | NodeJS.Signals | undefined} */
  let exitCode;
  /** @type {Promise<number | NodeJS.Signals>} */
  const exited = new Promise((resolve) =>
    child.once("exit", (code, sig) => {
      // One of the two is set when a process exits.
      exitCode = /** @type {number | NodeJS.Signals} */ (code ?? sig);
      resolve(exitCode);
    }),
  );
  child.once("error", (err) => keep(Buffer.from(`spawn failed: ${err.message}`)));
  /** @param {NodeJS.Signals} sig */
  const group = (sig) => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, sig);
    } catch {
      // the group is gone already
    }
  };
  const output = () => lines.map((l) => `[portkey] ${l}`).join("\n");
  const url = `http://127.0.0.1:${port}`;
  /** @type {Promise<number | NodeJS.Signals | undefined> | undefined} */
  let stopping;
  const peer = {
    url,
    child,
    output,
    kill: () => group("SIGKILL"),
    stop(graceMs = 5_000) {
      stopping ??= (async () => {
        group("SIGTERM");
        const timer = setTimeout(() => group("SIGKILL"), graceMs);
        await exited;
        clearTimeout(timer);
        // Anything it left in its group (a child npm or node) goes too.
        group("SIGKILL");
        return exitCode;
      })();
      return stopping;
    },
  };
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      if (exitCode !== undefined)
        throw new Error(`portkey.sh exited (${exitCode}) before answering`);
      if (signal?.aborted) throw new Error(`stopped while waiting for Portkey: ${signal.reason}`);
      if (Date.now() > deadline) throw new Error(`Portkey did not answer within ${timeoutMs} ms`);
      const answered = await fetch(`${url}/`, { signal: AbortSignal.timeout(1_000) }).then(
        () => true,
        () => false,
      );
      if (answered) return peer;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  } catch (err) {
    await peer.stop(1_000);
    throw new Error(`${/** @type {Error} */ (err).message}\n${output()}`);
  }
}
