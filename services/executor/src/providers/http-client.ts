import type { Readable } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import { request as send, type Dispatcher } from "undici";
import { EndpointRefusedError } from "@pies/common";
import { decoded } from "./guarded-fetch.js";
import {
  pause,
  providerAborted,
  ProviderError,
  type CompletionOptions,
  type CompletionRequest,
  type CompletionResult,
  type LlmClient,
  type TokenUsage,
} from "./types.js";

export interface ProviderHttpOptions {
  /**
   * Time limit of one attempt: until the answer's headers (streamed), or its whole body; and of
   * each silence between the pieces of a streamed body.
   */
  timeoutMs: number;
  /** Retries of 429, 408, 409, 5xx, timeouts and dropped connections, before any chunk. */
  maxRetries: number;
  /** The connection pool, shared by all clients: every connection passes the endpoint policy. */
  agent: Dispatcher;
}

export const USER_AGENT = "pies-executor";
/**
 * The longest pause asked for (`retry-after-ms`, `Retry-After`) that is waited; an answer that
 * asks for more is not retried: the call fails at once with it. The openai SDK (v5) waited
 * whatever it was told.
 */
const MAX_RETRY_PAUSE_MS = 60_000;
/** A provider's error text past this is cut: it ends up in the run's record. */
const MAX_ERROR_CHARS = 2000;

/** A JSON request's headers, as undici's flat list, with the provider's key headers after them. */
export const jsonHeaders = (...keyHeaders: string[]): string[] => [
  "content-type",
  "application/json",
  "accept",
  "application/json",
  "user-agent",
  USER_AGENT,
  ...keyHeaders,
];

/** What a streamed event says the answer is complete: what follows is read and ignored. */
export const DONE = Symbol("done");

/** What a wire reads of a stream as it goes (the usage of some comes in pieces). */
export interface StreamState {
  usage: TokenUsage | undefined;
}

/**
 * A provider's wire protocol: its request, and how its answers read. Everything else (the pool,
 * retries, time limits, reading bodies and events, failures) is the client's.
 */
export interface Wire {
  /** The URL of a call, or why there is none (an endpoint URL that is not one). */
  url(request: CompletionRequest, streamed: boolean): string | { invalid: string };
  /** The request's headers, as undici's flat list; the provider key among them. */
  readonly headers: string[];
  /** The request's body. */
  body(request: CompletionRequest, streamed: boolean): string;
  /** A blocking answer (its JSON) as a result; throws BadAnswer when it is not an answer. */
  completion(json: unknown): CompletionResult;
  /**
   * One event of a streamed answer: the content it adds ("" for none), or DONE at the answer's
   * end; usage it reports goes into `state`. Throws BadAnswer for an error event or an event that
   * is not the wire's.
   */
  event(data: string, event: string, state: StreamState): string | typeof DONE;
}

/**
 * The failure of a JSON answer that is not what the wire expects (`what`): the provider's error
 * when the answer holds one.
 */
export function notAnAnswer(json: unknown, what: string): BadAnswer {
  const error = errorOf(json, true);
  return new BadAnswer(
    error
      ? `the provider reported an error: ${cut(error)}`
      : `the provider's answer is not ${what}`,
  );
}

/** `data` of an event as JSON; BadAnswer when it is not. */
export function eventJson(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch (err) {
    throw new BadAnswer("the provider's stream is not JSON", { cause: err });
  }
}

/**
 * A model provider over HTTP: one completion, blocking or streamed, with the guarantees every
 * provider of pies gives, whatever its wire (DESIGN.md §7; the wire is a `Wire`: openai.ts,
 * azure-openai.ts, anthropic.ts, google.ts). Requests go over undici's `request()` on the guarded
 * pool, without the providers' SDKs: the openai SDK's per-call machinery cost more CPU than the
 * HTTP under it (docs/decisions/0010-openai-without-the-sdk.md), and one client gives every wire
 * the same retries, time limits and failures (docs/decisions/0060-native-provider-wires.md).
 *
 * What the openai SDK did, done here by hand the same way (node_modules/openai/client.mjs):
 * - retries (`maxRetries`) of 408, 409, 429 and 5xx answers, and of timeouts and failed
 *   connections, unless the answer's `x-should-retry` says otherwise; the pause is the answer's
 *   `retry-after-ms`, else its `Retry-After` (seconds or an HTTP date), else 0.5 s doubling up to
 *   8 s, less up to 25% of jitter. Unlike the SDK, the pause ends when the caller aborts, an
 *   answer that asks for more than 60 s is not retried (the call fails with it at once), and the
 *   endpoint policy's refusal is not retried (it would be refused again);
 * - `timeoutMs` limits each attempt, not the call: until the answer's headers for a stream (as the
 *   SDK), until the whole answer for a blocking call (the SDK left the body unbounded); a stream
 *   that has started may run longer, but fails when no byte comes for `timeoutMs` (the SDK left it
 *   to undici's 300 s);
 * - only before the first chunk: a stream that breaks after it fails with `stream_error`, one that
 *   breaks before it (nothing was delivered) is retried like a dropped connection;
 * - the provider's error message is its JSON body's `error.message` (else the `error` object as
 *   JSON, else a top-level `message` or `detail`, else the body's text), and an error event inside
 *   a stream fails the call, as does a streamed answer without a single event (an HTML page);
 * - Server-Sent Events as the SSE spec reads them: lines ending in CRLF, LF or CR, split anywhere
 *   across TCP chunks (and inside UTF-8 sequences), `data:` on several lines joined by "\n",
 *   comments and keep-alives skipped;
 * - gzip, deflate and br bodies are decoded (none are asked for).
 * Nothing stays on the caller's signal once a call is over.
 */
export class HttpProviderClient implements LlmClient {
  private readonly agent: Dispatcher;
  private readonly timeoutMs: number;
  private readonly maxRetries: number;

  constructor(
    private readonly wire: Wire,
    options: ProviderHttpOptions,
  ) {
    this.agent = options.agent;
    this.timeoutMs = options.timeoutMs;
    this.maxRetries = options.maxRetries;
  }

  async complete(
    request: CompletionRequest,
    options: CompletionOptions,
  ): Promise<CompletionResult> {
    const streamed = options.onChunk !== undefined;
    const url = this.wire.url(request, streamed);
    if (typeof url !== "string") {
      throw new ProviderError(
        `the provider endpoint URL is not valid${url.invalid}`,
        "provider_error",
      );
    }
    const body = this.wire.body(request, streamed);
    const progress: Progress = { content: "" };
    const maxRetries = options.maxRetries ?? this.maxRetries;
    for (let retriesLeft = maxRetries; ; retriesLeft--) {
      if (options.signal?.aborted) throw providerAborted(options.signal.reason);
      let failure: Failure;
      try {
        return await this.attempt(url, body, options, retriesLeft > 0, progress);
      } catch (err) {
        failure = failureOf(err, options.signal);
      }
      if (progress.content) {
        // Past the first chunk nothing is retried: the caller has part of an answer.
        if (failure.error.code === "cancelled") throw failure.error;
        throw new ProviderError(
          `the provider's answer broke off after ${progress.content.length} characters: ${failure.error.message}`,
          "stream_error",
          failure.error.cause ?? failure.error,
        );
      }
      if (!failure.retry || retriesLeft <= 0) throw failure.error;
      await pause(retryDelayMs(failure.headers, maxRetries - retriesLeft), options.signal);
    }
  }

  /** One attempt: the request, and its answer read to the end. */
  private async attempt(
    url: string,
    body: string,
    options: CompletionOptions,
    mayRetry: boolean,
    progress: Progress,
  ): Promise<CompletionResult> {
    const { signal, onChunk } = options;
    // Its own signal: the time limit aborts the attempt, not the caller's signal.
    const controller = new AttemptSignal();
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const state: AttemptState = { timedOut: false, body: undefined };
    let timer: NodeJS.Timeout | undefined = setTimeout(() => {
      state.timedOut = true;
      controller.abort(new TimedOut());
    }, this.timeoutMs);
    try {
      const answer = await send(url, {
        dispatcher: this.agent,
        method: "POST",
        headers: this.wire.headers,
        body,
        signal: controller,
        // undici's own limits (300 s each by default) would cap a longer timeoutMs. Until the
        // headers, and for a blocking body, the attempt's timer comes first; a streamed body has
        // no timer, and undici's body limit, restarted by every piece that arrives (keep-alive
        // comments too), is its limit per silence between pieces.
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
      state.body = answer.body;
      // undici's body emits 'error' when the connection drops; a body nobody reads any more
      // (a pipeline's source) would otherwise throw it out of the process.
      answer.body.on("error", ignore);
      if (onChunk) {
        // The SDK's limit for a stream: its start. Chunks then come as the model writes them.
        clearTimeout(timer);
        timer = undefined;
      }
      const status = answer.statusCode;
      const failed = status < 200 || status >= 300;
      // A provider that asks for more than a minute (a quota spent until the next hour) is not
      // waited for: the run would hold its slot and its caller for nothing they can see.
      const retry =
        failed &&
        shouldRetry(status, answer.headers) &&
        !((askedPauseMs(answer.headers) ?? 0) > MAX_RETRY_PAUSE_MS);
      if (retry && mayRetry) {
        // Its body does not matter: the next attempt's answer will.
        await answer.body.dump().catch(ignore);
        throw new StatusError(status, "", answer.headers, true);
      }
      const stream = decoded(answer.headers["content-encoding"], answer.body);
      if (failed) {
        const text = await readAll(stream).catch(() => "");
        throw new StatusError(status, errorMessage(text), answer.headers, retry);
      }
      if (!onChunk) return this.completionOf(await readAll(stream));
      if (isJson(answer.headers["content-type"])) {
        // A server that does not stream answers the whole completion: one chunk.
        const result = this.completionOf(await readAll(stream));
        if (result.content) {
          progress.content = result.content;
          onChunk(result.content);
        }
        return result;
      }
      return await readEvents(this.wire, stream, onChunk, progress, answer.headers["content-type"]);
    } catch (err) {
      if (state.timedOut) throw new TimedOut(err);
      throw err;
    } finally {
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      // A body left unread (an error while reading it, a chunk callback that threw) is ended,
      // which ends its request; a body read to its end is already done.
      if (state.body && !state.body.readableEnded) state.body.destroy();
    }
  }

  /** A blocking answer's body as a result. */
  private completionOf(text: string): CompletionResult {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw new BadAnswer("the provider's answer is not JSON", { cause: err });
    }
    try {
      return this.wire.completion(json);
    } catch (err) {
      throw unreadable(err);
    }
  }
}

/**
 * `path` under a base URL (its own path kept, its query kept: the openai SDK appended after it),
 * or why there is none; `query` is added to it.
 */
export function joinUrl(
  base: string,
  path: string,
  query: Record<string, string> = {},
): string | { invalid: string } {
  let url: URL;
  try {
    url = new URL(base);
  } catch {
    return { invalid: "" };
  }
  // undici would refuse any other scheme on each attempt, as if the provider could not be reached.
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return { invalid: ": it must be http or https" };
  }
  url.pathname = url.pathname.endsWith("/") ? `${url.pathname}${path}` : `${url.pathname}/${path}`;
  for (const [name, value] of Object.entries(query)) url.searchParams.set(name, value);
  return url.href;
}

interface Progress {
  /** What was delivered to the caller so far. */
  content: string;
}

interface AttemptState {
  timedOut: boolean;
  body: Readable | undefined;
}

type ResponseHeaders = Record<string, string | string[] | undefined>;

/** A non-2xx answer. */
class StatusError extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    readonly headers: ResponseHeaders,
    readonly retry: boolean,
  ) {
    super(`provider answered ${status}: ${reason || "no error message"}`);
  }
}

/**
 * What undici's `request()` needs of a signal (`aborted`, `reason`, one abort listener), for one
 * attempt, instead of an AbortController and its EventTarget. With no Error made at a body's
 * normal close, this brought the client to the bare `undici.request` floor (bench/provider.mjs;
 * docs/decisions/0010-openai-without-the-sdk.md).
 */
class AttemptSignal {
  aborted = false;
  reason: unknown = undefined;
  private listener: (() => void) | undefined;

  addEventListener(_type: "abort", listener: () => void): void {
    this.listener = listener;
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    if (this.listener === listener) this.listener = undefined;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listener = this.listener;
    this.listener = undefined;
    listener?.();
  }
}

/** The attempt's time limit passed. */
class TimedOut extends Error {
  constructor(cause?: unknown) {
    super("the provider did not answer in time", cause === undefined ? undefined : { cause });
  }
}

/** The provider's answer is an error, or not an answer: never retried. */
export class BadAnswer extends Error {}

/**
 * An error the provider reports inside its answer that another attempt, or another provider, may
 * not meet (Anthropic's overloaded_error in a stream): retried before the first chunk like a 5xx.
 */
export class TransientAnswer extends BadAnswer {}

/**
 * What a wire threw reading an answer: an answer it cannot read (a field of the wrong type) is a
 * bad answer, not a failure to reach the provider.
 */
function unreadable(err: unknown): BadAnswer {
  return err instanceof BadAnswer
    ? err
    : new BadAnswer("the provider's answer is not one its API gives", { cause: err });
}

interface Failure {
  error: ProviderError;
  retry: boolean;
  headers?: ResponseHeaders;
}

/**
 * A provider failure as the caller sees it, and whether another attempt may help. The provider's
 * own answer (status and message) is passed on; a failure below HTTP is generic, whatever its
 * cause (refused, reset, unknown name, TLS): addresses, DNS names and errno codes stay in the
 * cause, for the logs, so that errors cannot be used to map a network. Only the endpoint policy's
 * refusal is named.
 */
function failureOf(err: unknown, signal: AbortSignal | undefined): Failure {
  if (signal?.aborted) return { error: providerAborted(err), retry: false };
  if (err instanceof ProviderError) return { error: err, retry: false };
  if (err instanceof StatusError) {
    const error = new ProviderError(err.message, "provider_error", err);
    // Another provider could answer a busy or failing one, even one that asks for a long pause.
    error.failover = err.status === 408 || err.status === 429 || err.status >= 500;
    return { error, retry: err.retry, headers: err.headers };
  }
  if (err instanceof TransientAnswer) {
    const error = new ProviderError(err.message, "provider_error", err.cause);
    error.failover = true;
    return { error, retry: true };
  }
  if (err instanceof BadAnswer) {
    return { error: new ProviderError(err.message, "provider_error", err.cause), retry: false };
  }
  if (err instanceof TimedOut || timeoutIn(err)) {
    const error = new ProviderError("the provider did not answer in time", "timeout", err);
    error.failover = true;
    return { error, retry: true };
  }
  const invalid = findCause(err, (e) => e.code === "UND_ERR_INVALID_ARG");
  if (invalid) {
    // undici refused to send the request: it would refuse it again. Its message names the header
    // or option (never a value), but only ours is passed on.
    const reason = String(invalid.message ?? "");
    return {
      error: new ProviderError(
        /^invalid authorization header/.test(reason)
          ? "the provider API key has characters an HTTP header cannot carry"
          : /^Redirect loop/.test(reason)
            ? "the provider endpoint redirects in a loop"
            : "the provider request could not be made from the environment's settings",
        "provider_error",
        err,
      ),
      retry: false,
    };
  }
  if (causeOf(err, (e) => e instanceof EndpointRefusedError)) {
    return {
      error: new ProviderError(
        "the provider endpoint is not allowed by the endpoint policy",
        "provider_error",
        err,
      ),
      // The same address would be refused again.
      retry: false,
    };
  }
  const unreachable = new ProviderError("the provider could not be reached", "provider_error", err);
  unreachable.failover = true;
  return {
    error: unreachable,
    retry: true,
  };
}

/** undici's own time limits (connect, headers, body) and the system's. */
const TIMEOUT_CODES = new Set([
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
  "ETIMEDOUT",
]);

function timeoutIn(err: unknown): boolean {
  return causeOf(err, (e) => TIMEOUT_CODES.has(e.code as string));
}

type Cause = { code?: unknown; message?: unknown };

/** The first of `err` and its causes (8 deep at most) that passes `test`. */
function findCause(err: unknown, test: (e: Cause) => boolean): Cause | undefined {
  for (let e = err, depth = 0; e && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    if (test(e as Cause)) return e as Cause;
  }
  return undefined;
}

const causeOf = (err: unknown, test: (e: Cause) => boolean) => findCause(err, test) !== undefined;

/** The SDK's `shouldRetry`: the server's `x-should-retry` first, then 408, 409, 429 and 5xx. */
export function shouldRetry(status: number, headers: ResponseHeaders): boolean {
  const header = headers["x-should-retry"];
  if (header === "true") return true;
  if (header === "false") return false;
  return status === 408 || status === 409 || status === 429 || status >= 500;
}

/**
 * The SDK's pause before retry `retry` (0 for the first): `retry-after-ms`, else `Retry-After` in
 * seconds or as an HTTP date (a date past is no pause), else 0.5 s × 2^retry up to 8 s, less up to
 * 25% of jitter. Unlike the SDK, an unreadable date falls back to the backoff (the SDK slept NaN).
 */
export function retryDelayMs(
  headers: ResponseHeaders | undefined,
  retry: number,
  random = Math.random(),
): number {
  const asked = askedPauseMs(headers);
  if (asked !== undefined) return asked;
  const backoffSeconds = Math.min(0.5 * 2 ** retry, 8);
  return backoffSeconds * (1 - random * 0.25) * 1000;
}

/** The pause an answer asks for, if it asks for one the SDK read. */
function askedPauseMs(headers: ResponseHeaders | undefined): number | undefined {
  const inMs = parseFloat(single(headers?.["retry-after-ms"]) ?? "");
  // As the SDK: a `retry-after-ms` of 0 leaves the choice to Retry-After.
  if (inMs) return Math.max(0, inMs);
  const after = single(headers?.["retry-after"]);
  if (after) {
    const seconds = parseFloat(after);
    if (!Number.isNaN(seconds)) return Math.max(0, seconds * 1000);
    const date = Date.parse(after);
    if (!Number.isNaN(date)) return Math.max(0, date - Date.now());
  }
  return undefined;
}

const single = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);

/**
 * The message of a provider's error body, as the SDK's `APIError.makeMessage` took it: a JSON
 * body's `error.message` (a string, else as JSON), else its `error` as JSON; a body that is not
 * JSON as it is, cut to MAX_ERROR_CHARS. A JSON body without `error` gives none.
 */
export function errorMessage(text: string): string {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return cut(text.trim());
  }
  return cut(errorOf(json, true) ?? "");
}

/**
 * An `error` object's message (an event of a stream counts as an error by it alone); with
 * `others`, for a body known to be no completion, the top-level `message` of servers such as
 * older vLLM and the `detail` of FastAPI's (the SDK gave no message for them).
 */
export function errorOf(json: unknown, others = false): string | undefined {
  const body = json as { error?: unknown; message?: unknown; detail?: unknown } | null;
  const error = body?.error;
  if (!error) {
    if (!others || typeof body !== "object") return undefined;
    const other = body?.message || body?.detail;
    if (!other) return undefined;
    return typeof other === "string" ? other : JSON.stringify(other);
  }
  const message = (error as { message?: unknown }).message;
  if (message) return typeof message === "string" ? message : JSON.stringify(message);
  return JSON.stringify(error);
}

export const cut = (text: string) =>
  text.length > MAX_ERROR_CHARS ? `${text.slice(0, MAX_ERROR_CHARS)}…` : text;

const isJson = (type: string | string[] | undefined) =>
  typeof type === "string" && type.trimStart().toLowerCase().startsWith("application/json");

/** A body read to its end, as text. */
function readAll(stream: Readable): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.once("error", reject);
    stream.once("close", () => {
      // After its end too: an error is made (and its stack) only when the body was cut short.
      if (!stream.readableEnded) reject(new Error("the answer ended before its end"));
    });
    stream.once("end", () => {
      const [only] = chunks;
      resolve(
        chunks.length === 1 && only
          ? only.toString("utf8")
          : Buffer.concat(chunks).toString("utf8"),
      );
    });
  });
}

/**
 * A streamed answer read to its end: each event to the wire, each piece of content it finds to
 * `onChunk`, then the result.
 */
function readEvents(
  wire: Wire,
  stream: Readable,
  onChunk: (text: string) => void,
  progress: Progress,
  type: string | string[] | undefined,
): Promise<CompletionResult> {
  return new Promise((resolve, reject) => {
    const state: StreamState = { usage: undefined };
    let done = false;
    let dispatched = 0;
    const events = new EventParser((data, event) => {
      dispatched++;
      // After the answer's end, the rest of the body is read, and ignored, so that its connection
      // is kept.
      if (done) return;
      let delta: string | typeof DONE;
      try {
        delta = wire.event(data, event, state);
      } catch (err) {
        throw unreadable(err);
      }
      if (delta === DONE) {
        done = true;
        return;
      }
      if (delta) {
        progress.content += delta;
        onChunk(delta);
      }
    });
    // Once failed, nothing more is read: the body's end may come in the same read as the event
    // that failed it, and its listener would replay the parser's unfinished text.
    let settled = false;
    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      stream.removeListener("data", onData);
      stream.removeListener("end", onEnd);
      stream.removeListener("close", onClose);
      // Its connection is closed now, so that the provider stops generating (an `error` still
      // to come is heard by the listener undici's body and `attempt` keep on it).
      stream.destroy();
      reject(err);
    };
    // undici's body ignores setEncoding: a UTF-8 sequence split between chunks is joined here.
    const utf8 = new StringDecoder("utf8");
    const onData = (chunk: Buffer) => {
      try {
        events.push(utf8.write(chunk));
      } catch (err) {
        fail(err);
      }
    };
    const onClose = () => {
      if (!stream.readableEnded) fail(new Error("the answer ended before its end"));
    };
    const onEnd = () => {
      if (settled) return;
      try {
        events.push(utf8.end());
        events.end();
      } catch (err) {
        fail(err);
        return;
      }
      if (dispatched === 0) {
        // An HTML page (a proxy's sign-in, a captive portal), an empty body: not an empty answer.
        fail(
          new BadAnswer(
            `the provider's answer is not a stream of events (${single(type) ?? "no content type"})`,
          ),
        );
        return;
      }
      settled = true;
      resolve({ content: progress.content, usage: state.usage });
    };
    stream.on("data", onData);
    stream.once("error", fail);
    stream.once("close", onClose);
    stream.once("end", onEnd);
  });
}

/**
 * Server-Sent Events from text as it arrives: lines end in CRLF, LF or CR (a CR at the end of a
 * piece waits for the next, which may start with its LF); an empty line dispatches the event's
 * `data:` lines joined by "\n"; lines starting with ":" are comments; an event without data is
 * not dispatched.
 */
export class EventParser {
  private pending = "";
  private data: string[] = [];
  private event = "";

  constructor(private readonly dispatch: (data: string, event: string) => void) {}

  push(text: string): void {
    const buffer = this.pending ? this.pending + text : text;
    let start = 0;
    // Most streams have no CR at all: then it is looked for once per piece.
    let cr = buffer.indexOf("\r");
    try {
      for (;;) {
        if (cr !== -1 && cr < start) cr = buffer.indexOf("\r", start);
        const lf = buffer.indexOf("\n", start);
        let line: string;
        if (cr !== -1 && (lf === -1 || cr < lf)) {
          if (cr === buffer.length - 1) break; // its LF may start the next piece
          line = buffer.slice(start, cr);
          start = buffer.charCodeAt(cr + 1) === 10 ? cr + 2 : cr + 1;
        } else if (lf !== -1) {
          line = buffer.slice(start, lf);
          start = lf + 1;
        } else {
          break;
        }
        // Consumed before it is handled: a dispatch that throws leaves no line to read again.
        this.line(line);
      }
    } finally {
      this.pending = start === 0 ? buffer : buffer.slice(start);
    }
  }

  /**
   * The body ended: its last line counts without its line end, and an event it ends before the
   * empty line is dispatched all the same (the spec drops it; a body that ends cleanly was sent
   * whole, and its last event may be the usage).
   */
  end(): void {
    const last = this.pending.endsWith("\r") ? this.pending.slice(0, -1) : this.pending;
    this.pending = "";
    if (last) this.line(last);
    this.line("");
  }

  private line(line: string): void {
    if (line === "") {
      if (this.data.length > 0) {
        const [only] = this.data;
        const data = this.data.length === 1 && only !== undefined ? only : this.data.join("\n");
        const event = this.event;
        this.data = [];
        this.event = "";
        this.dispatch(data, event);
      } else {
        this.event = "";
      }
      return;
    }
    if (line.charCodeAt(0) === 58) return; // ":" a comment, a keep-alive
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
  }
}

function ignore(): void {}
