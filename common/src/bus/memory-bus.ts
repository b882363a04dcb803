import type { RunEvent, RunEventBus, SubscribeOptions } from "./bus.js";

const KINDS: readonly RunEvent["kind"][] = ["chunk", "repair", "end"];
const END = 2;

/**
 * One run's events, in few objects whatever their number: their data end to end in one buffer,
 * and per event three numbers (its seq, its kind, where its data ends) in one array. The bus
 * keeps thousands of runs for minutes, so every object per event would be copied by the young
 * generation's collections and then promoted (decision 0056).
 */
class RunLog {
  data: Uint8Array = EMPTY;
  used = 0;
  /** seq, kind (index in KINDS), end of its data: three numbers per event. */
  readonly index: number[] = [];
  /** The largest chunk or repair number stored (a publish of a lower one may be a retry). */
  lastSeq = 0;
  ended = false;
  /** Readers waiting for its next event. */
  wake: Set<() => void> | undefined;
  /** What it is counted to weigh against the bus's maxBytes. */
  bytes = RUN_OVERHEAD_BYTES;
  constructor(
    /** When its last event was published (or it was made), in ms. */
    public touchedAt: number,
  ) {}

  get length(): number {
    return this.index.length / 3;
  }

  /** Number `at` of the index (0 past its end: never asked for). */
  private at(at: number): number {
    return this.index[at] ?? 0;
  }

  seq(i: number): number {
    return this.at(3 * i);
  }

  event(i: number): RunEvent {
    return {
      seq: this.at(3 * i),
      kind: KINDS[this.at(3 * i + 1)] ?? "chunk",
      data: this.data.subarray(i === 0 ? 0 : this.at(3 * i - 1), this.at(3 * i + 2)),
    };
  }

  has(seq: number, kind: number): boolean {
    if (kind === END) return this.ended;
    if (seq > this.lastSeq) return false;
    for (let i = 0; i < this.index.length; i += 3) {
      if (this.index[i] === seq && this.index[i + 1] !== END) return true;
    }
    return false;
  }

  /** Appends the event; returns what that changed in the log's weight (an end may lower it). */
  append(seq: number, kind: number, data: Uint8Array): number {
    const before = this.data.byteLength + this.index.length * 8;
    const need = this.used + data.length;
    // Chunks double the buffer, as an array would; an end comes last, and the run is kept for
    // minutes after it: its buffer is made to measure then.
    if (need > this.data.byteLength || (kind === END && need < this.data.byteLength)) {
      const size = kind === END ? need : Math.max(need, 2 * this.data.byteLength, 256);
      const grown = new Uint8Array(size);
      grown.set(this.data.subarray(0, this.used));
      this.data = grown;
    }
    this.data.set(data, this.used);
    this.used = need;
    this.index.push(seq, kind, need);
    if (kind === END) this.ended = true;
    else this.lastSeq = Math.max(this.lastSeq, seq);
    const change = this.data.byteLength + this.index.length * 8 - before;
    this.bytes += change;
    return change;
  }
}

const EMPTY = new Uint8Array(0);

/**
 * What a run's log costs besides its buffer and its index: the log, its entry in the bus's map,
 * the run's id, the buffer's and the array's own objects (measured in memory-bus.test.ts).
 */
const RUN_OVERHEAD_BYTES = 400;

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

  /** How many runs are kept, what all their events weigh now, and the most they may. */
  get held(): { runs: number; bytes: number; maxBytes: number } {
    return { runs: this.logs.size, bytes: this.bytes, maxBytes: this.maxBytes };
  }

  private log(runId: string): RunLog {
    let log = this.logs.get(runId);
    if (!log) {
      log = new RunLog(Date.now());
      this.logs.set(runId, log);
      this.bytes += log.bytes;
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
      if (log.wake?.size && log.touchedAt >= agedBefore) {
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
    // A run's events are in its own log, in order: a replay needs no links between them.
    _previous?: number,
  ): Promise<number | undefined> {
    const log = this.log(runId);
    const code = KINDS.indexOf(kind);
    // Stored once, as JetStream's dedup ids do it: by number, and any end as the end.
    if (log.has(seq, code)) return undefined;
    this.bytes += log.append(seq, code, data);
    log.touchedAt = Date.now();
    // To the back: the runs stay in the order of their last event.
    this.logs.delete(runId);
    this.logs.set(runId, log);
    if (log.wake) for (const wake of log.wake) wake();
    this.forget();
    return undefined;
  }

  async *subscribe(runId: string, { afterSeq = 0, signal }: SubscribeOptions) {
    const log = this.log(runId);
    let next = 0;
    while (next < log.length && log.seq(next) <= afterSeq) next++;
    while (!signal.aborted) {
      while (next < log.length) yield log.event(next++);
      await new Promise<void>((resolve) => {
        const wake = () => {
          log.wake?.delete(wake);
          // No set kept for a run nobody reads any more: the log stays a few objects.
          if (log.wake?.size === 0) log.wake = undefined;
          signal.removeEventListener("abort", wake);
          resolve();
        };
        (log.wake ??= new Set()).add(wake);
        signal.addEventListener("abort", wake, { once: true });
      });
    }
  }

  async stored(runId: string, afterSeq = 0) {
    const log = this.logs.get(runId);
    const events: RunEvent[] = [];
    for (let i = 0; log && i < log.length; i++) {
      const event = log.event(i);
      if (event.kind === "end" || event.seq > afterSeq) events.push(event);
    }
    return events;
  }

  async hasEnd(runId: string) {
    return this.logs.get(runId)?.ended ?? false;
  }

  async drop(runId: string) {
    const log = this.logs.get(runId);
    if (!log) return;
    // A reader still iterating it keeps its own reference until it stops.
    this.logs.delete(runId);
    this.bytes -= log.bytes;
  }

  async ready() {
    return true;
  }

  async close() {
    clearInterval(this.sweeper);
    for (const log of this.logs.values()) if (log.wake) for (const wake of log.wake) wake();
  }
}
