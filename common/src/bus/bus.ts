/**
 * One event of a run's stream: a chunk of the result, a repair (the answer so far failed the
 * output schema and another follows; JSON `{attempt, errors}`), or the end (carrying the final
 * run).
 */
export interface RunEvent {
  /**
   * The event's number in its run: 1, 2, … for its chunks and repairs in the order published, the
   * end one more than the last of them. The SSE `id:` and the resume point.
   */
  seq: number;
  kind: "chunk" | "repair" | "end";
  data: Uint8Array;
  /** The publisher's trace context (W3C), when tracing is on (common/src/tracing.ts). */
  traceparent?: string;
}

export interface SubscribeOptions {
  /** Deliver only events after this sequence (the SSE Last-Event-ID). */
  afterSeq?: number;
  signal: AbortSignal;
}

/**
 * Carries execution chunks from the executor to the gateway's SSE streams. In a deployment it is
 * NATS JetStream (subjects `<prefix>.run.<runId>.chunk|repair|end`, captured with a bounded age so a late or
 * reconnecting reader gets the events replayed); embedded, an in-process stand-in.
 */
export interface RunEventBus {
  /**
   * Publishes event number `seq` of the run (RunEvent.seq) and resolves once it is stored, with
   * its place in the bus's store (JetStream: the stream sequence; undefined in memory). A retried
   * publish of the same number (of an end: of any end) is stored once, and resolves with the
   * place of the one stored. `previous` is the place of the run's event before this one: it links
   * the run's events, so that a replay reads them back from the last, a lookup each, without
   * anything left on the server (a run's events are published one after another).
   */
  publish(
    runId: string,
    kind: RunEvent["kind"],
    data: Uint8Array,
    seq: number,
    previous?: number,
  ): Promise<number | undefined>;
  /**
   * The largest event data a publish takes (JetStream: the server's max_payload less the
   * headers; a larger one fails with EventTooLarge); undefined when there is none (in memory).
   */
  readonly maxEventBytes?: number;
  /**
   * What the bus holds in this process, for metrics: its runs, what their events weigh and the
   * most they may (in memory only; JetStream's store is the server's, seen from its monitoring).
   */
  readonly held?: { runs: number; bytes: number; maxBytes: number };
  /** Every stored event of the run (after `afterSeq`), then live ones, until the signal aborts. */
  subscribe(runId: string, options: SubscribeOptions): AsyncIterable<RunEvent>;
  /**
   * Optional, for a run that has no events yet (the stream that is starting it): resolves once
   * every event published from then on will be delivered, live, without a replay (cheaper than
   * `subscribe`). The iterable yields them in order from number 1 and ends after the end; it
   * throws LiveGap if one was missed (the bus lost it, the connection was re-established, or the
   * first ones went out before the subscription was in place): `subscribe` after the last one
   * delivered then. Events that all went out before it was in place never show as a gap:
   * `missed` tells those. Stops, iterated or not, when `signal` aborts.
   */
  live?(runId: string, signal: AbortSignal): Promise<LiveEvents>;
  /** Whether the end event of the run is still stored. */
  hasEnd(runId: string): Promise<boolean>;
  /**
   * Optional: forgets the run's stored events before they age out. A metadata-only run's, once a
   * stream has delivered its `close` (its chunks and end carry the payloads its records withhold;
   * docs/decisions/0063-metadata-only-runs.md). A reader still replaying them then closes with
   * the run as the runs store has it.
   */
  drop?(runId: string): Promise<void>;
  /**
   * The run's stored events numbered after `afterSeq`, in order, its end last if stored, without
   * waiting for more: what a replay of a run that ended without its end on the bus (its executor
   * died, and the runs service failed it) can still send.
   */
  stored(runId: string, afterSeq?: number): Promise<RunEvent[]>;
  ready(): Promise<boolean>;
  close(): Promise<void>;
}

/** A run's events as a live subscription (RunEventBus.live) receives them. */
export interface LiveEvents extends AsyncIterable<RunEvent> {
  /**
   * Whether the run has stored events this subscription has not received, none having reached it
   * yet: they went out before it was in place (a run started while it was being set up), and
   * only `subscribe` has them. One question per kind of event to the bus's store, no consumer; asked once the run
   * has started, and again while nothing has come (an event may be stored just after the ask).
   * Once the subscription has received the run's first event, a gap shows any it misses.
   */
  missed(): Promise<boolean>;
}

/** A live subscription missed an event: resume with `subscribe` after `lastSeq`. */
export class LiveGap extends Error {
  constructor(readonly lastSeq: number) {
    super(`the live subscription missed an event after ${lastSeq}`);
    this.name = "LiveGap";
  }
}

/** An event larger than the bus takes (RunEventBus.maxEventBytes): no retry can store it. */
export class EventTooLarge extends Error {
  constructor(
    readonly runId: string,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(
      `an event of run ${runId} of ${bytes} bytes is larger than the bus takes (${limit} bytes)`,
    );
  }
}
