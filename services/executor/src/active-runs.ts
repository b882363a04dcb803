import type { Logger } from "@pies/common";

/**
 * The runs this executor is executing, blocking or streamed: their ids are sent as heartbeats (so
 * the runs sweeper can tell a dead executor's runs from slow ones), and their work is awaited on
 * shutdown.
 */
export class ActiveRuns {
  private readonly runs = new Map<string, Promise<unknown>>();

  /** Runs `work` for `runId`, tracked until it settles. */
  run<T>(runId: string, work: () => Promise<T>): Promise<T> {
    const task = work();
    this.runs.set(runId, task);
    const forget = () => {
      if (this.runs.get(runId) === task) this.runs.delete(runId);
    };
    task.then(forget, forget);
    return task;
  }

  ids(): string[] {
    return [...this.runs.keys()];
  }

  /** Resolves when every tracked run has settled, or after `timeoutMs`. */
  async settle(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.runs.values()]),
      new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs))),
    ]);
    clearTimeout(timer);
  }

  /** Sends the ids of the active runs every `intervalMs` (nothing when there are none). */
  startHeartbeat(
    send: (runIds: string[]) => Promise<unknown>,
    intervalMs: number,
    logger: Logger,
  ): { stop(): void } {
    const timer = setInterval(() => {
      const ids = this.ids();
      if (ids.length === 0) return;
      send(ids).catch((err: unknown) => logger.warn({ err }, "run heartbeat failed"));
    }, intervalMs);
    timer.unref();
    return { stop: () => clearInterval(timer) };
  }
}
