import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import OpenAI from "openai";
import { EndpointPolicy, EndpointRefusedError } from "@pies/common";
import { startFakeOpenAI, type FakeOpenAI } from "@pies/testkit";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createGuardedFetch, type GuardedFetch } from "./guarded-fetch.js";

let fake: FakeOpenAI;
// Paces its streamed chunks, to see them arrive one by one.
let paced: FakeOpenAI;
let http: GuardedFetch;
let strict: GuardedFetch;
let helper: Server;
let helperUrl: string;

const CHUNK_DELAY_MS = 60;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  paced = await startFakeOpenAI({ chunkDelayMs: CHUNK_DELAY_MS });
  http = createGuardedFetch(new EndpointPolicy("loopback"));
  strict = createGuardedFetch(new EndpointPolicy(""));
  // Answers the fake does not give: a redirect to the fake, a gzip body nobody asked for.
  helper = createServer((req, res) => {
    if (req.url === "/redirect/chat/completions") {
      res.writeHead(307, { location: `${fake.url}/chat/completions` }).end();
    } else if (req.url === "/gzip") {
      res
        .writeHead(200, { "content-type": "application/json", "content-encoding": "gzip" })
        .end(gzipSync(JSON.stringify({ zipped: "yes" })));
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve) => helper.listen(0, "127.0.0.1", resolve));
  helperUrl = `http://127.0.0.1:${(helper.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await Promise.all([fake.close(), paced.close(), http.close(), strict.close()]);
  helper.closeAllConnections();
  await new Promise((resolve) => helper.close(resolve));
});
beforeEach(() => {
  fake.reset();
  paced.reset();
});

const chat = (model: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model, messages: [{ role: "user", content: "hello world" }], ...extra });

/** A POST as the SDK sends it: a Headers object and a string body. */
const post = (body: string, signal?: AbortSignal): RequestInit => ({
  method: "POST",
  headers: new Headers({ "content-type": "application/json", authorization: "Bearer sk-test" }),
  body,
  signal,
});

async function rejection(promise: Promise<unknown>): Promise<Error> {
  const error = await promise.then(
    () => new Error("resolved instead of failing"),
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(Error);
  expect((error as Error).message).not.toBe("resolved instead of failing");
  return error as Error;
}

function causes(err: unknown): unknown[] {
  const all: unknown[] = [];
  for (let e = err; e && all.length < 8; e = (e as { cause?: unknown }).cause) all.push(e);
  return all;
}

describe("the guarded fetch", () => {
  it("passes the status, headers and JSON body through, and sends the request as given", async () => {
    const response = await http.fetch(`${fake.url}/chat/completions`, post(chat("gpt-4o-mini")));
    expect(response.status).toBe(200);
    expect(response.ok).toBe(true);
    expect(response.url).toBe(`${fake.url}/chat/completions`);
    expect(response.headers.get("Content-Type")).toBe("application/json");
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    expect(response.headers.get("absent")).toBeNull();
    expect([...response.headers.entries()].map(([name]) => name)).toContain("x-request-id");
    const body = (await response.json()) as { choices: Array<{ message: { content: string } }> };
    expect(body.choices[0]!.message.content).toBe("echo: hello world");
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0]!.method).toBe("POST");
    expect(fake.requests[0]!.headers.authorization).toBe("Bearer sk-test");
    expect(fake.requests[0]!.body).toMatchObject({ model: "gpt-4o-mini" });
  });

  it("passes an error status and its body through as text", async () => {
    const response = await http.fetch(`${fake.url}/chat/completions`, post(chat("fail-400")));
    expect(response.status).toBe(400);
    expect(response.ok).toBe(false);
    expect(JSON.parse(await response.text())).toMatchObject({
      error: { type: "invalid_request_error" },
    });
    const missing = await http.fetch(`${fake.url}/nowhere`);
    expect(missing.status).toBe(404);
    expect(await missing.text()).toContain("Invalid URL (GET /v1/nowhere)");
  });

  it("gives the SDK a 429 with its Retry-After: the SDK waits that long and retries", async () => {
    const client = new OpenAI({ apiKey: "sk-test", baseURL: fake.url, fetch: http.fetch });
    const start = performance.now();
    const answer = await client.chat.completions.create(
      { model: "rate-limit-once", messages: [{ role: "user", content: "hi" }] },
      { maxRetries: 1 },
    );
    expect(answer.choices[0]!.message.content).toBe("echo: hi");
    expect(fake.requests).toHaveLength(2);
    // retry-after-ms: 10, not the SDK's default backoff of half a second or more.
    expect(performance.now() - start).toBeLessThan(400);

    fake.reset();
    const error = await rejection(
      client.chat.completions.create(
        { model: "rate-limit-once", messages: [{ role: "user", content: "hi" }] },
        { maxRetries: 0 },
      ),
    );
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    const rateLimited = error as InstanceType<typeof OpenAI.RateLimitError>;
    expect(rateLimited.status).toBe(429);
    expect(rateLimited.headers?.get("retry-after-ms")).toBe("10");
    expect(rateLimited.code).toBe("rate_limit_exceeded");
  });

  it("delivers a streamed body as it arrives: the first chunk before the upstream ends", async () => {
    const start = performance.now();
    const response = await http.fetch(
      `${paced.url}/chat/completions`,
      post(chat("gpt-4o-mini", { stream: true })),
    );
    expect(response.headers.get("content-type")).toContain("text/event-stream");
    const arrivals: Array<{ at: number; text: string }> = [];
    const decoder = new TextDecoder();
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      arrivals.push({ at: performance.now() - start, text: decoder.decode(chunk) });
    }
    const all = arrivals.map((a) => a.text).join("");
    expect(all).toContain("data: [DONE]");
    // Role, three pieces of "echo: hello world", stop, [DONE]: five pauses in between.
    expect(arrivals.length).toBeGreaterThan(3);
    expect(arrivals[0]!.text).not.toContain("[DONE]");
    expect(arrivals.at(-1)!.at - arrivals[0]!.at).toBeGreaterThan(3 * CHUNK_DELAY_MS);
  });

  it("streams through the SDK chunk by chunk", async () => {
    const client = new OpenAI({ apiKey: "sk-test", baseURL: paced.url, fetch: http.fetch });
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "hello world" }],
      stream: true,
    });
    const at: number[] = [];
    let content = "";
    for await (const chunk of stream) {
      at.push(performance.now());
      content += chunk.choices[0]?.delta?.content ?? "";
    }
    expect(content).toBe("echo: hello world");
    expect(at.at(-1)! - at[0]!).toBeGreaterThan(3 * CHUNK_DELAY_MS);
  });

  it("aborts a request waiting for its answer when its signal aborts", async () => {
    const controller = new AbortController();
    const start = performance.now();
    const pending = http.fetch(
      `${fake.url}/chat/completions`,
      post(chat("slow-2000"), controller.signal),
    );
    setTimeout(() => controller.abort(), 50);
    const error = await rejection(pending);
    // What the SDK recognises as an abort (then a timeout or the caller's abort).
    expect(error.name).toBe("AbortError");
    expect(performance.now() - start).toBeLessThan(1000);
  });

  it("fails at once with a signal that was aborted already, sending nothing", async () => {
    const error = await rejection(
      http.fetch(`${fake.url}/chat/completions`, post(chat("gpt-4o-mini"), AbortSignal.abort())),
    );
    expect(error.name).toBe("AbortError");
    expect(fake.requests).toHaveLength(0);
  });

  it("ends a streamed body with an error when its signal aborts mid-stream", async () => {
    const controller = new AbortController();
    const response = await http.fetch(
      `${paced.url}/chat/completions`,
      post(chat("gpt-4o-mini", { stream: true }), controller.signal),
    );
    const chunks: string[] = [];
    const reading = (async () => {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        chunks.push(Buffer.from(chunk).toString());
        controller.abort();
      }
    })();
    const error = await rejection(reading);
    expect(error.name).toBe("AbortError");
    expect(chunks).toHaveLength(1);
  });

  it("ends a streamed body with an error when the connection drops mid-stream", async () => {
    const response = await http.fetch(
      `${fake.url}/chat/completions`,
      post(chat("drop-mid-stream", { stream: true })),
    );
    expect(response.status).toBe(200);
    const chunks: string[] = [];
    const error = await rejection(
      (async () => {
        for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
          chunks.push(Buffer.from(chunk).toString());
        }
      })(),
    );
    expect(chunks.join("")).toContain("echo: he");
    expect(chunks.join("")).not.toContain("[DONE]");
    expect(error.name).not.toBe("AbortError");
  });

  it("fails a blocking request whose connection is dropped before the answer", async () => {
    await rejection(http.fetch(`${fake.url}/chat/completions`, post(chat("drop-mid-stream"))));
  });

  it("fails when nothing listens, with the network error", async () => {
    const closed = await startFakeOpenAI();
    await closed.close();
    const error = await rejection(
      http.fetch(`${closed.url}/chat/completions`, post(chat("gpt-4o-mini"))),
    );
    expect(causes(error).some((e) => (e as { code?: string }).code === "ECONNREFUSED")).toBe(true);
  });

  it("refuses loopback addresses when the policy does not allow them, sending nothing", async () => {
    for (const host of ["127.0.0.1", "localhost", "[::1]"]) {
      const error = await rejection(
        strict.fetch(`http://${host}:${fake.port}/v1/chat/completions`, post(chat("gpt-4o-mini"))),
      );
      expect(causes(error).some((e) => e instanceof EndpointRefusedError)).toBe(true);
    }
    // The fallback (a body that is not a string) goes through the same pool.
    const error = await rejection(
      strict.fetch(`${fake.url}/chat/completions`, {
        ...post(""),
        body: new Blob([chat("gpt-4o-mini")]),
      }),
    );
    expect(causes(error).some((e) => e instanceof EndpointRefusedError)).toBe(true);
    expect(fake.requests).toHaveLength(0);
  });

  it("follows a redirect, resending the body, as fetch does", async () => {
    const response = await http.fetch(
      `${helperUrl}/redirect/chat/completions`,
      post(chat("gpt-4o-mini")),
    );
    expect(response.status).toBe(200);
    expect(fake.requests).toHaveLength(1);
    expect(fake.requests[0]!.body).toMatchObject({ model: "gpt-4o-mini" });
  });

  it("takes a body that is not a string through fetch itself", async () => {
    const response = await http.fetch(`${fake.url}/chat/completions`, {
      ...post(""),
      body: new Blob([chat("gpt-4o-mini")]),
    });
    expect(response.status).toBe(200);
    expect(fake.requests[0]!.body).toMatchObject({ model: "gpt-4o-mini" });
  });

  it("decompresses a body sent compressed", async () => {
    const response = await http.fetch(`${helperUrl}/gzip`);
    expect(await response.json()).toEqual({ zipped: "yes" });
  });
});
