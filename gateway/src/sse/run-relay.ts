import { activeTracer, contextOf, SpanKind } from "@pies/common";
import { setTimeout as sleep } from "node:timers/promises";
import type { Client } from "@connectrpc/connect";
import { fromBinary } from "@bufbuild/protobuf";
import type { Logger } from "@pies/common";
import type { RunEventBus } from "@pies/common/bus";
import { RunSchema, RunStatus, type Run, type RunsService } from "@pies/proto/runs";
import { runJson } from "../json/runs.js";
import type { EventStream } from "./event-stream.js";

const decoder = new TextDecoder();
const terminal = (run: Run) =>
  run.status === RunStatus.COMPLETED || run.status === RunStatus.FAILED;

/** Backoff between subscriptions after the bus failed: 100 ms doubling to 5 s. */
const resubscribeDelayMs = (failures: number) => Math.min(5000, 100 * 2 ** (failures - 1));

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
  /** Told the final run when its `close` is sent. */
  onClose?: (final: Run) => void;
}

/**
 * Relays a run's events from the bus to one SSE response until the run's `close` has been sent or
 * the client has gone. It never rejects, and it always ends the response.
 *
 * - A subscription that fails or ends early (NATS restarted, connection lost) is made again after
 *   the last event sent, with backoff; events already sent are skipped.
 * - Each heartbeat with no event since the last one checks the runs store: a run seen ended at two
 *   such beats in a row whose end the bus did not deliver (aged out, lost, bus unreachable, or the
 *   client is past it) closes with the stored run. One beat of grace because the executor records
 *   a run before it publishes its end.
 * - A reconnect to an ended run replays from the start of the run's events and skips those up to
 *   Last-Event-ID, so a Last-Event-ID at or past the end (the `close` event's own id) gets `close`
 *   again at once.
 */
export async function relayRun(out: EventStream, options: RelayOptions): Promise<void> {
  const { bus, logger, run } = options;
  const runId = run.id;
  let lastSeq = options.afterSeq ?? 0;
  const close = (final: Run, seq?: number) => {
    options.onClose?.(final);
    out.event("close", JSON.stringify(runJson(final)), seq);
    out.end();
  };
  const heartbeat = setInterval(() => void beat(), options.heartbeatMs);
  heartbeat.unref();

  let checking = false;
  let endedBeats = 0;
  let quiet = true;
  async function beat() {
    out.comment("keep-alive");
    // Events are flowing: the bus is doing its job, and the runs store need not be asked.
    if (!quiet) {
      quiet = true;
      endedBeats = 0;
      return;
    }
    if (checking || !out.open) return;
    checking = true;
    try {
      const { run: current } = await options.runs.getRun({
        projectId: options.projectId,
        id: runId,
      });
      endedBeats = current && terminal(current) ? endedBeats + 1 : 0;
      if (current && endedBeats >= 2) close(current);
    } catch (err) {
      // Transient (the runs service is away): checked again at the next beat.
      logger.debug({ err, runId }, "run stream could not check the runs store");
    } finally {
      checking = false;
    }
  }

  try {
    // An ended run whose events have aged out of the bus (or whose bus cannot say) is answered
    // from the runs store. Otherwise its (bounded) events are replayed from the start, on every
    // subscription, so that the end comes again even to a client already past it.
    const replayFromStart = terminal(run);
    if (replayFromStart && !(await bus.hasEnd(runId).catch(() => false))) return close(run);
    for (let failures = 0; out.open;) {
      try {
        const from = replayFromStart ? undefined : lastSeq || undefined;
        for await (const event of bus.subscribe(runId, { afterSeq: from, signal: out.signal })) {
          // Tracing on: the event's delivery in the trace of the run that published it.
          if (event.traceparent) traceDelivery(event.traceparent, event.kind, runId);
          failures = 0;
          if (event.kind === "end") return close(fromBinary(RunSchema, event.data), event.seq);
          if (event.seq <= lastSeq) continue;
          lastSeq = event.seq;
          quiet = false;
          if (event.kind === "repair") {
            // The answer so far failed the output schema: a new one follows (JSON {attempt, errors}).
            out.event("repair", decoder.decode(event.data), event.seq);
          } else {
            out.event("message", JSON.stringify(decoder.decode(event.data)), event.seq);
          }
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
  } catch (err) {
    // Nothing above should throw; if it does, the client reconnects with its Last-Event-ID.
    logger.error({ err, runId }, "run stream failed");
  } finally {
    clearInterval(heartbeat);
    out.end();
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
