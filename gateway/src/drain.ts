import type { FastifyInstance } from "fastify";

const trackers = new WeakMap<FastifyInstance, InFlightRequests>();

/** Counts requests whose response has not closed yet (an SSE stream counts until it ends). */
class InFlightRequests {
  private count = 0;
  private waiters: (() => void)[] = [];

  start(onClose: (listener: () => void) => void) {
    this.count++;
    onClose(() => {
      if (--this.count === 0) for (const wake of this.waiters.splice(0)) wake();
    });
  }

  /** Resolves when nothing is in flight, or after `timeoutMs`. */
  idle(timeoutMs: number): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

export function trackInFlight(app: FastifyInstance) {
  const tracker = new InFlightRequests();
  trackers.set(app, tracker);
  app.addHook("onRequest", (_request, reply, done) => {
    tracker.start((listener) => reply.raw.once("close", listener));
    done();
  });
}

/**
 * Stops accepting, lets the requests and streams in flight finish for up to `graceMs`, then closes
 * every connection left, idle keep-alive and half-open ones included (a client that aborted
 * mid-request must not hold the shutdown up).
 */
export async function closeGracefully(app: FastifyInstance, graceMs: number): Promise<void> {
  const closing = app.close();
  await trackers.get(app)?.idle(graceMs);
  app.server.closeAllConnections();
  await closing;
}
