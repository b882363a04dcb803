import type { FastifyReply } from "fastify";
import { answered, inSpan, KeySlots } from "@pies/common";
import type { Principal } from "@pies/proto/catalog";
import type { GatewayDeps } from "../deps.js";
import { tooManyRequests } from "../errors.js";
import type { GatewayMetrics } from "../metrics.js";
import { EventStream, STREAM_ENDED } from "./event-stream.js";
import { relayRun } from "./run-relay.js";

/**
 * Seconds a key over its open-stream bound is told to wait: streams free up as runs end, so soon,
 * but not in a tight loop.
 */
const STREAMS_RETRY_AFTER_SECONDS = 5;

/** What opening a stream is told besides the caller. */
export interface StreamRequest {
  runId: string;
  /** The client's Last-Event-ID (events after it only). */
  afterSeq?: number;
}

/**
 * The SSE streams of runs of one gateway: each API key may hold `maxStreamsPerKey` open at once
 * (per process: behind a load balancer the bound is per replica). `open` is the whole life of one
 * stream:
 *
 * 1. take one of the key's slots (429 `rate_limited` with Retry-After when none is free);
 * 2. listen live to the run's events (a first open: no Last-Event-ID) while the run is read and
 *    started if it is still created (the executor: a run not created with `stream: true` is 409, an
 *    unknown one 404) — errors so far are ordinary JSON responses;
 * 3. take the response over, as an EventStream, counted in `pies_sse_streams_active`;
 * 4. relay the run (RunRelay: replay, heartbeat, reconcile with the runs store, close);
 * 5. give the slot back, however the stream ended.
 */
export class RunStreams {
  private readonly slots: KeySlots;

  constructor(
    private readonly deps: GatewayDeps,
    private readonly metrics: GatewayMetrics,
  ) {
    this.slots = new KeySlots(deps.options.maxStreamsPerKey);
  }

  async open(principal: Principal, { runId, afterSeq }: StreamRequest, reply: FastifyReply) {
    const { runs, executor, bus, logger, options } = this.deps;
    const release = this.slots.take(principal.apiKeyId);
    if (!release) {
      throw tooManyRequests(
        `this API key has ${options.maxStreamsPerKey} streams open, the most allowed`,
        STREAMS_RETRY_AFTER_SECONDS,
      );
    }
    // A stream that opens a run from its start listens live (bus.live: no replay to set up); it is
    // given up if the run turns out to be started already. The subscription is set up while the
    // executor starts the run, not before (its round trip to NATS is off the way to the first
    // chunk), so the run's first events may go out before it is in place: the relay then finds a
    // gap, or the bus tells it the run has stored events the subscription never got (asked once
    // it is in place and the run started), and replays them from the bus.
    const listening = new AbortController();
    const stopListening = () => listening.abort(STREAM_ENDED);
    try {
      const projectId = principal.projectId;
      const subscribe = afterSeq === undefined ? bus.live?.bind(bus) : undefined;
      const subscribing = subscribe
        ? inSpan("bus.live", {}, () => subscribe(runId, listening.signal)).catch((err: unknown) => {
            logger.debug({ err, runId }, "live subscription failed; the stream replays");
            return undefined;
          })
        : undefined;
      // One call reads the run and starts it if it is still created.
      const { run: read, started } = await executor.startRun({ projectId, runId });
      if (!started) stopListening();
      const live = started ? await subscribing : undefined;
      const run = answered(read, "run");
      reply.hijack();
      const out = new EventStream(reply.raw, logger);
      this.metrics.streams.inc();
      out.signal.addEventListener("abort", release, { once: true });
      // The client gone, the live subscription stops too (the relay may be waiting on it).
      out.signal.addEventListener("abort", stopListening, { once: true });
      out.signal.addEventListener("abort", () => this.metrics.streams.dec(), { once: true });
      await relayRun(out, {
        runs,
        bus,
        logger,
        heartbeatMs: options.sseHeartbeatSeconds * 1000,
        projectId,
        run,
        afterSeq,
        // This request started the run: its events, live, from the first that reached the
        // subscription once in place (the relay replays any it missed).
        ...(live ? { live, missed: () => live.missed(), stopLive: stopListening } : {}),
        // Counted once, by the stream that started the run.
        ...(started ? { onClose: (final) => this.metrics.execution(final) } : {}),
        ...(started && subscribe && !live ? { replayReason: "live_setup" as const } : {}),
        // Counted where the bus has a live path to leave (not the embedded mode's, in memory).
        ...(bus.live ? { onReplay: (reason) => this.metrics.replays.inc({ reason }) } : {}),
      });
    } finally {
      stopListening();
      release();
    }
  }
}
