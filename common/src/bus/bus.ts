/**
 * One event of a run's stream: a chunk of the result, a repair (the answer so far failed the
 * output schema and another follows; JSON `{attempt, errors}`), or the end (carrying the final
 * run).
 */
export interface RunEvent {
  /** Position in the bus, strictly increasing per run; the SSE `id:` and the resume point. */
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
 * NATS JetStream (subjects `<prefix>.run.<runId>.chunk|end`, captured with a bounded age so a late or
 * reconnecting reader gets the events replayed); embedded, an in-process stand-in.
 */
export interface RunEventBus {
  /**
   * Publishes one event and resolves once it is stored. `dedupId` makes a retried publish of the
   * same event idempotent.
   */
  publish(runId: string, kind: RunEvent["kind"], data: Uint8Array, dedupId: string): Promise<void>;
  /** Every stored event of the run (after `afterSeq`), then live ones, until the signal aborts. */
  subscribe(runId: string, options: SubscribeOptions): AsyncIterable<RunEvent>;
  /** Whether the end event of the run is still stored. */
  hasEnd(runId: string): Promise<boolean>;
  ready(): Promise<boolean>;
  close(): Promise<void>;
}
