import { getEventListeners } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { create } from "@bufbuild/protobuf";
import { EndpointPolicy } from "@pies/common";
import { startFakeOpenAI, type FakeOpenAI } from "@pies/testkit";
import { EnvironmentSchema } from "@pies/proto/catalog";
import type { Dispatcher } from "undici";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { providerError as failure } from "../../test/provider-fixtures.js";
import { guardedAgent } from "./guarded-fetch.js";
import {
  errorMessage,
  EventParser,
  retryDelayMs,
  shouldRetry,
  type ProviderHttpOptions,
} from "./http-client.js";
import { OpenAIClient } from "./openai.js";
import type { CompletionRequest } from "./types.js";

/*
 * What the openai SDK did for us and the client now does by hand (openai.test.ts holds the cases
 * the SDK-based client passed): retry pauses, SSE framing, compressed bodies, time limits, the
 * caller's signal.
 */

/** Answers each request with the handler, given how many requests came before it. */
type Handler = (req: IncomingMessage, res: ServerResponse, attempt: number, body: string) => void;

let server: Server;
let base: string;
let handler: Handler;
let attempts: Array<{ path: string; headers: IncomingMessage["headers"] }>;
let agent: Dispatcher;
let fake: FakeOpenAI;

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (d: Buffer) => (body += d.toString()));
    req.on("end", () => {
      const attempt = attempts.length;
      attempts.push({ path: req.url ?? "", headers: req.headers });
      handler(req, res, attempt, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  agent = guardedAgent(new EndpointPolicy("loopback"));
  fake = await startFakeOpenAI();
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await agent.close();
  await fake.close();
});
beforeEach(() => {
  attempts = [];
  fake.reset();
});

function client(options: Partial<ProviderHttpOptions> = {}, endpointUrl = base) {
  const environment = create(EnvironmentSchema, {
    id: "env-wire",
    provider: "openai_compatible",
    endpointUrl,
  });
  return new OpenAIClient(environment, "sk-wire", {
    timeoutMs: 5000,
    maxRetries: 0,
    agent,
    ...options,
  });
}

const request: CompletionRequest = {
  model: "gpt-4o-mini",
  messages: [{ role: "user", content: "hello world" }],
};

const completion = (content: string) =>
  JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1,
    model: "gpt-4o-mini",
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
  });

const chunk = (content: string | undefined, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 1,
    model: "gpt-4o-mini",
    choices: content === undefined ? [] : [{ index: 0, delta: { content } }],
    ...extra,
  });

const sse = (...events: string[]) => events.map((e) => `data: ${e}\n\n`).join("");
const USAGE = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
const ok = (res: ServerResponse, content = "fine") =>
  res.writeHead(200, { "content-type": "application/json" }).end(completion(content));
const refuse = (res: ServerResponse, status: number, headers: Record<string, string> = {}) =>
  res
    .writeHead(status, { "content-type": "application/json", ...headers })
    .end(JSON.stringify({ error: { message: `refused with ${status}`, type: "x" } }));

async function timed<T>(promise: Promise<T>): Promise<{ value: T; ms: number }> {
  const start = performance.now();
  const value = await promise;
  return { value, ms: performance.now() - start };
}

describe("retries, as the SDK made them", () => {
  it("waits the Retry-After given as an HTTP date", async () => {
    handler = (_req, res, attempt) => {
      if (attempt > 0) return ok(res);
      // Dates have whole seconds: the wait is between 1 and 2 s.
      refuse(res, 429, { "retry-after": new Date(Date.now() + 2000).toUTCString() });
    };
    const { value, ms } = await timed(client({ maxRetries: 1 }).complete(request, {}));
    expect(value.content).toBe("fine");
    expect(attempts).toHaveLength(2);
    expect(ms).toBeGreaterThan(900);
    expect(ms).toBeLessThan(2600);
  });

  it("waits the Retry-After given in seconds", async () => {
    handler = (_req, res, attempt) =>
      attempt > 0 ? ok(res) : refuse(res, 503, { "retry-after": "1" });
    const { ms } = await timed(client({ maxRetries: 1 }).complete(request, {}));
    expect(attempts).toHaveLength(2);
    expect(ms).toBeGreaterThan(950);
  });

  it("prefers retry-after-ms to Retry-After", async () => {
    handler = (_req, res, attempt) =>
      attempt > 0 ? ok(res) : refuse(res, 429, { "retry-after-ms": "300", "retry-after": "0" });
    const { ms } = await timed(client({ maxRetries: 1 }).complete(request, {}));
    expect(attempts).toHaveLength(2);
    expect(ms).toBeGreaterThan(280);
    expect(ms).toBeLessThan(1000);
  });

  it("backs off 0.5 s less jitter without a Retry-After", async () => {
    handler = (_req, res, attempt) => (attempt > 0 ? ok(res) : refuse(res, 502));
    const { ms } = await timed(client({ maxRetries: 1 }).complete(request, {}));
    expect(attempts).toHaveLength(2);
    expect(ms).toBeGreaterThan(360);
    expect(ms).toBeLessThan(1200);
  });

  it("retries 408 and 409, not 404", async () => {
    for (const status of [408, 409]) {
      attempts = [];
      handler = (_req, res, attempt) =>
        attempt > 0 ? ok(res) : refuse(res, status, { "retry-after-ms": "1" });
      expect((await client({ maxRetries: 1 }).complete(request, {})).content).toBe("fine");
      expect(attempts).toHaveLength(2);
    }
    attempts = [];
    handler = (_req, res) => refuse(res, 404, { "retry-after-ms": "1" });
    const error = await failure(client({ maxRetries: 2 }).complete(request, {}));
    expect(error.message).toBe("provider answered 404: refused with 404");
    expect(attempts).toHaveLength(1);
  });

  it("obeys x-should-retry: false on a 500, true on a 400", async () => {
    handler = (_req, res) => refuse(res, 500, { "x-should-retry": "false" });
    const error = await failure(client({ maxRetries: 2 }).complete(request, {}));
    expect(error.message).toBe("provider answered 500: refused with 500");
    expect(attempts).toHaveLength(1);

    attempts = [];
    handler = (_req, res, attempt) =>
      attempt > 0 ? ok(res) : refuse(res, 400, { "x-should-retry": "true", "retry-after-ms": "1" });
    expect((await client({ maxRetries: 1 }).complete(request, {})).content).toBe("fine");
    expect(attempts).toHaveLength(2);
  });

  it("retries at most maxRetries times, and fails with the last answer", async () => {
    handler = (_req, res, attempt) => refuse(res, 500 + attempt, { "retry-after-ms": "1" });
    const error = await failure(client({ maxRetries: 3 }).complete(request, {}));
    expect(attempts).toHaveLength(4);
    expect(error.message).toBe("provider answered 503: refused with 503");
  });

  it("retries a stream broken before its first chunk, not after", async () => {
    handler = (_req, res, attempt) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (attempt === 0) {
        // The role chunk, no content, then the connection drops.
        res.write(sse(JSON.stringify({ choices: [{ index: 0, delta: { role: "assistant" } }] })));
        setTimeout(() => res.socket?.destroy(), 20);
        return;
      }
      res.end(sse(chunk("echo"), chunk(undefined, { usage: USAGE }), "[DONE]"));
    };
    const pieces: string[] = [];
    const result = await client({ maxRetries: 1 }).complete(request, {
      onChunk: (t) => pieces.push(t),
    });
    expect(result).toEqual({ content: "echo", usage: { prompt: 3, result: 2, total: 5 } });
    expect(pieces).toEqual(["echo"]);
    expect(attempts).toHaveLength(2);
  });

  it("does not retry the endpoint policy's refusal", async () => {
    const strict = guardedAgent(new EndpointPolicy(""));
    try {
      const { value: error, ms } = await timed(
        failure(client({ maxRetries: 2, agent: strict }).complete(request, {})),
      );
      expect(error.message).toBe("the provider endpoint is not allowed by the endpoint policy");
      // Retried, it would wait 0.5 s and 1 s for the same refusal.
      expect(ms).toBeLessThan(300);
    } finally {
      await strict.close();
    }
  });

  it("stops waiting for a retry when the caller aborts", async () => {
    handler = (_req, res) => refuse(res, 429, { "retry-after": "10" });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const { value: error, ms } = await timed(
      failure(client({ maxRetries: 2 }).complete(request, { signal: controller.signal })),
    );
    expect(error.code).toBe("cancelled");
    expect(ms).toBeLessThan(1000);
    expect(attempts).toHaveLength(1);
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
  });

  it("fails at once when told to wait more than a minute, with the refusal", async () => {
    const asks: Array<Record<string, string>> = [
      { "retry-after": "120" },
      { "retry-after-ms": "61000" },
      { "retry-after": new Date(Date.now() + 3_600_000).toUTCString() },
    ];
    for (const headers of asks) {
      attempts = [];
      handler = (_req, res) => refuse(res, 429, headers);
      const { value: error, ms } = await timed(
        failure(client({ maxRetries: 2 }).complete(request, {})),
      );
      expect(error.message).toBe("provider answered 429: refused with 429");
      expect(attempts).toHaveLength(1);
      expect(ms).toBeLessThan(1000);
    }
    // A minute is still waited for (here cut short by the caller).
    attempts = [];
    handler = (_req, res) => refuse(res, 503, { "retry-after": "60" });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 200);
    const error = await failure(
      client({ maxRetries: 2 }).complete(request, { signal: controller.signal }),
    );
    expect(error.code).toBe("cancelled");
  });

  it("computes the SDK's pauses", () => {
    expect(retryDelayMs(undefined, 0, 0)).toBe(500);
    expect(retryDelayMs(undefined, 1, 0)).toBe(1000);
    expect(retryDelayMs(undefined, 2, 1)).toBe(1500);
    expect(retryDelayMs(undefined, 10, 0)).toBe(8000);
    expect(retryDelayMs({ "retry-after-ms": "12.5" }, 3)).toBe(12.5);
    expect(retryDelayMs({ "retry-after-ms": "0", "retry-after": "2" }, 0)).toBe(2000);
    expect(retryDelayMs({ "retry-after": "0" }, 0)).toBe(0);
    expect(retryDelayMs({ "retry-after": new Date(Date.now() - 5000).toUTCString() }, 0)).toBe(0);
    // Unreadable: the backoff.
    expect(retryDelayMs({ "retry-after": "soon" }, 1, 0)).toBe(1000);
    expect(shouldRetry(400, {})).toBe(false);
    expect(shouldRetry(429, {})).toBe(true);
    expect(shouldRetry(599, {})).toBe(true);
    expect(shouldRetry(503, { "x-should-retry": "false" })).toBe(false);
    expect(shouldRetry(422, { "x-should-retry": "true" })).toBe(true);
  });
});

describe("time limits", () => {
  it("limits each attempt, not the whole call", async () => {
    // Two attempts of 200 ms each: 400 ms in all, over a limit of 300 ms per attempt.
    handler = (_req, res, attempt) =>
      setTimeout(
        () => (attempt === 0 ? refuse(res, 503, { "retry-after-ms": "1" }) : ok(res)),
        200,
      );
    const { value, ms } = await timed(
      client({ timeoutMs: 300, maxRetries: 1 }).complete(request, {}),
    );
    expect(value.content).toBe("fine");
    expect(ms).toBeGreaterThan(390);
  });

  it("retries an attempt that timed out", async () => {
    handler = (_req, res, attempt) =>
      attempt === 0 ? setTimeout(() => !res.destroyed && ok(res), 1000) : ok(res, "second");
    const { value, ms } = await timed(
      client({ timeoutMs: 150, maxRetries: 1 }).complete(request, {}),
    );
    expect(value.content).toBe("second");
    expect(attempts).toHaveLength(2);
    expect(ms).toBeLessThan(1000);
  });

  it("limits a blocking answer whose body stalls after its headers", async () => {
    handler = (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.flushHeaders();
      setTimeout(() => !res.destroyed && res.end(completion("late")), 2000);
    };
    const { value: error, ms } = await timed(
      failure(client({ timeoutMs: 200 }).complete(request, {})),
    );
    expect(error.code).toBe("timeout");
    expect(ms).toBeLessThan(1500);
  });
});

describe("time limits of a stream", () => {
  it("lets a stream that started in time run past timeoutMs", async () => {
    const paced = await startFakeOpenAI({ chunkDelayMs: 80, streamChunkChars: 4 });
    try {
      const { value, ms } = await timed(
        client({ timeoutMs: 200 }, paced.url).complete(request, { onChunk: () => {} }),
      );
      expect(value.content).toBe("echo: hello world");
      expect(ms).toBeGreaterThan(300);
    } finally {
      await paced.close();
    }
  });

  it("fails a stream that goes silent after a chunk, within the limit per idle gap", async () => {
    handler = (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" }).write(sse(chunk("one")));
      // Then nothing, the connection kept open.
    };
    const pieces: string[] = [];
    const { value: error, ms } = await timed(
      failure(client({ timeoutMs: 300 }).complete(request, { onChunk: (t) => pieces.push(t) })),
    );
    expect(pieces).toEqual(["one"]);
    expect(error.code).toBe("stream_error");
    expect(error.message).toBe(
      "the provider's answer broke off after 3 characters: the provider did not answer in time",
    );
    expect(ms).toBeLessThan(2000);
  });

  it("keeps a stream whose gaps are filled by keep-alive comments", async () => {
    handler = (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" }).write(sse(chunk("one")));
      let n = 0;
      const beat = setInterval(() => {
        if (res.destroyed) return clearInterval(beat);
        if (++n < 6) return void res.write(": keep-alive\n\n");
        clearInterval(beat);
        res.end(sse(chunk(" two"), "[DONE]"));
      }, 100);
    };
    const { value, ms } = await timed(
      client({ timeoutMs: 250 }).complete(request, { onChunk: () => {} }),
    );
    expect(value.content).toBe("one two");
    expect(ms).toBeGreaterThan(500);
  });

  it("gives undici timeoutMs as its headers and body limits, whatever its own defaults", async () => {
    const seen: Array<{ headersTimeout?: number | null; bodyTimeout?: number | null }> = [];
    const recording = agent.compose((dispatch) => (opts, handler) => {
      seen.push({ headersTimeout: opts.headersTimeout, bodyTimeout: opts.bodyTimeout });
      return dispatch(opts, handler);
    });
    handler = (_req, res) => ok(res);
    // Above undici's default of 300 s, which would otherwise cap it.
    await client({ timeoutMs: 600_000, agent: recording }).complete(request, {});
    expect(seen).toEqual([{ headersTimeout: 600_000, bodyTimeout: 600_000 }]);
  });
});

describe("the caller's signal", () => {
  it("keeps no listener on it once a call is over, whatever the outcome", async () => {
    const controller = new AbortController();
    const signal = controller.signal;
    handler = (_req, res) => ok(res);
    await client().complete(request, { signal });
    expect(getEventListeners(signal, "abort")).toHaveLength(0);
    await client({}, fake.url).complete(request, { signal, onChunk: () => {} });
    expect(getEventListeners(signal, "abort")).toHaveLength(0);
    await failure(client({}, fake.url).complete({ ...request, model: "fail-400" }, { signal }));
    await client({ maxRetries: 1 }, fake.url).complete(
      { ...request, model: "rate-limit-once" },
      { signal },
    );
    await failure(
      client({ timeoutMs: 50 }, fake.url).complete({ ...request, model: "slow-500" }, { signal }),
    );
    await failure(
      client({}, fake.url).complete(
        { ...request, model: "drop-mid-stream" },
        {
          signal,
          onChunk: () => {},
        },
      ),
    );
    expect(getEventListeners(signal, "abort")).toHaveLength(0);
    // The end of an in-process call aborts its handler's signal: nothing hears it any more.
    controller.abort(new Error("call ended"));
  });

  it("delivers each chunk as it arrives, not when the answer ends", async () => {
    const paced = await startFakeOpenAI({ chunkDelayMs: 60, streamChunkChars: 4 });
    try {
      const at: number[] = [];
      const result = await client({}, paced.url).complete(request, {
        onChunk: () => at.push(performance.now()),
      });
      expect(result.content).toBe("echo: hello world");
      // Five pieces of four characters, 60 ms apart.
      expect(at).toHaveLength(5);
      expect(at.at(-1)! - at[0]!).toBeGreaterThan(3 * 60);
    } finally {
      await paced.close();
    }
  });

  it("aborts a stream under way with cancelled, keeping what was delivered", async () => {
    const paced = await startFakeOpenAI({ chunkDelayMs: 50 });
    try {
      const controller = new AbortController();
      const pieces: string[] = [];
      const error = await failure(
        client({}, paced.url).complete(request, {
          signal: controller.signal,
          onChunk: (t) => {
            pieces.push(t);
            controller.abort();
          },
        }),
      );
      expect(error.code).toBe("cancelled");
      expect(pieces).toHaveLength(1);
    } finally {
      await paced.close();
    }
  });
});

describe("server-sent events", () => {
  it("reads events split anywhere across TCP chunks", async () => {
    // CRLF lines, a comment, an event name, data on two lines, a multi-byte character, a
    // keep-alive, the usage, then [DONE] and what a server may send after it.
    const body =
      ": keep-alive\r\n\r\n" +
      `event: message\r\ndata: ${chunk("héllo ")}\r\n\r\n` +
      `data: {"choices": [{"index": 0,\r\ndata: "delta": {"content": "wörld 🌍"}}]}\r\n\r\n` +
      ":\r\n\r\n" +
      `data: ${chunk(undefined, { usage: USAGE })}\r\n\r\n` +
      "data: [DONE]\r\n\r\n" +
      `data: ${chunk("after done")}\r\n\r\n`;
    const bytes = Buffer.from(body);
    handler = (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      // One byte a write, each in its own TCP segment: every split point, inside "\r\n" and
      // inside the UTF-8 sequences included.
      res.socket?.setNoDelay(true);
      let i = 0;
      const next = () => {
        if (res.destroyed) return;
        if (i >= bytes.length) return void res.end();
        res.write(bytes.subarray(i, i + 1));
        i += 1;
        setImmediate(next);
      };
      next();
    };
    const pieces: string[] = [];
    const result = await client().complete(request, { onChunk: (t) => pieces.push(t) });
    expect(pieces).toEqual(["héllo ", "wörld 🌍"]);
    expect(result).toEqual({
      content: "héllo wörld 🌍",
      usage: { prompt: 3, result: 2, total: 5 },
    });
  });

  it("parses the same events at every split point, with LF, CRLF or CR line ends", () => {
    for (const end of ["\n", "\r\n", "\r"]) {
      const text = [
        ": comment",
        "",
        "event: message",
        "data: one",
        "",
        "data: two",
        "data:three",
        "id: 7",
        "retry: 10",
        "",
        "event: empty",
        "",
        "data",
        "",
        "data: last",
      ].join(end);
      const expected = [
        ["one", "message"],
        ["two\nthree", ""],
        ["", ""],
        ["last", ""],
      ];
      for (let split = 0; split <= text.length; split++) {
        for (const second of [split, Math.min(text.length, split + 3)]) {
          const seen: string[][] = [];
          const parser = new EventParser((data, event) => seen.push([data, event]));
          parser.push(text.slice(0, split));
          parser.push(text.slice(split, second));
          parser.push(text.slice(second));
          parser.end();
          expect(seen, `${JSON.stringify(end)} split at ${split}, ${second}`).toEqual(expected);
        }
      }
    }
  });

  it("fails on an error event before any chunk, naming the provider's message", async () => {
    handler = (_req, res) =>
      res
        .writeHead(200, { "content-type": "text/event-stream" })
        .end(sse(JSON.stringify({ error: { message: "overloaded", type: "server_error" } })));
    const error = await failure(client({ maxRetries: 2 }).complete(request, { onChunk: () => {} }));
    expect(error.code).toBe("provider_error");
    expect(error.message).toBe("the provider reported an error: overloaded");
    expect(attempts).toHaveLength(1);
  });

  it("fails with stream_error on an error event after a chunk", async () => {
    handler = (_req, res) =>
      res
        .writeHead(200, { "content-type": "text/event-stream" })
        .end(
          sse(chunk("part"), JSON.stringify({ error: { message: "overloaded" } }), chunk("more")) +
            "data: [DONE]\n\n",
        );
    const pieces: string[] = [];
    const error = await failure(
      client({ maxRetries: 2 }).complete(request, { onChunk: (t) => pieces.push(t) }),
    );
    expect(error.code).toBe("stream_error");
    expect(error.message).toBe(
      "the provider's answer broke off after 4 characters: the provider reported an error: overloaded",
    );
    expect(pieces).toEqual(["part"]);
  });

  it("delivers a chunk once when an error event follows it in the body's last read", async () => {
    handler = (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      // The chunk without its line end, then the rest and the body's end in one read: the
      // parser's unfinished text must not be replayed at the end.
      res.write(`data: ${chunk("Hello")}`);
      setTimeout(
        () => res.end(`\n\ndata: ${JSON.stringify({ error: { message: "overloaded" } })}\n\n`),
        50,
      );
    };
    const pieces: string[] = [];
    const error = await failure(client().complete(request, { onChunk: (t) => pieces.push(t) }));
    expect(pieces).toEqual(["Hello"]);
    expect(error.code).toBe("stream_error");
    expect(error.message).toBe(
      "the provider's answer broke off after 5 characters: the provider reported an error: overloaded",
    );
  });

  it("keeps no unfinished text of a dispatch that threw", () => {
    const seen: string[] = [];
    const parser = new EventParser((data) => {
      seen.push(data);
      if (data === "bad") throw new Error("bad");
    });
    expect(() => parser.push("data: bad\n\ndata: after")).toThrow("bad");
    parser.end();
    expect(seen).toEqual(["bad", "after"]);
  });

  it("closes the connection after an error event or a chunk callback that threw", async () => {
    for (const [name, body, onChunk] of [
      ["error event", sse(chunk("part"), JSON.stringify({ error: { message: "no" } })), () => {}],
      [
        "throwing onChunk",
        sse(chunk("part")),
        () => {
          throw new Error("the caller failed");
        },
      ],
    ] as const) {
      let closed!: () => void;
      const seenClose = new Promise<void>((resolve) => (closed = resolve));
      handler = (_req, res) => {
        res.on("close", closed);
        // The provider would go on generating: the body never ends by itself.
        res.writeHead(200, { "content-type": "text/event-stream" }).write(body);
      };
      const error = await failure(client().complete(request, { onChunk }));
      expect(error.code, name).toBe("stream_error");
      await Promise.race([
        seenClose,
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error(`${name}: not closed`)), 1000),
        ),
      ]);
    }
  });

  it("fails a streamed 200 that holds no event, such as an HTML page, without retrying it", async () => {
    for (const [type, body] of [
      ["text/html; charset=utf-8", "<html><body>Sign in to continue</body></html>"],
      ["text/event-stream", ""],
    ]) {
      attempts = [];
      handler = (_req, res) => res.writeHead(200, { "content-type": type! }).end(body);
      const error = await failure(
        client({ maxRetries: 2 }).complete(request, { onChunk: () => {} }),
      );
      expect(error.code, type).toBe("provider_error");
      expect(error.message).toBe(`the provider's answer is not a stream of events (${type})`);
      expect(attempts).toHaveLength(1);
    }
  });

  it("takes a whole completion answered to a streamed request as one chunk", async () => {
    handler = (_req, res) => ok(res, "not streamed");
    const pieces: string[] = [];
    const result = await client().complete(request, { onChunk: (t) => pieces.push(t) });
    expect(pieces).toEqual(["not streamed"]);
    expect(result.content).toBe("not streamed");
  });
});

describe("the wire", () => {
  it("decodes gzip, deflate and br answers, blocking and streamed", async () => {
    const encoders = { gzip: gzipSync, deflate: deflateSync, br: brotliCompressSync };
    for (const [coding, encode] of Object.entries(encoders)) {
      handler = (_req, res, _attempt, body) => {
        const streamed = (JSON.parse(body) as { stream?: boolean }).stream;
        const text = streamed
          ? sse(chunk(`${coding} `), chunk("streamed"), "[DONE]")
          : completion(`${coding} blocking`);
        res
          .writeHead(200, {
            "content-type": streamed ? "text/event-stream" : "application/json",
            "content-encoding": coding,
          })
          .end(encode(text));
      };
      expect((await client().complete(request, {})).content).toBe(`${coding} blocking`);
      const pieces: string[] = [];
      await client().complete(request, { onChunk: (t) => pieces.push(t) });
      expect(pieces.join("")).toBe(`${coding} streamed`);
    }
  });

  it("reads the message of a compressed error body, and retries past a compressed refusal", async () => {
    handler = (_req, res, attempt) =>
      res
        .writeHead(attempt === 0 ? 503 : 400, {
          "content-type": "application/json",
          "content-encoding": "gzip",
          "retry-after-ms": "1",
        })
        .end(gzipSync(JSON.stringify({ error: { message: `zipped ${attempt}` } })));
    const error = await failure(client({ maxRetries: 1 }).complete(request, {}));
    expect(error.message).toBe("provider answered 400: zipped 1");
    expect(attempts).toHaveLength(2);
  });

  it("sends JSON with its user agent, to the endpoint's path with its query kept", async () => {
    handler = (_req, res) => ok(res);
    await client({}, `${base}/?api-version=2024-10-21`).complete(request, {});
    expect(attempts[0]!.path).toBe("/v1/chat/completions?api-version=2024-10-21");
    expect(attempts[0]!.headers["content-type"]).toBe("application/json");
    expect(attempts[0]!.headers["user-agent"]).toBe("pies-executor");
    expect(attempts[0]!.headers.authorization).toBe("Bearer sk-wire");
  });

  it("follows a redirect, resending the POST and its body, the key only to the same origin", async () => {
    const bodies: Array<{ origin: string; method?: string; body: string; auth?: string }> = [];
    const other = createServer((req, res) => {
      let body = "";
      req.on("data", (d: Buffer) => (body += d.toString()));
      req.on("end", () => {
        bodies.push({ origin: "other", method: req.method, body, auth: req.headers.authorization });
        ok(res, "moved twice");
      });
    });
    await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
    const otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    try {
      handler = (req, res, attempt, body) => {
        bodies.push({ origin: "base", method: req.method, body, auth: req.headers.authorization });
        if (attempt === 0) return res.writeHead(307, { location: "/v1/moved" }).end();
        res.writeHead(308, { location: `${otherUrl}/v1/chat/completions` }).end();
      };
      const result = await client().complete(request, {});
      expect(result.content).toBe("moved twice");
      expect(attempts.map((a) => a.path)).toEqual(["/v1/chat/completions", "/v1/moved"]);
      expect(bodies.map((b) => [b.origin, b.method, b.auth])).toEqual([
        ["base", "POST", "Bearer sk-wire"],
        ["base", "POST", "Bearer sk-wire"],
        // Another origin: the key is not sent there.
        ["other", "POST", undefined],
      ]);
      for (const b of bodies) expect(JSON.parse(b.body)).toMatchObject({ model: "gpt-4o-mini" });
    } finally {
      other.closeAllConnections();
      await new Promise((resolve) => other.close(resolve));
    }
  });

  it("refuses a redirect to an address the endpoint policy refuses", async () => {
    handler = (_req, res) =>
      res.writeHead(307, { location: "http://169.254.169.254/latest/meta-data" }).end();
    const error = await failure(client({ maxRetries: 2 }).complete(request, {}));
    expect(error.message).toBe("the provider endpoint is not allowed by the endpoint policy");
    expect(attempts).toHaveLength(1);
  });

  it("gives up after three redirects, failing with the last, and at once on a loop", async () => {
    handler = (_req, res, attempt) =>
      res.writeHead(307, { location: `/v1/hop${attempt + 1}` }).end();
    let error = await failure(client({ maxRetries: 2 }).complete(request, {}));
    expect(error.message).toBe("provider answered 307: no error message");
    expect(attempts).toHaveLength(4);

    attempts = [];
    handler = (_req, res) => res.writeHead(308, { location: "/v1/again" }).end();
    error = await failure(client({ maxRetries: 2 }).complete(request, {}));
    // undici's message names the origin; ours does not.
    expect(error.message).toBe("the provider endpoint redirects in a loop");
    expect(attempts).toHaveLength(2);
  });

  it("sends a key pasted with whitespace around it, trimmed, as the SDK's headers did", async () => {
    handler = (_req, res) => ok(res);
    const environment = create(EnvironmentSchema, { id: "env-ws", endpointUrl: base });
    await new OpenAIClient(environment, "  sk-pasted\r\n", {
      timeoutMs: 5000,
      maxRetries: 0,
      agent,
    }).complete(request, {});
    expect(attempts[0]!.headers.authorization).toBe("Bearer sk-pasted");
  });

  it("fails at once, naming no address, a key or URL that no request can carry", async () => {
    const cases: Array<[string, string, string]> = [
      [base, "sk-bad\nkey", "the provider API key has characters an HTTP header cannot carry"],
      [
        "ftp://127.0.0.1:21/v1",
        "sk-wire",
        "the provider endpoint URL is not valid: it must be http or https",
      ],
      [
        "file:///etc/passwd",
        "sk-wire",
        "the provider endpoint URL is not valid: it must be http or https",
      ],
    ];
    for (const [endpointUrl, key, message] of cases) {
      const environment = create(EnvironmentSchema, { id: "env-bad", endpointUrl });
      const { value: error, ms } = await timed(
        failure(
          new OpenAIClient(environment, key, { timeoutMs: 5000, maxRetries: 2, agent }).complete(
            request,
            {},
          ),
        ),
      );
      expect(error.message, endpointUrl).toBe(message);
      expect(error.code).toBe("provider_error");
      // Retried, it would wait 0.5 s and 1 s to fail the same way.
      expect(ms).toBeLessThan(300);
    }
    expect(attempts).toHaveLength(0);
  });

  it("names an answer that is not a chat completion, without retrying it", async () => {
    for (const [body, message] of [
      ["<html>oops</html>", "the provider's answer is not JSON"],
      ['{"object": "list"}', "the provider's answer is not a chat completion"],
      ['{"error": {"message": "quota"}}', "the provider reported an error: quota"],
    ]) {
      attempts = [];
      handler = (_req, res) => res.writeHead(200).end(body);
      const error = await failure(client({ maxRetries: 2 }).complete(request, {}));
      expect(error.message).toBe(message);
      expect(attempts).toHaveLength(1);
    }
  });

  it("takes the provider's message as the SDK did", () => {
    expect(errorMessage('{"error": {"message": "bad model"}}')).toBe("bad model");
    expect(errorMessage('{"error": {"message": {"detail": "x"}}}')).toBe('{"detail":"x"}');
    expect(errorMessage('{"error": {"code": "nope"}}')).toBe('{"code":"nope"}');
    expect(errorMessage('{"error": "plain"}')).toBe('"plain"');
    // Servers that are not OpenAI's: older vLLM's top-level `message`, FastAPI's `detail`.
    expect(errorMessage('{"object": "error", "message": "model not found"}')).toBe(
      "model not found",
    );
    expect(errorMessage('{"detail": "Not authenticated"}')).toBe("Not authenticated");
    expect(errorMessage('{"detail": [{"loc": ["body"], "msg": "field required"}]}')).toBe(
      '[{"loc":["body"],"msg":"field required"}]',
    );
    expect(errorMessage('{"error": {"message": "first"}, "message": "second"}')).toBe("first");
    expect(errorMessage('{"status": "bad"}')).toBe("");
    expect(errorMessage(" Bad Gateway \n")).toBe("Bad Gateway");
    expect(errorMessage("")).toBe("");
    expect(errorMessage("x".repeat(5000))).toHaveLength(2001);
  });

  it("says when the provider gave no message", async () => {
    handler = (_req, res) => res.writeHead(502).end();
    const error = await failure(client().complete(request, {}));
    expect(error.message).toBe("provider answered 502: no error message");
  });
});
