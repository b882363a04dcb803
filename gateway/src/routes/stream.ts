import type { FastifyInstance, FastifyRequest } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { errorResponse, idParams } from "../json/responses.js";
import { RunStreams } from "../sse/run-streams.js";
import { principalOf, type RouteContext } from "./context.js";

/** A query parameter given more than once counts once, as its first value (as before). */
const firstOf = (schema: z.ZodOptional<z.ZodString>) =>
  z.preprocess((value) => (Array.isArray(value) ? value[0] : value), schema);

/** The query of the stream route: the token and Last-Event-ID for clients that cannot set headers. */
const streamQuery = z
  .object({
    access_token: firstOf(
      z
        .string()
        .optional()
        .describe("The API key or JWT, for clients that cannot set headers (this route only)"),
    ),
    lastEventId: firstOf(z.string().optional().describe("As the Last-Event-ID header")),
  })
  .passthrough();

const EVENTS =
  "Server-Sent Events: `message` (a chunk of the result, as a JSON string), `repair` (the answer so " +
  "far failed the output schema; JSON {attempt, errors}), `close` (the final run, as GET /runs/{id}) " +
  "and, when the stream cannot go on, `error` (an error body, as every error). Each event but " +
  "`error` has an `id:`, for Last-Event-ID.";

/**
 * GET /runs/:id/stream: Server-Sent Events of a streamed run. The first request starts the run;
 * every request (a second reader, a reconnect with Last-Event-ID, a run that already ended) gets the
 * stored events replayed from the bus, then the live ones (RunStreams, sse/run-streams.ts).
 */
export function streamRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const streams = new RunStreams(ctx.deps, ctx.metrics, ctx.streamSlots);
  app.get(
    "/runs/:id/stream",
    {
      config: { auth: "stream" },
      // A HEAD would start the run and hold a stream open with nothing to show for it.
      exposeHeadRoute: false,
      schema: {
        summary: "Stream a run created with `stream: true` (starts it)",
        params: idParams,
        querystring: streamQuery,
        response: {
          200: { description: EVENTS, content: { "text/event-stream": { schema: z.string() } } },
          default: errorResponse,
        },
      },
    },
    (request, reply) =>
      streams.open(
        principalOf(request),
        { runId: request.params.id, afterSeq: lastEventId(request, request.query.lastEventId) },
        reply,
      ),
  );
}

/**
 * The Last-Event-ID header, or `?lastEventId=` for clients that cannot set headers. An id past
 * every sequence is kept as the largest one, so it reads as "after the end", not as "from the start".
 */
function lastEventId(request: FastifyRequest, fromQuery: string | undefined): number | undefined {
  const raw = request.headers["last-event-id"] ?? fromQuery;
  const text = String(Array.isArray(raw) ? raw[0] : (raw ?? "")).trim();
  if (!/^\d{1,30}$/.test(text)) return undefined;
  const seq = Math.min(Number(text), Number.MAX_SAFE_INTEGER);
  return seq > 0 ? seq : undefined;
}
