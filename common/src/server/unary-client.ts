import http2 from "node:http2";
import {
  create,
  fromBinary,
  fromJsonString,
  toBinary,
  toJsonString,
  type DescMessage,
  type DescMethodUnary,
  type MessageShape,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  type ContextValues,
  type Interceptor,
  type Transport,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import {
  codeFromHttpStatus,
  errorFromJsonBytes,
  parseContentType,
  trailerDemux,
} from "@connectrpc/connect/protocol-connect";
import { isConnectionError } from "../unavailable.js";
import { decodeRunAnswer } from "../bus/run-binary.js";

/**
 * Connect's unary protocol over one node:http2 session, for pies' calls to its own services (see
 * `peerTransport`). The wire is the same as connect-node's Connect transport (POST
 * /<service>/<method>, `connect-protocol-version: 1`, `connect-timeout-ms`, the message as the
 * body; an error as a non-200 status and Connect's JSON error), so the callees do not change; what
 * differs is how much work surrounds each call.
 *
 * Why: connect-node's transport cost several times the caller's CPU per call, and round-trip time,
 * of a bare node:http2 request of the same bytes (figures, and this client's:
 * docs/decisions/0009-lean-unary-connect-path.md). Its profile is spread over a promise-based
 * session manager, a "sentinel" racing every read, async iterables for a body of one chunk, several
 * linked AbortControllers whose `abort()` at the end of each call builds a DOMException with its
 * stack, a ConnectError (stack and all) built by every successful call, and the body written with
 * `write()` then `end()`, which sends the body's DATA frame and an empty END_STREAM frame in two
 * writes, so the callee wakes up twice. Here: the body goes out with its END_STREAM in one
 * `end(body)`, one timer and one listener per call, no error object unless the call fails.
 *
 * Kept from connect-node's transport: the interceptors, in the same order (the first outermost),
 * with a request whose signal aborts when the caller's does or the deadline passes; the deadline
 * (`timeoutMs`, else `defaultTimeoutMs`) sent as `connect-timeout-ms` and enforced here (the call
 * fails DEADLINE_EXCEEDED, the stream is reset with CANCEL, so the callee's signal aborts too); a
 * caller that aborts gets CANCELED (its reason kept when that is a ConnectError) and the callee's
 * stream is reset with CANCEL; the callee's Connect errors with their code, message, details and
 * metadata (response headers and `trailer-` headers); a stream reset by the callee as connect-node
 * maps it (CANCEL: CANCELED, REFUSED_STREAM: UNAVAILABLE, …); a connection refused, lost or reset
 * as a ConnectError (UNAVAILABLE when the connection was refused or lost, with the system error as
 * its cause, which `peerUnavailableInterceptor` reads); one session reused by every call and made
 * again when it closed (GOAWAY, a lost socket), kept alive by pings, closed after an idle period.
 * Streaming calls (none in pies' services; grpc.health.v1 Watch) go to `streaming`.
 */
export interface UnaryTransportOptions {
  baseUrl: string;
  /**
   * Protobuf binary (`application/proto`) or JSON (`application/json`): for every call, or per
   * method (both formats on the one session).
   */
  useBinaryFormat?: boolean | ((method: DescMethodUnary) => boolean);
  /** The deadline of a call that names none; none when undefined. */
  defaultTimeoutMs?: number;
  /** Outermost first, as connect's `interceptors` option. */
  interceptors?: Interceptor[];
  /** A ping every so often; a session whose ping is not answered in `pingTimeoutMs` is dropped. */
  pingIntervalMs?: number;
  pingTimeoutMs?: number;
  /** A session without a stream for this long is closed (the next call opens another). */
  idleConnectionTimeoutMs?: number;
  /** Where streaming calls go (connect-node's transport). */
  streaming: () => Transport;
}

/** The session of a transport: one at a time, made on demand. */
class Session {
  private current: http2.ClientHttp2Session | undefined;
  private active = 0;
  /** When the current session's last call ended (or it was made): its idle period's start. */
  private idleSince = 0;
  private upkeep: NodeJS.Timeout | undefined;

  constructor(private readonly options: UnaryTransportOptions) {}

  /** The open session, or a new one. Throws what http2.connect throws. */
  get(): http2.ClientHttp2Session {
    const s = this.current;
    if (s && !s.closed && !s.destroyed) return s;
    const session = http2.connect(this.options.baseUrl);
    // A session's own errors (a refused connection, a lost socket) reach its streams too, which
    // report them to their calls; a session without a listener would throw them at the process.
    session.on("error", () => {});
    const forget = () => {
      if (this.current === session) {
        this.current = undefined;
        clearInterval(this.upkeep);
      }
    };
    session.once("close", forget);
    session.once("goaway", forget);
    // No call waiting: the session must not keep its process alive (a CLI, a test).
    session.unref();
    this.current = session;
    this.active = 0;
    this.idleSince = Date.now();
    clearInterval(this.upkeep);
    this.upkeep = this.keepUp(session);
    return session;
  }

  /**
   * One timer per session for its pings and its idle close, cleared when it closes. Not
   * `session.setTimeout`: Node keeps a destroyed session's timer (and through it the session, its
   * socket and every call queued on it) until it fires, so each session made while a peer was
   * down, one per call that found it down, stayed in memory for the whole idle period.
   */
  private keepUp(session: http2.ClientHttp2Session): NodeJS.Timeout | undefined {
    const { pingIntervalMs, pingTimeoutMs = 15_000, idleConnectionTimeoutMs } = this.options;
    const period = Math.min(pingIntervalMs ?? Infinity, idleConnectionTimeoutMs ?? Infinity);
    if (period === Infinity) return undefined;
    const pingEvery = pingIntervalMs ? Math.max(1, Math.round(pingIntervalMs / period)) : 0;
    let ticks = 0;
    return setInterval(() => {
      if (this.current !== session || session.closed || session.destroyed) return;
      const now = Date.now();
      if (
        idleConnectionTimeoutMs &&
        this.active === 0 &&
        now - this.idleSince >= idleConnectionTimeoutMs
      ) {
        session.close();
        return;
      }
      if (!pingEvery || ++ticks % pingEvery !== 0) return;
      const timer = setTimeout(() => session.destroy(), pingTimeoutMs).unref();
      try {
        session.ping((err) => {
          clearTimeout(timer);
          if (err) session.destroy();
        });
      } catch {
        clearTimeout(timer);
      }
    }, period).unref();
  }

  /** A call starts on `session`: the process stays up until it ends. */
  begin(session: http2.ClientHttp2Session): void {
    if (session !== this.current) return;
    if (this.active++ === 0) session.ref();
  }

  end(session: http2.ClientHttp2Session): void {
    if (session !== this.current) return;
    if (--this.active === 0) {
      session.unref();
      this.idleSince = Date.now();
    }
  }
}

const { NGHTTP2_CANCEL } = http2.constants;

/** As connect-node maps a stream reset by the callee. */
function resetError(rstCode: number): ConnectError | undefined {
  const c = http2.constants;
  const message = `http/2 stream closed with error code ${rstCode} (0x${rstCode.toString(16)})`;
  switch (rstCode) {
    case c.NGHTTP2_PROTOCOL_ERROR:
    case c.NGHTTP2_INTERNAL_ERROR:
    case c.NGHTTP2_FLOW_CONTROL_ERROR:
    case c.NGHTTP2_SETTINGS_TIMEOUT:
    case c.NGHTTP2_FRAME_SIZE_ERROR:
    case c.NGHTTP2_COMPRESSION_ERROR:
    case c.NGHTTP2_CONNECT_ERROR:
      return new ConnectError(message, Code.Internal);
    case c.NGHTTP2_REFUSED_STREAM:
      return new ConnectError(message, Code.Unavailable);
    case c.NGHTTP2_CANCEL:
      return new ConnectError(message, Code.Canceled);
    case c.NGHTTP2_ENHANCE_YOUR_CALM:
      return new ConnectError(message, Code.ResourceExhausted);
    case c.NGHTTP2_INADEQUATE_SECURITY:
    case c.NGHTTP2_HTTP_1_1_REQUIRED:
      return new ConnectError(message, Code.PermissionDenied);
    default:
      return undefined;
  }
}

/** A Node error of the connection or stream as a ConnectError, the error kept as its cause. */
function transportError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const code = isConnectionError(err) ? Code.Unavailable : Code.Internal;
  const ce = new ConnectError((err as Error)?.message ?? String(err), code);
  ce.cause = err;
  return ce;
}

/** The stream closed with neither an answer nor an error: its connection went away. */
const lostStream = () =>
  transportError(
    Object.assign(new Error("the connection closed before the answer"), {
      code: "ERR_HTTP2_STREAM_CANCEL",
    }),
  );

/** Node's HTTP/2 headers as Web headers, pseudo-headers left out (as connect-node's adapter). */
export function webHeaders(headers: http2.IncomingHttpHeaders): Headers {
  const out = new Headers();
  for (const key in headers) {
    if (key.charCodeAt(0) === 58 /* : */) continue;
    const value = headers[key];
    if (Array.isArray(value)) for (const v of value) out.append(key, v);
    else if (value !== undefined) out.set(key, value);
  }
  return out;
}

/** The lean unary transport (its streaming calls go to connect-node's). */
export type UnaryTransport = Transport;

export function unaryTransport(options: UnaryTransportOptions): UnaryTransport {
  const session = new Session(options);
  const interceptors = options.interceptors ?? [];
  const format = options.useBinaryFormat ?? true;
  const binaryFor: (method: DescMethodUnary) => boolean =
    typeof format === "function" ? format : () => format;
  const base = options.baseUrl.replace(/\/$/, "");
  let streaming: Transport | undefined;

  function send<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    req: UnaryRequest<I, O>,
    timeoutMs: number | undefined,
  ): Promise<UnaryResponse<I, O>> {
    return new Promise((resolve, reject) => {
      const { signal } = req;
      const binary = binaryFor(method);
      if (signal.aborted) {
        reject(ConnectError.from(signal.reason, Code.Canceled));
        return;
      }
      const headers: http2.OutgoingHttpHeaders = {
        ":method": "POST",
        ":path": `/${method.parent.typeName}/${method.name}`,
        "content-type": binary ? "application/proto" : "application/json",
        "connect-protocol-version": "1",
      };
      req.header.forEach((value, key) => {
        headers[key] = value;
      });
      if (timeoutMs !== undefined) headers["connect-timeout-ms"] = String(timeoutMs);
      let body: Uint8Array;
      let h2: http2.ClientHttp2Session;
      let stream: http2.ClientHttp2Stream;
      try {
        body = binary
          ? toBinary(method.input, req.message)
          : Buffer.from(toJsonString(method.input, req.message));
        h2 = session.get();
        stream = h2.request(headers);
      } catch (err) {
        reject(transportError(err));
        return;
      }
      session.begin(h2);
      let settled = false;
      let status = 0;
      let responseHeaders: http2.IncomingHttpHeaders | undefined;
      const chunks: Buffer[] = [];
      const finish = (err: ConnectError | undefined, res?: UnaryResponse<I, O>) => {
        if (settled) return;
        settled = true;
        signal.removeEventListener("abort", onAbort);
        session.end(h2);
        if (res) resolve(res);
        else reject(err);
      };
      const onAbort = () => {
        // The caller went away or the deadline passed: the callee's stream is reset (CANCEL),
        // which aborts its handler's signal.
        if (!stream.closed) stream.close(NGHTTP2_CANCEL);
        finish(ConnectError.from(signal.reason, Code.Canceled));
      };
      signal.addEventListener("abort", onAbort);
      stream.on("response", (h) => {
        status = Number(h[":status"]);
        responseHeaders = h;
      });
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("end", () => {
        if (settled) return;
        // Ended without an answer, or before its end (the stream closed with a code, CANCEL when
        // the connection went away): a process that died closes its socket, and its streams end
        // with no error event, whatever they had received.
        if (responseHeaders === undefined || stream.rstCode) {
          finish((h2.destroyed ? undefined : resetError(stream.rstCode ?? 0)) ?? lostStream());
          return;
        }
        const bytes = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
        try {
          finish(undefined, answer(method, binary, status, responseHeaders, bytes));
        } catch (err) {
          finish(ConnectError.from(err));
        }
      });
      // A reset other than CANCEL comes as an 'error' before 'close': mapped by its code too.
      stream.on("error", (err) => {
        const reset =
          (err as NodeJS.ErrnoException).code === "ERR_HTTP2_STREAM_ERROR"
            ? resetError(stream.rstCode ?? 0)
            : undefined;
        // The stream error stays the cause, as with connect-node's client: callers read it as
        // their peer failing (peerUnavailableInterceptor).
        if (reset) reset.cause = err;
        finish(reset ?? transportError(err));
      });
      stream.on("close", () => {
        if (settled) return;
        finish(resetError(stream.rstCode ?? 0) ?? lostStream());
      });
      stream.end(body);
    });
  }

  /** The callee's answer: the message, or the Connect error it sent. */
  function answer<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    binary: boolean,
    status: number,
    headers: http2.IncomingHttpHeaders,
    bytes: Buffer,
  ): UnaryResponse<I, O> {
    // The answer's headers and trailers as Web Headers, made when read: an error's metadata, or
    // a caller that asks for them (onHeader, onTrailer, an interceptor); most calls never do.
    let demuxed: [Headers, Headers] | undefined;
    const demux = () => (demuxed ??= trailerDemux(webHeaders(headers)));
    const encoding = headers["content-encoding"];
    if (encoding !== undefined && encoding !== "identity") {
      throw new ConnectError(`unexpected content-encoding "${encoding}"`, Code.Internal);
    }
    const type = parseContentType(headers["content-type"] ?? null);
    if (status !== 200) {
      const [header, trailer] = demux();
      const metadata = new Headers(header);
      trailer.forEach((value, key) => metadata.append(key, value));
      const fromStatus = new ConnectError(`HTTP ${status}`, codeFromHttpStatus(status), metadata);
      // As connect's validateResponse: only a JSON body is read as a Connect error; anything else
      // (a proxy's page, an empty 503) is the status alone.
      throw type && !type.binary && !type.stream
        ? errorFromJsonBytes(bytes, metadata, fromStatus)
        : fromStatus;
    }
    // Parameters such as `; charset=utf-8` allowed, as connect-node allows them.
    if (!type || type.stream || type.binary !== binary) {
      throw new ConnectError(`unexpected content-type "${headers["content-type"]}"`, Code.Internal);
    }
    // An answer that holds a run has its run read by hand (run-binary.ts).
    const message = binary
      ? (decodeRunAnswer<MessageShape<O>>(method.output, bytes) ?? fromBinary(method.output, bytes))
      : fromJsonString(method.output, bytes.toString("utf8"), { ignoreUnknownFields: true });
    return {
      stream: false,
      service: method.parent,
      method,
      get header() {
        return demux()[0];
      },
      get trailer() {
        return demux()[1];
      },
      message,
    };
  }

  function call<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: Parameters<Transport["unary"]>[3],
    input: unknown,
    contextValues: ContextValues | undefined,
  ): Promise<UnaryResponse<I, O>> {
    const deadline =
      timeoutMs === undefined ? options.defaultTimeoutMs : timeoutMs <= 0 ? undefined : timeoutMs;
    // One signal for the interceptors and the call: the caller's abort or the deadline.
    const controller = new AbortController();
    const onCallerAbort = () => controller.abort(ConnectError.from(signal?.reason, Code.Canceled));
    if (signal?.aborted) onCallerAbort();
    else signal?.addEventListener("abort", onCallerAbort);
    const timer =
      deadline === undefined
        ? undefined
        : setTimeout(
            () =>
              controller.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded)),
            deadline,
          );
    const handler = (req: UnaryRequest<I, O>) => send(method, req, deadline);
    const next = interceptors.reduceRight(
      (inner, interceptor) => interceptor(inner as never) as unknown as typeof handler,
      handler,
    );
    const cleanup = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onCallerAbort);
    };
    let pending: Promise<UnaryResponse<I, O>>;
    try {
      pending = next({
        stream: false,
        service: method.parent,
        method,
        requestMethod: "POST",
        url: `${base}/${method.parent.typeName}/${method.name}`,
        signal: controller.signal,
        header: new Headers(header),
        contextValues: contextValues ?? createContextValues(),
        message: create(method.input, input as never),
      });
    } catch (err) {
      // Thrown before the call began (an input `create` refuses, an interceptor that throws):
      // a failed call like any, its deadline timer and abort listener cleaned up below.
      pending = Promise.reject(err);
    }
    return pending.then(
      (res) => {
        cleanup();
        return res;
      },
      (err: unknown) => {
        cleanup();
        throw controller.signal.aborted
          ? ConnectError.from(controller.signal.reason, Code.Canceled)
          : ConnectError.from(err);
      },
    );
  }

  return {
    unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: Parameters<Transport["unary"]>[3],
      input: unknown,
      contextValues?: ContextValues,
    ): Promise<UnaryResponse<I, O>> {
      return call(method, signal, timeoutMs, header, input, contextValues);
    },

    stream(method, signal, timeoutMs, header, input, contextValues) {
      streaming ??= options.streaming();
      return streaming.stream(method, signal, timeoutMs, header, input, contextValues);
    },
  };
}
