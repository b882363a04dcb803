import { LRUCache } from "lru-cache";
import type { CatalogChange, CatalogEvents } from "./catalog-events.js";

export interface CatalogCacheOptions<V> {
  /** Bounded age of an entry (the fallback for a lost event); 0 turns caching off. */
  maxAgeMs: number;
  /** Entries kept at most (the least recently used go). */
  max: number;
  /**
   * The project an answer belongs to (what a change event names), for callers that learn it from
   * the answer (the gateway's keys); others give it with each look-up.
   */
  projectOf?: (value: V) => string;
  /** Which changes concern this cache (default: every change). */
  concerns?: (change: CatalogChange) => boolean;
}

interface Entry<V> {
  value: V;
  project: string;
}

interface Flight<V> {
  promise: Promise<V>;
  /** This load, told apart from a later one of the same key. */
  id: number;
  /** The project, when the key says it before the answer (the executor's keys do). */
  project?: string;
}

/**
 * What a process keeps from the catalog, kept right by the catalog's change events: an entry is
 * dropped on any change of its project, everything on a reset (changes may have been lost), and
 * every entry is at most `maxAgeMs` old whatever happens to the events.
 *
 * Concurrent misses of one key share one load (a miss costs exactly one call), and a load that
 * was under way when its project changed answers its callers but is not kept: it may have read
 * the catalog before the change. Errors are never kept.
 */
export class CatalogCache<V> {
  private readonly entries: LRUCache<string, Entry<V>>;
  private readonly pending = new Map<string, Flight<V>>();
  /** Counts invalidations; a load keeps its answer only if none of its project came after it started. */
  private generation = 0;
  private clearedAt = 0;
  /** The generation of each project's last change, while loads that started before it may run. */
  private readonly changedAt = new Map<string, number>();
  private loading = 0;
  private flights = 0;
  private readonly options: CatalogCacheOptions<V>;

  constructor(options: CatalogCacheOptions<V>) {
    this.options = options;
    // Expiry by the wall clock, read at each look-up, as the gateway's other caches.
    this.entries = new LRUCache<string, Entry<V>>({
      max: options.max,
      perf: Date,
      ttlResolution: 0,
    });
  }

  /** Drops entries on the changes `events` carries (and everything on a reset); returns the stop. */
  follow(events: CatalogEvents): () => void {
    return events.listen({
      change: (change) => {
        if (this.options.concerns && !this.options.concerns(change)) return;
        if (change.projectId) this.dropProject(change.projectId);
        else this.clear();
      },
      reset: () => this.clear(),
    });
  }

  /**
   * The cached answer for `key`, or what `load` answers (shared with concurrent callers). `project`
   * is the project the answer belongs to, when the caller knows it before loading.
   */
  get(key: string, load: () => Promise<V>, project?: string): Promise<V> {
    const hit = this.entries.get(key);
    if (hit) return Promise.resolve(hit.value);
    const flight = this.pending.get(key);
    if (flight) return flight.promise;
    const started = this.generation;
    const id = ++this.flights;
    this.loading++;
    const promise = (async () => {
      try {
        // Even a load that throws at once settles after this flight is registered.
        const value = await (async () => load())();
        const owner = project ?? this.options.projectOf?.(value) ?? "";
        if (this.options.maxAgeMs > 0 && this.unchangedSince(owner, started)) {
          this.entries.set(key, { value, project: owner }, { ttl: this.options.maxAgeMs });
        }
        return value;
      } finally {
        if (this.pending.get(key)?.id === id) this.pending.delete(key);
        if (--this.loading === 0) this.changedAt.clear();
      }
    })();
    this.pending.set(key, { promise, id, project });
    return promise;
  }

  /** Drops what is cached for a project, and detaches the loads under way for it. */
  dropProject(projectId: string) {
    this.generation++;
    if (this.loading > 0) this.changedAt.set(projectId, this.generation);
    const dropped: string[] = [];
    for (const [key, entry] of this.entries.entries())
      if (entry.project === projectId) dropped.push(key);
    for (const key of dropped) this.entries.delete(key);
    // A load under way may have read the catalog before the change: later callers load again.
    for (const [key, flight] of this.pending) {
      if (flight.project === undefined || flight.project === projectId) this.pending.delete(key);
    }
  }

  /** Drops everything (changes may have been lost). */
  clear() {
    this.generation++;
    this.clearedAt = this.generation;
    this.entries.clear();
    this.pending.clear();
  }

  get size(): number {
    return this.entries.size;
  }

  private unchangedSince(project: string, started: number): boolean {
    return this.clearedAt <= started && (this.changedAt.get(project) ?? 0) <= started;
  }
}
