/**
 * The gateway's readiness as `GET /readyz` answers it: checked in the background once a second
 * (every dependency, together), answered from the last check. A probe asked the dependencies
 * itself before: under load it waited for a round trip to each service and their database and
 * NATS checks, behind everything else their event loops had queued (0.2–1 s at 64-way load on
 * this machine, over a Kubernetes probe's 1 s default at times), and each probe of each replica
 * added that work to the load. See docs/decisions/0003-readiness-in-the-background.md.
 *
 * A check older than STALE_MS (the checks stopped, or one hangs) is not trusted: the probe then
 * waits for one (each dependency's check has its own time limit).
 */
export class Readiness {
  private last: { ready: boolean; at: number } | undefined;
  private inFlight: Promise<boolean> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Told every check's outcome (the probe thread: probe-server.ts). */
  private readonly listeners = new Set<(ready: boolean) => void>();

  constructor(
    private readonly check: () => Promise<boolean>,
    private readonly intervalMs = 1000,
  ) {}

  /** Whether every dependency answered at the last check (made now when none is fresh). */
  async ready(): Promise<boolean> {
    // The checks run once something asks: no background work for a gateway nobody probes.
    this.start();
    const last = this.last;
    if (last && performance.now() - last.at <= STALE_MS) return last.ready;
    return this.refresh();
  }

  /** Checks now and every interval from now on (once started, later calls change nothing). */
  start() {
    if (this.timer) return;
    this.timer = setInterval(() => void this.refresh(), this.intervalMs).unref();
    void this.refresh();
  }

  /** Calls `listener` with the outcome of every check from now on; the function returned stops. */
  onCheck(listener: (ready: boolean) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** One check at a time; its outcome is what later probes answer. */
  private refresh(): Promise<boolean> {
    this.inFlight ??= this.check()
      .catch(() => false)
      .then((ready) => {
        this.last = { ready, at: performance.now() };
        // A listener that throws must not turn the check into a rejection nobody awaits.
        for (const listener of this.listeners) {
          try {
            listener(ready);
          } catch {
            // the listener's own fault; the next check tells it again
          }
        }
        return ready;
      })
      .finally(() => {
        this.inFlight = undefined;
      });
    return this.inFlight;
  }

  /** Stops the checks (the gateway closes). */
  stop() {
    clearInterval(this.timer);
  }
}

/** How old the last check may be for a probe to be answered from it. */
const STALE_MS = 3000;
