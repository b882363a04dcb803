import { serveMetrics, type MetricsServer } from "@pies/common/server";
import { collectDefaultMetrics, Counter, Gauge, Registry } from "prom-client";
import type { BreakerState, Router } from "./providers/router.js";

const STATES: BreakerState[] = ["closed", "open", "half_open"];

/**
 * The routing of virtual environments, as Prometheus metrics in `registry`:
 * - `pies_route_breaker_state{virtual_environment,environment,model,state}`: 1 for the state each
 *   entry's circuit is in (closed, open, half_open), 0 for the others, per executor;
 * - `pies_route_failovers_total{virtual_environment}`: calls that moved on to a next entry.
 * The edge and the embedded mode serve them at the gateway's /metrics (their executor is in its
 * process); a standalone executor on its own port (serveExecutorMetrics).
 */
export function registerRouteMetrics(router: Router, registry: Registry): void {
  new Gauge({
    name: "pies_route_breaker_state",
    help: "State of each virtual environment entry's circuit breaker (1: the state it is in)",
    labelNames: ["virtual_environment", "environment", "model", "state"] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [key, state] of router.states()) {
        const [virtual = "", environment = "", model = ""] = key.split("|");
        for (const s of STATES) {
          this.set(
            { virtual_environment: virtual, environment, model, state: s },
            s === state ? 1 : 0,
          );
        }
      }
    },
  });
  const failovers = new Counter({
    name: "pies_route_failovers_total",
    help: "Calls of a virtual environment that failed over to its next entry",
    labelNames: ["virtual_environment"] as const,
    registers: [registry],
  });
  router.onFailover = (virtual) => failovers.inc({ virtual_environment: virtual });
}

/**
 * A standalone executor's metrics (PIES_METRICS_PORT): `GET /metrics` over HTTP/1.1 on a port of
 * its own (serveMetrics), with Node's own metrics prefixed `pies_executor_`.
 */
export async function serveExecutorMetrics(
  router: Router,
  host: string,
  port: number,
  /** Told of the server's errors once it listens (they must not end the process). */
  onError: (err: unknown) => void,
): Promise<MetricsServer> {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "pies_executor_" });
  registerRouteMetrics(router, registry);
  return serveMetrics(registry, host, port, onError);
}
