/**
 * A fake model provider for loopback tests and benchmarks: OpenAI's wire, and
 * Azure OpenAI's, Anthropic's and Google's (fake-wires.ts), on one server.
 *
 * It speaks the real chat-completions wire protocol (JSON responses, SSE
 * streaming with `data: [DONE]`, OpenAI error bodies, `Retry-After` headers),
 * so production code can talk to it through the official `openai` SDK with
 * `baseURL` set to {@link FakeOpenAI.url}; the other wires are at their own
 * paths under {@link FakeOpenAI.origin}, each with its own request shape,
 * answers, events, error bodies and key header. Only node built-ins (and the
 * dependency-free sampler beside it in @pies/common) are used so it can be
 * imported from any workspace without extra dependencies.
 *
 * Endpoints:
 * - `POST /v1/chat/completions` (also `/chat/completions`): blocking or
 *   streaming (`stream: true`) chat completion.
 * - `POST /openai/deployments/{deployment}/chat/completions?api-version=…`
 *   (Azure OpenAI), `POST /v1/messages` (Anthropic),
 *   `POST /v1beta/models/{model}:generateContent` and
 *   `:streamGenerateContent?alt=sse` (Gemini).
 * - `GET /v1/models` (also `/models`): a one-model list.
 * - anything else: 404 with an OpenAI-style error body.
 *
 * Response content is deterministic:
 * - `options.respond(body)` when given, otherwise
 * - `response_format.type === "json_schema"`: JSON of a value sampled from
 *   `response_format.json_schema.schema` by the sampler the executor's test
 *   provider uses (`sampleJson` in common/src/json-sample.ts), seeded by the
 *   messages: all properties present, local `$ref`s resolved;
 * - `response_format.type === "json_object"`: `{"echo": <last user message>}`;
 * - otherwise `"echo: " + <last user message>`.
 *
 * Usage is `prompt_tokens = ceil(chars of all message contents / 4)` and
 * `completion_tokens = ceil(content length / 4)`.
 *
 * Fault injection is chosen by the request's `model` name:
 * - `fail-500`: always 500 with a `server_error` body.
 * - `fail-400`: always 400 with an `invalid_request_error` body.
 * - `rate-limit-once`: the first request for this model (per server, until
 *   {@link FakeOpenAI.reset}) gets 429 with `Retry-After: 0`,
 *   `retry-after-ms: 10` and a `rate_limit_exceeded` body; later ones succeed.
 * - `rate-limit-once-1s`: the same with `Retry-After: 1` alone (a client that honours it waits a
 *   second before trying again).
 * - `drop-mid-stream`: streaming sends the role chunk and the first content
 *   chunk, then destroys the socket; non-streaming destroys the socket
 *   without answering.
 * - `error-mid-stream`: streaming sends the events up to the first content
 *   chunk, then the wire's error event (Anthropic's `overloaded_error`);
 *   non-streaming answers 500.
 * - `refuse-connection`: the socket is destroyed before any answer, streamed
 *   or not (a connection reset).
 * - `error-before-content-once`: the first streamed request for this model
 *   (per server, until {@link FakeOpenAI.reset}) gets the events before the
 *   first content chunk, then the wire's error event; later ones succeed.
 * - `slow-<ms>` (e.g. `slow-200`): waits that many ms before answering.
 * - `invalid-json`: with a `json_schema` response format, returns valid JSON
 *   that violates the schema (missing required properties or wrong types);
 *   otherwise behaves normally.
 * - `invalid-json-once`: as `invalid-json` for the first request for this
 *   model (per server, until {@link FakeOpenAI.reset}), normal afterwards.
 * - `not-json-once`: the first request's content is not JSON at all
 *   (`Sure! Here is your JSON:` and a truncated object), normal afterwards.
 * - any other name: normal behaviour.
 *
 * `options.latencyMs` is added before every answer (errors included) and
 * `options.chunkDelayMs` between streamed chunks.
 *
 * @example
 * ```ts
 * const fake = await startFakeOpenAI({ apiKey: "sk-test" });
 * const client = new OpenAI({ apiKey: "sk-test", baseURL: fake.url });
 * await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
 * await fake.close();
 * ```
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { sampleJson, seededRandom, seedOf, violateJson, type JsonObject } from "@pies/common";
import {
  newAnswerId,
  openai,
  routeOf,
  type ChatCompletionRequestBody,
  type ChatMessage,
  type ErrorKind,
  type FakeWire,
  type Usage,
} from "./fake-wires.js";

export type { ChatCompletionRequestBody, ChatMessage, WireName } from "./fake-wires.js";

/** Options for {@link startFakeOpenAI}. */
export interface FakeOpenAIOptions {
  /** Port to listen on (127.0.0.1). Default 0: an ephemeral port. */
  port?: number;
  /**
   * When set, every request must carry `Authorization: Bearer <apiKey>`;
   * others get 401 `invalid_api_key`. When unset, any (or no) key is accepted.
   */
  apiKey?: string;
  /** Delay in ms added before every answer. Default 0. */
  latencyMs?: number;
  /** Delay in ms between streamed chunks. Default 0 (all chunks in one write). */
  chunkDelayMs?: number;
  /** Characters of content per streamed delta. Default 8. */
  streamChunkChars?: number;
  /**
   * Overrides the generated content of successful chat completions (fault
   * models still apply). Throwing makes the server answer 500.
   */
  respond?: (body: ChatCompletionRequestBody) => string | Promise<string>;
  /**
   * At most this many requests are kept in {@link FakeOpenAI.requests}; later
   * ones are not recorded so long benchmarks do not grow memory without
   * bound. 0 disables recording. Default 10 000.
   */
  maxRecordedRequests?: number;
  /** Request bodies larger than this get 413. Default 16 MiB. */
  maxBodyBytes?: number;
}

/** One request as received by the fake server. */
export interface RecordedRequest {
  /** HTTP method, e.g. `"POST"`. */
  method: string;
  /** Request path without the query string, e.g. `"/v1/chat/completions"`. */
  path: string;
  /** The query string, without its `?` (empty when none). */
  query: string;
  /** Request headers as parsed by node (lower-case names). */
  headers: IncomingHttpHeaders;
  /** Parsed JSON body; `undefined` when the body was empty or not valid JSON. */
  body: unknown;
}

/** A running fake server; see {@link startFakeOpenAI}. */
export interface FakeOpenAI {
  /** Base URL to give the SDK, e.g. `http://127.0.0.1:12345/v1`. */
  readonly url: string;
  /**
   * The server's origin, e.g. `http://127.0.0.1:12345`: the endpoint URL of an Anthropic, Google
   * or Azure OpenAI environment, whose clients add their paths to it.
   */
  readonly origin: string;
  /** The port the server listens on. */
  readonly port: number;
  /** Requests received so far (oldest first); the same array across {@link reset}. */
  readonly requests: RecordedRequest[];
  /** Closes the server and destroys all open (including keep-alive) sockets. */
  close(): Promise<void>;
  /** Clears {@link requests} and the per-model counters (re-arms `rate-limit-once`). */
  reset(): void;
}

const DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024;
const DEFAULT_MAX_RECORDED = 10_000;
const MODELS_CREATED = 1_700_000_000;

/**
 * Starts a fake OpenAI-compatible server on 127.0.0.1.
 *
 * @param options - see {@link FakeOpenAIOptions}; all optional.
 * @returns the running server once it is listening.
 */
export async function startFakeOpenAI(options: FakeOpenAIOptions = {}): Promise<FakeOpenAI> {
  const config = {
    apiKey: options.apiKey,
    latencyMs: options.latencyMs ?? 0,
    chunkDelayMs: options.chunkDelayMs ?? 0,
    streamChunkChars: Math.max(1, options.streamChunkChars ?? 8),
    respond: options.respond,
    maxRecorded: options.maxRecordedRequests ?? DEFAULT_MAX_RECORDED,
    maxBodyBytes: options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
  };
  const requests: RecordedRequest[] = [];
  const modelCounts = new Map<string, number>();
  // Aborted by close() so pending latency/chunk timers end immediately
  // instead of keeping the process (and close()) waiting.
  const shutdown = new AbortController();

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      // Last resort: a bug in the handler must not leave the client hanging.
      if (!res.headersSent && !res.destroyed) {
        sendJson(
          res,
          500,
          openai.error(500, `fake-openai internal error: ${String(err)}`, "server"),
        );
      } else {
        res.destroy();
      }
    });
  });
  // Longer than typical client idle timeouts (undici: 4 s, honouring our
  // `Keep-Alive: timeout=` hint) so the server is not the side that closes an
  // idle socket while a client is reusing it under load.
  server.keepAliveTimeout = 10_000;
  // Bound how long a client may take to send a request, so slow or stalled
  // uploads cannot pin memory or sockets forever.
  server.requestTimeout = 60_000;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? "GET";
    const [path = "/", search = ""] = (req.url ?? "/").split("?", 2);
    const query = new URLSearchParams(search);
    const route = routeOf(method, path, query);
    const wire = route?.wire ?? openai;
    const fail = (status: number, message: string, kind: ErrorKind) =>
      sendJson(res, status, wire.error(status, message, kind));

    const raw = await readBody(req, config.maxBodyBytes);
    if (raw === undefined) {
      // Too large: answer and close the connection rather than read on.
      res.setHeader("connection", "close");
      fail(413, "Request body too large.", "too_large");
      return;
    }
    let body: unknown;
    let badJson = false;
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw.toString("utf8"));
      } catch {
        badJson = true;
      }
    }
    if (requests.length < config.maxRecorded) {
      requests.push({ method, path, query: search, headers: req.headers, body });
    }

    if (config.latencyMs > 0 && !(await sleep(config.latencyMs, shutdown.signal))) return;
    if (res.destroyed) return;

    if (config.apiKey !== undefined && !wire.authorized(req.headers, query, config.apiKey)) {
      fail(401, "Incorrect API key provided", "auth");
      return;
    }

    const isModels = path === "/v1/models" || path === "/models";
    if (method === "GET" && isModels) {
      sendJson(res, 200, {
        object: "list",
        data: [
          {
            id: "gpt-4o-mini",
            object: "model",
            created: MODELS_CREATED,
            owned_by: "pies-fake",
          },
        ],
      });
      return;
    }
    if (!route) {
      fail(404, `Invalid URL (${method} ${path})`, "not_found");
      return;
    }
    if (wire.name === "anthropic" && !req.headers["anthropic-version"]) {
      fail(400, "anthropic-version: header is required", "invalid");
      return;
    }
    if (badJson) {
      fail(400, "We could not parse the JSON body of your request.", "invalid");
      return;
    }
    const chat = wire.chat(body, route);
    if ("invalid" in chat) {
      fail(400, String(chat.invalid), "invalid");
      return;
    }
    await handleChat(chat, wire, res);
  }

  async function handleChat(
    body: ChatCompletionRequestBody,
    wire: FakeWire,
    res: ServerResponse,
  ): Promise<void> {
    const model = body.model;
    const count = (modelCounts.get(model) ?? 0) + 1;
    modelCounts.set(model, count);
    const streaming = body.stream === true;
    const fail = (status: number, message: string, kind: ErrorKind) =>
      sendJson(res, status, wire.error(status, message, kind));

    const slow = /^slow-(\d+)$/.exec(model);
    if (slow?.[1] !== undefined && !(await sleep(Number(slow[1]), shutdown.signal))) return;
    if (res.destroyed) return;

    switch (model) {
      case "fail-500":
        fail(
          500,
          "The server had an error while processing your request. Sorry about that!",
          "server",
        );
        return;
      case "fail-400":
        fail(400, "Invalid request (simulated by model fail-400).", "invalid");
        return;
      case "rate-limit-once-1s":
        if (count === 1) {
          res.setHeader("retry-after", "1");
          fail(429, "Rate limit reached (simulated).", "rate_limit");
          return;
        }
        break;
      case "rate-limit-once":
        if (count === 1) {
          // The SDK prefers retry-after-ms; Retry-After: 0 is the standard fallback.
          res.setHeader("retry-after", "0");
          res.setHeader("retry-after-ms", "10");
          fail(
            429,
            "Rate limit reached for rate-limit-once (simulated). Please try again later.",
            "rate_limit",
          );
          return;
        }
        break;
      case "refuse-connection":
        res.socket?.destroy();
        return;
      case "drop-mid-stream":
        if (!streaming) {
          res.socket?.destroy();
          return;
        }
        break;
      case "error-mid-stream":
        if (!streaming) {
          fail(500, "Overloaded (simulated by model error-mid-stream).", "server");
          return;
        }
        break;
      default:
        break;
    }

    let content: string;
    try {
      content = config.respond
        ? await config.respond(body)
        : model === "not-json-once" && count === 1
          ? 'Sure! Here is your JSON: {"summary": '
          : generateContent(body, model === "invalid-json-once" && count === 1);
    } catch (err) {
      fail(500, `respond() threw: ${String(err)}`, "server");
      return;
    }
    if (res.destroyed) return;

    const answer = {
      id: `chatcmpl-${newAnswerId()}`,
      model,
      content,
      usage: computeUsage(body.messages, content),
    };
    if (!streaming) {
      sendJson(res, 200, wire.answer(answer, body));
      return;
    }

    const { frames, first } = wire.events(
      answer,
      splitContent(content, config.streamChunkChars),
      body,
    );
    res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      "x-request-id": requestId(),
    });

    if (model === "error-before-content-once" && count === 1) {
      // The frames before the first content chunk, then the wire's error event.
      for (const frame of frames.slice(0, first)) if (!(await writeFlushed(res, frame))) return;
      res.end(wire.errorEvent("Overloaded (simulated by model error-before-content-once)."));
      return;
    }
    if (model === "drop-mid-stream" || model === "error-mid-stream") {
      // The frames up to the first content chunk (if any), each flushed, then a hard close
      // without the chunked terminator (the client sees a truncated body), or the wire's error
      // event. Each write waits to reach the socket: destroy() discards anything still
      // buffered, and the client must really receive the first chunk.
      const upTo = Math.min(first + 1, frames.length);
      for (let i = 0; i < upTo; i++) {
        if (
          i >= first &&
          config.chunkDelayMs > 0 &&
          !(await sleep(config.chunkDelayMs, shutdown.signal))
        )
          return;
        if (!(await writeFlushed(res, frames[i] ?? ""))) return;
      }
      if (model === "error-mid-stream") {
        res.end(wire.errorEvent("Overloaded (simulated by model error-mid-stream)."));
        return;
      }
      res.socket?.destroy();
      return;
    }

    if (config.chunkDelayMs <= 0) {
      // No pacing wanted: one write keeps benchmarks cheap; the client still
      // sees separate SSE events.
      res.end(frames.join(""));
      return;
    }
    for (let i = 0; i < frames.length; i++) {
      if (i > 0 && !(await sleep(config.chunkDelayMs, shutdown.signal))) return;
      if (!(await write(res, frames[i] ?? ""))) return;
    }
    res.end();
  }

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;

  let closing: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    origin: `http://127.0.0.1:${port}`,
    port,
    requests,
    close() {
      closing ??= new Promise<void>((resolve, reject) => {
        shutdown.abort();
        server.close((err) => (err ? reject(err) : resolve()));
        // server.close() alone waits for keep-alive sockets to go idle and
        // time out; destroy them so close() ends promptly.
        server.closeAllConnections();
      });
      return closing;
    },
    reset() {
      requests.length = 0;
      modelCounts.clear();
    },
  };
}

// ---------------------------------------------------------------------------
// HTTP helpers

/**
 * Reads the whole request body, or returns undefined (and stops buffering)
 * once it exceeds `limit` bytes.
 */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on("data", (c: Buffer) => {
      if (tooLarge) return;
      size += c.length;
      if (size > limit) {
        tooLarge = true;
        chunks.length = 0;
        resolve(undefined);
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => {
      if (!tooLarge) resolve(Buffer.concat(chunks));
    });
    req.on("error", reject);
  });
}

/** Writes a chunk, waiting for 'drain' so a slow reader cannot make us buffer without bound. */
function write(res: ServerResponse, data: string): Promise<boolean> {
  if (res.destroyed) return Promise.resolve(false);
  if (res.write(data)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      res.off("drain", onDrain);
      res.off("close", onClose);
      resolve(ok);
    };
    const onDrain = () => done(true);
    const onClose = () => done(false);
    res.on("drain", onDrain);
    res.on("close", onClose);
  });
}

/** Writes a chunk and resolves once it has been handed to the socket (false if the response closed first). */
function writeFlushed(res: ServerResponse, data: string): Promise<boolean> {
  if (res.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    res.write(data, (err) => resolve(!err && !res.destroyed));
  });
}

function sendJson(res: ServerResponse, status: number, payload: unknown): void {
  if (res.destroyed || res.headersSent) return;
  const text = JSON.stringify(payload);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    "x-request-id": requestId(),
  });
  res.end(text);
}

function requestId(): string {
  return `req_${randomUUID().replaceAll("-", "")}`;
}

/** Resolves true after `ms`, or false as soon as `signal` aborts (server closing). */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

// ---------------------------------------------------------------------------
// Content generation

function generateContent(body: ChatCompletionRequestBody, invalid = false): string {
  const format = body.response_format;
  if (format?.type === "json_schema") {
    const given = format.json_schema?.schema;
    const schema = isRecord(given) ? (given as JsonObject) : {};
    const value =
      body.model === "invalid-json" || invalid
        ? violateJson(schema)
        : sampleJson(schema, seededRandom(seedOf(body.messages)));
    return JSON.stringify(value);
  }
  const lastUser = lastUserContent(body.messages);
  if (format?.type === "json_object") return JSON.stringify({ echo: lastUser });
  return `echo: ${lastUser}`;
}

function messageText(message: ChatMessage): string {
  const c = message.content;
  if (typeof c === "string") return c;
  if (Array.isArray(c)) {
    return c
      .map((part) => (isRecord(part) && typeof part.text === "string" ? part.text : ""))
      .join("");
  }
  return "";
}

function lastUserContent(messages: ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m?.role === "user") return messageText(m);
  }
  return "";
}

function computeUsage(messages: ChatMessage[], content: string): Usage {
  const promptChars = messages.reduce((n, m) => n + messageText(m).length, 0);
  const prompt_tokens = Math.ceil(promptChars / 4);
  const completion_tokens = Math.ceil(content.length / 4);
  return {
    prompt_tokens,
    completion_tokens,
    total_tokens: prompt_tokens + completion_tokens,
  };
}

/** Splits into pieces of about `size` UTF-16 units without cutting a surrogate pair. */
function splitContent(content: string, size: number): string[] {
  const pieces: string[] = [];
  let start = 0;
  while (start < content.length) {
    let end = Math.min(start + size, content.length);
    const last = content.charCodeAt(end - 1);
    if (end < content.length && last >= 0xd800 && last <= 0xdbff) end++;
    pieces.push(content.slice(start, end));
    start = end;
  }
  return pieces;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
