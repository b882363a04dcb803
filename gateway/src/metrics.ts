import type { FastifyInstance } from "fastify";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { RunEventBus } from "@pies/common/bus";
import { listedModelOf } from "@pies/common";
import { RunStatus, type Run } from "@pies/proto/runs";

/**
 * The gateway's Prometheus metrics, served at `GET /metrics` (the text format; no key: scrape it on
 * the pod's port, it carries no tenant data). One registry per gateway, so that several in one
 * process (tests, the embedded mode beside nothing else) do not mix.
 *
 * - `pies_http_requests_total{method,route,status}` and `pies_http_request_duration_seconds` (a
 *   histogram): by the route's pattern (`/api/v1/runs/:id`), never the raw URL, so that ids do not
 *   make series without bound; 404s of unknown paths are one route, `unmatched`.
 * - `pies_sse_streams_active`: SSE streams open now.
 * - `pies_sse_replays_total{reason}`: streams that replayed their run's events from the bus's
 *   store, by why (gateway/src/sse/run-relay.ts ReplayReason).
 * - `pies_executions_total{status,provider}`: executions answered (blocking) or ended (streamed,
 *   when the gateway relays the end), by the run's final status and its environment's provider.
 * - `pies_cost_usd_total{project,model}`: what those executions' tokens cost (RunCost.total), by
 *   project and the model that answered; runs of a model of no known price add nothing.
 * - `pies_event_bus_runs`, `pies_event_bus_bytes`, `pies_event_bus_max_bytes`: what an in-memory
 *   event bus (the embedded mode's) holds, and its bound; absent with JetStream (whose store NATS's
 *   own monitoring shows).
 * - Node's own (event loop lag, heap, GC, CPU), prefixed `pies_gateway_`.
 */
export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly requests = new Counter({
    name: "pies_http_requests_total",
    help: "HTTP requests answered, by method, route pattern and status",
    labelNames: ["method", "route", "status"] as const,
    registers: [this.registry],
  });
  private readonly durations = new Histogram({
    name: "pies_http_request_duration_seconds",
    help: "Time to answer an HTTP request (SSE streams: until the stream ends), by method, route pattern and status",
    labelNames: ["method", "route", "status"] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly streams = new Gauge({
    name: "pies_sse_streams_active",
    help: "Server-Sent Events streams open now",
    registers: [this.registry],
  });
  /** Streams whose events were read from the bus's store rather than live, by ReplayReason. */
  readonly replays = new Counter({
    name: "pies_sse_replays_total",
    help: "SSE streams that replayed their run's events from the bus's store, by why they left the live path (resumed, reopened, live_setup, missed, gap)",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  private readonly executions = new Counter({
    name: "pies_executions_total",
    help: "Executions by final status and provider",
    labelNames: ["status", "provider"] as const,
    registers: [this.registry],
  });

  private readonly cost = new Counter({
    name: "pies_cost_usd_total",
    help: "What executions' tokens cost, USD, by project and model",
    labelNames: ["project", "model"] as const,
    registers: [this.registry],
  });

  constructor(bus?: Pick<RunEventBus, "held">) {
    collectDefaultMetrics({ register: this.registry, prefix: "pies_gateway_" });
    if (bus?.held) this.watchHeld(bus as Required<Pick<RunEventBus, "held">>);
  }

  /** Gauges read from the bus when scraped (nothing kept between scrapes). */
  private watchHeld(bus: Required<Pick<RunEventBus, "held">>) {
    const gauges = [
      ["pies_event_bus_runs", "Runs whose events the in-memory event bus holds", "runs"],
      ["pies_event_bus_bytes", "What the events the in-memory event bus holds weigh", "bytes"],
      [
        "pies_event_bus_max_bytes",
        "The most the in-memory event bus's events may weigh",
        "maxBytes",
      ],
    ] as const;
    for (const [name, help, key] of gauges) {
      new Gauge({
        name,
        help,
        registers: [this.registry],
        collect() {
          this.set(bus.held[key]);
        },
      });
    }
  }

  /** Counts and times every answered request (a hook: one label look-up and two updates). */
  install(app: FastifyInstance) {
    app.addHook("onResponse", (request, reply, done) => {
      const labels = {
        method: request.method,
        route: request.routeOptions.url ?? "unmatched",
        status: String(reply.statusCode),
      };
      this.requests.inc(labels);
      this.durations.observe(labels, reply.elapsedTime / 1000);
      done();
    });
  }

  /** `GET /metrics`, the Prometheus text format. */
  serve(app: FastifyInstance) {
    app.get(
      "/metrics",
      {
        schema: {
          summary: "Prometheus metrics (text format; no key: scrape it on the pod's port)",
          tags: ["operations"],
          produces: [this.registry.contentType],
        },
      },
      async (_request, reply) => {
        reply.header("content-type", this.registry.contentType);
        return this.registry.metrics();
      },
    );
  }

  /** An execution's end as the gateway saw it. */
  execution(run: Pick<Run, "status" | "provider" | "cost" | "projectId" | "modelId">) {
    this.executions.inc({
      status: (RunStatus[run.status] ?? "unknown").toLowerCase(),
      provider: run.provider || "unknown",
    });
    if (run.cost && run.cost.total > 0) {
      // A listed model by its listed name (its snapshots are many), another by its own: priced,
      // so named in its environment's config.prices, by an admin.
      const model = listedModelOf(run.modelId) ?? (run.modelId || "unknown");
      this.cost.inc({ project: run.projectId, model }, run.cost.total);
    }
  }
}
