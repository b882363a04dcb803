import { once } from "node:events";
import { Worker } from "node:worker_threads";
import type { Readiness } from "./readiness.js";

/**
 * Kubernetes' probes (`GET /readyz`, `GET /healthz`) answered by a thread of their own on a port
 * of their own (PIES_PROBE_PORT), so that a gateway busy with its load answers them at once: on
 * the API's port a probe waits its turn behind every request the event loop has queued, and at
 * full load on a small node that wait alone came near a probe's time limit. A busy gateway is
 * still ready; one whose main thread stops is not: the main thread tells the probe thread every
 * readiness check's outcome and beats once a second, and a probe answers 503 when either is older
 * than its limit. See docs/decisions/0053-probes-on-a-thread-of-their-own.md.
 */
export interface ProbeServer {
  /** The port the probes are served on (the one asked for, or the one given for 0). */
  port: number;
  close(): Promise<void>;
}

export interface ProbeLimits {
  /** Age beyond which the last readiness check (or beat) no longer makes /readyz 200. */
  readyStaleMs: number;
  /** Age beyond which the main thread's last beat makes /healthz 503 (a hung event loop). */
  aliveStaleMs: number;
  /** How often the main thread beats. */
  beatMs: number;
}

export const PROBE_LIMITS: ProbeLimits = {
  readyStaleMs: 5_000,
  aliveStaleMs: 10_000,
  beatMs: 1_000,
};

export async function startProbeServer(options: {
  host: string;
  port: number;
  readiness: Readiness;
  /** Told when the probe thread fails after it started (its probes then go unanswered). */
  onError: (err: unknown) => void;
  limits?: ProbeLimits;
}): Promise<ProbeServer> {
  const limits = options.limits ?? PROBE_LIMITS;
  const worker = new Worker(`(${probeThread.toString()})()`, {
    eval: true,
    workerData: { host: options.host, port: options.port, limits },
  });
  // The gateway's own server keeps the process alive; this thread never does.
  worker.unref();
  let port: number;
  try {
    // Its first message: the port it listens on. An error (the port is taken) rejects.
    [port] = (await once(worker, "message")) as [number];
  } catch (err) {
    await worker.terminate();
    throw err;
  }
  // A thread that fails later (its server's error, say) must not end the process: the kubelet
  // sees its probes unanswered and restarts the pod, and the log says why.
  worker.on("error", options.onError);
  const beat = setInterval(() => worker.postMessage({}), limits.beatMs).unref();
  const stopListening = options.readiness.onCheck((ready) => worker.postMessage({ ready }));
  options.readiness.start();
  return {
    port,
    async close() {
      clearInterval(beat);
      stopListening();
      await worker.terminate();
    },
  };
}

/**
 * The probe thread, run from this function's source (so that it needs no file of its own, in the
 * sources as in the build): node builtins only, taken with process.getBuiltinModule.
 */
function probeThread() {
  const { createServer } = process.getBuiltinModule("node:http");
  const { parentPort: parent, workerData } = process.getBuiltinModule("node:worker_threads");
  if (!parent) throw new Error("the probe server runs in a worker thread");
  const { host, port, limits } = workerData as { host: string; port: number; limits: ProbeLimits };
  let ready = false;
  let checkedAt = 0;
  let beatAt = Date.now();
  parent.on("message", (message: { ready?: boolean }) => {
    beatAt = Date.now();
    if (message.ready !== undefined) {
      ready = message.ready;
      checkedAt = beatAt;
    }
  });
  const server = createServer((req, res) => {
    const now = Date.now();
    const path = (req.url ?? "").split("?")[0];
    let status = 404;
    let body: Record<string, string> = { error: "not_found", message: `no route ${path}` };
    if (path === "/healthz") {
      const alive = now - beatAt <= limits.aliveStaleMs;
      status = alive ? 200 : 503;
      body = { status: alive ? "ok" : "unresponsive" };
    } else if (path === "/readyz") {
      const fresh = now - beatAt <= limits.readyStaleMs && now - checkedAt <= limits.readyStaleMs;
      status = ready && fresh ? 200 : 503;
      body = { status: status === 200 ? "ready" : "not ready" };
    }
    res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
    res.end(JSON.stringify(body));
  });
  server.listen(port, host, () => {
    const address = server.address();
    parent.postMessage(typeof address === "object" && address ? address.port : port);
  });
}
