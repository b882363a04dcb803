// @ts-check
import { Worker } from "node:worker_threads";

/** @import { FakeOpenAIOptions } from "@pies/testkit" */

/**
 * startFakeInWorker: startFakeOpenAI in a worker thread. Resolves to { url, port, close(),
 * loopDelay() }; close() closes the server (destroying keep-alive sockets) and ends the worker,
 * terminating it if it does not answer; loopDelay() answers the worker's event-loop delay (p99
 * and max, ms) since its last call.
 * @param {Omit<FakeOpenAIOptions, "respond">} options without `respond`: a function cannot be
 *   handed to a worker thread
 * @returns {Promise<{ url: string, port: number, close(): Promise<void>,
 *   loopDelay(): Promise<{ p99Ms: number, maxMs: number }> }>}
 */
export async function startFakeInWorker(options) {
  const worker = new Worker(new URL("./fake-worker.mjs", import.meta.url), { workerData: options });
  /** @type {{ url: string, port: number }} */
  const started = await new Promise((resolve, reject) => {
    worker.once("message", resolve);
    worker.once("error", reject);
    worker.once("exit", (code) =>
      reject(new Error(`fake upstream worker exited with code ${code}`)),
    );
  });
  /** @type {Promise<void> | undefined} */
  let closing;
  return {
    url: started.url,
    port: started.port,
    loopDelay() {
      return new Promise((resolve) => {
        /** @param {{ loopDelay?: { p99Ms: number, maxMs: number } }} message */
        const onMessage = (message) => {
          if (!message.loopDelay) return;
          worker.off("message", onMessage);
          resolve(message.loopDelay);
        };
        worker.on("message", onMessage);
        worker.postMessage("loop-delay");
      });
    },
    close() {
      closing ??= new Promise((resolve) => {
        const timer = setTimeout(() => worker.terminate().then(() => resolve()), 5_000);
        worker.once("exit", () => {
          clearTimeout(timer);
          resolve();
        });
        worker.postMessage("close");
      });
      return closing;
    },
  };
}
