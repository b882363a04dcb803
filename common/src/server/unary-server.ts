import http2 from "node:http2";
import {
  fromBinary,
  fromJsonString,
  toBinary,
  toJsonString,
  type DescMethodUnary,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import {
  codeToHttpStatus,
  errorToJsonBytes,
  parseTimeout,
} from "@connectrpc/connect/protocol-connect";
import { directTransport, recordingRouter } from "./direct.js";
import { tooLargeError } from "../retry-after.js";
import { webHeaders } from "./unary-client.js";

/**
 * The callee's side of unary-client.ts: a Connect unary call (POST, `application/json` or
 * `application/proto`, uncompressed) to a unary method of `routes` is answered here, through the
 * handler and the server's interceptors as `directTransport` calls them (a HandlerContext from
 * Connect's own `createHandlerContext`, the interceptors outermost first, unexpected errors
 * INTERNAL); everything else (gRPC and gRPC-Web from grpc-js callers and probes, Connect GET,
 * streaming methods, compressed bodies, other content types) goes to `fallback`, connect-node's
 * adapter. Returns false when it does not take the request.
 *
 * Why (same measurement as unary-client.ts): connect-node's adapter cost 0.64 ms of the callee's
 * CPU per call (a universal request and response with async iterables, Web Headers for every
 * request, linked AbortControllers each building a DOMException when the call ends, the answer
 * written as headers, body and an empty END_STREAM frame in separate writes); here 0.37 ms, the
 * answer going out as headers then one DATA frame carrying END_STREAM.
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
  const methods = new Map<string, DescMethodUnary>();
  routes(
    recordingRouter(({ method }) => {
      if (method.methodKind === "unary") {
        methods.set(`/${method.parent.typeName}/${method.name}`, method);
      }
    }),
  );
  const transport: Transport = directTransport(routes, { interceptors, protocolName: "connect" });

  return (req, res) => {
    const method = methods.get(req.url);
    if (method === undefined || req.method !== "POST") return false;
    const h = req.headers;
    const type = h["content-type"];
    const binary = type === "application/proto";
    if (!binary && type !== "application/json") return false;
    const encoding = h["content-encoding"];
    if (encoding !== undefined && encoding !== "identity") return false;
    const version = h["connect-protocol-version"];
    if (version !== undefined && version !== "1") return false;

    // The caller going away before the answer (its stream reset or lost) aborts the call.
    const { stream } = res;
    const gone = new AbortController();
    const onClose = () => gone.abort(new ConnectError("the caller went away", Code.Canceled));
    stream.once("close", onClose);
    const answer = ({ status, headers, body }: Answer) => {
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
      void call(method, binary, req, chunks, gone.signal)
        .then(answer)
        .catch(() => {
          if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
        });
    req.on("data", onData);
    req.on("end", onEnd);
    return true;
  };

  async function call(
    method: DescMethodUnary,
    binary: boolean,
    req: http2.Http2ServerRequest,
    chunks: Buffer[],
    signal: AbortSignal,
  ): Promise<Answer> {
    const contentType = binary ? "application/proto" : "application/json";
    try {
      const timeout = parseTimeout(
        (req.headers["connect-timeout-ms"] as string | undefined) ?? null,
        Number.MAX_SAFE_INTEGER,
      );
      if (timeout.error) throw timeout.error;
      const bytes = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
      let input;
      try {
        input = binary
          ? fromBinary(method.input, bytes)
          : // As connect-node reads JSON: a field or enum name from a newer caller (a rolling
            // upgrade) is ignored, not refused.
            fromJsonString(method.input, bytes.toString("utf8"), { ignoreUnknownFields: true });
      } catch (err) {
        throw new ConnectError(
          `cannot decode message ${method.input.typeName}: ${(err as Error).message}`,
          Code.InvalidArgument,
        );
      }
      const res = await transport.unary(
        method,
        signal,
        // No deadline: none (directTransport reads 0 or less as none); a deadline of 0 ms is past.
        timeout.timeoutMs === undefined ? 0 : Math.max(1, timeout.timeoutMs),
        webHeaders(req.headers),
        input,
      );
      const headers: http2.OutgoingHttpHeaders = {};
      res.header.forEach((value, key) => {
        headers[key] = value;
      });
      res.trailer.forEach((value, key) => {
        headers[`trailer-${key}`] = value;
      });
      headers["content-type"] = contentType;
      const body = binary
        ? toBinary(method.output, res.message)
        : Buffer.from(toJsonString(method.output, res.message));
      return { status: 200, headers, body };
    } catch (err) {
      return errorAnswer(ConnectError.from(err));
    }
  }
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
