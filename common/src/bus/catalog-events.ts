import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { onReconnect } from "./nats.js";

/**
 * One successful write to the catalog. Published after every write (create, update, delete,
 * publish …) so that the processes that keep what they read from the catalog (the executor's
 * resolved interactions and environments, the gateway's verified keys) drop it.
 */
export interface CatalogChange {
  /** The project whose catalog changed; absent when the write named none (then: every project). */
  projectId?: string;
  /** What changed, from the method's name: interaction, prompt, environment, apikey, project … */
  kind: string;
  /** The verb: create, update, delete, publish … */
  op: string;
  /** The id of what changed, where the request or the answer names one. */
  id?: string;
  /**
   * The written resource's `updated_at` (or `created_at`) in milliseconds, where the answer
   * carries one (not on deletes): tells a listener which of two events of one resource is the later write.
   */
  revision?: number;
}

/** What a cache does on catalog events. */
export interface CatalogListener {
  /** A change of the catalog, from any catalog replica. */
  change(change: CatalogChange): void;
  /**
   * Changes may have been lost (the connection to the bus was re-established after an outage):
   * everything cached may be stale.
   */
  reset(): void;
}

/**
 * The catalog's change events: the catalog publishes, caches listen. Best effort by design: a
 * publish never fails a write nor waits for the bus; caches bound the age of their entries and
 * flush on `reset`, so a lost event costs at most that age.
 */
export interface CatalogEvents {
  /** Publishes a change; never throws (a failure is the implementation's to log). */
  publish(change: CatalogChange): void;
  /** Calls the listener for every change; returns a function that stops listening. */
  listen(listener: CatalogListener): () => void;
  close(): Promise<void>;
}

/** Set on the listeners of both implementations; one process's listeners are few. */
class Listeners {
  private readonly set = new Set<CatalogListener>();

  add(listener: CatalogListener): () => void {
    this.set.add(listener);
    return () => this.set.delete(listener);
  }

  change(change: CatalogChange) {
    for (const l of this.set) l.change(change);
  }

  reset() {
    for (const l of this.set) l.reset();
  }

  clear() {
    this.set.clear();
  }
}

/**
 * The embedded mode's catalog events: listeners are called before `publish` returns, so a write
 * is seen by every cache of the process by the time its RPC answers.
 */
export class MemoryCatalogEvents implements CatalogEvents {
  private readonly listeners = new Listeners();

  publish(change: CatalogChange): void {
    this.listeners.change(change);
  }

  listen(listener: CatalogListener): () => void {
    return this.listeners.add(listener);
  }

  async close() {
    this.listeners.clear();
  }
}

/** What the NATS implementation needs beside the connection. */
export interface NatsCatalogEventsOptions {
  /** PIES_NATS_SUBJECT_PREFIX: events go to `<prefix>.catalog.<projectId>.<kind>`. */
  subjectPrefix: string;
  /** Where a failed publish or an unreadable event is reported (at warn). */
  logger: { warn(obj: object, msg: string): void };
}

/** The subject token of a change that names no project (the listeners then drop everything). */
const NO_PROJECT = "_";

/** A subject token: NATS subjects are split on dots, and `*`, `>` and spaces are not allowed. */
function token(value: string): string {
  return value.replace(/[.*>\s]/g, "_") || NO_PROJECT;
}

/**
 * Catalog events on core NATS (no JetStream: an event matters only to the processes connected
 * now, and a process that was away flushes its caches when it comes back). Over the process's one
 * connection, which it does not own: `close` stops listening but leaves the connection open.
 */
export class NatsCatalogEvents implements CatalogEvents {
  private readonly listeners = new Listeners();
  private subscription: Subscription | undefined;
  private stopWatching: (() => void) | undefined;
  private readonly encoder = new TextEncoder();

  private constructor(
    private readonly nc: NatsConnection,
    private readonly options: NatsCatalogEventsOptions,
  ) {}

  /**
   * Events over `nc`. With `listen: true` (the processes that cache) it subscribes to every
   * project's events and waits until the server has the subscription, so no write made after
   * this resolves goes unseen; the catalog, which only publishes, passes false.
   */
  static async over(
    nc: NatsConnection,
    options: NatsCatalogEventsOptions & { listen: boolean },
  ): Promise<NatsCatalogEvents> {
    const events = new NatsCatalogEvents(nc, options);
    if (options.listen) await events.subscribe();
    return events;
  }

  /** The subject of a change. */
  subject(change: Pick<CatalogChange, "projectId" | "kind">): string {
    return `${this.options.subjectPrefix}.catalog.${token(change.projectId ?? "")}.${token(change.kind)}`;
  }

  publish(change: CatalogChange): void {
    try {
      // Core NATS: buffered by the client (also while it reconnects), never awaited.
      this.nc.publish(this.subject(change), this.encoder.encode(JSON.stringify(change)));
    } catch (err) {
      this.options.logger.warn(
        { err, change },
        "catalog change event not published (caches see it within their maximum age)",
      );
    }
  }

  listen(listener: CatalogListener): () => void {
    return this.listeners.add(listener);
  }

  private async subscribe() {
    const subscription = this.nc.subscribe(`${this.options.subjectPrefix}.catalog.>`, {
      callback: (err, msg) => {
        if (err) {
          this.options.logger.warn({ err }, "catalog events subscription failed: flushing");
          this.listeners.reset();
          return;
        }
        let change: CatalogChange;
        try {
          change = msg.json<CatalogChange>();
        } catch (parseErr) {
          // Not knowing what changed, drop everything.
          this.options.logger.warn({ err: parseErr }, "unreadable catalog change event: flushing");
          this.listeners.reset();
          return;
        }
        this.listeners.change(change);
      },
    });
    this.subscription = subscription;
    // Events published while the connection was down are lost: whatever is cached may be stale.
    this.stopWatching = onReconnect(this.nc, () => this.listeners.reset());
    await this.nc.flush();
  }

  async close() {
    this.stopWatching?.();
    if (!this.nc.isClosed()) this.subscription?.unsubscribe();
    this.listeners.clear();
  }
}

/**
 * The catalog events of a component's NATS settings over its connection: listening (the processes
 * that cache what they read from the catalog) unless `listen` is false (the catalog publishes).
 */
export function catalogEventsFromConfig(
  nc: NatsConnection,
  config: { PIES_NATS_SUBJECT_PREFIX: string },
  logger: NatsCatalogEventsOptions["logger"],
  listen = true,
): Promise<NatsCatalogEvents> {
  return NatsCatalogEvents.over(nc, {
    subjectPrefix: config.PIES_NATS_SUBJECT_PREFIX,
    logger,
    listen,
  });
}
