/** What a FairQueue allows each key (a project). */
export interface FairShare {
  /** Items a key may hold, queued and running together; more are refused. */
  maxHeld: number;
  /** Items of one key that may run at once (below the pool's size, so others find a free worker). */
  maxRunning: number;
}

interface KeyState<T> {
  queued: T[];
  running: number;
  /** When this key last had an item taken (0: never): the least recently served goes first. */
  servedAt: number;
}

/**
 * Work waiting for a shared pool, queued per key (project) and taken fairly: of the keys below
 * their running share, the one with the fewest items running goes first, ties to the one served
 * least recently. So a key with a long backlog delays another key's item by at most the items
 * already running, never by its backlog. Keys with nothing queued or running are forgotten.
 */
export class FairQueue<T> {
  private readonly keys = new Map<string, KeyState<T>>();
  private served = 0;
  private total = 0;

  constructor(private readonly share: FairShare) {}

  /** Items queued, all keys together. */
  get size(): number {
    return this.total;
  }

  /** Items `key` holds, queued and running. */
  held(key: string): number {
    const state = this.keys.get(key);
    return state ? state.queued.length + state.running : 0;
  }

  /** Queues `item` for `key`; false (and nothing queued) when `key` already holds its maximum. */
  offer(key: string, item: T): boolean {
    let state = this.keys.get(key);
    if (state && state.queued.length + state.running >= this.share.maxHeld) return false;
    if (!state) {
      state = { queued: [], running: 0, servedAt: 0 };
      this.keys.set(key, state);
    }
    state.queued.push(item);
    this.total++;
    return true;
  }

  /** The next item to run, now counted as running for its key until `done(key)`. */
  take(): { key: string; item: T } | undefined {
    let key: string | undefined;
    let best: KeyState<T> | undefined;
    for (const [candidate, state] of this.keys) {
      if (state.queued.length === 0 || state.running >= this.share.maxRunning) continue;
      if (
        !best ||
        state.running < best.running ||
        (state.running === best.running && state.servedAt < best.servedAt)
      ) {
        key = candidate;
        best = state;
      }
    }
    // The chosen key has a queued item (keys without one were skipped above).
    const item = best?.queued.shift();
    if (key === undefined || !best || item === undefined) return undefined;
    best.running++;
    best.servedAt = ++this.served;
    this.total--;
    return { key, item };
  }

  /** An item of `key` taken earlier has finished (whichever way). */
  done(key: string): void {
    const state = this.keys.get(key);
    if (!state || state.running === 0) return;
    state.running--;
    if (state.running === 0 && state.queued.length === 0) this.keys.delete(key);
  }

  /** Removes and returns every queued item (running ones stay counted until `done`). */
  drain(): T[] {
    const items: T[] = [];
    for (const [key, state] of this.keys) {
      items.push(...state.queued.splice(0));
      if (state.running === 0) this.keys.delete(key);
    }
    this.total = 0;
    return items;
  }
}
