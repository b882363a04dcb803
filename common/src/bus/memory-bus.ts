import type { RunEvent, RunEventBus, SubscribeOptions } from "./bus.js";

interface RunLog {
  events: RunEvent[];
  wake: Set<() => void>;
  dedup: Set<string>;
}

/**
 * The embedded mode's stand-in for NATS JetStream: the same replay semantics, held in memory for
 * `maxAgeMs` after a run's last event.
 */
export class MemoryRunEventBus implements RunEventBus {
  private readonly logs = new Map<string, RunLog>();
  private readonly expiry = new Map<string, NodeJS.Timeout>();

  constructor(private readonly maxAgeMs = 3_600_000) {}

  private log(runId: string): RunLog {
    let log = this.logs.get(runId);
    if (!log) {
      log = { events: [], wake: new Set(), dedup: new Set() };
      this.logs.set(runId, log);
      this.touch(runId);
    }
    return log;
  }

  /** (Re)starts the clock after which a run's events are forgotten. */
  private touch(runId: string) {
    clearTimeout(this.expiry.get(runId));
    const timer = setTimeout(() => {
      this.logs.delete(runId);
      this.expiry.delete(runId);
    }, this.maxAgeMs);
    timer.unref();
    this.expiry.set(runId, timer);
  }

  async publish(
    runId: string,
    kind: RunEvent["kind"],
    data: Uint8Array,
    seq: number,
    // A run's events are in its own list, in order: a replay needs no links between them.
    _previous?: number,
  ): Promise<number | undefined> {
    const log = this.log(runId);
    const dedupId = kind === "end" ? "end" : String(seq);
    if (log.dedup.has(dedupId)) return undefined;
    log.dedup.add(dedupId);
    log.events.push({ seq, kind, data });
    for (const wake of log.wake) wake();
    this.touch(runId);
    return undefined;
  }

  async *subscribe(runId: string, { afterSeq = 0, signal }: SubscribeOptions) {
    const log = this.log(runId);
    let next = log.events.findIndex((e) => e.seq > afterSeq);
    if (next < 0) next = log.events.length;
    while (!signal.aborted) {
      while (next < log.events.length) {
        const event = log.events[next++];
        if (event) yield event;
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          log.wake.delete(wake);
          signal.removeEventListener("abort", wake);
          resolve();
        };
        log.wake.add(wake);
        signal.addEventListener("abort", wake, { once: true });
      });
    }
  }

  async hasEnd(runId: string) {
    return this.logs.get(runId)?.events.some((e) => e.kind === "end") ?? false;
  }

  async ready() {
    return true;
  }

  async close() {
    for (const timer of this.expiry.values()) clearTimeout(timer);
    for (const log of this.logs.values()) for (const wake of log.wake) wake();
  }
}
