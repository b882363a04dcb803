import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import type { RenderOutcome, SandboxLimits } from "./jst-engine.js";
import type { RenderJob } from "./jst-worker.js";

export type { SandboxLimits };

export class TemplateError extends Error {}

// Resolved through the package, so that the built worker is found from src (tests) and dist alike.
const WORKER = createRequire(import.meta.url).resolve("@pies/executor/jst-worker");

interface Pending {
  job: RenderJob;
  resolve: (value: string) => void;
  reject: (err: Error) => void;
}

interface Slot {
  worker: Worker;
  ready: Promise<void>;
  busy?: Pending;
  timer?: NodeJS.Timeout;
}

/**
 * Renders `jst` templates in QuickJS compiled to WebAssembly, in a pool of worker threads: a
 * template sees only its input data and the JavaScript built-ins (no `process`, `require`, file
 * system, network or host globals), within a memory limit, and it never blocks the executor. A
 * template that outlives its time limit (QuickJS polls its interrupt only now and then, and never
 * inside a built-in) has its worker terminated and replaced.
 */
export class JstSandbox {
  private readonly slots: Slot[] = [];
  private readonly queue: Pending[] = [];
  private nextId = 0;
  private closed = false;

  private constructor(
    private readonly limits: SandboxLimits,
    size: number,
  ) {
    for (let i = 0; i < size; i++) this.slots.push(this.spawn());
  }

  static async create(limits: SandboxLimits, workers = 2): Promise<JstSandbox> {
    const sandbox = new JstSandbox(limits, Math.max(1, workers));
    await Promise.all(sandbox.slots.map((s) => s.ready));
    return sandbox;
  }

  render(content: string, data: Record<string, unknown>): Promise<string> {
    if (this.closed) return Promise.reject(new TemplateError("the template sandbox is closed"));
    return new Promise((resolve, reject) => {
      this.queue.push({
        job: { id: ++this.nextId, content, data, limits: this.limits },
        resolve,
        reject,
      });
      this.dispatch();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const pending of this.queue.splice(0))
      pending.reject(new TemplateError("the template sandbox is closed"));
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
  }

  private spawn(): Slot {
    const worker = new Worker(WORKER);
    worker.unref();
    const slot: Slot = {
      worker,
      ready: new Promise((resolve) => worker.once("message", () => resolve())),
    };
    worker.on("message", (message: RenderOutcome & { id?: number }) => {
      const pending = slot.busy;
      if (message.id === undefined || !pending || pending.job.id !== message.id) return;
      clearTimeout(slot.timer);
      slot.busy = undefined;
      if (message.ok) pending.resolve(message.value);
      else pending.reject(new TemplateError(message.message));
      this.dispatch();
    });
    worker.on("error", () => this.replace(slot, "the template sandbox failed"));
    worker.on("exit", () => this.replace(slot, "template exhausted the sandbox"));
    return slot;
  }

  /** Fails the slot's job (if any) and puts a fresh worker in its place. */
  private replace(slot: Slot, reason: string) {
    const index = this.slots.indexOf(slot);
    if (index < 0) return;
    clearTimeout(slot.timer);
    slot.busy?.reject(new TemplateError(reason));
    slot.busy = undefined;
    void slot.worker.terminate();
    if (this.closed) return;
    const fresh = this.spawn();
    this.slots[index] = fresh;
    void fresh.ready.then(() => this.dispatch());
  }

  private dispatch() {
    for (const slot of this.slots) {
      if (slot.busy || this.queue.length === 0) continue;
      const pending = this.queue.shift()!;
      slot.busy = pending;
      void slot.ready.then(() => {
        if (slot.busy !== pending) return;
        // QuickJS's own interrupt normally ends the render at the limit; this is the backstop.
        const hardDeadline = this.limits.timeoutMs * 2 + 50;
        slot.timer = setTimeout(() => {
          if (slot.busy !== pending) return;
          slot.busy = undefined;
          pending.reject(
            new TemplateError(`template did not finish within ${this.limits.timeoutMs} ms`),
          );
          this.replace(slot, "");
        }, hardDeadline);
        slot.worker.postMessage(pending.job);
      });
    }
  }
}
