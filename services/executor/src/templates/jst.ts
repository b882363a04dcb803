import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import { overProjectLimit } from "../project-limits.js";
import { FairQueue } from "./fair-queue.js";
import { renderFast } from "./jst-fast.js";
import type { RenderOutcome, SandboxLimits } from "./jst-engine.js";
import type { RenderJob } from "./jst-worker.js";

export type { SandboxLimits };

export class TemplateError extends Error {}

// Resolved through the package, so that the built worker is found from src (tests) and dist alike.
const WORKER = createRequire(import.meta.url).resolve("@pies/executor/jst-worker");

interface Pending {
  projectId: string;
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
 * inside a built-in) has its worker terminated and replaced. A template that is only a template
 * literal over data keys (`` return `Summarise ${text}` ``) needs none of that: it renders on the
 * calling thread (jst-fast.ts), with the same output.
 *
 * The workers are shared fairly between projects: renders wait in a queue per project, the project
 * with the fewest renders running goes first (ties: the one served least recently), no project
 * runs on every worker at once (one stays free for the others when there are two or more), and a
 * project that holds `maxPerProject` renders, running and queued, gets RESOURCE_EXHAUSTED.
 */
export class JstSandbox {
  private readonly slots: Slot[] = [];
  private readonly queue: FairQueue<Pending>;
  private nextId = 0;
  private closed = false;

  private constructor(
    private readonly limits: SandboxLimits,
    size: number,
    private readonly maxPerProject: number,
  ) {
    this.queue = new FairQueue({
      maxHeld: maxPerProject > 0 ? maxPerProject : Infinity,
      maxRunning: Math.max(1, size - 1),
    });
    for (let i = 0; i < size; i++) this.slots.push(this.spawn());
  }

  /**
   * A pool of `workers` threads; `maxPerProject` renders (running and queued) at most per project,
   * 0 for no limit.
   */
  static async create(limits: SandboxLimits, workers = 2, maxPerProject = 0): Promise<JstSandbox> {
    const sandbox = new JstSandbox(limits, Math.max(1, workers), maxPerProject);
    await Promise.all(sandbox.slots.map((s) => s.ready));
    return sandbox;
  }

  /**
   * Renders `content` with `data` as its variables. A template literal over plain variables renders
   * at once on this thread, with the sandbox's output (see renderFast); any other template renders
   * in a worker, counted against `projectId`'s share.
   */
  render(content: string, data: Record<string, unknown>, projectId = ""): Promise<string> {
    if (this.closed) return Promise.reject(new TemplateError("the template sandbox is closed"));
    const fast = renderFast(content, data, this.limits);
    if (fast !== undefined) return Promise.resolve(fast);
    return this.renderInSandbox(content, data, projectId);
  }

  /** Renders `content` in QuickJS, in a worker, whatever it is (render takes the fast path). */
  renderInSandbox(content: string, data: Record<string, unknown>, projectId = ""): Promise<string> {
    if (this.closed) return Promise.reject(new TemplateError("the template sandbox is closed"));
    return new Promise((resolve, reject) => {
      const pending: Pending = {
        projectId,
        job: { id: ++this.nextId, content, data },
        resolve,
        reject,
      };
      if (!this.queue.offer(projectId, pending)) {
        reject(
          overProjectLimit(
            `project ${projectId} has ${this.maxPerProject} template renders running or queued, its limit; try again shortly`,
          ),
        );
        return;
      }
      this.dispatch();
    });
  }

  /** Renders `projectId` holds now, running and queued. */
  held(projectId: string): number {
    return this.queue.held(projectId);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const pending of this.queue.drain())
      pending.reject(new TemplateError("the template sandbox is closed"));
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
  }

  private spawn(): Slot {
    const worker = new Worker(WORKER, { workerData: this.limits });
    worker.unref();
    const slot: Slot = {
      worker,
      ready: new Promise((resolve) => worker.once("message", () => resolve())),
    };
    worker.on("message", (message: RenderOutcome & { id?: number }) => {
      if (message.id === undefined || slot.busy?.job.id !== message.id) return;
      // Busy with this job (checked above), so there is a pending render to settle.
      const pending = this.release(slot);
      if (!pending) return;
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
    this.release(slot)?.reject(new TemplateError(reason));
    void slot.worker.terminate();
    if (this.closed) return;
    this.slots[index] = this.spawn();
    // The fresh worker takes the next render once it is ready; a project's share freed here may
    // also let one of its queued renders go to a worker that is idle.
    this.dispatch();
  }

  /** Frees the slot's render (however it ended) and gives its project's share back. */
  private release(slot: Slot): Pending | undefined {
    const pending = slot.busy;
    clearTimeout(slot.timer);
    slot.busy = undefined;
    if (pending) this.queue.done(pending.projectId);
    return pending;
  }

  private dispatch() {
    for (const slot of this.slots) {
      if (slot.busy) continue;
      const next = this.queue.take();
      if (!next) return;
      const pending = next.item;
      slot.busy = pending;
      void slot.ready.then(() => {
        if (slot.busy !== pending) return;
        // QuickJS's own interrupt normally ends the render at the limit; this is the backstop.
        const hardDeadline = this.limits.timeoutMs * 2 + 50;
        slot.timer = setTimeout(() => {
          if (slot.busy !== pending) return;
          this.release(slot);
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
