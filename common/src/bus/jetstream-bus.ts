import {
  headers as natsHeaders,
  nanos,
  type MsgHdrs,
  type NatsConnection,
} from "@nats-io/transport-node";
import { currentTraceparent, tracingEnabled } from "../tracing.js";
import type { Logger } from "../logger.js";
import {
  jetstream,
  jetstreamManager,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
  type SeqMsgRequest,
  type StoredMsg,
} from "@nats-io/jetstream";
import {
  EventTooLarge,
  LiveGap,
  type LiveEvents,
  type RunEvent,
  type RunEventBus,
  type SubscribeOptions,
} from "./bus.js";
import { ensureStream } from "./ensure-stream.js";
import { connectNats, maxDataBytes, natsReady, onReconnect } from "./nats.js";

export interface NatsSettings {
  NATS_URL: string;
  PIES_NATS_STREAM: string;
  PIES_NATS_SUBJECT_PREFIX: string;
  PIES_STREAM_MAX_AGE_SECONDS: number;
  PIES_NATS_REPLICAS?: number;
}

export interface JetStreamBusOptions {
  url: string;
  stream: string;
  subjectPrefix: string;
  maxAgeSeconds: number;
  /** How many nodes of the NATS cluster keep the stream (PIES_NATS_REPLICAS; default 1). */
  replicas?: number;
  /** Connection name shown by the NATS server (monitoring). */
  name: string;
  /** Told when the stream's replicas change. */
  logger?: Logger;
}

/**
 * The run event bus on NATS JetStream. One connection per process, reconnecting forever; the
 * stream is created (or its limits updated) at connect, so any component may start first.
 */
export class JetStreamRunEventBus implements RunEventBus {
  private constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly options: JetStreamBusOptions,
  ) {}

  /** Connects with the NATS_URL / PIES_NATS_* settings of a component's configuration. */
  static fromConfig(
    config: NatsSettings,
    name: string,
    logger?: Logger,
  ): Promise<JetStreamRunEventBus> {
    return JetStreamRunEventBus.connect({
      url: config.NATS_URL,
      stream: config.PIES_NATS_STREAM,
      subjectPrefix: config.PIES_NATS_SUBJECT_PREFIX,
      maxAgeSeconds: config.PIES_STREAM_MAX_AGE_SECONDS,
      replicas: config.PIES_NATS_REPLICAS,
      name,
      logger,
    });
  }

  static async connect(options: JetStreamBusOptions): Promise<JetStreamRunEventBus> {
    const nc = await connectNats(options.url, options.name);
    try {
      const bus = new JetStreamRunEventBus(nc, jetstream(nc), await jetstreamManager(nc), options);
      await bus.ensureStream();
      return bus;
    } catch (err) {
      await nc.close();
      throw err;
    }
  }

  /** The NATS connection, for the other components of the process that use NATS. */
  get connection(): NatsConnection {
    return this.nc;
  }

  /** The largest event a publish takes (maxDataBytes). */
  get maxEventBytes(): number | undefined {
    return maxDataBytes(this.nc);
  }

  private subject(runId: string, kind: RunEvent["kind"] | ">") {
    return `${this.options.subjectPrefix}.run.${runId}.${kind}`;
  }

  private ensureStream() {
    const replicas = this.options.replicas ?? 1;
    return ensureStream(
      this.jsm,
      {
        name: this.options.stream,
        subjects: [`${this.options.subjectPrefix}.run.>`],
        max_age: nanos(this.options.maxAgeSeconds * 1000),
        storage: StorageType.File,
        duplicate_window: nanos(Math.min(this.options.maxAgeSeconds, 120) * 1000),
        num_replicas: replicas,
      },
      { settings: { PIES_NATS_REPLICAS: replicas }, logger: this.options.logger },
    );
  }

  /**
   * Stored in the run's stream, and delivered to live subscribers (core NATS) as it is published.
   * The event's number travels in a header, and so does the stream sequence of the run's event
   * before it (`previous`): stored() follows those links back. The message id (JetStream's
   * deduplication) is the run and the number, or the run's end.
   */
  async publish(
    runId: string,
    kind: RunEvent["kind"],
    data: Uint8Array,
    seq: number,
    previous?: number,
  ): Promise<number> {
    // nats.js would refuse it too, but as an error a retry could not tell from a lost connection.
    const limit = this.maxEventBytes;
    if (limit !== undefined && data.length > limit)
      throw new EventTooLarge(runId, data.length, limit);
    const headers = tracingEnabled() ? traceHeaders() : natsHeaders();
    headers.set(SEQ_HEADER, String(seq));
    if (previous !== undefined) headers.set(PREVIOUS_HEADER, String(previous));
    const ack = await this.js.publish(this.subject(runId, kind), data, {
      msgID: kind === "end" ? `${runId}-end` : `${runId}-${seq}`,
      headers,
    });
    // A duplicate (a retry of one stored) is acknowledged with the sequence of the one stored.
    return ack.seq;
  }

  /**
   * The run's stored events after `afterSeq`, then its live ones, with nothing made on the server
   * but a core subscription, gone when this ends: no consumer. The subscription to the run's
   * subjects is asked for first, then the stream is read by lookups (stored()): the server takes
   * a connection's messages in order, so every event stored after the lookups reach it comes to
   * the subscription. Events come in order, each once; a gap in what the subscription brings (an
   * event the server dropped for a slow reader) is filled from the stream, which holds every
   * event before one that arrives (a run's events are published one after another). After the
   * connection comes back from an outage (core messages sent meanwhile are lost) it throws; the
   * caller subscribes again after the last event it got (gateway/src/sse/run-relay.ts).
   */
  async *subscribe(runId: string, { afterSeq = 0, signal }: SubscribeOptions) {
    const sub = this.nc.subscribe(this.subject(runId, ">"));
    const stop = () => {
      if (!sub.isClosed()) sub.unsubscribe();
    };
    let reconnected = false;
    const stopWatching = onReconnect(this.nc, () => {
      reconnected = true;
      stop();
    });
    signal.addEventListener("abort", stop, { once: true });
    try {
      if (signal.aborted) return;
      // The highest number delivered: nothing at or below it is delivered again (but the end).
      let last = afterSeq;
      for (const event of await this.stored(runId, last)) {
        yield event;
        if (event.kind === "end") return;
        last = event.seq;
      }
      for await (const m of sub) {
        const event = eventOf(m.subject, m.headers, m.data);
        if (event.kind !== "end" && !(event.seq > last)) continue;
        if (event.seq > last + 1) {
          // Some before it did not come (or came before the lookups saw them stored).
          for (const missed of await this.stored(runId, last)) {
            if (missed.kind === "end" || missed.seq >= event.seq) break;
            yield missed;
            last = missed.seq;
          }
        }
        yield event;
        if (event.kind === "end") return;
        last = event.seq;
      }
      if (reconnected && !signal.aborted) {
        throw new Error("the NATS connection was re-established; subscribe again");
      }
    } finally {
      signal.removeEventListener("abort", stop);
      stop();
      stopWatching();
    }
  }

  /**
   * The run's stored events numbered after `afterSeq`, and its end if stored, in order. Read by
   * lookups whose cost does not grow with what the stream holds: the last stored event of each
   * kind by its literal subject (from the stream's index of subjects), then, from the newest of
   * them, each event before it by the stream sequence it names (PREVIOUS_HEADER), until the
   * events at or before `afterSeq`. An event that names none was published by a version of pies
   * before the links: the run's events are then found by subject from the stream's start.
   */
  async stored(runId: string, afterSeq = 0): Promise<RunEvent[]> {
    const { jsm, options } = this;
    const lasts = await Promise.all(
      RUN_EVENT_KINDS.map((kind) =>
        jsm.streams.getMessage(options.stream, { last_by_subj: this.subject(runId, kind) }),
      ),
    );
    let newest: StoredMsg | undefined;
    for (const m of lasts) if (m && (!newest || m.seq > newest.seq)) newest = m;
    const found: StoredMsg[] = [];
    for (let m = newest; m;) {
      found.push(m);
      // Nothing numbered between it and afterSeq: the walk is done.
      if (!(numberOf(m) > afterSeq + 1)) break;
      const previous = Number(m.header?.get(PREVIOUS_HEADER) || Number.NaN);
      if (!Number.isInteger(previous)) {
        if (m.seq > 1 && numberOf(m) > 1) found.push(...(await this.unlinked(runId, m.seq)));
        break;
      }
      // Null once it has aged out (or been deleted): the run's events before it are gone too.
      m = (await jsm.streams.getMessage(options.stream, { seq: previous })) ?? undefined;
    }
    return found
      .sort((a, b) => a.seq - b.seq)
      .map((m) => eventOf(m.subject, m.header, m.data, m.seq))
      .filter((event) => event.kind === "end" || event.seq > afterSeq);
  }

  /**
   * The run's chunks and repairs stored before stream sequence `before`, found by their literal
   * subjects from the stream's start (`next_by_subj`): for events published without links, by a
   * version of pies before them, during an upgrade. Costs a pass over the stream's index.
   */
  private async unlinked(runId: string, before: number): Promise<StoredMsg[]> {
    const found: StoredMsg[] = [];
    for (const kind of ["chunk", "repair"] as const) {
      for (let seq = 1; seq < before;) {
        // A request the server has answered since 2.9, which nats.js types only for direct gets.
        const query: SeqMsgRequest & { next_by_subj: string } = {
          seq,
          next_by_subj: this.subject(runId, kind),
        };
        const m = await this.jsm.streams.getMessage(this.options.stream, query);
        if (!m || m.seq >= before) break;
        found.push(m);
        seq = m.seq + 1;
      }
    }
    return found;
  }

  /**
   * A core NATS subscription to the run's subjects, in place at the server when this resolves (a
   * flush): no consumer to create, no replay. Numbers must follow each other from 1; a repeat (a
   * publish retried after a lost acknowledgement reaches core subscribers twice) is dropped, a
   * skip or a reconnect (core messages sent meanwhile are lost) is a LiveGap.
   */
  async live(runId: string, signal: AbortSignal): Promise<LiveEvents> {
    const sub = this.nc.subscribe(this.subject(runId, ">"));
    const stop = () => {
      if (!sub.isClosed()) sub.unsubscribe();
    };
    // Watched from here, not from the first read: a reconnect before it (the caller may read
    // later) loses core messages just the same, and an end lost so would leave a reader waiting.
    const stopWatching = onReconnect(this.nc, stop);
    const dispose = () => {
      signal.removeEventListener("abort", dispose);
      stop();
      stopWatching();
    };
    signal.addEventListener("abort", dispose, { once: true });
    try {
      // While NATS is away the flush waits for it: the stream takes the replay path instead.
      await withTimeout(this.nc.flush(), LIVE_SETUP_MS, "the live subscription was not set up");
    } catch (err) {
      dispose();
      throw err;
    }
    const { jsm, options } = this;
    // The run's subjects one by one: a lookup by a literal subject is answered from the stream's
    // index of subjects, where one by the wildcard (`<run>.>`) makes the server scan every stored
    // block for it, a cost that grows with all the stream holds (an hour of every run's events).
    const subjects = RUN_EVENT_KINDS.map((kind) => this.subject(runId, kind));
    const events = (async function* () {
      let last = 0;
      try {
        // Ends early when the subscription was stopped: by the abort, or by a reconnect (core
        // messages sent while the connection was down are lost), a gap.
        for await (const m of sub) {
          const event = eventOf(m.subject, m.headers, m.data);
          if (event.seq <= last && event.kind !== "end") continue;
          if (event.seq !== last + 1) throw new LiveGap(last);
          last = event.seq;
          yield event;
          if (event.kind === "end") return;
        }
        if (!signal.aborted) throw new LiveGap(last);
      } finally {
        dispose();
      }
    })();
    return Object.assign(events, {
      // Whether the run has a stored event of any kind (a lookup per kind, together). Counted
      // after the answers: an event published once the subscription was in place reaches it
      // before them (one server: the same connection, in order), so a false "missed" costs only a
      // replay. Once one has reached it, nothing is asked: a gap shows any it misses.
      async missed() {
        if (sub.getReceived() > 0) return false;
        const stored = await Promise.all(
          subjects.map((s) => jsm.streams.getMessage(options.stream, { last_by_subj: s })),
        );
        return stored.some((m) => m !== null) && sub.getReceived() === 0;
      },
    });
  }

  async hasEnd(runId: string) {
    const msg = await this.jsm.streams.getMessage(this.options.stream, {
      last_by_subj: this.subject(runId, "end"),
    });
    return msg !== null;
  }

  /** Purges the run's subjects, each by its literal subject (the stream's index of subjects). */
  async drop(runId: string) {
    await Promise.all(
      RUN_EVENT_KINDS.map((kind) =>
        this.jsm.streams.purge(this.options.stream, { filter: this.subject(runId, kind) }),
      ),
    );
  }

  ready(timeoutMs = 2000) {
    return natsReady(this.nc, timeoutMs);
  }

  async close() {
    if (!this.nc.isClosed()) await this.nc.drain();
  }
}

/** How long a live subscription may take to be in place at the server. */
const LIVE_SETUP_MS = 1000;

async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  // Given up on at the timeout, it may still reject later (the connection closed): not unheard.
  promise.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(message)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Every kind of a run's events: the last part of their subjects. Keyed by the kind, so that a new
 * kind of RunEvent does not compile until it is listed (missed() asks for each).
 */
const RUN_EVENT_KIND_SET: Record<RunEvent["kind"], true> = { chunk: true, repair: true, end: true };
const RUN_EVENT_KINDS = Object.keys(RUN_EVENT_KIND_SET) as readonly RunEvent["kind"][];

/** The header that carries an event's number in its run (RunEvent.seq). */
const SEQ_HEADER = "Pies-Seq";

/** The header that carries the stream sequence of the run's event before this one. */
const PREVIOUS_HEADER = "Pies-Previous";

/** A stored event's number in its run (NaN when it has none). */
function numberOf(m: StoredMsg): number {
  return Number(m.header?.get(SEQ_HEADER) || Number.NaN);
}

/** A run's event as a NATS message carries it; `fallbackSeq` when it has no number (NaN if none). */
function eventOf(
  subject: string,
  headers: MsgHdrs | undefined,
  data: Uint8Array,
  fallbackSeq = Number.NaN,
): RunEvent {
  const kind = subject.endsWith(".end") ? "end" : subject.endsWith(".repair") ? "repair" : "chunk";
  const number = Number(headers?.get(SEQ_HEADER) || Number.NaN);
  const traceparent = headers?.get("traceparent");
  return {
    seq: Number.isInteger(number) ? number : fallbackSeq,
    kind,
    data,
    ...(traceparent ? { traceparent } : {}),
  };
}

/** The current trace context as NATS message headers (tracing on only). */
export function traceHeaders() {
  const h = natsHeaders();
  const traceparent = currentTraceparent();
  if (traceparent) h.set("traceparent", traceparent);
  return h;
}
