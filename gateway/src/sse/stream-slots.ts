/**
 * Counts the open SSE streams of each API key, so that one key cannot hold an unbounded number of
 * connections (and run-store checks) open on a gateway. Per process: behind a load balancer the
 * bound is per replica.
 */
export class StreamSlots {
  private readonly open = new Map<string, number>();

  constructor(private readonly maxPerKey: number) {}

  /**
   * Takes a slot for the key; returns the function that gives it back (idempotent), or undefined
   * when the key already has `maxPerKey` streams open.
   */
  acquire(keyId: string): (() => void) | undefined {
    const count = this.open.get(keyId) ?? 0;
    if (count >= this.maxPerKey) return undefined;
    this.open.set(keyId, count + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.open.get(keyId) ?? 1) - 1;
      if (left > 0) this.open.set(keyId, left);
      else this.open.delete(keyId);
    };
  }
}
