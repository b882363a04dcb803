import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { ServerResponse } from "node:http";
import { fromBinary } from "@bufbuild/protobuf";
import { RunSchema, RunStatus, type Run } from "@pies/proto/runs";
import { conflict, toHttpError } from "../errors.js";
import { runJson } from "../json/runs.js";
import { params, type RouteContext } from "./context.js";

const decoder = new TextDecoder();
const terminal = (run: Run) =>
  run.status === RunStatus.COMPLETED || run.status === RunStatus.FAILED;

/**
 * GET /runs/:id/stream: Server-Sent Events of a streamed run. The first request starts the run;
 * every request (a second reader, a reconnect with Last-Event-ID, a run that already ended) gets the
 * stored events replayed from the bus, then the live ones: `message` with each chunk as a JSON
 * string, then `close` with the final run.
 */
export function streamRoutes(app: FastifyInstance, ctx: RouteContext) {
  const { runs, executor, bus } = ctx.deps;

  app.get("/runs/:id/stream", async (request: FastifyRequest, reply: FastifyReply) => {
    const principal = await ctx.auth.authenticate(request, true);
    const runId = params(request).id!;
    const projectId = principal.projectId;
    let { run } = await runs.getRun({ projectId, id: runId });
    if (!run!.stream) throw conflict(`run ${runId} was not created with stream: true`);
    const afterSeq = lastEventId(request);

    if (run!.status === RunStatus.CREATED) {
      ({ run } = await executor.startRun({ projectId, runId }));
    }

    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache, no-transform",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    res.flushHeaders();
    const abort = new AbortController();
    res.on("close", () => abort.abort());

    const close = (final: Run, seq?: number) => {
      writeEvent(res, "close", JSON.stringify(runJson(final)), seq);
      res.end();
      abort.abort();
    };

    try {
      // An ended run whose events have aged out of the bus is answered from the runs store.
      if (terminal(run!) && !(await bus.hasEnd(runId))) return close(run!);

      const heartbeat = setInterval(async () => {
        res.write(": keep-alive\n\n");
        // A run that ended without its end event reaching the bus must not hold the stream open.
        try {
          const { run: current } = await runs.getRun({ projectId, id: runId });
          // When the bus cannot tell (NATS unreachable), the runs store has the last word.
          const ended = await bus.hasEnd(runId).catch(() => false);
          if (current && terminal(current) && !ended) close(current);
        } catch {
          /* transient: checked again at the next beat */
        }
      }, ctx.deps.options.sseHeartbeatSeconds * 1000);
      heartbeat.unref();
      abort.signal.addEventListener("abort", () => clearInterval(heartbeat), { once: true });

      for await (const event of bus.subscribe(runId, { afterSeq, signal: abort.signal })) {
        if (event.kind === "chunk") {
          writeEvent(res, "message", JSON.stringify(decoder.decode(event.data)), event.seq);
        } else {
          return close(fromBinary(RunSchema, event.data), event.seq);
        }
      }
    } catch (err) {
      if (abort.signal.aborted) return;
      ctx.deps.logger.error({ err, runId }, "run stream failed");
      const error = toHttpError(err);
      writeEvent(res, "error", JSON.stringify({ code: error.code, message: error.message }));
      res.end();
      abort.abort();
    }
  });
}

function writeEvent(res: ServerResponse, event: string, data: string, id?: number) {
  res.write(`${id !== undefined ? `id: ${id}\n` : ""}event: ${event}\ndata: ${data}\n\n`);
}

function lastEventId(request: FastifyRequest): number | undefined {
  const raw =
    request.headers["last-event-id"] ?? (request.query as Record<string, string>)?.lastEventId;
  const seq = Number(Array.isArray(raw) ? raw[0] : raw);
  return Number.isInteger(seq) && seq > 0 ? seq : undefined;
}
