import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** One span as an OTLP/HTTP JSON export carried it. */
export interface CollectedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
}

export interface TraceCollector {
  /** The OTLP endpoint to give processes (OTEL_EXPORTER_OTLP_ENDPOINT). */
  url: string;
  spans: CollectedSpan[];
  /** Every export as received (to check that nothing secret is in them). */
  bodies: string[];
  /** Resolves once `predicate` holds over the spans collected (polling), or rejects at the timeout. */
  waitFor(predicate: (spans: CollectedSpan[]) => boolean, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/** An id as hex, whichever encoding the exporter used (hex, or base64 of the bytes). */
const hex = (id: unknown) => {
  const text = typeof id === "string" ? id : "";
  return /^[0-9a-f]*$/i.test(text)
    ? text.toLowerCase()
    : Buffer.from(text, "base64").toString("hex");
};

/**
 * An OTLP/HTTP receiver on loopback that keeps, in memory, every span the processes export
 * (`POST /v1/traces`, JSON): what a trace test asserts on without a collector to install.
 */
export async function startTraceCollector(): Promise<TraceCollector> {
  const spans: CollectedSpan[] = [];
  const bodies: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("error", () => res.destroy());
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method === "POST" && req.url === "/v1/traces") {
        try {
          const text = Buffer.concat(chunks).toString("utf8");
          bodies.push(text);
          const body = JSON.parse(text);
          for (const rs of body.resourceSpans ?? []) {
            const service =
              rs.resource?.attributes?.find((a: any) => a.key === "service.name")?.value
                ?.stringValue ?? "";
            for (const ss of rs.scopeSpans ?? []) {
              for (const s of ss.spans ?? []) {
                spans.push({
                  service,
                  traceId: hex(s.traceId),
                  spanId: hex(s.spanId),
                  parentSpanId: hex(s.parentSpanId ?? ""),
                  name: s.name,
                  kind: s.kind,
                });
              }
            }
          }
        } catch {
          res.writeHead(400).end();
          return;
        }
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
        return;
      }
      res.writeHead(404).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    bodies,
    async waitFor(predicate, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(spans)) {
        if (Date.now() > deadline) {
          throw new Error(
            `spans not collected in time; have: ${spans.map((s) => `${s.service}:${s.name}`).join(", ")}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
