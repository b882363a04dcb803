import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// Issue 10 through the REST surface, in memory: repairs (blocking and as an SSE event of their
// own), the result cache, generate-test-data.
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

function call(url: string, body?: unknown, token = key) {
  return request(app, body === undefined ? "GET" : "POST", url, { key: token, body });
}

const inputSchema = {
  type: "object",
  properties: { topic: { type: "string", minLength: 2 }, words: { type: "integer", minimum: 1 } },
  required: ["topic", "words"],
};
const resultSchema = {
  type: "object",
  properties: { summary: { type: "string" } },
  required: ["summary"],
};

async function interaction(extra: Record<string, unknown> = {}) {
  const prompt = await call("/prompts", {
    name: "p",
    role: "user",
    content_type: "jst",
    content: "return `Tell me about ${topic} in ${words} words`",
    input_schema: inputSchema,
  });
  expect(prompt.status).toBe(201);
  const created = await call("/interactions", {
    name: "About",
    environment: environmentId,
    prompts: [{ type: "template", template: prompt.json.id }],
    result_schema: resultSchema,
    ...extra,
  });
  expect(created.status, created.text).toBe(201);
  return created.json as { id: string };
}

describe("repairs", () => {
  it("answers a repaired run with its attempts", async () => {
    const i = await interaction({ model: "test-invalid-once" });
    const r = await call(`/interactions/${i.id}/execute`, { data: { topic: "x1", words: 3 } });
    expect(r.status, r.text).toBe(200);
    expect(r.json.status).toBe("completed");
    expect(r.json.attempts).toHaveLength(2);
    expect(r.json.attempts[0]).toMatchObject({
      number: 1,
      prompt_added: [],
      error: { code: "validation_error" },
    });
    expect(r.json.attempts[1].prompt_added.map((m: { role: string }) => m.role)).toEqual([
      "assistant",
      "user",
    ]);
    expect(r.json.token_use.total).toBe(
      r.json.attempts[0].token_use.total + r.json.attempts[1].token_use.total,
    );
    expect((await call(`/runs/${r.json.id}`)).json.attempts).toHaveLength(2);
  });

  it("fails with validation_error and ajv's errors when repairs run out", async () => {
    const i = await interaction({ model: "test-invalid" });
    const r = await call(`/interactions/${i.id}/execute`, {
      data: { topic: "x1", words: 3 },
      config: { max_repairs: 1 },
    });
    expect(r.status).toBe(502);
    expect(r.json.code).toBe("validation_error");
    const run = r.json.details.run;
    expect(run.error.data.errors[0]).toMatchObject({ keyword: "required" });
    expect(run.attempts).toHaveLength(2);
    const bad = await call(`/interactions/${i.id}/execute`, {
      data: { topic: "x1", words: 3 },
      config: { max_repairs: 9 },
    });
    expect(bad.status).toBe(400);
    expect(bad.json.message).toMatch(/^config\.max_repairs: /);
  });

  it("streams a repair as an SSE event of its own", async () => {
    const i = await interaction({ model: "test-invalid-once" });
    const created = await call("/runs", {
      interaction: i.id,
      stream: true,
      data: { topic: "streamed", words: 2 },
    });
    const events = parseSse((await call(`/runs/${created.json.id}/stream`)).text);
    const kinds = events.map((e) => e.event);
    expect(kinds.filter((k) => k === "repair")).toHaveLength(1);
    const at = kinds.indexOf("repair");
    expect(JSON.parse(events[at]!.data)).toMatchObject({ attempt: 2 });
    expect(events.slice(0, at).every((e) => e.event === "message")).toBe(true);
    const final = JSON.parse(events.at(-1)!.data);
    expect(events.at(-1)!.event).toBe("close");
    expect(final.status).toBe("completed");
    const after = events
      .slice(at + 1, -1)
      .map((e) => JSON.parse(e.data) as string)
      .join("");
    expect(JSON.parse(after)).toEqual(final.result);
  });
});

describe("the result cache", () => {
  it("answers a repeat from the cache, marked with the run it came from (interaction policy)", async () => {
    const i = await interaction({ cache_policy: { type: "cache", ttl: 60 } });
    const first = await call(`/interactions/${i.id}/execute`, { data: { topic: "cc", words: 1 } });
    const second = await call(`/interactions/${i.id}/execute`, { data: { topic: "cc", words: 1 } });
    expect(first.json.cached).toBeUndefined();
    expect(second.json).toMatchObject({
      status: "completed",
      cached: true,
      cached_from: first.json.id,
      result: first.json.result,
      cache_policy: { type: "cache", ttl: 60 },
    });
    // The request's policy wins over the interaction's.
    const fresh = await call(`/interactions/${i.id}/execute`, {
      data: { topic: "cc", words: 1 },
      config: { cache_policy: { type: "no_cache" } },
    });
    expect(fresh.json.cached).toBeUndefined();
    const bad = await call(`/interactions/${i.id}/execute`, {
      data: { topic: "cc", words: 1 },
      config: { cache_policy: { type: "sometimes" } },
    });
    expect(bad.status).toBe(400);
  });
});

describe("generate-test-data", () => {
  it("generates count objects valid against the input schema, recorded as a run", async () => {
    const i = await interaction();
    const r = await call(`/interactions/${i.id}/generate-test-data`, {
      count: 3,
      message: "about cheese",
      config: { environment: environmentId },
    });
    expect(r.status, r.text).toBe(200);
    expect(r.json).toHaveLength(3);
    for (const item of r.json as { topic: unknown; words: unknown }[]) {
      expect(typeof item.topic === "string" && item.topic.length >= 2, JSON.stringify(item)).toBe(
        true,
      );
      expect(Number.isInteger(item.words) && (item.words as number) >= 1).toBe(true);
    }
    const listed = await call(`/runs?interaction=${i.id}&tag=test-data`);
    expect(listed.json).toHaveLength(1);
    const run = (await call(`/runs/${listed.json[0].id}`)).json;
    expect(run.parameters).toEqual({ count: 3, message: "about cheese" });
    expect(run.result.items).toEqual(r.json);
    expect(JSON.stringify(run.prompt)).toContain("about cheese");
    // count defaults to 1.
    const one = await call(`/interactions/${i.id}/generate-test-data`, {
      config: { environment: environmentId },
    });
    expect(one.json).toHaveLength(1);
  });

  it("takes an input schema whose references point at its own definitions", async () => {
    const prompt = await call("/prompts", {
      name: "refs",
      role: "user",
      content_type: "jst",
      content: "return `About ${topic}`",
      input_schema: {
        type: "object",
        $defs: { topic: { type: "string", minLength: 2 } },
        properties: { topic: { $ref: "#/$defs/topic" } },
        required: ["topic"],
      },
    });
    const created = await call("/interactions", {
      name: "Refs",
      environment: environmentId,
      prompts: [{ type: "template", template: prompt.json.id }],
    });
    const r = await call(`/interactions/${created.json.id}/generate-test-data`, {
      count: 2,
      config: { environment: environmentId },
    });
    expect(r.status, r.text).toBe(200);
    expect(r.json).toHaveLength(2);
    for (const item of r.json as { topic: unknown }[]) expect(typeof item.topic).toBe("string");
  });

  it("requires config.environment, a count in range, and a known interaction", async () => {
    const i = await interaction();
    const none = await call(`/interactions/${i.id}/generate-test-data`, { count: 2 });
    expect(none.status).toBe(400);
    expect(none.json.message).toMatch(/^config: /);
    const empty = await call(`/interactions/${i.id}/generate-test-data`, { config: {} });
    expect(empty.status).toBe(400);
    expect(empty.json.message).toMatch(/^config\.environment: /);
    const many = await call(`/interactions/${i.id}/generate-test-data`, {
      count: 51,
      config: { environment: environmentId },
    });
    expect(many.status).toBe(400);
    expect(many.json.message).toMatch(/^count: /);
    const unknown = await call(`/interactions/nope/generate-test-data`, {
      config: { environment: environmentId },
    });
    expect(unknown.status).toBe(404);
    const elsewhere = await call(
      `/interactions/${i.id}/generate-test-data`,
      { config: { environment: environmentId } },
      otherKey,
    );
    expect(elsewhere.status).toBe(404);
    const failing = await call(`/interactions/${i.id}/generate-test-data`, {
      config: { environment: environmentId, model: "test-fail" },
    });
    expect(failing.status).toBe(502);
    expect(failing.json.details.run_id).toBeTruthy();
  });
});
