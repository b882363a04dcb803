import { parentPort, workerData } from "node:worker_threads";
import { getQuickJS } from "quickjs-emscripten";
import {
  disposeSandbox,
  prepareSandbox,
  renderInQuickJS,
  SandboxCorrupted,
  type PreparedSandbox,
  type SandboxLimits,
} from "./jst-engine.js";

/** A render request from JstSandbox (the limits are the pool's, given once as workerData). */
export interface RenderJob {
  id: number;
  content: string;
  data: unknown;
}

// Loaded only as JstSandbox's worker thread, where the port to the sandbox always exists.
if (!parentPort) throw new Error("jst-worker runs as a worker thread of JstSandbox");
const port = parentPort;
const limits = workerData as SandboxLimits;

const quickjs = await getQuickJS();
// One throwaway render before taking work: V8 compiles QuickJS's WebAssembly lazily, so a fresh
// worker's first render would otherwise spend much of a template's time limit compiling.
const warm = prepareSandbox(quickjs, { timeoutMs: 10_000, memoryBytes: 1 << 24 });
renderInQuickJS(warm, "return `${x}`", { x: "warm" });
disposeSandbox(warm);
// The next render's runtime and context, set up while the worker waits for it.
let next: PreparedSandbox | undefined = prepareSandbox(quickjs, limits);

port.on("message", (job: RenderJob) => {
  try {
    const sandbox = next ?? prepareSandbox(quickjs, limits);
    next = undefined;
    const outcome = renderInQuickJS(sandbox, job.content, job.data);
    // A good render's runtime is freed after the answer, off the render's path. A failed one's
    // before: if it is corrupt (a stack overflow, say), this render fails, not the next one.
    if (!outcome.ok) disposeSandbox(sandbox);
    port.postMessage({ id: job.id, ...outcome });
    if (outcome.ok) disposeSandbox(sandbox);
    next = prepareSandbox(quickjs, limits);
  } catch (err) {
    const message =
      err instanceof SandboxCorrupted
        ? "template exhausted the sandbox"
        : "template could not be run";
    port.postMessage({ id: job.id, ok: false, message });
    // The WebAssembly instance is suspect: this worker goes, the pool starts a fresh one.
    process.exit(1);
  }
});
port.postMessage({ ready: true });
