import { create } from "@bufbuild/protobuf";
import { EndpointPolicy, jsonBytes, type JsonObject } from "@pies/common";
import { startFakeOpenAI, type FakeOpenAI, type RecordedRequest } from "@pies/testkit";
import { EnvironmentSchema } from "@pies/proto/catalog";
import type { Dispatcher } from "undici";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { messages, providerError, schema } from "../../test/provider-fixtures.js";
import { SchemaValidator } from "../schemas.js";
import type { ChatMessage } from "../templates/render.js";
import { AnthropicClient, DEFAULT_MAX_TOKENS } from "./anthropic.js";
import { AzureOpenAIClient, DEFAULT_API_VERSION } from "./azure-openai.js";
import { GoogleClient } from "./google.js";
import { guardedAgent } from "./guarded-fetch.js";
import type { ProviderHttpOptions } from "./http-client.js";
import { OpenAIClient } from "./openai.js";
import type { CompletionRequest, LlmClient } from "./types.js";

// Each provider's own wire, against the fake that speaks it on loopback (testkit's fake-wires.ts):
// what pies sends (path, key header, body), how it reads each answer, and the guarantees every
// provider gives (retries before the first chunk honouring Retry-After, time limits, an explicit
// mid-stream failure, the endpoint policy, the key in no error).

const API_KEY = "sk-upstream-native-key";
let fake: FakeOpenAI;
let http: Dispatcher;
let strict: Dispatcher;

beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: API_KEY });
  http = guardedAgent(new EndpointPolicy("loopback"));
  strict = guardedAgent(new EndpointPolicy(""));
});
afterAll(async () => {
  await fake.close();
  await http.close();
  await strict.close();
});
beforeEach(() => fake.reset());

type Make = (
  endpointUrl: string,
  apiKey: string,
  options: ProviderHttpOptions,
  config?: JsonObject,
) => LlmClient;

const environment = (provider: string, endpointUrl: string, config?: JsonObject) =>
  create(EnvironmentSchema, {
    id: `env-${provider}`,
    provider,
    endpointUrl,
    configJson: jsonBytes(config),
  });

interface WireCase {
  provider: string;
  make: Make;
  /** The fake's endpoint URL for this provider. */
  endpoint: () => string;
  /** The path of a call, streamed or not, for model m. */
  path: (model: string, streamed: boolean) => string;
  /** The key as the provider takes it, from a recorded request. */
  key: (r: RecordedRequest) => unknown;
  /** The system text and the other messages of a recorded body. */
  prompt: (body: Record<string, unknown>) => { system?: string; messages: ChatMessage[] };
  /** Where the body carries the output schema (undefined when it does not). */
  schemaOf: (body: Record<string, unknown>) => unknown;
}

const wires: WireCase[] = [
  {
    provider: "anthropic",
    make: (url, key, options, config) =>
      new AnthropicClient(environment("anthropic", url, config), key, options),
    endpoint: () => fake.origin,
    path: () => "/v1/messages",
    key: (r) => r.headers["x-api-key"],
    prompt: (body) => ({
      system: body.system as string | undefined,
      messages: body.messages as ChatMessage[],
    }),
    schemaOf: (body) =>
      (body.output_config as { format?: { schema?: unknown } } | undefined)?.format?.schema,
  },
  {
    provider: "google",
    make: (url, key, options, config) =>
      new GoogleClient(environment("google", url, config), key, options),
    endpoint: () => fake.origin,
    path: (model, streamed) =>
      `/v1beta/models/${model}:${streamed ? "streamGenerateContent" : "generateContent"}`,
    key: (r) => r.headers["x-goog-api-key"],
    prompt: (body) => {
      const text = (parts: unknown) => (parts as { text: string }[]).map((p) => p.text).join("");
      const system = body.systemInstruction as { parts: unknown } | undefined;
      return {
        system: system ? text(system.parts) : undefined,
        messages: (body.contents as { role: string; parts: unknown }[]).map((c) => ({
          role: c.role === "model" ? "assistant" : "user",
          content: text(c.parts),
        })),
      };
    },
    schemaOf: (body) =>
      (body.generationConfig as { responseJsonSchema?: unknown } | undefined)?.responseJsonSchema,
  },
  {
    provider: "azure_openai",
    make: (url, key, options, config) =>
      new AzureOpenAIClient(environment("azure_openai", url, config), key, options),
    endpoint: () => fake.origin,
    path: (model) => `/openai/deployments/${model}/chat/completions`,
    key: (r) => r.headers["api-key"],
    prompt: (body) => {
      const all = body.messages as ChatMessage[];
      return {
        system: all
          .filter((m) => m.role === "system")
          .map((m) => m.content)
          .join("\n\n"),
        messages: all.filter((m) => m.role !== "system"),
      };
    },
    schemaOf: (body) =>
      (body.response_format as { json_schema?: { schema?: unknown } } | undefined)?.json_schema
        ?.schema,
  },
];

const request = (extra: Partial<CompletionRequest> = {}): CompletionRequest => ({
  model: "m-1",
  messages,
  ...extra,
});
// The fake counts ceil(characters / 4): "Be brief." + "hello world" is 20 characters.
const usage = (result: number) => ({ prompt: 5, result, total: 5 + result });

describe.each(wires)("the $provider wire", (wire) => {
  const client = (options: Partial<ProviderHttpOptions> = {}, config?: JsonObject, key = API_KEY) =>
    wire.make(
      wire.endpoint(),
      key,
      { timeoutMs: 5000, maxRetries: 0, agent: http, ...options },
      config,
    );
  const only = () => {
    expect(fake.requests).toHaveLength(1);
    return fake.requests[0]!;
  };

  it("sends the provider's request and reads its answer, with the usage", async () => {
    const result = await client().complete(request({ temperature: 0.2, maxTokens: 50 }), {});
    expect(result).toEqual({ content: "echo: hello world", usage: usage(5) });
    const sent = only();
    expect(sent.path).toBe(wire.path("m-1", false));
    expect(wire.key(sent)).toBe(API_KEY);
    // The key goes in its own header only.
    expect(sent.headers.authorization).toBeUndefined();
    const body = sent.body as Record<string, unknown>;
    expect(wire.prompt(body)).toEqual({
      system: "Be brief.",
      messages: [{ role: "user", content: "hello world" }],
    });
    expect(wire.schemaOf(body)).toBeUndefined();
    if (wire.provider === "anthropic") {
      expect(body).toMatchObject({ model: "m-1", max_tokens: 50, temperature: 0.2 });
      expect(sent.headers["anthropic-version"]).toBe("2023-06-01");
    }
    if (wire.provider === "google") {
      expect(body.generationConfig).toEqual({ temperature: 0.2, maxOutputTokens: 50 });
    }
    if (wire.provider === "azure_openai") {
      expect(new URLSearchParams(sent.query).get("api-version")).toBe(DEFAULT_API_VERSION);
      expect(body).toMatchObject({ temperature: 0.2, max_tokens: 50 });
    }
  });

  it("streams chunks that join to the content, with the usage of the stream", async () => {
    const pieces: string[] = [];
    const result = await client().complete(request(), { onChunk: (t) => pieces.push(t) });
    expect(pieces.length).toBeGreaterThan(1);
    expect(pieces.join("")).toBe("echo: hello world");
    expect(result).toEqual({ content: "echo: hello world", usage: usage(5) });
    const sent = only();
    expect(sent.path).toBe(wire.path("m-1", true));
    if (wire.provider === "google") expect(sent.query).toBe("alt=sse");
    if (wire.provider === "anthropic") expect(sent.body).toMatchObject({ stream: true });
    if (wire.provider === "azure_openai") {
      expect(sent.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    }
  });

  it("asks for the output schema through the provider's own mechanism", async () => {
    const result = await client().complete(request({ schema }), {});
    expect(wire.schemaOf(only().body as Record<string, unknown>)).toEqual(schema);
    expect(new SchemaValidator().errors(schema, JSON.parse(result.content))).toEqual([]);
  });

  it("asks for it in the prompt instead when config.structured_output is false", async () => {
    await client({}, { structured_output: false }).complete(request({ schema }), {});
    const body = only().body as Record<string, unknown>;
    expect(wire.schemaOf(body)).toBeUndefined();
    expect(wire.prompt(body).system).toContain(JSON.stringify(schema));
  });

  it("retries a 429 after the pause its Retry-After asks for, before any chunk", async () => {
    const started = Date.now();
    const pieces: string[] = [];
    const result = await client({ maxRetries: 2 }).complete(
      request({ model: "rate-limit-once-1s" }),
      {
        onChunk: (t) => pieces.push(t),
      },
    );
    expect(result.content).toBe("echo: hello world");
    expect(pieces.join("")).toBe("echo: hello world");
    expect(fake.requests).toHaveLength(2);
    // Retry-After: 1 (the backoff alone would be under 0.5 s).
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
  });

  it("reads the provider's error body, retries a 500, and never retries a 400", async () => {
    const server = await providerError(
      client({ maxRetries: 1 }).complete(request({ model: "fail-500" }), {}),
    );
    expect(server.code).toBe("provider_error");
    expect(server.message).toBe(
      "provider answered 500: The server had an error while processing your request. Sorry about that!",
    );
    expect(fake.requests).toHaveLength(2);
    fake.reset();
    const invalid = await providerError(
      client({ maxRetries: 2 }).complete(request({ model: "fail-400" }), {}),
    );
    expect(invalid.message).toBe(
      "provider answered 400: Invalid request (simulated by model fail-400).",
    );
    expect(fake.requests).toHaveLength(1);
  });

  it("fails on a wrong key without naming the key", async () => {
    const error = await providerError(
      client({}, undefined, "sk-wrong-key-xyz").complete(request(), {}),
    );
    expect(error.message).toBe("provider answered 401: Incorrect API key provided");
    expect(JSON.stringify({ message: error.message, cause: String(error.cause) })).not.toContain(
      "sk-wrong-key-xyz",
    );
  });

  it("fails a stream that breaks after its first chunk with stream_error, never retried", async () => {
    for (const model of ["drop-mid-stream", "error-mid-stream"]) {
      fake.reset();
      const pieces: string[] = [];
      const error = await providerError(
        client({ maxRetries: 2 }).complete(request({ model }), { onChunk: (t) => pieces.push(t) }),
      );
      expect(error.code, model).toBe("stream_error");
      expect(pieces.join(""), model).toBe("echo: he");
      expect(error.message).toMatch(/^the provider's answer broke off after 8 characters: /);
      if (model === "error-mid-stream") expect(error.message).toContain("Overloaded (simulated");
      expect(fake.requests, model).toHaveLength(1);
    }
  });

  it("retries a refused connection, then says it could not be reached", async () => {
    const error = await providerError(
      client({ maxRetries: 1 }).complete(request({ model: "refuse-connection" }), {}),
    );
    expect(error).toMatchObject({
      code: "provider_error",
      message: "the provider could not be reached",
    });
    expect(fake.requests).toHaveLength(2);
  });

  it("times out an answer that does not come, as timeout", async () => {
    const error = await providerError(
      client({ timeoutMs: 200 }).complete(request({ model: "slow-2000" }), {}),
    );
    expect(error.code).toBe("timeout");
  });

  it("goes only where the endpoint policy allows", async () => {
    const error = await providerError(client({ agent: strict }).complete(request(), {}));
    expect(error.message).toBe("the provider endpoint is not allowed by the endpoint policy");
    expect(fake.requests).toHaveLength(0);
  });
});

describe("the native wires' own details", () => {
  const options = () => ({ timeoutMs: 5000, maxRetries: 0, agent: http });

  it("anthropic: max_tokens by default, a temperature within 0–1, system-only prompts as the user's", async () => {
    const client = new AnthropicClient(environment("anthropic", fake.origin), API_KEY, options());
    await client.complete(
      { model: "m-1", messages: [{ role: "system", content: "Say hi." }], temperature: 1.5 },
      {},
    );
    expect(fake.requests[0]!.body).toMatchObject({
      max_tokens: DEFAULT_MAX_TOKENS,
      temperature: 1,
      messages: [{ role: "user", content: "Say hi." }],
    });
    expect(fake.requests[0]!.body).not.toHaveProperty("system");
  });

  it("anthropic: an overloaded error event before any text is retried, as a 5xx would be", async () => {
    const client = new AnthropicClient(environment("anthropic", fake.origin), API_KEY, {
      ...options(),
      maxRetries: 1,
    });
    const pieces: string[] = [];
    const result = await client.complete(
      { model: "error-before-content-once", messages },
      { onChunk: (t) => pieces.push(t) },
    );
    expect(result.content).toBe("echo: hello world");
    expect(pieces.join("")).toBe("echo: hello world");
    expect(fake.requests).toHaveLength(2);
    // Without a retry left, it fails as one another provider could answer.
    fake.reset();
    const once = new AnthropicClient(environment("anthropic", fake.origin), API_KEY, options());
    const error = await providerError(
      once.complete({ model: "error-before-content-once", messages }, { onChunk: () => {} }),
    );
    expect(error).toMatchObject({ code: "provider_error", failover: true });
    expect(error.message).toContain("Overloaded (simulated");
  });

  it("google: a model named models/… and an api_version of the environment's", async () => {
    const client = new GoogleClient(
      environment("google", fake.origin, { api_version: "v1" }),
      API_KEY,
      options(),
    );
    await client.complete({ model: "models/gemini-x", messages }, {});
    expect(fake.requests[0]!.path).toBe("/v1/models/gemini-x:generateContent");
  });

  it("azure_openai: the environment's api_version; no endpoint is a clear failure", async () => {
    const client = new AzureOpenAIClient(
      environment("azure_openai", fake.origin, { api_version: "2025-01-01-preview" }),
      API_KEY,
      options(),
    );
    await client.complete({ model: "my-deployment", messages }, {});
    expect(fake.requests[0]!.path).toBe("/openai/deployments/my-deployment/chat/completions");
    expect(fake.requests[0]!.query).toBe("api-version=2025-01-01-preview");
    const none = new AzureOpenAIClient(environment("azure_openai", ""), API_KEY, options());
    const error = await providerError(none.complete({ model: "d", messages }, {}));
    expect(error.message).toBe(
      "the provider endpoint URL is not valid: an azure_openai environment needs the resource's endpoint_url",
    );
  });

  it("openai: the same fake still speaks its wire with a bearer key", async () => {
    const client = new OpenAIClient(environment("openai", fake.url), API_KEY, options());
    expect((await client.complete({ model: "m-1", messages }, {})).content).toBe(
      "echo: hello world",
    );
    expect(fake.requests[0]!.headers.authorization).toBe(`Bearer ${API_KEY}`);
  });
});
