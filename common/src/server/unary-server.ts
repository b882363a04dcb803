import http2 from "node:http2";
import {
  create,
  fromBinary,
  fromJsonString,
  toBinary,
  toJsonString,
  type DescMethodUnary,
  type Message,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  type ConnectRouter,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import {
  codeToHttpStatus,
  errorToJsonBytes,
  parseTimeout,
} from "@connectrpc/connect/protocol-connect";
import { CALL_ENDED, received, recordingRouter } from "./direct.js";
import { tooLargeError } from "../retry-after.js";
import { webHeaders } from "./unary-client.js";
import { encodeRunAnswer } from "../bus/run-binary.js";

/**
 * The callee's side of unary-client.ts: a Connect unary call (POST, `application/json` or
 * `application/proto`, uncompressed) to a unary method of `routes` is answered here, through the
 * handler and the server's interceptors as `directTransport` calls them (the interceptors
 * outermost first, errors as a caller receives them, unexpected ones INTERNAL; see `call` for the
 * handler's context); everything else (gRPC and gRPC-Web from grpc-js callers and probes, Connect GET,
 * streaming methods, compressed bodies, other content types) goes to `fallback`, connect-node's
 * adapter. Returns false when it does not take the request.
 *
 * Why (docs/decisions/0009-lean-unary-connect-path.md): connect-node's adapter cost the callee
 * nearly twice this path's CPU per call (a universal request and response with async iterables, Web
 * Headers for every request, linked AbortControllers each building a DOMException when the call
 * ends, the answer written as headers, body and an empty END_STREAM frame in separate writes); here
 * the answer goes out as headers then one DATA frame carrying END_STREAM.
 *
 * Kept: the deadline (`connect-timeout-ms`: the handler's signal aborts when it passes, the call
 * is answered DEADLINE_EXCEEDED); the caller going away (its stream reset or closed) aborts the
 * handler's signal; the handler's response headers and trailers (`trailer-` prefixed, as Connect's
 * unary answers carry them); errors as Connect's JSON error with the HTTP status of their code,
 * their metadata as headers; a body that does not decode is INVALID_ARGUMENT; a bad timeout too;
 * a body larger than `readMaxBytes` is RESOURCE_EXHAUSTED with connect-node's message, answered
 * as soon as its length says so (or its bytes pass the cap), without reading the rest.
 */
export function unaryHandler(
  routes: (router: ConnectRouter) => void,
  interceptors: Interceptor[],
  { readMaxBytes }: { readMaxBytes: number },
): (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => boolean {
  const methods = new Map<string, ServedMethod>();
  routes(
    recordingRouter((spec) => {
      if (spec.kind !== "unary") return;
      const path = `/${spec.method.parent.typeName}/${spec.method.name}`;
      methods.set(path, {
        spec,
        url: `connect://${path}`,
      });
    }),
  );

  return (req, res) => {
    const served = methods.get(req.url);
    if (served === undefined || req.method !== "POST") return false;
    const h = req.headers;
    const type = h["content-type"];
    const binary = type === "application/proto";
    if (!binary && type !== "application/json") return false;
    const encoding = h["content-encoding"];
    if (encoding !== undefined && encoding !== "identity") return false;
    const version = h["connect-protocol-version"];
    if (version !== undefined && version !== "1") return false;

    // The call's one signal: the caller going away (its stream reset or lost), the deadline, or
    // the end of the call abort it.
    const { stream } = res;
    const controller = new AbortController();
    const onClose = () => controller.abort(new ConnectError("the caller went away", Code.Canceled));
    stream.once("close", onClose);
    let answered = false;
    const answer = ({ status, headers, body }: Answer) => {
      // Once: the deadline's answer goes out while the handler ends as it can, unheard.
      if (answered) return;
      answered = true;
      stream.removeListener("close", onClose);
      if (stream.closed || stream.destroyed) return;
      // The stream's own API: its `end(body)` sends the body's last DATA frame with END_STREAM,
      // where the compatibility API's `res.end(body)` sends an empty END_STREAM frame after it
      // (a second wake-up of the caller).
      headers[":status"] = status;
      try {
        stream.respond(headers);
        stream.end(body);
      } catch {
        // Headers HTTP/2 refuses (a connection-specific one a handler set): the caller's stream
        // is reset, the call fails there, never the process.
        stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      }
    };
    /**
     * Too large: answered at once, and the stream then reset with NO_ERROR, which tells the
     * caller to stop sending (RFC 9113 §8.1) after the complete answer, so nothing more is read.
     * Marked as a request too large (the gateway's 413), not a limit a retry may pass (429).
     */
    const tooLarge = (size?: number) => {
      answer(
        errorAnswer(
          tooLargeError(
            size === undefined
              ? `message size is larger than configured readMaxBytes ${readMaxBytes}`
              : `message size ${size} is larger than configured readMaxBytes ${readMaxBytes}`,
          ),
        ),
      );
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    };
    const length = h["content-length"];
    if (length !== undefined && Number(length) > readMaxBytes) {
      tooLarge(Number(length));
      return true;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= readMaxBytes) {
        chunks.push(chunk);
        return;
      }
      req.removeListener("data", onData);
      req.removeListener("end", onEnd);
      chunks.length = 0;
      tooLarge();
    };
    // Whatever throws past `call` (an error answer that cannot be encoded) resets the caller's
    // stream: never an unhandled rejection, which would end the process.
    const onEnd = () =>
      void call(served, binary, req, chunks, controller, answer).catch(() => {
        if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      });
    req.on("data", onData);
    req.on("end", onEnd);
    return true;
  };

  /**
   * Decodes the request, calls the handler through the interceptors and answers. What
   * `directTransport` does for a caller in the process, without what only such a caller needs:
   * the handler's context is made here with one AbortController for the call (connect's
   * createHandlerContext links three, a listener on each, and a caller in the process races the
   * call with one more), the request's headers read once (not copied again), and the deadline
   * answered by its timer. Measured on Execute alone: docs/decisions/0013-per-call-costs-cut.md.
   */
  async function call(
    served: ServedMethod,
    binary: boolean,
    req: http2.Http2ServerRequest,
    chunks: Buffer[],
    controller: AbortController,
    answer: (answer: Answer) => void,
  ): Promise<void> {
    const { spec, url } = served;
    const method = spec.method as DescMethodUnary;
    const { signal } = controller;
    let ctx: HandlerContext | undefined;
    let timer: NodeJS.Timeout | undefined;
    try {
      const timeout = parseTimeout(
        (req.headers["connect-timeout-ms"] as string | undefined) ?? null,
        Number.MAX_SAFE_INTEGER,
      );
      if (timeout.error) throw timeout.error;
      const bytes = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
      const input = decode(served, binary, bytes);
      // A deadline of 0 ms is past (1 ms); none when the caller sends none. When it passes, the
      // caller is answered DEADLINE_EXCEEDED at once and the handler's signal aborts.
      let deadline: number | undefined;
      if (timeout.timeoutMs !== undefined) {
        const ms = Math.max(1, timeout.timeoutMs);
        deadline = Date.now() + ms;
        timer = setTimeout(() => {
          const exceeded = new ConnectError("the operation timed out", Code.DeadlineExceeded);
          controller.abort(exceeded);
          answer(errorAnswer(exceeded));
        }, ms);
      }
      // Nothing is called for a caller already gone (its stream closed while the body came).
      if (signal.aborted) return;
      const context: HandlerContext = {
        service: method.parent,
        method,
        protocolName: "connect",
        requestMethod: "POST",
        url,
        signal,
        timeoutMs: deadline === undefined ? noDeadline : () => deadline - Date.now(),
        requestHeader: webHeaders(req.headers),
        responseHeader: new Headers(),
        responseTrailer: new Headers(),
        values: createContextValues(),
      };
      ctx = context;
      // The handler, then the interceptors around it (the first outermost), as a router runs them.
      const handler = async (r: UnaryRequest): Promise<UnaryResponse> => {
        // The request as the interceptors left it: its signal, headers and values.
        const c =
          r.header === context.requestHeader &&
          r.contextValues === context.values &&
          r.signal === context.signal
            ? context
            : { ...context, requestHeader: r.header, values: r.contextValues, signal: r.signal };
        const message = await spec.impl(r.message as never, c);
        return {
          stream: false,
          service: method.parent,
          method,
          header: context.responseHeader,
          trailer: context.responseTrailer,
          message: create(method.output, message as never),
        };
      };
      let next = handler;
      for (let i = interceptors.length - 1; i >= 0; i--) {
        next = (interceptors[i] as Interceptor)(next as never) as typeof handler;
      }
      const res = await next({
        stream: false,
        service: method.parent,
        method,
        requestMethod: "POST",
        url,
        signal,
        header: context.requestHeader,
        contextValues: context.values,
        message: input,
      });
      const headers: http2.OutgoingHttpHeaders = {};
      res.header.forEach((value, key) => {
        headers[key] = value;
      });
      res.trailer.forEach((value, key) => {
        headers[`trailer-${key}`] = value;
      });
      headers["content-type"] = binary ? "application/proto" : "application/json";
      answer({ status: 200, headers, body: encode(served, binary, res.message) });
    } catch (err) {
      // As a caller receives a handler's error (direct.ts): the response's headers and trailers
      // in its metadata, unexpected errors INTERNAL.
      answer(errorAnswer(ctx ? received(err, ctx) : ConnectError.from(err)));
    } finally {
      clearTimeout(timer);
      // As behind connect-node: the handler's signal ends with its call.
      controller.abort(CALL_ENDED);
    }
  }
}

/** A unary method served on the lean path, with its URL. */
interface ServedMethod {
  spec: MethodImplSpec & { kind: "unary" };
  url: string;
}

const noDeadline = () => undefined;

/** The request's message; a body that does not decode is INVALID_ARGUMENT. */
function decode(served: ServedMethod, binary: boolean, bytes: Buffer) {
  const method = served.spec.method;
  try {
    if (binary) return fromBinary(method.input, bytes);
    const text = bytes.toString("utf8");
    // As connect-node reads JSON: a field or enum name from a newer caller (a rolling upgrade)
    // is ignored, not refused.
    return fromJsonString(method.input, text, { ignoreUnknownFields: true });
  } catch (err) {
    throw new ConnectError(
      `cannot decode message ${method.input.typeName}: ${(err as Error).message}`,
      Code.InvalidArgument,
    );
  }
}

/** The answer's body. */
function encode(served: ServedMethod, binary: boolean, message: Message): Uint8Array {
  const output = served.spec.method.output;
  // An answer that holds a run has its run written by hand (run-binary.ts).
  if (binary) return encodeRunAnswer(output, message) ?? toBinary(output, message);
  return Buffer.from(toJsonString(output, message));
}

interface Answer {
  status: number;
  headers: http2.OutgoingHttpHeaders;
  body: Uint8Array;
}

/** A Connect unary error answer: the code's HTTP status, its metadata as headers, JSON body. */
function errorAnswer(error: ConnectError): Answer {
  const headers: http2.OutgoingHttpHeaders = {};
  error.metadata.forEach((value, key) => {
    headers[key] = value;
  });
  headers["content-type"] = "application/json";
  return { status: codeToHttpStatus(error.code), headers, body: errorToJsonBytes(error, {}) };
}
