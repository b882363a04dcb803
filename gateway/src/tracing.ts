import type { FastifyInstance, FastifyRequest } from "fastify";
import { trace, type Context } from "@opentelemetry/api";
import { activeTracer, extractContext, SpanKind, traceContext } from "@pies/common";

/** Each traced request's context (its SERVER span), for the handler to run in. */
const contexts = new WeakMap<FastifyRequest, Context>();

/**
 * When tracing is on (common/src/tracing.ts): a SERVER span per request, child of the caller's
 * `traceparent`, named by the route's pattern, ended when the response closes (SSE streams
 * included). Off: nothing is installed.
 */
export function installRequestTracing(app: FastifyInstance) {
  const tracer = activeTracer();
  if (!tracer) return;
  app.addHook("onRequest", (request, reply, done) => {
    const parent = extractContext(request.headers);
    const span = tracer.startSpan(
      `${request.method} ${request.routeOptions.url ?? "unmatched"}`,
      {
        kind: SpanKind.SERVER,
        attributes: { "http.request.method": request.method, "pies.request_id": request.id },
      },
      parent,
    );
    contexts.set(request, trace.setSpan(parent, span));
    reply.raw.once("close", () => {
      span.setAttribute("http.response.status_code", reply.raw.statusCode);
      span.end();
    });
    done();
  });
}

/** Runs a handler in its request's trace context (as is, when the request is not traced). */
export function inRequestTrace<T>(request: FastifyRequest, fn: () => T): T {
  const ctx = contexts.get(request);
  return ctx ? traceContext.with(ctx, fn) : fn();
}
