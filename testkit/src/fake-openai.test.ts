import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startFakeOpenAI } from "./fake-openai.js";
import type { FakeOpenAI } from "./fake-openai.js";

const API_KEY = "sk-fake-test";
const user = (content: string) => [{ role: "user" as const, content }];

describe("fake OpenAI server through the real SDK", () => {
  let fake: FakeOpenAI;
  let client: OpenAI;

  beforeAll(async () => {
    fake = await startFakeOpenAI({ apiKey: API_KEY });
    client = new OpenAI({ apiKey: API_KEY, baseURL: fake.url, maxRetries: 0 });
  });
  afterAll(async () => {
    await fake.close();
  });
  beforeEach(() => {
    fake.reset();
  });

  it("answers a blocking completion with echo content and usage", async () => {
    const completion = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [
        { role: "system", content: "be brief" }, // 8 chars
        { role: "user", content: "hello world" }, // 11 chars
      ],
    });
    expect(fake.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    expect(completion.object).toBe("chat.completion");
    expect(completion.id).toMatch(/^chatcmpl-/);
    expect(completion.model).toBe("gpt-4o-mini");
    const choice = completion.choices[0];
    expect(choice?.message.role).toBe("assistant");
    expect(choice?.message.content).toBe("echo: hello world");
    expect(choice?.finish_reason).toBe("stop");
    expect(completion.usage).toEqual({
      prompt_tokens: Math.ceil(19 / 4),
      completion_tokens: Math.ceil("echo: hello world".length / 4),
      total_tokens: Math.ceil(19 / 4) + Math.ceil("echo: hello world".length / 4),
    });
  });

  it("streams content over several chunks and reports usage", async () => {
    const text = "the quick brown fox jumps over the lazy dog";
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: user(text),
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = "";
    let contentChunks = 0;
    let finish: string | null | undefined;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).toBe("chat.completion.chunk");
      const choice = chunk.choices[0];
      if (choice?.delta.content) {
        content += choice.delta.content;
        contentChunks++;
      }
      if (choice?.finish_reason) finish = choice.finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(content).toBe(`echo: ${text}`);
    expect(contentChunks).toBeGreaterThanOrEqual(3);
    expect(finish).toBe("stop");
    expect(usage?.completion_tokens).toBe(Math.ceil(content.length / 4));
    expect(usage?.prompt_tokens).toBe(Math.ceil(text.length / 4));
  });

  it("returns JSON matching a json_schema response format", async () => {
    const schema = {
      type: "object",
      properties: {
        title: { type: "string" },
        mood: { type: "string", enum: ["happy", "sad"] },
        score: { type: "integer", minimum: 3 },
        ratio: { type: "number" },
        ok: { type: "boolean" },
        tags: { type: "array", items: { type: "string" }, minItems: 2 },
        author: {
          type: "object",
          properties: {
            name: { type: "string" },
            kind: { type: "string", const: "human" },
          },
          required: ["name", "kind"],
          additionalProperties: false,
        },
      },
      required: ["title", "mood", "score", "ratio", "ok", "tags", "author"],
      additionalProperties: false,
    };
    const create = () =>
      client.chat.completions.create({
        model: "gpt-4o-mini",
        messages: user("make a thing"),
        response_format: {
          type: "json_schema",
          json_schema: { name: "thing", schema, strict: true },
        },
      });
    const completion = await create();
    const content = completion.choices[0]?.message.content ?? "";
    // Sampled with a seed taken from the messages: the same request, the same answer.
    expect((await create()).choices[0]?.message.content).toBe(content);
    const parsed = JSON.parse(content) as Record<string, unknown>;
    for (const key of schema.required) expect(parsed).toHaveProperty(key);
    expect(typeof parsed.title).toBe("string");
    expect(["happy", "sad"]).toContain(parsed.mood);
    expect(Number.isInteger(parsed.score) && (parsed.score as number) >= 3).toBe(true);
    expect(typeof parsed.ratio).toBe("number");
    expect(typeof parsed.ok).toBe("boolean");
    expect(Array.isArray(parsed.tags) && parsed.tags.length >= 2).toBe(true);
    expect(parsed.author).toEqual({ name: expect.any(String), kind: "human" });

    const invalid = await client.chat.completions.create({
      model: "invalid-json",
      messages: user("make a thing"),
      response_format: {
        type: "json_schema",
        json_schema: { name: "thing", schema, strict: true },
      },
    });
    const bad = JSON.parse(invalid.choices[0]?.message.content ?? "null") as Record<
      string,
      unknown
    >;
    expect(schema.required.every((key) => key in bad)).toBe(false);
  });

  it("echoes the last user message for json_object", async () => {
    const completion = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: user("ping"),
      response_format: { type: "json_object" },
    });
    expect(JSON.parse(completion.choices[0]?.message.content ?? "")).toEqual({
      echo: "ping",
    });
  });

  it("rejects a bad API key with 401", async () => {
    const bad = new OpenAI({
      apiKey: "sk-wrong",
      baseURL: fake.url,
      maxRetries: 0,
    });
    const err = await bad.chat.completions
      .create({ model: "gpt-4o-mini", messages: user("hi") })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(401);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe("invalid_api_key");
  });

  it("fails with 500 for model fail-500", async () => {
    const err = await client.chat.completions
      .create({ model: "fail-500", messages: user("hi") })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(500);
  });

  it("rate-limits the first request for rate-limit-once", async () => {
    const err = await client.chat.completions
      .create({ model: "rate-limit-once", messages: user("hi") })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(429);
    const second = await client.chat.completions.create({
      model: "rate-limit-once",
      messages: user("hi"),
    });
    expect(second.choices[0]?.message.content).toBe("echo: hi");

    // After reset() the first request is limited again; the SDK honours
    // Retry-After and succeeds within one call.
    fake.reset();
    const retrying = new OpenAI({
      apiKey: API_KEY,
      baseURL: fake.url,
      maxRetries: 2,
    });
    const started = Date.now();
    const ok = await retrying.chat.completions.create({
      model: "rate-limit-once",
      messages: user("again"),
    });
    expect(ok.choices[0]?.message.content).toBe("echo: again");
    expect(Date.now() - started).toBeLessThan(400); // not the SDK's default ~0.5-1 s backoff
    expect(fake.requests.map((r) => r.path)).toEqual([
      "/v1/chat/completions",
      "/v1/chat/completions",
    ]);
  });

  it("breaks stream iteration for drop-mid-stream", async () => {
    const stream = await client.chat.completions.create({
      model: "drop-mid-stream",
      messages: user("a fairly long message so that there are many chunks"),
      stream: true,
    });
    let received = "";
    const err = await (async () => {
      for await (const chunk of stream) received += chunk.choices[0]?.delta.content ?? "";
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(received).toBe("echo: a "); // exactly the first content chunk
  });

  it("drops the connection for non-streaming drop-mid-stream", async () => {
    const err = await client.chat.completions
      .create({ model: "drop-mid-stream", messages: user("hi") })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIConnectionError);
  });

  it("fails with 400 for fail-400 and answers 404 on unknown paths", async () => {
    const err = await client.chat.completions
      .create({ model: "fail-400", messages: user("hi") })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);

    const res = await fetch(`${fake.url}/nope`, {
      headers: { authorization: `Bearer ${API_KEY}` },
    });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe(
      "invalid_request_error",
    );

    const badJson = await fetch(`${fake.url}/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${API_KEY}`,
        "content-type": "application/json",
      },
      body: "{not json",
    });
    expect(badJson.status).toBe(400);
  });

  it("lists models", async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toEqual(["gpt-4o-mini"]);
    expect(page.data[0]?.owned_by).toBe("pies-fake");
  });

  it("records requests", async () => {
    await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: user("record me"),
      temperature: 0,
    });
    expect(fake.requests).toHaveLength(1);
    const [req] = fake.requests;
    expect(req?.method).toBe("POST");
    expect(req?.path).toBe("/v1/chat/completions");
    expect(req?.headers.authorization).toBe(`Bearer ${API_KEY}`);
    expect(req?.body).toMatchObject({
      model: "gpt-4o-mini",
      messages: user("record me"),
      temperature: 0,
    });
    fake.reset();
    expect(fake.requests).toHaveLength(0);
  });

  it("lets options.respond override the content", async () => {
    const custom = await startFakeOpenAI({
      respond: (body) => `custom for ${body.model}`,
    });
    try {
      const c = new OpenAI({
        apiKey: "anything",
        baseURL: custom.url,
        maxRetries: 0,
      });
      const completion = await c.chat.completions.create({
        model: "m1",
        messages: user("x"),
      });
      expect(completion.choices[0]?.message.content).toBe("custom for m1");
    } finally {
      await custom.close();
    }
  });
});

describe("fake OpenAI server lifecycle", () => {
  let fake: FakeOpenAI | undefined;
  afterEach(async () => {
    await fake?.close();
    fake = undefined;
  });

  it("waits for slow-<ms> models", async () => {
    fake = await startFakeOpenAI();
    const client = new OpenAI({
      apiKey: "k",
      baseURL: fake.url,
      maxRetries: 0,
    });
    const started = Date.now();
    await client.chat.completions.create({
      model: "slow-150",
      messages: user("hi"),
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
  });

  it("serves 64 concurrent keep-alive requests and closes with open sockets", async () => {
    fake = await startFakeOpenAI({ chunkDelayMs: 1 });
    const client = new OpenAI({
      apiKey: "k",
      baseURL: fake.url,
      maxRetries: 0,
    });
    const results = await Promise.all(
      Array.from({ length: 64 }, async (_, i) => {
        const stream = await client.chat.completions.create({
          model: "gpt-4o-mini",
          messages: user(`request number ${i}`),
          stream: true,
        });
        let text = "";
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
        return text;
      }),
    );
    results.forEach((text, i) => expect(text).toBe(`echo: request number ${i}`));

    // Keep-alive sockets are still open here; close() must not wait for them,
    // nor for a request stuck in a long delay.
    const pending = client.chat.completions
      .create({ model: "slow-60000", messages: user("hi") })
      .catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 50));
    const started = Date.now();
    await fake.close();
    expect(Date.now() - started).toBeLessThan(1000);
    expect(await pending).toBeInstanceOf(OpenAI.APIConnectionError);
    fake = undefined;
  });
});
