import { activeTracer, contextOf, SpanKind } from "@pies/common";
import { setTimeout as sleep } from "node:timers/promises";
import type { Client } from "@connectrpc/connect";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Logger } from "@pies/common";
import { decodeStoredRun, isMetadataOnly, type RunEvent, type RunEventBus } from "@pies/common/bus";
import { RunStatus, type Run, type RunsService } from "@pies/proto/runs";
import { runJson } from "../json/runs.js";
import { errorBody, HttpError } from "../errors.js";
import type { EventStream } from "./event-stream.js";

const decoder = new TextDecoder();
const terminal = (run: Run) =>
  run.status === RunStatus.COMPLETED || run.status === RunStatus.FAILED;

/** Backoff between subscriptions after the bus failed: 100 ms doubling to 5 s. */
const resubscribeDelayMs = (failures: number) => Math.min(5000, 100 * 2 ** (failures - 1));
/** How long a replay waits for a bus that cannot answer (whether it holds a run's end, its events). */
const BUS_ASK_MS = 15_000;
/**
 * How long after a run's end (its updated_at) a stream waits for the end to reach the bus: the
 * executor records the end before it publishes it, so a stream opened in between finds the run
 * ended and the bus without its end (decision 0068).
 */
const END_PUBLISH_WAIT_MS = 5_000;

export interface RelayOptions {
  runs: Client<typeof RunsService>;
  bus: RunEventBus;
  logger: Logger;
  heartbeatMs: number;
  projectId: string;
  /** The run as read when the stream opened. */
  run: Run;
  /** The client's Last-Event-ID: deliver only events after it. */
  afterSeq?: number;
  /**
   * The run's events live from its first (bus.live), for a stream that started the run: relayed
   * first, without a replay; on a gap the relay subscribes after the last event it sent.
   */
  live?: AsyncIterable<RunEvent>;
  /**
   * Whether the live subscription missed the run's first events, none having reached it (it was
   * in place only after they went out): LiveEvents.missed. Asked at once, and at each heartbeat
   * while nothing has come; without it, a heartbeat with nothing come counts as missed.
   */
  missed?: () => Promise<boolean>;
  /**
   * Ends the live subscription (its iteration then stops without a gap), when it missed the run's
   * first events: the relay replays from the bus after the last event it sent.
   */
  stopLive?: () => void;
  /**
   * Why a stream without `live` replays, when not for a Last-Event-ID: "reopened" (the run was
   * started by another) unless said otherwise ("live_setup": the live subscription failed).
   */
  replayReason?: ReplayReason;
  /** Told the final run when its `close` is sent. */
  onClose?: (final: Run) => void;
  /**
   * Told once, when the relay reads the run's events from the bus's store rather than live, why
   * (ReplayReason): the count of each says why streams leave the live path.
   */
  onReplay?: (reason: ReplayReason) => void;
}

/**
 * Why a stream's events are replayed from the bus's store: the client resumed with
 * Last-Event-ID, or opened the stream of a run already started (a reconnect without it, a second
 * reader); the live subscription could not be set up, missed the run's first events (in place
 * after they went out), or lost one later (a gap: dropped by the server, or a reconnect).
 */
export type ReplayReason = "resumed" | "reopened" | "live_setup" | "missed" | "gap";

/**
 * Relays a run's events from the bus to one SSE response until the run's `close` has been sent or
 * the client has gone. It never rejects, and it always ends the response. See RunRelay.
 */
export function relayRun(out: EventStream, options: RelayOptions): Promise<void> {
  return new RunRelay(out, options).relay();
}

/**
 * One run's relay to one response, in its steps:
 *
 * - **replay** (`relay`): the stored events after Last-Event-ID, then the live ones. A
 *   subscription that fails or ends early (NATS restarted, connection lost) is made again after
 *   the last event sent, with backoff; events already sent are skipped. A reconnect to an ended
 *   run replays from the start of the run's events and skips those up to Last-Event-ID, so a
 *   Last-Event-ID at or past the end (the `close` event's own id) gets `close` again at once.
 * - **heartbeat** (`beat`): a comment line every `heartbeatMs`, and with no event since the last
 *   beat, a **reconcile** with the runs store: a run seen ended at two such beats in a row whose end
 *   the bus did not deliver (aged out, lost, bus unreachable, or the client is past it) closes with
 *   the stored run. One beat of grace because the executor records a run before it publishes its
 *   end.
 * - **close**: `event: close` with the final run, once; or **fail**: `event: error` with the error
 *   body every other error has (DESIGN.md §10), when the relay cannot go on (an end event that
 *   cannot be read, or a fault of its own). The client may read the run at `GET /runs/:id`.
 */
export class RunRelay {
  private readonly runId: string;
  private lastSeq: number;
  /** No event since the last beat. */
  private quiet = true;
  /** Beats in a row that found the run ended in the runs store. */
  private endedBeats = 0;
  /** A store check is in flight. */
  private checking = false;
  /** `close` was sent (or would have been, had the client stayed). */
  private closed = false;
  /** Events come from the live subscription (until a gap, its end, or it missed the first). */
  private living = false;
  /** The bus is being asked whether the live subscription missed the run's first events. */
  private askingMissed = false;
  /** Why the live subscription was given up (a replay follows). */
  private leftLive: ReplayReason | undefined;

  constructor(
    private readonly out: EventStream,
    private readonly options: RelayOptions,
  ) {
    this.runId = options.run.id;
    this.lastSeq = options.afterSeq ?? 0;
  }

  /** Replays, then relays, until the stream ends. Never rejects; always ends the response. */
  async relay(): Promise<void> {
    const heartbeat = setInterval(() => void this.beat(), this.options.heartbeatMs);
    heartbeat.unref();
    try {
      await this.replay();
    } catch (err) {
      // Nothing in replay should throw; if something does, the client is told, in the error shape.
      this.options.logger.error({ err, runId: this.runId }, "run stream failed");
      this.fail(
        new HttpError(500, "internal", "the run's stream failed; reconnect with Last-Event-ID"),
      );
    } finally {
      clearInterval(heartbeat);
      this.out.end();
    }
  }

  private async replay(): Promise<void> {
    const { bus, logger, run, live } = this.options;
    const { out, runId } = this;
    if (live) {
      this.living = true;
      // Off the way to the first event: its answer matters only when all went out before.
      if (this.options.missed) void this.askMissed();
      try {
        for await (const event of live) if (await this.deliver(event)) return;
      } catch (err) {
        if (!out.open) return;
        this.leftLive ??= "gap";
        logger.debug({ err, runId }, "live run events missed one; subscribing after the last");
      } finally {
        this.living = false;
      }
      if (!out.open) return;
    }
    const reason =
      this.leftLive ??
      (this.options.afterSeq !== undefined
        ? "resumed"
        : live
          ? "gap"
          : (this.options.replayReason ?? "reopened"));
    // An ended run's (bounded) events are replayed from the start, on every subscription, so that
    // the end comes again even to a client already past it. One whose end the bus does not hold
    // (its executor died before publishing it and the runs service failed the run, or its events
    // have aged out) gets the events the bus still holds, then `close` with the stored run.
    const replayFromStart = terminal(run);
    if (replayFromStart && !(await this.endOnBus(run))) {
      const events = await this.askBus(() => bus.stored(runId, this.lastSeq), []);
      if (events.length > 0) this.options.onReplay?.(reason);
      for (const event of events) {
        if (event.kind === "end" || !out.open) break;
        await this.deliver(event);
      }
      return this.close(run);
    }
    this.options.onReplay?.(reason);
    for (let failures = 0; out.open;) {
      try {
        const from = replayFromStart ? undefined : this.lastSeq || undefined;
        for await (const event of bus.subscribe(runId, { afterSeq: from, signal: out.signal })) {
          failures = 0;
          if (await this.deliver(event)) return;
        }
        if (!out.open) return;
        logger.warn({ runId }, "run stream subscription ended early; subscribing again");
      } catch (err) {
        if (!out.open) return;
        logger.warn({ err, runId }, "run stream subscription failed; subscribing again");
      }
      // Cut short (rejected) when the stream ends; the loop then stops.
      await sleep(resubscribeDelayMs(++failures), undefined, { signal: out.signal }).catch(
        () => {},
      );
    }
  }

  /**
   * Whether the bus holds the ended run's end. One that ended a moment ago may be about to: the
   * bus is asked again (25 ms doubling to 400 ms) until END_PUBLISH_WAIT_MS past its end, so the
   * stream closes with the executor's final run (a metadata-only run's store copy has no payloads).
   */
  private async endOnBus(run: Run): Promise<boolean> {
    const { bus } = this.options;
    const until = run.updatedAt ? timestampMs(run.updatedAt) + END_PUBLISH_WAIT_MS : 0;
    for (let wait = 25; ; wait = Math.min(400, wait * 2)) {
      if (await this.askBus(() => bus.hasEnd(this.runId), false)) return true;
      if (!this.out.open || Date.now() + wait > until) return false;
      await sleep(wait, undefined, { signal: this.out.signal }).catch(() => {});
    }
  }

  /**
   * The bus's answer to `ask`. A bus that cannot answer (NATS restarting) is asked again, backing
   * off as a subscription does, for up to BUS_ASK_MS: answered from the store at once, a replay in
   * that moment would close without the run's messages. Past that (or once the client has gone),
   * `otherwise`.
   */
  private async askBus<T>(ask: () => Promise<T>, otherwise: T): Promise<T> {
    const { logger } = this.options;
    const { out, runId } = this;
    const until = Date.now() + BUS_ASK_MS;
    for (let failures = 0; ;) {
      try {
        return await ask();
      } catch (err) {
        if (!out.open || Date.now() >= until) return otherwise;
        logger.warn({ err, runId }, "the bus cannot answer the run's replay; asking again");
      }
      await sleep(resubscribeDelayMs(++failures), undefined, { signal: out.signal }).catch(
        () => {},
      );
    }
  }

  /** Relays one event unless already sent; true once the stream is closed (the end). */
  private async deliver(event: RunEvent): Promise<boolean> {
    // Tracing on: the event's delivery in the trace of the run that published it.
    if (event.traceparent) traceDelivery(event.traceparent, event.kind, this.runId);
    if (event.kind === "end") {
      await this.closeWithEnd(event.data, event.seq);
      return true;
    }
    if (event.seq <= this.lastSeq) return false;
    this.lastSeq = event.seq;
    this.quiet = false;
    if (event.kind === "repair") {
      // The answer so far failed the output schema: a new one follows (JSON {attempt, errors}).
      this.out.event("repair", decoder.decode(event.data), event.seq);
    } else {
      this.out.event("message", JSON.stringify(decoder.decode(event.data)), event.seq);
    }
    return false;
  }

  /** Each heartbeat: a comment, and when the bus was quiet, a reconcile with the runs store. */
  private async beat() {
    this.out.comment("keep-alive");
    // Events are flowing: the bus is doing its job, and the runs store need not be asked.
    if (!this.quiet) {
      this.quiet = true;
      this.endedBeats = 0;
      return;
    }
    // Asked again while the live subscription has delivered nothing (an event that went out
    // before it was in place may have been stored only after the first ask). Once it has
    // delivered the run's first event a gap shows any it misses: a pause, however long, keeps it.
    if (this.living && this.lastSeq === 0) void this.askMissed();
    if (this.checking || !this.out.open) return;
    this.checking = true;
    try {
      await this.reconcile();
    } catch (err) {
      // Transient (the runs service is away): checked again at the next beat.
      this.options.logger.debug(
        { err, runId: this.runId },
        "run stream could not check the runs store",
      );
    } finally {
      this.checking = false;
    }
  }

  /** Gives the live subscription up for a replay when the bus says it missed the first events. */
  private async askMissed() {
    const { missed, logger } = this.options;
    if (this.askingMissed) return;
    this.askingMissed = true;
    try {
      // A bus that cannot say: replayed (complete, at the cost of a consumer).
      const gone = missed
        ? await missed().catch((err: unknown) => {
            logger.debug({ err, runId: this.runId }, "could not ask whether live events went out");
            return true;
          })
        : true;
      if (gone && this.living && this.lastSeq === 0) {
        this.leftLive ??= "missed";
        logger.debug({ runId: this.runId }, "live run events went out before it; replaying");
        this.options.stopLive?.();
      }
    } finally {
      this.askingMissed = false;
    }
  }

  /** Closes with the stored run once it has been seen ended at two quiet beats in a row. */
  private async reconcile() {
    const { run: current } = await this.options.runs.getRun({
      projectId: this.options.projectId,
      id: this.runId,
    });
    this.endedBeats = current && terminal(current) ? this.endedBeats + 1 : 0;
    if (current && this.endedBeats >= 2) this.close(current);
  }

  /** The bus's end event: the final run, or a failure when it cannot be read. */
  private async closeWithEnd(data: Uint8Array, seq: number) {
    let final: Run;
    try {
      // Written by this release or, during an upgrade, the one before (legacy-payloads.ts).
      final = decodeStoredRun(data);
    } catch (err) {
      this.options.logger.error(
        { err, runId: this.runId },
        "run stream got an unreadable end event",
      );
      // The runs store has the end too, once the run is recorded ended: close with it, so that a
      // client's reconnect is not answered with the same error again and again.
      const stored = await this.options.runs
        .getRun({ projectId: this.options.projectId, id: this.runId })
        .then(({ run }) => run)
        .catch(() => undefined);
      if (stored && terminal(stored)) return this.close(stored, seq);
      return this.fail(
        new HttpError(
          502,
          "bad_event",
          `the end event of run ${this.runId} could not be read; read the run at GET /runs/${this.runId}`,
        ),
      );
    }
    this.close(final, seq);
  }

  /**
   * `close` with the final run, once (whoever calls it first: the bus's end or a reconcile).
   * `onClose` is told even when the client has gone meanwhile: the run ended all the same.
   */
  private close(final: Run, seq?: number) {
    if (this.closed) return;
    this.closed = true;
    if (this.out.open) {
      this.out.last("close", JSON.stringify(runJson(final)), seq);
      // Delivered: a metadata-only run's events, which carry its payloads, go at once rather
      // than when they age out. One whose close never reached a client stays for its resume.
      if (isMetadataOnly(final)) this.dropEvents();
    }
    try {
      this.options.onClose?.(final);
    } catch (err) {
      this.options.logger.error({ err, runId: this.runId }, "run stream's onClose failed");
    }
  }

  /** Forgets the run's events on the bus, without holding the stream up (they age out else). */
  private dropEvents() {
    const { bus, logger } = this.options;
    bus.drop?.(this.runId).catch((err: unknown) => {
      logger.warn({ err, runId: this.runId }, "a metadata-only run's events could not be dropped");
    });
  }

  /** `error` with pies' error body (DESIGN.md §10), and the end of the stream. */
  private fail(error: HttpError) {
    this.out.last("error", JSON.stringify(errorBody(error)));
  }
}

/** A zero-length CONSUMER span: this gateway relayed the event to a client (tracing on only). */
function traceDelivery(traceparent: string, kind: string, runId: string) {
  activeTracer()
    ?.startSpan(
      `sse relay ${kind}`,
      { kind: SpanKind.CONSUMER, attributes: { "pies.run_id": runId } },
      contextOf(traceparent),
    )
    .end();
}
