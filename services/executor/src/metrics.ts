import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
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

export interface MetricsServer {
  port: number;
  close(): Promise<void>;
}

/**
 * A standalone executor's metrics (PIES_METRICS_PORT): `GET /metrics` over HTTP/1.1 on a port of
 * its own (the service's port speaks HTTP/2 only, which Prometheus does not scrape), with Node's
 * own metrics prefixed `pies_executor_`.
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
  const server: Server = createServer((req, res) => {
    if (req.method !== "GET" || req.url?.split("?")[0] !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { "content-type": registry.contentType }).end(text),
      () => res.writeHead(500, { "content-type": "text/plain" }).end("metrics failed\n"),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      server.on("error", onError);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
