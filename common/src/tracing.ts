import {
  context,
  propagation,
  INVALID_SPAN_CONTEXT,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
  type Tracer,
} from "@opentelemetry/api";
import type { Interceptor } from "@connectrpc/connect";
import { z } from "zod";

/**
 * Traces across the hops (OpenTelemetry, W3C `traceparent`): the gateway's requests, every Connect
 * call (client and server spans), the NATS messages of a streamed run and the record log, so that
 * one trace shows a whole execution. Exported over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is
 * set; otherwise nothing is registered and every hook below is skipped where it is installed (no
 * interceptor, no header, no span object), so that tracing off costs nothing on the hot path.
 */
export const tracingConfigSchema = {
  OTEL_EXPORTER_OTLP_ENDPOINT: z.string().url().optional(),
  // Fraction of new traces recorded (a caller's sampled traceparent is always followed).
  OTEL_TRACES_SAMPLER_RATIO: z.coerce.number().min(0).max(1).default(1),
};

let tracer: Tracer | undefined;
/** What `inSpan` hands its function when tracing is off: one shared span that records nothing. */
const NO_SPAN = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/** Whether this process records traces (decided once, at start). */
export function tracingEnabled(): boolean {
  return tracer !== undefined;
}

/** The tracer, when tracing is on. */
export function activeTracer(): Tracer | undefined {
  return tracer;
}

/**
 * Registers the SDK for `serviceName` when an endpoint is configured, and returns what flushes and
 * stops it; without one, does nothing. Call before building servers and clients.
 */
export async function startTracing(
  serviceName: string,
  settings: {
    OTEL_EXPORTER_OTLP_ENDPOINT?: string | undefined;
    OTEL_TRACES_SAMPLER_RATIO?: number;
  },
): Promise<() => Promise<void>> {
  const endpoint = settings.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!endpoint || tracer) return async () => {};
  // Loaded only when tracing is on: the SDK and exporter stay out of every other process.
  const [
    { TracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler },
    { OTLPTraceExporter },
    { AsyncLocalStorageContextManager },
    { W3CTraceContextPropagator },
    { resourceFromAttributes },
  ] = await Promise.all([
    import("@opentelemetry/sdk-trace"),
    import("@opentelemetry/exporter-trace-otlp-http"),
    import("@opentelemetry/context-async-hooks"),
    import("@opentelemetry/core"),
    import("@opentelemetry/resources"),
  ]);
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": `pies-${serviceName}` }),
    sampler: new ParentBasedSampler({
      root: new TraceIdRatioBasedSampler(settings.OTEL_TRACES_SAMPLER_RATIO ?? 1),
    }),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: new OTLPTraceExporter({ url: `${endpoint.replace(/\/$/, "")}/v1/traces` }),
        scheduledDelayMillis: 500,
      }),
    ],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  tracer = trace.getTracer("pies");
  return async () => {
    await provider.forceFlush().catch(() => {});
    await provider.shutdown().catch(() => {});
  };
}

/** Headers as a carrier: Web `Headers` (Connect) or Node's incoming headers (Fastify). */
type Carrier = Headers | Record<string, string | string[] | undefined>;

const getter: TextMapGetter<Carrier> = {
  keys: (carrier) => (carrier instanceof Headers ? [...carrier.keys()] : Object.keys(carrier)),
  get: (carrier, key) => {
    if (carrier instanceof Headers) return carrier.get(key) ?? undefined;
    return carrier[key];
  },
};

const setter: TextMapSetter<Carrier> = {
  set: (carrier, key, value) => {
    if (carrier instanceof Headers) carrier.set(key, value);
    else carrier[key] = value;
  },
};

/** The trace context carried by headers (W3C traceparent), as a parent for new spans. */
export function extractContext(carrier: Carrier): Context {
  return propagation.extract(ROOT_CONTEXT, carrier, getter);
}

/** Writes the current (or given) trace context into headers. */
export function injectContext(carrier: Carrier, from: Context = context.active()): void {
  propagation.inject(from, carrier, setter);
}

/** The current trace context as a `traceparent` value ("" when tracing is off or there is none). */
export function currentTraceparent(): string {
  if (!tracer) return "";
  const carrier: Record<string, string> = {};
  injectContext(carrier);
  return carrier.traceparent ?? "";
}

/** The context a stored `traceparent` names (ROOT when empty). */
export function contextOf(traceparent: string | undefined): Context {
  return traceparent ? extractContext({ traceparent }) : ROOT_CONTEXT;
}

/**
 * Runs `fn` in a span (child of `parent`, else of the active context); ends it, records failure.
 * With tracing off, `fn`'s own promise, not one more around it (a promise and its reactions per
 * call, on the paths every execution takes); a throw is still a rejection.
 */
export function inSpan<T>(
  name: string,
  options: { kind?: SpanKind; parent?: Context; attributes?: Record<string, string | number> },
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const t = tracer;
  if (!t) {
    try {
      return fn(NO_SPAN);
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }
  return inTracedSpan(t, name, options, fn);
}

async function inTracedSpan<T>(
  t: Tracer,
  name: string,
  options: { kind?: SpanKind; parent?: Context; attributes?: Record<string, string | number> },
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = options.parent ?? context.active();
  return t.startActiveSpan(
    name,
    { kind: options.kind ?? SpanKind.INTERNAL, attributes: options.attributes ?? {} },
    parent,
    async (span) => {
      try {
        return await fn(span);
      } catch (err) {
        span.recordException(err as Error);
        span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

/** The callee's side of a Connect call: a SERVER span, child of the caller's traceparent. */
export function serverTracingInterceptor(): Interceptor {
  return (next) => (req) =>
    // Probes are not traced: they would bury the executions.
    req.service.typeName === "grpc.health.v1.Health"
      ? next(req)
      : inSpan(
          `${req.service.typeName}/${req.method.name}`,
          { kind: SpanKind.SERVER, parent: extractContext(req.header) },
          () => next(req),
        );
}

/** The caller's side: a CLIENT span, and its traceparent on the call. */
export function clientTracingInterceptor(): Interceptor {
  return (next) => (req) =>
    req.service.typeName === "grpc.health.v1.Health"
      ? next(req)
      : inSpan(`${req.service.typeName}/${req.method.name}`, { kind: SpanKind.CLIENT }, () => {
          injectContext(req.header);
          return next(req);
        });
}

export { context as traceContext, SpanKind };
