import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { answered, KeySlots } from "@pies/common";
import { tooManyRequests } from "../errors.js";
import { EventStream } from "../sse/event-stream.js";
import { relayRun } from "../sse/run-relay.js";
import { routeId, type RouteContext } from "./context.js";
import { inRequestTrace } from "../tracing.js";

/**
 * Seconds a key over its open-stream bound is told to wait: streams free up as runs end, so soon,
 * but not in a tight loop.
 */
const STREAMS_RETRY_AFTER_SECONDS = 5;

/**
 * GET /runs/:id/stream: Server-Sent Events of a streamed run. The first request starts the run;
 * every request (a second reader, a reconnect with Last-Event-ID, a run that already ended) gets the
 * stored events replayed from the bus, then the live ones: `message` with each chunk as a JSON
 * string, then `close` with the final run. Each API key may hold `maxStreamsPerKey` open at once.
 */
export function streamRoutes(app: FastifyInstance, ctx: RouteContext) {
  const { runs, executor, bus, logger, options } = ctx.deps;
  // Per process: behind a load balancer the bound is per replica.
  const slots = new KeySlots(options.maxStreamsPerKey);

  app.get("/runs/:id/stream", (request: FastifyRequest, reply: FastifyReply) =>
    inRequestTrace(request, () => stream(request, reply)),
  );

  async function stream(request: FastifyRequest, reply: FastifyReply) {
    const principal = await ctx.auth.authenticate(request, true);
    const release = slots.take(principal.apiKeyId);
    if (!release) {
      throw tooManyRequests(
        `this API key has ${options.maxStreamsPerKey} streams open, the most allowed`,
        STREAMS_RETRY_AFTER_SECONDS,
      );
    }
    try {
      const runId = routeId(request);
      const projectId = principal.projectId;
      // One call reads the run and starts it if it is still created: a run not created with
      // stream: true is FAILED_PRECONDITION (409), an unknown one NOT_FOUND.
      const { run: read, started } = await executor.startRun({ projectId, runId });
      const run = answered(read, "run");
      reply.hijack();
      const out = new EventStream(reply.raw, logger);
      ctx.metrics.streams.inc();
      out.signal.addEventListener("abort", release, { once: true });
      out.signal.addEventListener("abort", () => ctx.metrics.streams.dec(), { once: true });
      await relayRun(out, {
        runs,
        bus,
        logger,
        heartbeatMs: options.sseHeartbeatSeconds * 1000,
        projectId,
        run,
        afterSeq: lastEventId(request),
        // Counted once, by the stream that started the run.
        ...(started ? { onClose: (final) => ctx.metrics.execution(final) } : {}),
      });
    } finally {
      release();
    }
  }
}

/**
 * The Last-Event-ID header, or `?lastEventId=` for clients that cannot set headers. An id past
 * every sequence is kept as the largest one, so it reads as "after the end", not as "from the start".
 */
function lastEventId(request: FastifyRequest): number | undefined {
  const raw =
    request.headers["last-event-id"] ?? (request.query as Record<string, string>)?.lastEventId;
  const text = String(Array.isArray(raw) ? raw[0] : (raw ?? "")).trim();
  if (!/^\d{1,30}$/.test(text)) return undefined;
  const seq = Math.min(Number(text), Number.MAX_SAFE_INTEGER);
  return seq > 0 ? seq : undefined;
}
