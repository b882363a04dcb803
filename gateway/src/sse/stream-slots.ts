import { KeySlots } from "@pies/common";
import { tooManyRequests } from "../errors.js";

/**
 * Seconds a key over its open-stream bound is told to wait: streams free up as runs end, so soon,
 * but not in a tight loop.
 */
const STREAMS_RETRY_AFTER_SECONDS = 5;

/**
 * The SSE streams each API key holds open on this gateway, runs' and experiments' alike, up to
 * PIES_MAX_STREAMS_PER_KEY (0: no limit): one count per key, whichever route opened them.
 */
export class StreamSlots {
  private readonly slots: KeySlots;

  constructor(private readonly max: number) {
    this.slots = new KeySlots(max);
  }

  /**
   * One of the key's slots; the function that gives it back (once, however often called). 429
   * `rate_limited` with Retry-After when the key holds the most.
   */
  take(apiKeyId: string): () => void {
    const release = this.slots.take(apiKeyId);
    if (!release) {
      throw tooManyRequests(
        `this API key has ${this.max} streams open, the most allowed`,
        STREAMS_RETRY_AFTER_SECONDS,
      );
    }
    return release;
  }
}
