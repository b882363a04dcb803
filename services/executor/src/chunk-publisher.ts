import { EventTooLarge, type RunEventBus } from "@pies/common/bus";

const encoder = new TextEncoder();

/**
 * Publishes a run's chunks in order without holding up the provider stream: a chunk goes out at
 * once when no publish is in flight; while one awaits its acknowledgement, the chunks that arrive
 * (and those that come in the turn of the event loop that brought it) are joined and go out as the
 * next message (as several, each at most the bus's limit, when they are more: a long answer that
 * came while the start was being recorded). So a run's events follow its chunks one to one while
 * the bus answers fast, and get fewer, larger, as it slows under load. A publish is retried
 * (idempotently: each message has a dedup id) before the run fails.
 */
export class ChunkPublisher {
  private pending = "";
  /** A repair waiting behind the pending chunks (JSON), and the chunks that follow it. */
  private queued: { repair: string; after: string }[] = [];
  private inflight: Promise<void> | undefined;
  private sent = 0;
  /** Where the bus stored the run's last event (the next one links to it: RunEventBus.publish). */
  private stored: number | undefined;
  private failure: Error | undefined;

  constructor(
    private readonly bus: RunEventBus,
    private readonly runId: string,
    private readonly attempts = 3,
    /**
     * Nothing is published until `open()`: what is pushed meanwhile waits, joined (a run's
     * chunks while its start is not recorded yet; `discard()` drops them if it never is).
     */
    private held = false,
  ) {}

  push(text: string): void {
    if (this.failure) return;
    const last = this.queued.at(-1);
    if (last) last.after += text;
    else this.pending += text;
    if (!this.held) this.inflight ??= this.pump();
  }

  /** A repair event, in order after the chunks pushed so far and before those pushed next. */
  repair(json: string): void {
    if (this.failure) return;
    this.queued.push({ repair: json, after: "" });
    if (!this.held) this.inflight ??= this.pump();
  }

  /** Publishes what was held, and from now on every push as it comes. */
  open(): void {
    if (!this.held) return;
    this.held = false;
    if (this.pending || this.queued.length > 0) this.inflight ??= this.pump();
  }

  /** Drops what is held and everything pushed later: nothing of it is ever published. */
  discard(): void {
    this.failure ??= new Error(`the events of run ${this.runId} were discarded`);
    this.pending = "";
    this.queued = [];
  }

  private async pump(): Promise<void> {
    try {
      while (this.waiting() && !this.failure) {
        if (this.pending) {
          await this.publish("chunk", this.takePending(), ++this.sent);
        } else {
          const next = this.queued.shift();
          if (!next) break;
          this.pending = next.after;
          await this.publish("repair", encoder.encode(next.repair), ++this.sent);
        }
        // More came while that publish awaited its acknowledgement (the bus is slow to answer:
        // under load): what else comes in this turn of the event loop joins it. A process that
        // is busy takes its sockets' input in batches, so the provider's next chunks are often
        // read in the same turn. Nothing waiting, the next push publishes at once.
        if (this.waiting()) await new Promise((resolve) => setImmediate(resolve));
      }
    } catch (err) {
      // An event the bus refused for its size was not stored: its number goes to the next one.
      if (err instanceof EventTooLarge) this.sent--;
      this.failure = err as Error;
    } finally {
      this.inflight = undefined;
    }
  }

  /** Whether chunks or a repair wait to be published. */
  private waiting(): boolean {
    return this.pending !== "" || this.queued.length > 0;
  }

  /**
   * The pending text, encoded, or as much of it as the bus takes in one event (the rest stays
   * pending, to go first in the next). Cut between characters, never inside one (nor a surrogate
   * pair): each event is decoded on its own, and the pieces join to the text.
   */
  private takePending(): Uint8Array {
    const text = this.pending;
    const limit = this.bus.maxEventBytes;
    // At most 3 bytes of UTF-8 per UTF-16 code unit: most often, all of it fits.
    if (limit === undefined || text.length * 3 <= limit) {
      this.pending = "";
      return encoder.encode(text);
    }
    const buffer = new Uint8Array(Math.max(4, Math.min(limit, text.length * 3)));
    // encodeInto writes whole characters only, and says how much of the text it took.
    const { read, written } = encoder.encodeInto(text, buffer);
    this.pending = text.slice(read);
    return buffer.subarray(0, written);
  }

  /** Event number `seq` of the run (retried with the same number: stored once). */
  private async publish(kind: "chunk" | "repair" | "end", data: Uint8Array, seq: number) {
    for (let attempt = 1; ; attempt++) {
      try {
        this.stored = await this.bus.publish(this.runId, kind, data, seq, this.stored);
        return;
      } catch (err) {
        if (attempt >= this.attempts || err instanceof EventTooLarge) throw err;
        await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
      }
    }
  }

  /** Waits until every chunk is stored; throws if one could not be. */
  async flush(): Promise<void> {
    while (this.inflight) await this.inflight;
    if (this.failure) throw this.failure;
  }

  /** Publishes the end event (after the chunks), numbered one more than the last of them. */
  async end(data: Uint8Array): Promise<void> {
    await this.flush().catch(() => {});
    await this.publish("end", data, this.sent + 1);
  }
}
