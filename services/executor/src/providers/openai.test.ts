import { create } from "@bufbuild/protobuf";
import { EndpointPolicy, jsonBytes, type JsonObject } from "@pies/common";
import { startFakeOpenAI, type FakeOpenAI } from "@pies/testkit";
import { EnvironmentSchema, type Environment } from "@pies/proto/catalog";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { messages, providerError, schema } from "../../test/provider-fixtures.js";
import { SchemaValidator } from "../schemas.js";
import type { ChatMessage } from "../templates/render.js";
import type { Dispatcher } from "undici";
import { guardedAgent } from "./guarded-fetch.js";
import type { ProviderHttpOptions } from "./http-client.js";
import { OpenAIClient } from "./openai.js";
import type { CompletionRequest } from "./types.js";

const API_KEY = "sk-upstream-secret";
let fake: FakeOpenAI;
// The fake listens on loopback: allowed here explicitly, as the embedded mode does by default.
let http: Dispatcher;
// The deployed default: no loopback.
let strict: Dispatcher;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  http = guardedAgent(new EndpointPolicy("loopback"));
  strict = guardedAgent(new EndpointPolicy(""));
});
afterAll(async () => {
  await fake.close();
  await http.close();
  await strict.close();
});
beforeEach(() => {
  fake.reset();
});

function environment(config?: JsonObject): Environment {
  return create(EnvironmentSchema, {
    id: "env-1",
    name: "fake",
    provider: "openai_compatible",
    endpointUrl: fake.url,
    configJson: jsonBytes(config),
  });
}

function client(options: Partial<ProviderHttpOptions> = {}, config?: JsonObject, apiKey = API_KEY) {
  return new OpenAIClient(environment(config), apiKey, {
    timeoutMs: 5000,
    maxRetries: 0,
    agent: http,
    ...options,
  });
}

const request = (extra: Partial<CompletionRequest> = {}): CompletionRequest => ({
  model: "gpt-4o-mini",
  messages,
  ...extra,
});

/** The JSON body of the only chat request the fake received. */
function onlyBody(): Record<string, unknown> {
  const chats = fake.requests.filter((r) => r.path === "/v1/chat/completions");
  expect(chats).toHaveLength(1);
  return chats[0]!.body as Record<string, unknown>;
}

const usage = (prompt: number, result: number) => ({ prompt, result, total: prompt + result });
// The fake counts ceil(characters / 4): "Be brief." + "hello world" is 20 characters.
const PROMPT_TOKENS = 5;

describe("OpenAIClient", () => {
  it("completes a blocking request with the content and the usage", async () => {
    const result = await client().complete(request({ temperature: 0.2, maxTokens: 50 }), {});
    expect(result).toEqual({ content: "echo: hello world", usage: usage(PROMPT_TOKENS, 5) });
    const body = onlyBody();
    expect(body).toMatchObject({
      model: "gpt-4o-mini",
      messages,
      temperature: 0.2,
      max_tokens: 50,
    });
    expect(body.stream).toBeFalsy();
    expect(body).not.toHaveProperty("response_format");
    expect(fake.requests[0]!.headers.authorization).toBe(`Bearer ${API_KEY}`);
  });

  it("leaves temperature and max_tokens out when they are not set", async () => {
    await client().complete(request(), {});
    const body = onlyBody();
    expect(body).not.toHaveProperty("temperature");
    expect(body).not.toHaveProperty("max_tokens");
  });

  it("sends a placeholder key when the environment has none", async () => {
    await client({}, undefined, "").complete(request(), {});
    expect(fake.requests[0]!.headers.authorization).toBe("Bearer none");
  });

  it("streams chunks that join to the content, with the usage", async () => {
    const pieces: string[] = [];
    const result = await client().complete(request(), { onChunk: (t) => pieces.push(t) });
    expect(result).toEqual({ content: "echo: hello world", usage: usage(PROMPT_TOKENS, 5) });
    expect(pieces.length).toBeGreaterThan(1);
    expect(pieces.join("")).toBe(result.content);
    expect(pieces.every((p) => p.length > 0)).toBe(true);
    expect(onlyBody()).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });

  it("asks for a json_schema response format when there is a schema", async () => {
    const validator = new SchemaValidator();
    for (const config of [undefined, {}, { structured_output: true }] as Array<
      JsonObject | undefined
    >) {
      fake.reset();
      const result = await client({}, config).complete(request({ schema }), {});
      expect(validator.errors(schema, JSON.parse(result.content))).toEqual([]);
      const body = onlyBody();
      expect(body.response_format).toEqual({
        type: "json_schema",
        json_schema: { name: "result", schema },
      });
      // The messages are the prompt's, unchanged.
      expect(body.messages).toEqual(messages);
    }
  });

  it("asks for JSON in a system message instead when structured_output is false", async () => {
    const result = await client({}, { structured_output: false }).complete(request({ schema }), {});
    expect(result.content).toBe("echo: hello world");
    const body = onlyBody();
    expect(body).not.toHaveProperty("response_format");
    const sent = body.messages as ChatMessage[];
    expect(sent.slice(0, 2)).toEqual(messages);
    expect(sent).toHaveLength(3);
    expect(sent[2]!.role).toBe("system");
    expect(sent[2]!.content).toContain("JSON");
    expect(sent[2]!.content).toContain(JSON.stringify(schema));
  });

  it("sends neither a response format nor a schema message without a schema", async () => {
    await client({}, { structured_output: false }).complete(request(), {});
    const body = onlyBody();
    expect(body).not.toHaveProperty("response_format");
    expect(body.messages).toEqual(messages);
  });

  it("turns a 500 into a provider_error that names status 500", async () => {
    const error = await providerError(client().complete(request({ model: "fail-500" }), {}));
    expect(error.code).toBe("provider_error");
    expect(error.message).toMatch(/^provider answered 500: /);
    expect(fake.requests).toHaveLength(1);
  });

  it("retries a 500 when retries are allowed, then fails with it", async () => {
    const error = await providerError(
      client({ maxRetries: 1 }).complete(request({ model: "fail-500" }), {}),
    );
    expect(error.message).toMatch(/^provider answered 500: /);
    expect(fake.requests).toHaveLength(2);
  });

  it("does not retry a 400", async () => {
    const error = await providerError(
      client({ maxRetries: 2 }).complete(request({ model: "fail-400" }), {}),
    );
    expect(error.code).toBe("provider_error");
    expect(error.message).toMatch(/^provider answered 400: /);
    expect(fake.requests).toHaveLength(1);
  });

  it("retries a 429 after the Retry-After it was given, and succeeds", async () => {
    const start = performance.now();
    const result = await client({ maxRetries: 1 }).complete(
      request({ model: "rate-limit-once" }),
      {},
    );
    expect(result.content).toBe("echo: hello world");
    expect(fake.requests).toHaveLength(2);
    // retry-after-ms: 10, not the SDK's default backoff of half a second or more.
    expect(performance.now() - start).toBeLessThan(400);
  });

  it("retries a 429 of a streamed request before any chunk, and streams the answer", async () => {
    const pieces: string[] = [];
    const result = await client({ maxRetries: 1 }).complete(request({ model: "rate-limit-once" }), {
      onChunk: (t) => pieces.push(t),
    });
    expect(pieces.join("")).toBe("echo: hello world");
    expect(result.content).toBe("echo: hello world");
    expect(fake.requests).toHaveLength(2);
  });

  it("fails a 429 with status 429 when retries are off", async () => {
    const error = await providerError(
      client({ maxRetries: 0 }).complete(request({ model: "rate-limit-once" }), {}),
    );
    expect(error.code).toBe("provider_error");
    expect(error.message).toMatch(/^provider answered 429: /);
    expect(fake.requests).toHaveLength(1);
  });

  it("fails a stream that breaks after the first chunk, once that chunk was delivered", async () => {
    const pieces: string[] = [];
    const error = await providerError(
      client({ maxRetries: 2 }).complete(request({ model: "drop-mid-stream" }), {
        onChunk: (t) => pieces.push(t),
      }),
    );
    expect(error.code).toBe("stream_error");
    expect(error.message).toMatch(/^the provider's answer broke off after 8 characters/);
    expect(pieces).toEqual(["echo: he"]);
    // Not retried: the caller already has part of the answer.
    expect(fake.requests).toHaveLength(1);
  });

  it("fails a blocking request whose connection is dropped", async () => {
    const error = await providerError(
      client({ maxRetries: 0 }).complete(request({ model: "drop-mid-stream" }), {}),
    );
    expect(error.code).toBe("provider_error");
    expect(error.message).toBe("the provider could not be reached");
  });

  it("times out a provider slower than timeoutMs with code timeout", async () => {
    const start = performance.now();
    const error = await providerError(
      client({ timeoutMs: 150 }).complete(request({ model: "slow-2000" }), {}),
    );
    expect(error.code).toBe("timeout");
    expect(performance.now() - start).toBeLessThan(1500);
  });

  it("times out a streamed request whose answer does not start in time", async () => {
    const pieces: string[] = [];
    const error = await providerError(
      client({ timeoutMs: 150 }).complete(request({ model: "slow-2000" }), {
        onChunk: (t) => pieces.push(t),
      }),
    );
    expect(error.code).toBe("timeout");
    expect(pieces).toEqual([]);
  });

  it("answers a provider that is slow but within timeoutMs", async () => {
    const result = await client({ timeoutMs: 2000 }).complete(request({ model: "slow-100" }), {});
    expect(result.content).toBe("echo: hello world");
  });

  it("fails with a ProviderError when the caller aborts", async () => {
    const controller = new AbortController();
    const pending = client().complete(request({ model: "slow-2000" }), {
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 50);
    const error = await providerError(pending);
    expect(error.code).toBe("cancelled");
  });

  it("fails with a ProviderError when nothing listens at the endpoint", async () => {
    const closed = await startFakeOpenAI();
    const env = create(EnvironmentSchema, {
      id: "env-2",
      provider: "openai_compatible",
      endpointUrl: closed.url,
    });
    await closed.close();
    const error = await providerError(
      new OpenAIClient(env, API_KEY, {
        timeoutMs: 2000,
        maxRetries: 0,
        agent: http,
      }).complete(request(), {}),
    );
    expect(error.code).toBe("provider_error");
    // Generic: no errno, address or port that would let a caller scan a network.
    expect(error.message).toBe("the provider could not be reached");
    expect(error.cause).toBeDefined();
  });

  it("refuses at connection time a name that resolves to loopback, sending nothing", async () => {
    const port = new URL(fake.url).port;
    for (const endpointUrl of [
      `http://localhost:${port}/v1`,
      `http://127.0.0.1:${port}/v1`,
      `http://[::1]:${port}/v1`,
      `http://[::ffff:127.0.0.1]:${port}/v1`,
      `http://2130706433:${port}/v1`,
    ]) {
      const env = create(EnvironmentSchema, {
        id: "env-3",
        provider: "openai_compatible",
        endpointUrl,
      });
      const error = await providerError(
        new OpenAIClient(env, API_KEY, {
          timeoutMs: 2000,
          maxRetries: 2,
          agent: strict,
        }).complete(request(), {}),
      );
      expect(error.code).toBe("provider_error");
      expect(error.message).toBe("the provider endpoint is not allowed by the endpoint policy");
    }
    expect(fake.requests).toHaveLength(0);
  });
});
