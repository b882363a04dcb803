// @ts-check
import { performance } from "node:perf_hooks";
import { readSseIncrementally } from "@pies/testkit";
import { send } from "./http.mjs";

/**
 * The request kinds. Each takes (ctx, signal) and resolves to a sample
 * { ok, latencyMs, ttfcMs?, phases?, error?, runId? } — it never throws, so every failure is
 * counted and described. runId (pies and embedded modes) is set when pies answered naming a run,
 * successful or not: the bench checks at the end that the runs store holds exactly that many runs.
 * ctx: { fakeUrl, fakeKey, model, text, portkeyUrl?, pies?, embedded? }, where pies (the
 * four-process stack) and embedded (the one-process embedded mode) are each
 * { gatewayUrl, apiKey, interactionId, text }: the same interaction on either.
 * The direct and portkey modes send the same chat completion (the one pies sends) to the same fake
 * upstream; portkey goes through Portkey's gateway, which forwards it to the fake.
 */

/**
 * One request's outcome, what every mode resolves to.
 * @typedef {object} Sample
 * @property {boolean} ok
 * @property {number} latencyMs
 * @property {number} [ttfcMs] time to the first content chunk (streamed modes)
 * @property {Record<string, number>} [phases] a breakdown in ms from the start (pies streamed:
 *   createMs, headersMs; one-request streamed: headersMs)
 * @property {string} [error]
 * @property {string} [runId]
 */

/**
 * One pies (the four-process stack, the edge or the embedded mode) as the pies modes call it.
 * @typedef {object} PiesTarget
 * @property {string} gatewayUrl
 * @property {string} apiKey
 * @property {string} interactionId
 * @property {string} text
 * @property {string} [traceparent] sent with each request (bench:hops)
 */

/**
 * What the modes call: each mode reads its part (the direct and portkey modes the upstream's
 * fields, a pies mode its target), so a caller gives only what its modes need.
 * @typedef {object} ModeContext
 * @property {string} [fakeUrl]
 * @property {string} [fakeKey]
 * @property {string} [model]
 * @property {string} [text]
 * @property {string} [portkeyUrl]
 * @property {PiesTarget} [pies]
 * @property {PiesTarget} [edge]
 * @property {PiesTarget} [embedded]
 */

/** @typedef {(ctx: ModeContext, signal: AbortSignal) => Promise<Sample>} Mode */

/**
 * A chat completion's URL and headers (a header left undefined, of a field the context lacks, is
 * not sent).
 * @typedef {{ url: string, headers: Record<string, string | undefined> }} ChatTarget
 */

/** @typedef {{ status: number, text(): Promise<string> }} Answer */

/** @param {string} text */
const snippet = (text) => text.replace(/\s+/g, " ").slice(0, 300);

/** @param {Error} e why a body could not be read */
const unreadable = (e) => `<body unreadable: ${e.message}>`;

/**
 * @param {number} started
 * @param {string} error
 * @returns {Sample}
 */
function failure(started, error) {
  return { ok: false, latencyMs: performance.now() - started, error };
}

/**
 * What a request may throw: an Error (undici's, with a system error as its cause) or anything.
 * @typedef {{ name?: string, message?: string, cause?: { code?: string, message?: string } }} Thrown
 */

/**
 * @param {unknown} thrown
 * @param {AbortSignal} [signal]
 */
function describe(thrown, signal) {
  if (signal?.aborted) return `aborted: ${signal.reason?.message ?? signal.reason ?? "deadline"}`;
  const err = /** @type {Thrown | null | undefined} */ (thrown);
  const cause = err?.cause ? ` (${err.cause.code ?? ""} ${err.cause.message ?? err.cause})` : "";
  return `${err?.name ?? "Error"}: ${err?.message ?? String(err)}${cause}`;
}

/**
 * @param {string} what
 * @param {Answer} response
 */
async function httpError(what, response) {
  const body = await response.text().catch(unreadable);
  return `${what} HTTP ${response.status}: ${snippet(body)}`;
}

/**
 * A pies error answer and the run it names, if any: a failed execution answers 502/504 with the
 * run in `details.run_id`; a run that ended but is not recorded yet answers 503 naming it.
 * @param {string} what
 * @param {Answer} response
 */
async function piesError(what, response) {
  const body = await response.text().catch(unreadable);
  /** @type {string | undefined} */
  let runId;
  try {
    const json = JSON.parse(body);
    runId =
      json?.details?.run_id ??
      /^run (\S+) ended but is not recorded yet/.exec(json?.message ?? "")?.[1];
  } catch {
    // not JSON: no run named
  }
  return { error: `${what} HTTP ${response.status}: ${snippet(body)}`, runId };
}

/**
 * @param {ModeContext} ctx
 * @param {boolean} stream
 */
function chatBody(ctx, stream) {
  return {
    model: ctx.model,
    messages: [{ role: "user", content: `Summarise ${ctx.text}` }],
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  };
}

/** @param {ModeContext} ctx */
function fakeHeaders(ctx) {
  return { "content-type": "application/json", authorization: `Bearer ${ctx.fakeKey}` };
}

/**
 * Where a chat completion goes: straight to the fake, or through Portkey to the fake.
 * @param {ModeContext} ctx
 * @returns {ChatTarget}
 */
function directTarget(ctx) {
  return { url: `${ctx.fakeUrl}/chat/completions`, headers: fakeHeaders(ctx) };
}

/**
 * @param {ModeContext} ctx
 * @returns {ChatTarget}
 */
function portkeyTarget(ctx) {
  return {
    url: `${ctx.portkeyUrl}/v1/chat/completions`,
    headers: {
      ...fakeHeaders(ctx),
      "x-portkey-provider": "openai",
      "x-portkey-custom-host": ctx.fakeUrl,
    },
  };
}

/**
 * @param {PiesTarget} ctx
 * @returns {Record<string, string>}
 */
function piesHeaders(ctx, json = true) {
  return {
    authorization: `Bearer ${ctx.apiKey}`,
    ...(json ? { "content-type": "application/json" } : {}),
    // bench:hops joins a streamed run's two requests into one trace.
    ...(ctx.traceparent ? { traceparent: ctx.traceparent } : {}),
  };
}

/**
 * @param {ModeContext} ctx
 * @param {ChatTarget} target
 * @param {AbortSignal} signal
 * @returns {Promise<Sample>}
 */
async function chatBlocking(ctx, target, signal) {
  const started = performance.now();
  try {
    const response = await send(target.url, {
      method: "POST",
      headers: target.headers,
      body: JSON.stringify(chatBody(ctx, false)),
      signal,
    });
    if (!response.ok) return failure(started, await httpError("chat/completions", response));
    const body = /** @type {ChatCompletion | null} */ (await response.json());
    const latencyMs = performance.now() - started;
    if (typeof body?.choices?.[0]?.message?.content !== "string") {
      return failure(
        started,
        `chat/completions 200 without content: ${snippet(JSON.stringify(body))}`,
      );
    }
    return { ok: true, latencyMs };
  } catch (err) {
    return failure(started, describe(err, signal));
  }
}

/**
 * The parts of a chat completion (the upstream's answer) the modes look at.
 * @typedef {{ choices?: { message?: { content?: unknown } }[] }} ChatCompletion
 * @typedef {{ choices?: { delta?: { content?: unknown } }[] }} ChatCompletionChunk
 */

/**
 * The parts of a run (pies' answer: an execution's, POST /runs', a stream's close) the modes look
 * at.
 * @typedef {{ id?: unknown, status?: unknown, result?: unknown, error?: unknown }} RunAnswer
 */

/** The request's cache policy of the cached modes: after the first, every execution is a hit. */
const CACHED = { cache_policy: { type: "cache", ttl: 3600 } };

/**
 * @param {PiesTarget | undefined} ctx
 * @param {AbortSignal} signal
 * @returns {Promise<Sample>}
 */
async function piesBlocking(ctx, signal, cached = false) {
  // Before the clock starts: the measured request is as it was.
  if (!ctx) return failure(performance.now(), "no pies target in the context");
  const started = performance.now();
  try {
    const response = await send(
      `${ctx.gatewayUrl}/api/v1/interactions/${ctx.interactionId}/execute`,
      {
        method: "POST",
        headers: piesHeaders(ctx),
        body: JSON.stringify({ data: { text: ctx.text }, ...(cached ? { config: CACHED } : {}) }),
        signal,
      },
    );
    if (!response.ok) {
      const { error, runId } = await piesError("execute", response);
      return { ...failure(started, error), runId };
    }
    const run = /** @type {RunAnswer | null} */ (await response.json());
    const latencyMs = performance.now() - started;
    const runId = typeof run?.id === "string" ? run.id : undefined;
    if (run?.status !== "completed" || typeof run.result !== "string") {
      return {
        ...failure(started, `execute 200 but run ${run?.status}: ${snippet(JSON.stringify(run))}`),
        runId,
      };
    }
    return { ok: true, latencyMs, runId };
  } catch (err) {
    return failure(started, describe(err, signal));
  }
}

/**
 * @param {ModeContext} ctx
 * @param {ChatTarget} target
 * @param {AbortSignal} signal
 * @returns {Promise<Sample>}
 */
async function chatStreamed(ctx, target, signal) {
  const started = performance.now();
  try {
    const response = await send(target.url, {
      method: "POST",
      headers: target.headers,
      body: JSON.stringify(chatBody(ctx, true)),
      signal,
    });
    if (!response.ok)
      return failure(started, await httpError("chat/completions (stream)", response));
    /** @type {number | undefined} */
    let ttfcMs;
    /** @type {number | undefined} */
    let done;
    /** @type {string | undefined} */
    let parseError;
    await readSseIncrementally(response.body, (event) => {
      if (event.data === "[DONE]") {
        done ??= performance.now() - started;
        return;
      }
      if (ttfcMs !== undefined || parseError) return;
      try {
        const chunk = /** @type {ChatCompletionChunk | null} */ (JSON.parse(event.data));
        if (chunk?.choices?.[0]?.delta?.content) ttfcMs = performance.now() - started;
      } catch (err) {
        // JSON.parse throws SyntaxErrors only.
        parseError = `bad chunk JSON: ${/** @type {SyntaxError} */ (err).message}: ${snippet(event.data)}`;
      }
    });
    if (parseError) return failure(started, parseError);
    if (done === undefined) return failure(started, "stream ended without data: [DONE]");
    if (ttfcMs === undefined) return failure(started, "stream had no content chunk");
    return { ok: true, latencyMs: done, ttfcMs };
  } catch (err) {
    return failure(started, describe(err, signal));
  }
}

/**
 * What reading a run's event stream to its end found: the times of its first `message` (ttfc) and
 * of its `close` from the request's start, or why it failed; and, either way, its first event's
 * name and the data of its `run` event (a one-request stream's first), when it had one.
 * @typedef {{ first?: string, opened?: RunAnswer | null }
 *   & ({ error: string } | { error?: undefined, latencyMs: number, ttfcMs: number })} RunStream
 */

/**
 * Reads a run's event stream, GET /runs/:id/stream's answer or a one-request POST's, to its end.
 * A failure: an SSE `error` event, an end without `event: close`, a `close` whose run is not
 * completed, or one without any `event: message` before it.
 * @param {AsyncIterable<Uint8Array>} body
 * @param {number} started performance.now() at the request's start
 * @returns {Promise<RunStream>}
 */
async function readRunStream(body, started) {
  /** @type {string | undefined} */
  let first;
  /** @type {RunAnswer | null | undefined} */
  let opened;
  /** @type {number | undefined} */
  let ttfcMs;
  /** @type {number | undefined} */
  let closedAt;
  /** @type {RunAnswer | null | undefined} */
  let final;
  /** @type {string | undefined} */
  let streamError;
  let messages = 0;
  /** @param {string} data */
  const runOf = (data) => {
    try {
      return /** @type {RunAnswer | null} */ (JSON.parse(data));
    } catch {
      return { status: `unparseable run data: ${snippet(data)}` };
    }
  };
  await readSseIncrementally(body, (event) => {
    first ??= event.event;
    if (event.event === "message") {
      messages++;
      ttfcMs ??= performance.now() - started;
    } else if (event.event === "close") {
      closedAt ??= performance.now() - started;
      final ??= runOf(event.data);
    } else if (event.event === "run") {
      opened ??= runOf(event.data);
    } else if (event.event === "error") {
      streamError ??= `SSE error event: ${snippet(event.data)}`;
    }
  });
  /** @param {string} error */
  const failed = (error) => ({ first, opened, error });
  if (streamError) return failed(streamError);
  if (closedAt === undefined) {
    return failed(`stream ended without event: close (after ${messages} messages)`);
  }
  if (final?.status !== "completed") {
    const error = final?.error ? ` ${snippet(JSON.stringify(final.error))}` : "";
    return failed(`close with run status ${final?.status}${error}`);
  }
  if (ttfcMs === undefined) return failed("close without any event: message");
  return { first, opened, latencyMs: closedAt, ttfcMs };
}

/**
 * POST /runs' body for a streamed run of the bench's interaction.
 * @param {PiesTarget} ctx
 */
function streamedRunBody(ctx) {
  return JSON.stringify({ interaction: ctx.interactionId, stream: true, data: { text: ctx.text } });
}

/**
 * A streamed run in two requests: POST /runs {stream: true} answers the created run, then
 * GET /runs/:id/stream starts it and is read to `close`.
 * @param {PiesTarget | undefined} ctx
 * @param {AbortSignal} signal
 * @returns {Promise<Sample>}
 */
async function piesStreamed(ctx, signal) {
  // Before the clock starts: the measured request is as it was.
  if (!ctx) return failure(performance.now(), "no pies target in the context");
  const started = performance.now();
  // Set once POST /runs named the run: from then on the run exists, whatever happens to its stream.
  /** @type {string | undefined} */
  let runId;
  /** @param {string} error */
  const fail = (error) => ({ ...failure(started, error), runId });
  try {
    const created = await send(`${ctx.gatewayUrl}/api/v1/runs`, {
      method: "POST",
      headers: piesHeaders(ctx),
      body: streamedRunBody(ctx),
      signal,
    });
    if (!created.ok) {
      const answer = await piesError("POST /runs", created);
      runId = answer.runId;
      return fail(answer.error);
    }
    const run = /** @type {RunAnswer | null} */ (await created.json());
    if (typeof run?.id !== "string") {
      return failure(started, `POST /runs 2xx without id: ${snippet(JSON.stringify(run))}`);
    }
    runId = run.id;
    const createMs = performance.now() - started;
    const response = await send(`${ctx.gatewayUrl}/api/v1/runs/${run.id}/stream`, {
      headers: piesHeaders(ctx, false),
      signal,
    });
    if (!response.ok) return fail(await httpError("GET /runs/:id/stream", response));
    const headersMs = performance.now() - started;
    const read = await readRunStream(response.body, started);
    if (read.error !== undefined) return fail(read.error);
    // Breakdown (ms from the POST start): run created, stream response headers, first chunk, close.
    const { latencyMs, ttfcMs } = read;
    return { ok: true, latencyMs, ttfcMs, phases: { createMs, headersMs }, runId };
  } catch (err) {
    return fail(describe(err, signal));
  }
}

/** The response header that names a one-request stream's run. */
const RUN_ID_HEADER = "pies-run-id";

/**
 * A streamed run in one request: POST /runs {stream: true} with `Accept: text/event-stream`
 * answers with the run's event stream itself, read to `close`: first `event: run` (the run, also
 * named by the pies-run-id header), then what GET /runs/:id/stream sends. Errors before the
 * stream are JSON answers, as POST /runs' are.
 * @param {PiesTarget | undefined} ctx
 * @param {AbortSignal} signal
 * @returns {Promise<Sample>}
 */
async function piesStreamedOneRequest(ctx, signal) {
  // Before the clock starts: the measured request is as it was.
  if (!ctx) return failure(performance.now(), "no pies target in the context");
  const started = performance.now();
  // Set once the answer named the run (its header, else its `run` event, else an error's
  // details): from then on the run exists, whatever happens to its stream.
  /** @type {string | undefined} */
  let runId;
  /** @param {string} error */
  const fail = (error) => ({ ...failure(started, error), runId });
  try {
    const response = await send(`${ctx.gatewayUrl}/api/v1/runs`, {
      method: "POST",
      headers: { ...piesHeaders(ctx), accept: "text/event-stream" },
      body: streamedRunBody(ctx),
      signal,
    });
    if (!response.ok) {
      const answer = await piesError("POST /runs (event stream)", response);
      runId = answer.runId;
      return fail(answer.error);
    }
    const header = response.headers[RUN_ID_HEADER];
    runId = typeof header === "string" && header !== "" ? header : undefined;
    const type = String(response.headers["content-type"] ?? "");
    if (!type.startsWith("text/event-stream")) {
      // A gateway without one-request streaming answers the created run as JSON.
      const body = await response.text().catch(unreadable);
      try {
        const run = /** @type {RunAnswer | null} */ (JSON.parse(body));
        if (typeof run?.id === "string") runId ??= run.id;
      } catch {
        // not JSON: no run named
      }
      return fail(`POST /runs ${response.status} ${type || "(no content-type)"}: ${snippet(body)}`);
    }
    const headersMs = performance.now() - started;
    const read = await readRunStream(response.body, started);
    const openedId = typeof read.opened?.id === "string" ? read.opened.id : undefined;
    runId ??= openedId;
    if (read.error !== undefined) return fail(read.error);
    if (header === undefined) return fail(`event stream without a ${RUN_ID_HEADER} header`);
    if (read.first !== "run") return fail(`first event ${read.first}, not run`);
    if (openedId !== runId) return fail(`run event names ${openedId}, ${RUN_ID_HEADER} ${runId}`);
    // Breakdown (ms from the POST start): stream response headers (the run created and started).
    const { latencyMs, ttfcMs } = read;
    return { ok: true, latencyMs, ttfcMs, phases: { headersMs }, runId };
  } catch (err) {
    return fail(describe(err, signal));
  }
}

/** @typedef {keyof typeof modes} ModeName */

/** Every mode by name (BENCH_MODES names them). */
export const modes = /** @satisfies {Record<string, Mode>} */ ({
  "direct blocking": (ctx, signal) => chatBlocking(ctx, directTarget(ctx), signal),
  "portkey blocking": (ctx, signal) => chatBlocking(ctx, portkeyTarget(ctx), signal),
  "pies blocking": (ctx, signal) => piesBlocking(ctx.pies, signal),
  "edge blocking": (ctx, signal) => piesBlocking(ctx.edge, signal),
  "embedded blocking": (ctx, signal) => piesBlocking(ctx.embedded, signal),
  // Result cache hits (the same data, cache_policy cache): what a hit adds over the upstream.
  "pies cached blocking": (ctx, signal) => piesBlocking(ctx.pies, signal, true),
  "embedded cached blocking": (ctx, signal) => piesBlocking(ctx.embedded, signal, true),
  "direct streamed": (ctx, signal) => chatStreamed(ctx, directTarget(ctx), signal),
  "portkey streamed": (ctx, signal) => chatStreamed(ctx, portkeyTarget(ctx), signal),
  "pies streamed": (ctx, signal) => piesStreamed(ctx.pies, signal),
  // The same streamed run in one request (POST /runs answers with the event stream), each beside
  // its two-request counterpart.
  "pies one-request streamed": (ctx, signal) => piesStreamedOneRequest(ctx.pies, signal),
  "edge streamed": (ctx, signal) => piesStreamed(ctx.edge, signal),
  "edge one-request streamed": (ctx, signal) => piesStreamedOneRequest(ctx.edge, signal),
  "embedded streamed": (ctx, signal) => piesStreamed(ctx.embedded, signal),
  "embedded one-request streamed": (ctx, signal) => piesStreamedOneRequest(ctx.embedded, signal),
});
