import { parentPort } from "node:worker_threads";
import { getQuickJS } from "quickjs-emscripten";
import { renderInQuickJS, SandboxCorrupted, type SandboxLimits } from "./jst-engine.js";

/** A render request from JstSandbox. */
export interface RenderJob {
  id: number;
  content: string;
  data: unknown;
  limits: SandboxLimits;
}

// Loaded only as JstSandbox's worker thread, where the port to the sandbox always exists.
if (!parentPort) throw new Error("jst-worker runs as a worker thread of JstSandbox");
const port = parentPort;

const quickjs = await getQuickJS();
// One throwaway render before taking work: V8 compiles QuickJS's WebAssembly lazily, so a fresh
// worker's first render would otherwise spend much of a template's time limit compiling.
renderInQuickJS(
  quickjs,
  "return `${x}`",
  { x: "warm" },
  { timeoutMs: 10_000, memoryBytes: 1 << 24 },
);
port.on("message", (job: RenderJob) => {
  try {
    port.postMessage({
      id: job.id,
      ...renderInQuickJS(quickjs, job.content, job.data, job.limits),
    });
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
