import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  expectJson,
  gatewayApi,
  internalToken,
  readSse,
  startTestStack,
  startTraceCollector,
  type ApiClient,
  type CollectedSpan,
  type Stack,
  type TraceCollector,
} from "@pies/testkit";

// OpenTelemetry across the hops: the four processes export to an OTLP receiver held in this test
// (OTEL_EXPORTER_OTLP_ENDPOINT), and one execution's spans, from all four, share one trace, linked
// by W3C traceparent through the gateway, every Connect call, the record log and the NATS
// messages of a streamed run.
let stack: Stack;
let collector: TraceCollector;
let api: ApiClient;

beforeAll(async () => {
  collector = await startTraceCollector();
  stack = await startTestStack("tracing", {
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url },
  });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
});

afterAll(async () => {
  try {
    if (stack) expect(await stack.stop()).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
  } finally {
    await collector?.close();
  }
});

/** A traceparent of a trace of the test's own, as a traced client sends it. */
function traceparent() {
  const traceId = randomBytes(16).toString("hex");
  return { traceId, header: `00-${traceId}-${randomBytes(8).toString("hex")}-01` };
}

/** A new interaction: its first execution resolves it from the catalog (no cache entry yet). */
async function interaction(name: string) {
  const json = (r: Response, status: number) => expectJson(r, status, () => stack.output());
  const prompt = await json(
    await api("/prompts", {
      body: { name, role: "user", content_type: "jst", content: "return `Trace ${w}`" },
    }),
    201,
  );
  const created = await json(
    await api("/interactions", {
      body: {
        name,
        environment: stack.bootstrap.environment,
        prompts: [{ type: "template", template: prompt.id }],
      },
    }),
    201,
  );
  return created.id as string;
}

const services = (spans: CollectedSpan[], traceId: string) =>
  new Set(spans.filter((s) => s.traceId === traceId).map((s) => s.service));

const ALL = ["pies-gateway", "pies-executor", "pies-catalog", "pies-runs"];

/** Every span of the trace has its parent in the trace, but the root (the client's span). */
function expectConnected(spans: CollectedSpan[], traceId: string, rootParent: string) {
  const ours = spans.filter((s) => s.traceId === traceId);
  const ids = new Set(ours.map((s) => s.spanId));
  const orphans = ours.filter((s) => s.parentSpanId !== rootParent && !ids.has(s.parentSpanId));
  expect(orphans.map((s) => `${s.service}:${s.name}`)).toEqual([]);
}

describe("one trace per execution", () => {
  it("spans gateway, executor, catalog and runs for a blocking execution", async () => {
    const id = await interaction("TracedBlocking");
    const { traceId, header } = traceparent();
    const response = await fetch(`${stack.gatewayUrl}/api/v1/interactions/${id}/execute`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${stack.bootstrap.key}`,
        "content-type": "application/json",
        traceparent: header,
      },
      body: JSON.stringify({ data: { w: "blocking" } }),
    });
    expect(response.status).toBe(200);
    await collector.waitFor((spans) => ALL.every((s) => services(spans, traceId).has(s)));
    const names = collector.spans.filter((s) => s.traceId === traceId).map((s) => s.name);
    expect(names).toEqual(
      expect.arrayContaining([
        "POST /api/v1/interactions/:id/execute",
        "pies.executor.v1.ExecutorService/Execute",
        "pies.catalog.v1.CatalogService/ResolveExecution",
        // The provider's time and the record's put, apart from pies' own work.
        "provider.complete",
        "runs.record.put",
        "runs.record.store",
      ]),
    );
    expectConnected(collector.spans, traceId, header.split("-")[2]!);
  });

  it("spans all four for a streamed execution, its NATS chunks included", async () => {
    const id = await interaction("TracedStreamed");
    const { traceId, header } = traceparent();
    const headers = {
      authorization: `Bearer ${stack.bootstrap.key}`,
      "content-type": "application/json",
      traceparent: header,
    };
    const created = await fetch(`${stack.gatewayUrl}/api/v1/runs`, {
      method: "POST",
      headers,
      body: JSON.stringify({ interaction: id, stream: true, data: { w: "streamed" } }),
    }).then((r) => r.json() as Promise<{ id: string }>);
    const events = await readSse(
      await fetch(`${stack.gatewayUrl}/api/v1/runs/${created.id}/stream`, { headers }),
    );
    expect(events.at(-1)?.event).toBe("close");
    await collector.waitFor(
      (spans) =>
        ALL.every((s) => services(spans, traceId).has(s)) &&
        spans.some((s) => s.traceId === traceId && s.name === "sse relay end"),
    );
    const names = collector.spans.filter((s) => s.traceId === traceId).map((s) => s.name);
    expect(names).toEqual(
      expect.arrayContaining([
        "POST /api/v1/runs",
        "GET /api/v1/runs/:id/stream",
        "pies.executor.v1.ExecutorService/StartRun",
        "sse relay chunk",
        "sse relay end",
        "runs.record.store",
      ]),
    );
    expectConnected(collector.spans, traceId, header.split("-")[2]!);
  });

  it("exports no key: neither the API key nor the internal credential is in any span", () => {
    const exported = collector.bodies.join("\n");
    expect(exported.length).toBeGreaterThan(0);
    expect(exported).not.toContain(stack.bootstrap.key);
    expect(exported).not.toContain(internalToken);
  });
});
