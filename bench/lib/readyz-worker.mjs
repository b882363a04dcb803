// @ts-check
// The soak's readiness prober, in a worker thread of its own: GET <url> every `everyMs`, one at a
// time, as a Kubernetes probe does; each probe's start (Date.now()), duration and outcome is posted
// to the parent. A thread of its own so that the load's clients, busy on the main event loop, do not
// delay the probes and count as the gateway's latency.
import { performance } from "node:perf_hooks";
import { parentPort, workerData } from "node:worker_threads";

/** @import { Probe } from "./soak-sampler.mjs" */

if (!parentPort)
  throw new Error("readyz-worker.mjs runs as a worker thread (see soak-sampler.mjs)");
const parent = parentPort;
/** @type {{ url: string, everyMs: number, timeoutMs: number }} */
const { url, everyMs, timeoutMs } = workerData;
let stopped = false;
parent.on("message", (message) => {
  if (message === "stop") stopped = true;
});
while (!stopped) {
  const at = Date.now();
  const started = performance.now();
  // What answered: the HTTP status, or why there was none.
  let status;
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    await response.arrayBuffer();
    status = String(response.status);
  } catch (err) {
    status =
      /** @type {Error | undefined} */ (err)?.name === "TimeoutError" ? "timeout" : "no answer";
  }
  /** @type {Probe} */
  const probe = { at, ms: performance.now() - started, ok: status === "200", status };
  parent.postMessage(probe);
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, everyMs - (Date.now() - at))));
}
parent.close();
