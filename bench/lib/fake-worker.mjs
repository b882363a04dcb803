// @ts-check
// Runs the fake OpenAI upstream on its own event loop (a worker thread), so the load generator's
// event loop in the main thread does not delay the upstream's answers, and the other way round.
import { EventEmitter } from "node:events";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { parentPort, workerData } from "node:worker_threads";
import { startFakeOpenAI } from "@pies/testkit";

if (!parentPort) throw new Error("fake-worker.mjs runs as a worker thread (see fake.mjs)");
const parent = parentPort;

// The fake adds (and later removes) one abort listener per pending delay on a shared shutdown
// signal, so above 10 concurrent requests node prints a MaxListenersExceededWarning that is not a
// leak. This setting is per worker, so it only affects the fake.
EventEmitter.defaultMaxListeners = 0;
const fake = await startFakeOpenAI(workerData);
// This thread's event-loop delay since the last "loop-delay" message: how late the fake may have
// answered for reasons of its own (the machine, its CPU), apart from the latency it was told.
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();
parent.on("message", async (message) => {
  if (message === "loop-delay") {
    parent.postMessage({
      loopDelay: { p99Ms: loopDelay.percentile(99) / 1e6, maxMs: loopDelay.max / 1e6 },
    });
    loopDelay.reset();
  }
  if (message === "close") {
    await fake.close();
    parent.postMessage({ closed: true });
    parent.close();
  }
});
parent.postMessage({ url: fake.url, port: fake.port });
