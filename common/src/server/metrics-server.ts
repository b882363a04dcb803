import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** What a Prometheus registry (prom-client's Registry) gives a scrape. */
export interface MetricsSource {
  metrics(): Promise<string>;
  contentType: string;
}

export interface MetricsServer {
  port: number;
  close(): Promise<void>;
}

/**
 * `GET /metrics` over HTTP/1.1 on a port of its own (PIES_METRICS_PORT), for a process whose
 * service port speaks HTTP/2 only, which Prometheus does not scrape (the executor, runs).
 */
export async function serveMetrics(
  registry: MetricsSource,
  host: string,
  port: number,
  /** Told of the server's errors once it listens (they must not end the process). */
  onError: (err: unknown) => void,
): Promise<MetricsServer> {
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
