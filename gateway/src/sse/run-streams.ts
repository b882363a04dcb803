import type { FastifyReply } from "fastify";
import { answered, inSpan } from "@pies/common";
import type { Principal } from "@pies/proto/catalog";
import { RunStatus, type Run } from "@pies/proto/runs";
import { runJson } from "../json/runs.js";
import type { GatewayDeps } from "../deps.js";
import type { StreamSlots } from "./stream-slots.js";
import type { GatewayMetrics } from "../metrics.js";
import { EventStream, STREAM_ENDED } from "./event-stream.js";
import { relayRun } from "./run-relay.js";

/** What opening a stream is told besides the caller. */
export type StreamRequest =
  | {
      runId: string;
      /** The client's Last-Event-ID (events after it only). */
      afterSeq?: number;
    }
  | {
      /** The id the run is to have (made here, so the stream listens before its first event). */
      runId: string;
      /**
       * One-request streaming (POST /runs with `Accept: text/event-stream`): makes the run and
       * starts it (ExecuteRequest.start). Its errors are the request's JSON errors.
       */
      start: () => Promise<Run>;
    };

/** The response header that names the run of a one-request stream. */
export const RUN_ID_HEADER = "pies-run-id";

/**
 * The SSE streams of runs of one gateway: each API key may hold `maxStreamsPerKey` open at once
 * (per process: behind a load balancer the bound is per replica). `open` is the whole life of one
 * stream:
 *
 * 1. take one of the key's slots (429 `rate_limited` with Retry-After when none is free), before
 *    a one-request stream's run is made;
 * 2. listen live to the run's events (a first open: no Last-Event-ID) while the run is read and
 *    started if it is still created (the executor: a run not created with `stream: true` is 409, an
 *    unknown one 404), or made started (one request) — errors so far are ordinary JSON responses;
 * 3. take the response over, as an EventStream, counted in `pies_sse_streams_active` (a
 *    one-request stream names the run in the `pies-run-id` header and a first `run` event);
 * 4. relay the run (RunRelay: replay, heartbeat, reconcile with the runs store, close);
 * 5. give the slot back, however the stream ended.
 */
export class RunStreams {
  constructor(
    private readonly deps: GatewayDeps,
    private readonly metrics: GatewayMetrics,
    /** The keys' stream slots, shared with the experiments' streams. */
    private readonly slots: StreamSlots,
  ) {}

  async open(principal: Principal, request: StreamRequest, reply: FastifyReply) {
    const { runs, executor, bus, logger, options } = this.deps;
    const release = this.slots.take(principal.apiKeyId);
    // A stream that opens a run from its start listens live (bus.live: no replay to set up); it is
    // given up if the run turns out to be started already. The subscription is set up while the
    // executor starts the run, not before (its round trip to NATS is off the way to the first
    // chunk), so the run's first events may go out before it is in place: the relay then finds a
    // gap, or the bus tells it the run has stored events the subscription never got (asked once
    // it is in place and the run started), and replays them from the bus.
    const listening = new AbortController();
    const stopListening = () => listening.abort(STREAM_ENDED);
    try {
      const oneRequest = "start" in request;
      const afterSeq = "afterSeq" in request ? request.afterSeq : undefined;
      let { runId } = request;
      const projectId = principal.projectId;
      const subscribe = afterSeq === undefined ? bus.live?.bind(bus) : undefined;
      const subscribing = subscribe
        ? inSpan("bus.live", {}, () => subscribe(runId, listening.signal)).catch((err: unknown) => {
            logger.debug({ err, runId }, "live subscription failed; the stream replays");
            return undefined;
          })
        : undefined;
      // One call reads the run and starts it if it is still created; or, in one request, one
      // call makes it started.
      const { run: read, started } = oneRequest
        ? await this.startAtOnce(request.start, projectId)
        : await executor.startRun({ projectId, runId });
      const run = answered(read, "run");
      // An executor before ExecuteRequest.start made the run under an id of its own.
      const listened = run.id === runId;
      runId = run.id;
      if (!started || !listened) stopListening();
      const live = started && listened ? await subscribing : undefined;
      if (oneRequest) reply.header(RUN_ID_HEADER, runId);
      reply.hijack();
      const out = new EventStream(reply.raw, logger, reply.getHeaders());
      this.metrics.streams.inc();
      // No id: a client's Last-Event-ID stays that of the run's last event (none yet).
      if (oneRequest) out.event("run", JSON.stringify(runJson(run)));
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

  /**
   * The run made and started by `start`. An executor of a release before ExecuteRequest.start
   * answers it created: it is then started as a second request would.
   */
  private async startAtOnce(start: () => Promise<Run>, projectId: string) {
    const run = await start();
    if (run.status !== RunStatus.CREATED) return { run, started: true };
    return this.deps.executor.startRun({ projectId, runId: run.id });
  }
}
