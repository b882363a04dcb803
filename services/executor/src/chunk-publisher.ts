import type { RunEventBus } from "@pies/common/bus";

const encoder = new TextEncoder();

/**
 * Publishes a run's chunks in order without holding up the provider stream: while one publish
 * awaits its acknowledgement, the chunks that arrive are joined and go out as the next message.
 * A publish is retried (idempotently: each message has a dedup id) before the run fails.
 */
export class ChunkPublisher {
  private pending = "";
  /** A repair waiting behind the pending chunks (JSON), and the chunks that follow it. */
  private queued: { repair: string; after: string }[] = [];
  private inflight: Promise<void> | undefined;
  private sent = 0;
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
      while ((this.pending || this.queued.length > 0) && !this.failure) {
        if (this.pending) {
          const data = encoder.encode(this.pending);
          this.pending = "";
          await this.publish("chunk", data, ++this.sent);
          continue;
        }
        const next = this.queued.shift();
        if (!next) break;
        this.pending = next.after;
        await this.publish("repair", encoder.encode(next.repair), ++this.sent);
      }
    } catch (err) {
      this.failure = err as Error;
    } finally {
      this.inflight = undefined;
    }
  }

  /** Event number `seq` of the run (retried with the same number: stored once). */
  private async publish(kind: "chunk" | "repair" | "end", data: Uint8Array, seq: number) {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.bus.publish(this.runId, kind, data, seq);
      } catch (err) {
        if (attempt >= this.attempts) throw err;
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
