import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// What operators rely on: x-request-id, /metrics, the per-key rate limit and CORS, through the
// real gateway over the real services in memory.
let pies: TestPies;
let app: FastifyInstance;

beforeAll(async () => {
  pies = await startTestPies({ gateway: { corsOrigins: ["https://app.example"] } });
  app = pies.app;
}, 60_000);

afterAll(async () => {
  await pies?.close();
});

async function interaction() {
  const prompt = await request(app, "POST", "/prompts", {
    key: pies.key,
    body: { name: "p", role: "user", content_type: "jst", content: "return `Say ${w}`" },
  });
  const created = await request(app, "POST", "/interactions", {
    key: pies.key,
    body: {
      name: "Ops",
      environment: pies.environmentId,
      prompts: [{ type: "template", template: prompt.json.id }],
    },
  });
  expect(created.status, created.text).toBe(201);
  return created.json.id as string;
}

/** The value of one series in the Prometheus text (one without labels: `{}`), 0 when absent. */
function sample(text: string, name: string, labels: Record<string, string>): number {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  const line = text
    .split("\n")
    .find(
      (l) =>
        (wanted.length === 0 ? l.startsWith(`${name} `) : l.startsWith(`${name}{`)) &&
        wanted.every((w) => l.includes(w)),
    );
  return line ? Number(line.split(" ").at(-1)) : 0;
}

const metrics = async () => (await app.inject({ method: "GET", url: "/metrics" })).body;

describe("x-request-id", () => {
  it("echoes a sane one, replaces a missing or unsafe one", async () => {
    const given = await request(app, "GET", "/environments", {
      key: pies.key,
      headers: { "x-request-id": "req-42.a:b" },
    });
    expect(given.headers["x-request-id"]).toBe("req-42.a:b");
    const unsafe: Record<string, string>[] = [
      {},
      { "x-request-id": "x".repeat(200) },
      { "x-request-id": "a b<c>" },
    ];
    for (const headers of unsafe) {
      const r = await request(app, "GET", "/environments", { key: pies.key, headers });
      expect(r.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/);
    }
    // On errors too.
    const refused = await request(app, "GET", "/environments", {
      headers: { "x-request-id": "err-1" },
    });
    expect(refused.status).toBe(401);
    expect(refused.headers["x-request-id"]).toBe("err-1");
  });
});

describe("GET /metrics", () => {
  it("counts requests by route pattern and status, executions by status and provider, open streams", async () => {
    const id = await interaction();
    const before = await metrics();
    const route = { method: "GET", route: "/api/v1/runs/:id", status: "200" };
    const executed = await request(app, "POST", `/interactions/${id}/execute`, {
      key: pies.key,
      body: { data: { w: "hi" } },
    });
    expect(executed.status).toBe(200);
    await request(app, "GET", `/runs/${executed.json.id}`, { key: pies.key });
    await request(app, "GET", `/runs/${executed.json.id}`, { key: pies.key });
    const created = await request(app, "POST", "/runs", {
      key: pies.key,
      body: { interaction: id, stream: true, data: { w: "yo" } },
    });
    const stream = await request(app, "GET", `/runs/${created.json.id}/stream`, { key: pies.key });
    expect(parseSse(stream.text).at(-1)?.event).toBe("close");
    // A second reader of the ended run is not a second execution.
    await request(app, "GET", `/runs/${created.json.id}/stream`, { key: pies.key });

    const after = await metrics();
    expect(after).toContain("# TYPE pies_http_request_duration_seconds histogram");
    const done = { status: "completed", provider: "test" };
    expect(sample(after, "pies_executions_total", done)).toBe(
      sample(before, "pies_executions_total", done) + 2,
    );
    // The streamed run's creation is no execution of its own.
    expect(sample(after, "pies_executions_total", { status: "created" })).toBe(0);
    expect(sample(after, "pies_http_requests_total", route)).toBe(
      sample(before, "pies_http_requests_total", route) + 2,
    );
    expect(sample(after, "pies_http_request_duration_seconds_count", route)).toBe(
      sample(before, "pies_http_request_duration_seconds_count", route) + 2,
    );
    // Ids never become labels.
    expect(after).not.toContain(executed.json.id);
    expect(after).toMatch(/^pies_sse_streams_active 0$/m);
    // The in-memory bus holds the streamed run's events, within its bound.
    const held = (text: string, name: string) => sample(text, name, {});
    expect(held(after, "pies_event_bus_runs")).toBe(held(before, "pies_event_bus_runs") + 1);
    expect(held(after, "pies_event_bus_bytes")).toBeGreaterThan(
      held(before, "pies_event_bus_bytes"),
    );
    expect(held(after, "pies_event_bus_max_bytes")).toBe(64 * 2 ** 20);
    expect(after).toContain("pies_gateway_nodejs_eventloop_lag_seconds");
  });

  it("shows the routing of virtual environments: breakers and failovers", async () => {
    const environment = (body: object) =>
      request(app, "POST", "/environments", { key: pies.key, body }).then((r) => {
        expect(r.status, r.text).toBe(201);
        return r.json.id as string;
      });
    const member = await environment({ provider: "test", default_model: "test" });
    const virtual = await environment({
      provider: "virtual_lb",
      config: {
        failover: true,
        entries: [
          { model: `${member}::test-refused`, weight: 1_000_000 },
          { model: `${member}::` },
        ],
      },
    });
    const id = await interaction();
    const executed = await request(app, "POST", `/interactions/${id}/execute`, {
      key: pies.key,
      body: { data: { w: "hi" }, config: { environment: virtual } },
    });
    expect(executed.status, executed.text).toBe(200);
    const failedOver = executed.json.attempts.length - 1;
    const after = await metrics();
    const entry = { virtual_environment: virtual, environment: member };
    expect(
      sample(after, "pies_route_breaker_state", { ...entry, model: "test", state: "closed" }),
    ).toBe(1);
    expect(sample(after, "pies_route_failovers_total", { virtual_environment: virtual })).toBe(
      failedOver,
    );
  });

  it("counts 404s of unknown paths as one route", async () => {
    await request(app, "GET", "/no/such/path/1", { key: pies.key });
    await request(app, "GET", "/no/such/path/2", { key: pies.key });
    expect(await metrics()).toMatch(/route="unmatched",status="404"/);
  });
});

describe("the rate limit", () => {
  it("answers 429 with Retry-After past the limit, per credential; probes are never limited", async () => {
    const limited = await startTestPies({ gateway: { rateLimitPerMinute: 3 } });
    try {
      const other = await limited.catalog.createApiKey({ projectId: limited.projectId });
      const statuses: number[] = [];
      let last;
      for (let i = 0; i < 4; i++) {
        last = await request(limited.app, "GET", "/environments", { key: limited.key });
        statuses.push(last.status);
      }
      expect(statuses).toEqual([200, 200, 200, 429]);
      expect(last!.json).toMatchObject({ status: 429, code: "rate_limited" });
      expect(Number(last!.headers["retry-after"])).toBeGreaterThan(0);
      expect(Number(last!.headers["retry-after"])).toBeLessThanOrEqual(60);
      // Another key has its own budget.
      expect(
        (await request(limited.app, "GET", "/environments", { key: other.secret })).status,
      ).toBe(200);
      for (let i = 0; i < 5; i++) {
        expect((await limited.app.inject({ method: "GET", url: "/healthz" })).statusCode).toBe(200);
      }
    } finally {
      await limited.close();
    }
  }, 60_000);

  it("limits bad credentials too (the limit comes before authentication)", async () => {
    const limited = await startTestPies({ gateway: { rateLimitPerMinute: 2 } });
    try {
      const unknown = `sk-${"Z".repeat(43)}`;
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) {
        statuses.push(
          (await request(limited.app, "GET", "/environments", { key: unknown })).status,
        );
      }
      expect(statuses).toEqual([401, 401, 429, 429]);
    } finally {
      await limited.close();
    }
  }, 60_000);
});

describe("CORS", () => {
  it("answers preflights for the configured origins only", async () => {
    const preflight = (origin: string) =>
      app.inject({
        method: "OPTIONS",
        url: "/api/v1/environments",
        headers: {
          origin,
          "access-control-request-method": "GET",
          "access-control-request-headers": "authorization",
        },
      });
    const allowed = await preflight("https://app.example");
    expect(allowed.statusCode).toBe(204);
    expect(allowed.headers["access-control-allow-origin"]).toBe("https://app.example");
    const other = await preflight("https://evil.example");
    expect(other.headers["access-control-allow-origin"]).toBeUndefined();
  });
});
