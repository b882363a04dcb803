import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// The real gateway over the real services, in memory: PGlite (a PostgreSQL engine) and the
// in-process bus; requests through Fastify's inject, no ports.
let pies: TestPies;
let app: FastifyInstance;
let key: string;
let otherKey: string;
let environmentId: string;

beforeAll(async () => {
  pies = await startTestPies();
  ({ app, key, environmentId } = pies);
  const { project: other } = await pies.catalog.createAccount({ name: "other" });
  otherKey = (await pies.catalog.createApiKey({ projectId: other!.id })).secret;
});

afterAll(async () => {
  await pies.close();
});

type Init = {
  method?: string;
  body?: unknown;
  token?: string | null;
  headers?: Record<string, string>;
};
function call(url: string, init: Init = {}) {
  const token = init.token === undefined ? key : init.token;
  return request(app, init.method ?? (init.body === undefined ? "GET" : "POST"), url, {
    key: token ?? undefined,
    body: init.body,
    headers: init.headers,
  });
}

async function interaction(extra: Record<string, unknown> = {}) {
  const prompt = await call("/prompts", {
    body: {
      name: "p",
      role: "user",
      content_type: "jst",
      content: "return `Tell me about ${topic}`",
      input_schema: {
        type: "object",
        properties: { topic: { type: "string" } },
        required: ["topic"],
      },
    },
  });
  expect(prompt.status).toBe(201);
  const created = await call("/interactions", {
    body: {
      name: "About",
      environment: environmentId,
      prompts: [{ type: "template", template: prompt.json.id }],
      ...extra,
    },
  });
  expect(created.status, created.text).toBe(201);
  return created.json;
}

describe("errors", () => {
  it("answers 401 as JSON without a key, with a malformed header and with an unknown key", async () => {
    for (const init of [
      { token: null },
      { headers: { authorization: "Basic abc" }, token: null },
      { token: "sk-nope" },
    ]) {
      const r = await call("/interactions", init);
      expect(r.status).toBe(401);
      expect(r.json).toMatchObject({ error: "Unauthorized", status: 401, code: "unauthorized" });
    }
  });

  it("answers bad JSON, wrong types and oversized bodies with 400 and 413", async () => {
    const bad = await call("/interactions", { body: "{not json" });
    expect(bad).toMatchObject({
      status: 400,
      json: { code: "invalid_request", message: "the request body is not valid JSON" },
    });
    const wrong = await call("/interactions", { body: { name: 42 } });
    expect(wrong.status).toBe(400);
    expect(wrong.json.message).toMatch(/^name:/);
    expect(wrong.json.details.issues[0].path).toBe("name");
    const huge = await call("/interactions", { body: { name: "x".repeat(70 * 1024) } });
    expect(huge).toMatchObject({ status: 413, json: { code: "payload_too_large" } });
    const badQuery = await call("/runs?limit=5000");
    expect(badQuery.status).toBe(400);
  });

  it("refuses NUL in strings, an over-long path and a body that is not JSON, as JSON errors", async () => {
    const nul = await call("/prompts", { body: '{"content":"a\\u0000b"}' });
    expect(nul).toMatchObject({ status: 400, json: { code: "invalid_request" } });
    expect(nul.json.message).toContain("NUL");
    const escaped = await call("/prompts", { body: '{"content":"a\\\\u0000b"}' });
    expect(escaped.status).toBe(201);
    expect(escaped.json.content).toBe("a\\u0000b");
    const long = await call(`/runs/${"a".repeat(5000)}`);
    expect(long.json).toMatchObject({ status: 414, code: "uri_too_long" });
    const text = await app.inject({
      method: "POST",
      url: "/api/v1/prompts",
      headers: { authorization: `Bearer ${key}`, "content-type": "text/plain" },
      payload: "hello",
    });
    expect(text.statusCode).toBe(415);
    expect(text.json()).toMatchObject({ code: "unsupported_media_type" });
  });

  it("answers unknown routes and unknown ids with 404, and conflicts with 409", async () => {
    expect((await call("/nothing")).json).toMatchObject({ status: 404, code: "not_found" });
    expect((await call("/interactions/000000000000000000000000")).status).toBe(404);
    for (const method of ["PUT", "DELETE"]) {
      const r = await call("/interactions/000000000000000000000000", {
        method,
        body: method === "PUT" ? {} : undefined,
      });
      expect(r.status).toBe(404);
    }
    const i = await interaction();
    const publish = await call(`/interactions/${i.id}/publish`, { body: {} });
    expect(publish.status).toBe(201);
    const onVersion = await call(`/interactions/${publish.json.id}`, { method: "PUT", body: {} });
    expect(onVersion.json).toMatchObject({ status: 409, code: "conflict" });
    const inUse = await call(`/environments/${environmentId}`, { method: "DELETE" });
    expect(inUse.json).toMatchObject({ status: 409, code: "conflict" });
    expect(inUse.json.message).toContain(i.id);
  });

  it("hides another project's resources behind 404", async () => {
    const i = await interaction();
    const run = await call(`/interactions/${i.id}/execute`, { body: { data: { topic: "x" } } });
    expect(run.status).toBe(200);
    for (const path of [
      `/interactions/${i.id}`,
      `/runs/${run.json.id}`,
      `/environments/${environmentId}`,
    ]) {
      expect((await call(path, { token: otherKey })).status).toBe(404);
    }
    expect(
      (
        await call(`/interactions/${i.id}/execute`, {
          token: otherKey,
          body: { data: { topic: "x" } },
        })
      ).status,
    ).toBe(404);
    expect(await call("/runs", { token: otherKey })).toMatchObject({ status: 200, json: [] });
  });
});

describe("resources", () => {
  it("maps interaction fields and their aliases", async () => {
    const schema = { type: "object", properties: { a: { type: "string" } }, required: ["a"] };
    const i = await interaction({
      resultSchema: schema,
      model_options: { temperature: 0.2, max_tokens: 50 },
      tags: "x, y",
    });
    expect(i).toMatchObject({
      name: "About",
      status: "draft",
      temperature: 0.2,
      max_tokens: 50,
      tags: ["x", "y"],
      resultSchema: schema,
      environment: environmentId,
    });
    const got = await call(`/interactions/${i.id}`);
    expect(got.json.prompts[0].template).toMatchObject({
      content_type: "jst",
      inputSchema: { required: ["topic"] },
    });
    const list = await call("/interactions?status=draft");
    const ref = list.json.find((x: any) => x.id === i.id);
    expect(Object.keys(ref).sort()).toEqual([
      "description",
      "id",
      "name",
      "prompts",
      "status",
      "updated_at",
    ]);
  });

  it("never returns a provider key, and shows an API key once", async () => {
    const env = await call("/environments", {
      body: {
        name: "oa",
        provider: "openai_compatible",
        endpoint_url: "http://93.184.216.34/v1",
        apiKey: "sk-provider-secret-1234",
      },
    });
    expect(env.status).toBe(201);
    expect(env.text).not.toContain("provider-secret");
    expect(env.json.api_key_hint).toBe("…1234");
    expect((await call(`/environments/${env.json.id}`)).text).not.toContain("provider-secret");

    const created = await call("/apikeys", { body: { name: "temp" } });
    expect(created.json.key).toMatch(/^sk-[0-9A-Za-z]{43}$/);
    const listed = await call("/apikeys");
    expect(listed.text).not.toContain(created.json.key);
    expect((await call("/account", { token: created.json.key })).status).toBe(200);
    expect((await call(`/apikeys/${created.json.id}`, { method: "DELETE" })).status).toBe(204);
    expect((await call("/account", { token: created.json.key })).status).toBe(401);
  });
});

describe("execution", () => {
  it("executes blocking, records the source, and lists with filters", async () => {
    const i = await interaction();
    const run = await call(`/runs`, {
      body: {
        interactionId: i.id,
        data: { topic: "cats" },
        tags: ["t1"],
        config: { temperature: 0.1 },
      },
    });
    expect(run.status).toBe(200);
    expect(run.json).toMatchObject({
      status: "completed",
      modelId: "test",
      tags: ["t1"],
      config: { temperature: 0.1, model: "test" },
      source: { type: "api", label: "ci", principal_type: "apikey" },
    });
    expect(run.json.result).toContain("Tell me about cats");
    const listed = await call(`/runs?interaction=${i.id}&tag=t1&status=completed`);
    expect(listed.status, listed.text).toBe(200);
    expect(listed.json.map((r: any) => r.id)).toEqual([run.json.id]);
    expect((await call(`/runs?interaction=${i.id}&status=failed`)).json).toEqual([]);
  });

  it("answers input that violates the input schema with 400, before any run is recorded", async () => {
    const i = await interaction();
    const r = await call(`/interactions/${i.id}/execute`, { body: { data: { topic: 7 } } });
    expect(r.status).toBe(400);
    expect(r.json.message).toContain("/topic must be string");
    expect((await call(`/runs?interaction=${i.id}`)).json).toEqual([]);
  });

  it("answers a provider failure with 502 and the recorded failed run", async () => {
    const i = await interaction({ model: "test-fail" });
    const r = await call(`/interactions/${i.id}/execute`, { body: { data: { topic: "x" } } });
    expect(r.status).toBe(502);
    expect(r.json).toMatchObject({
      code: "provider_error",
      details: { run: { status: "failed" } },
    });
    expect((await call(`/runs/${r.json.details.run_id}`)).json.status).toBe("failed");
  });

  it("executes by name", async () => {
    await interaction();
    const r = await call("/execute", {
      body: { interaction: "About@draft", data: { topic: "names" } },
    });
    expect(r.status).toBe(200);
    expect(r.json.interaction.name).toBe("About");
  });

  it("streams: message chunks then close; a reconnect resumes after Last-Event-ID", async () => {
    const i = await interaction();
    const created = await call("/runs", {
      body: { interaction: i.id, stream: true, data: { topic: "streams" } },
    });
    expect(created.json.status).toBe("created");
    const first = await call(`/runs/${created.json.id}/stream`);
    expect(first.headers["content-type"]).toMatch(/^text\/event-stream/);
    const events = parseSse(first.text);
    expect(events.length).toBeGreaterThan(2);
    expect(events.slice(0, -1).every((e) => e.event === "message")).toBe(true);
    const close = events.at(-1)!;
    expect(close.event).toBe("close");
    const final = JSON.parse(close.data);
    expect(final.status).toBe("completed");
    expect(
      events
        .slice(0, -1)
        .map((e) => JSON.parse(e.data))
        .join(""),
    ).toBe(final.result);

    const resumed = parseSse(
      (
        await call(`/runs/${created.json.id}/stream`, {
          headers: { "last-event-id": events[1]!.id! },
        })
      ).text,
    );
    expect(resumed.map((e) => e.id)).toEqual(events.slice(2).map((e) => e.id));
  });

  it("refuses to stream a run that was not created with stream: true", async () => {
    const i = await interaction();
    const run = await call(`/interactions/${i.id}/execute`, { body: { data: { topic: "x" } } });
    expect((await call(`/runs/${run.json.id}/stream`)).json).toMatchObject({
      status: 409,
      code: "conflict",
    });
  });
});

describe("probes", () => {
  it("serves /healthz and /readyz", async () => {
    expect((await app.inject({ url: "/healthz" })).statusCode).toBe(200);
    expect((await app.inject({ url: "/readyz" })).json()).toEqual({ status: "ready" });
  });
});
