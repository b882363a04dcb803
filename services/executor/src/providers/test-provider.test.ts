import { getEventListeners } from "node:events";
import type { JsonObject } from "@pies/common";
import { describe, expect, it } from "vitest";
import { SchemaValidator } from "../schemas.js";
import type { ChatMessage } from "../templates/render.js";
import { chunks, TestClient } from "./test-provider.js";
import { countTextTokens, countUsage } from "./tokens.js";
import { ProviderError, type CompletionRequest } from "./types.js";

const client = new TestClient();
const validator = new SchemaValidator();

const user = (content: string): ChatMessage[] => [{ role: "user", content }];
const request = (
  messages: ChatMessage[],
  extra: Partial<CompletionRequest> = {},
): CompletionRequest => ({
  model: "test",
  messages,
  ...extra,
});

const schemas: Record<string, JsonObject> = {
  greeting: {
    type: "object",
    required: ["greeting", "words"],
    properties: { greeting: { type: "string" }, words: { type: "integer", minimum: 1 } },
  },
  order: {
    type: "object",
    additionalProperties: false,
    required: ["id", "customer", "lines", "status", "placedAt"],
    properties: {
      id: { type: "integer", minimum: 1, maximum: 100000 },
      customer: {
        type: "object",
        required: ["email", "site"],
        properties: {
          email: { type: "string", format: "email" },
          site: { type: "string", format: "uri" },
        },
      },
      lines: {
        type: "array",
        minItems: 2,
        maxItems: 5,
        items: {
          type: "object",
          required: ["sku", "qty"],
          properties: {
            sku: { type: "string", minLength: 4 },
            qty: { type: "integer", minimum: 1, maximum: 9 },
          },
        },
      },
      status: { enum: ["new", "paid", "shipped"] },
      placedAt: { type: "string", format: "date-time" },
      deliveryDate: { type: "string", format: "date" },
    },
  },
  list: { type: "array", items: { type: "number", minimum: -1, maximum: 1 }, minItems: 3 },
};

async function collect(req: CompletionRequest) {
  const pieces: string[] = [];
  const result = await client.complete(req, { onChunk: (t) => pieces.push(t) });
  return { pieces, result };
}

describe("TestClient", () => {
  it("answers the same prompt with the same text, and a different prompt differently", async () => {
    const a = await client.complete(request(user("Write a haiku about tea")), {});
    const b = await client.complete(request(user("Write a haiku about tea")), {});
    const c = await client.complete(request(user("Write a haiku about coffee")), {});
    expect(a).toEqual(b);
    expect(a.content).not.toBe(c.content);
    expect(a.content).toMatch(/^Test answer to "Write a haiku about tea": (\w+ ){11}\w+\.$/);
  });

  it("seeds by every message, not only the last user message", async () => {
    const one = await client.complete(
      request([{ role: "system", content: "A" }, ...user("same")]),
      {},
    );
    const two = await client.complete(
      request([{ role: "system", content: "B" }, ...user("same")]),
      {},
    );
    expect(one.content).not.toBe(two.content);
  });

  it("answers JSON that validates against the output schema, deterministically", async () => {
    for (const [name, schema] of Object.entries(schemas)) {
      for (const topic of ["tea", "coffee", "water", "juice", "milk"]) {
        const req = request(user(`Describe ${topic}`), { schema });
        const { content } = await client.complete(req, {});
        const value: unknown = JSON.parse(content);
        expect(validator.errors(schema, value), `${name} / ${topic}: ${content}`).toEqual([]);
        expect((await client.complete(req, {})).content).toBe(content);
      }
    }
  });

  it("varies the JSON answer with the prompt", async () => {
    const answers = new Set<string>();
    for (const topic of ["a", "b", "c", "d", "e", "f"]) {
      answers.add(
        (await client.complete(request(user(topic), { schema: schemas.order }), {})).content,
      );
    }
    expect(answers.size).toBeGreaterThan(3);
  });

  it("reports no usage: the executor counts it with the tokenizer", async () => {
    const messages: ChatMessage[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hello there" },
    ];
    const { content, usage } = await client.complete(request(messages), {});
    expect(usage).toBeUndefined();
    // o200k_base: "Be brief." is 3 tokens, "Hello there" 2; 3 per message and 3 for the answer.
    const counted = countUsage(messages, content);
    expect(counted.prompt).toBe(3 + 3 + 3 + 3 + 2);
    expect(counted.result).toBe(countTextTokens(content));
    expect(counted.total).toBe(counted.prompt + counted.result);
    expect(countTextTokens("")).toBe(0);
    expect(countTextTokens("hello world")).toBe(2);
  });

  it("counts a long run without white space in linear time, about as the whole would count", () => {
    const started = Date.now();
    const tokens = countTextTokens("x".repeat(1_000_000));
    expect(Date.now() - started).toBeLessThan(5000);
    expect(tokens).toBeGreaterThan(1_000_000 / 16);
    expect(tokens).toBeLessThan(1_000_000 / 2);
    // Below the run length the count is the tokenizer's own.
    expect(countTextTokens("y".repeat(200))).toBe(countTextTokens("y".repeat(100)) * 2);
  });

  it("streams chunks of at most 12 characters that join to the content", async () => {
    for (const req of [
      request(user("Stream me a long answer please")),
      request(user("json"), { schema: schemas.order }),
    ]) {
      const { pieces, result } = await collect(req);
      expect(pieces.length).toBeGreaterThan(1);
      expect(pieces.join("")).toBe(result.content);
      for (const p of pieces) {
        expect(p.length).toBeGreaterThan(0);
        expect(p.length).toBeLessThanOrEqual(12);
      }
      // Streaming does not change the answer.
      expect((await client.complete(req, {})).content).toBe(result.content);
    }
  });

  it("cuts chunks after spaces and never loses characters", () => {
    expect(chunks("hello brave new world")).toEqual(["hello brave ", "new world"]);
    const long = "x".repeat(30) + " tail\nline two\n\n";
    expect(chunks(long).join("")).toBe(long);
    expect(chunks(long).every((p) => p.length <= 12)).toBe(true);
    expect(chunks("")).toEqual([""]);
  });

  it("fails model test-fail with a ProviderError (provider_error), streaming or not", async () => {
    const req = request(user("x"), { model: "test-fail" });
    const error = await client.complete(req, {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).code).toBe("provider_error");
    const pieces: string[] = [];
    await expect(client.complete(req, { onChunk: (t) => pieces.push(t) })).rejects.toBeInstanceOf(
      ProviderError,
    );
    expect(pieces).toEqual([]);
  });

  it("answers model test-invalid with JSON that violates the schema", async () => {
    const cases: JsonObject[] = [
      schemas.greeting!,
      { type: "object", properties: { name: { type: "string" }, n: { type: "integer" } } },
      { type: "object", properties: { n: { type: "integer" } } },
      { type: "object" },
      schemas.list!,
      { type: "string" },
    ];
    for (const schema of cases) {
      const { content } = await client.complete(
        request(user("x"), { model: "test-invalid", schema }),
        {},
      );
      const value: unknown = JSON.parse(content);
      expect(
        validator.errors(schema, value).length,
        `${JSON.stringify(schema)} → ${content}`,
      ).toBeGreaterThan(0);
    }
  });

  it("answers text for model test-invalid without a schema", async () => {
    const { content } = await client.complete(request(user("hi"), { model: "test-invalid" }), {});
    expect(content).toMatch(/^Test answer to "hi": /);
  });

  it("waits test-latency-<ms> before answering, and stops when aborted", async () => {
    const start = performance.now();
    await client.complete(request(user("x"), { model: "test-latency-60" }), {});
    expect(performance.now() - start).toBeGreaterThanOrEqual(55);

    const controller = new AbortController();
    const pending = client.complete(request(user("x"), { model: "test-latency-5000" }), {
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 20);
    const aborted = performance.now();
    await expect(pending).rejects.toBeInstanceOf(ProviderError);
    expect(performance.now() - aborted).toBeLessThan(1000);
  });

  it("paces test-slow chunks 50 ms apart", async () => {
    const at: number[] = [];
    const start = performance.now();
    const schema = { enum: ["alpha beta gamma delta"] };
    await client.complete(request(user("slow"), { model: "test-slow", schema }), {
      onChunk: () => at.push(performance.now() - start),
    });
    expect(at.length).toBeGreaterThanOrEqual(2);
    expect(at[0]).toBeGreaterThanOrEqual(45);
    for (let i = 1; i < at.length; i++) expect(at[i]! - at[i - 1]!).toBeGreaterThanOrEqual(45);
  });
});

describe("TestClient's pauses", () => {
  it("leaves no abort listener on the call's signal once the pauses are over", async () => {
    const signal = new AbortController().signal;
    const pieces: string[] = [];
    await client.complete(request(user("listeners"), { model: "test-slow" }), {
      signal,
      onChunk: (piece) => pieces.push(piece),
    });
    expect(pieces.length).toBeGreaterThan(1);
    expect(getEventListeners(signal, "abort")).toHaveLength(0);
  });
});
