import type { RunEvent, RunEventBus, SubscribeOptions } from "./bus.js";

interface RunLog {
  events: RunEvent[];
  wake: Set<() => void>;
  dedup: Set<string>;
  /** What its events weigh (their data, and EVENT_OVERHEAD_BYTES each). */
  bytes: number;
  /** When its last event was published (or it was made), in ms. */
  touchedAt: number;
}

/** What an event costs besides its data: its object, its dedup id, its slot (an estimate). */
const EVENT_OVERHEAD_BYTES = 160;

export interface MemoryRunEventBusOptions {
  /** How long a run's events are kept after its last one (JetStream's max_age). */
  maxAgeMs?: number;
  /**
   * The most all runs' events may weigh: past it, the runs whose last event is oldest are
   * forgotten first (JetStream's max_bytes with discard old). A stream of a run forgotten so
   * closes with the run as the runs store has it, as one whose events aged out does.
   */
  maxBytes?: number;
}

/**
 * The embedded mode's stand-in for NATS JetStream: the same replay semantics, held in memory for
 * `maxAgeMs` after a run's last event, within `maxBytes` in all. The runs are kept in the order of
 * their last event (a Map, re-inserted at each), so what to forget is always at its front: no
 * timer per run, and memory that stays flat under any sustained load.
 */
export class MemoryRunEventBus implements RunEventBus {
  private readonly logs = new Map<string, RunLog>();
  private readonly maxAgeMs: number;
  private readonly maxBytes: number;
  private bytes = 0;
  /** Forgets aged runs when nothing is published (a publish does it otherwise). */
  private readonly sweeper: NodeJS.Timeout;

  constructor(options: MemoryRunEventBusOptions | number = {}) {
    const { maxAgeMs = 3_600_000, maxBytes = 64 * 2 ** 20 } =
      typeof options === "number" ? { maxAgeMs: options } : options;
    this.maxAgeMs = maxAgeMs;
    this.maxBytes = maxBytes;
    this.sweeper = setInterval(() => this.forget(), Math.min(60_000, maxAgeMs));
    this.sweeper.unref();
  }

  /** What all runs' events weigh now, and how many runs are kept (for tests and metrics). */
  get held(): { runs: number; bytes: number } {
    return { runs: this.logs.size, bytes: this.bytes };
  }

  private log(runId: string): RunLog {
    let log = this.logs.get(runId);
    if (!log) {
      log = { events: [], wake: new Set(), dedup: new Set(), bytes: 0, touchedAt: Date.now() };
      this.logs.set(runId, log);
    }
    return log;
  }

  /**
   * Forgets runs from the front (oldest last event) while they are older than maxAgeMs or all
   * weigh more than maxBytes. One with a reader waiting for its next event is moved to the back
   * instead (its stream is open: a quiet run still running), once each.
   */
  private forget() {
    const agedBefore = Date.now() - this.maxAgeMs;
    let passes = this.logs.size;
    for (const [runId, log] of this.logs) {
      if (passes-- <= 0) break;
      if (!(log.touchedAt < agedBefore || this.bytes > this.maxBytes)) break;
      this.logs.delete(runId);
      if (log.wake.size > 0 && log.touchedAt >= agedBefore) {
        this.logs.set(runId, log);
        continue;
      }
      this.bytes -= log.bytes;
    }
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
    const weight = data.length + EVENT_OVERHEAD_BYTES;
    log.bytes += weight;
    this.bytes += weight;
    log.touchedAt = Date.now();
    // To the back: the runs stay in the order of their last event.
    this.logs.delete(runId);
    this.logs.set(runId, log);
    for (const wake of log.wake) wake();
    this.forget();
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

  async stored(runId: string, afterSeq = 0) {
    const events = this.logs.get(runId)?.events ?? [];
    return events.filter((e) => e.kind === "end" || e.seq > afterSeq);
  }

  async hasEnd(runId: string) {
    return this.logs.get(runId)?.events.some((e) => e.kind === "end") ?? false;
  }

  async ready() {
    return true;
  }

  async close() {
    clearInterval(this.sweeper);
    for (const log of this.logs.values()) for (const wake of log.wake) wake();
  }
}
