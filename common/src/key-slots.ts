/**
 * Counts what each key (an API key, a project) holds at once, up to `max` per key (0: no limit).
 * Keys that hold none are forgotten, so the map stays as small as what is in use.
 */
export class KeySlots {
  private readonly held = new Map<string, number>();

  constructor(private readonly max: number) {}

  /** Slots `key` holds now. */
  count(key: string): number {
    return this.held.get(key) ?? 0;
  }

  /**
   * Takes one of `key`'s slots; returns the function that gives it back (calling it again does
   * nothing), or undefined when the key already holds `max`.
   */
  take(key: string): (() => void) | undefined {
    const count = this.count(key);
    if (this.max > 0 && count >= this.max) return undefined;
    this.held.set(key, count + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = this.count(key) - 1;
      if (left > 0) this.held.set(key, left);
      else this.held.delete(key);
    };
  }
}
