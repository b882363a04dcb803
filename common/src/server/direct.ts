import { create, toBinary, toJson, type DescMethod, type JsonValue } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  createHandlerContext,
  createMethodImplSpec,
  createServiceImplSpec,
  type ConnectRouter,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type Transport,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";

/**
 * In-process calls without Connect's serialization (docs/decisions/0018-direct-transport.md).
 *
 * `createRouterTransport` (what the edge and the embedded mode used) runs the whole Connect
 * protocol in memory: the request is encoded, framed, parsed again, the answer the same way back,
 * with a universal handler, its headers, async iterables and two sets of abort controllers per
 * call — about as much CPU as one call over HTTP/2 costs in the two processes. `directTransport`
 * calls the handler itself, with what the wire gives a handler and a caller kept:
 *
 * - a HandlerContext from Connect's own `createHandlerContext`: its signal aborts when the caller's
 *   does or the deadline (`timeoutMs`, else `defaultTimeoutMs`) passes, and when the call is over,
 *   as the handler's does behind a transport; the caller's headers; the response headers and
 *   trailers it sets reach the caller (`onHeader`, `onTrailer`); the caller's context values too
 *   (which no wire can carry: behind a transport a handler gets empty ones);
 * - the server's interceptors (`errorInterceptor`: unexpected errors logged with their cause and
 *   answered INTERNAL, database faults UNAVAILABLE) around the handler, in the order a router
 *   applies them;
 * - errors as a caller receives them from the wire (`received`): code, message, details (encoded as
 *   the wire carries them) and metadata (the response headers and trailers with the error's own),
 *   never a `cause` (which stays in the callee's logs: the gateway reads a connection error in a
 *   cause chain as its own peer lost, and addresses would reach callers); anything but a
 *   ConnectError is INTERNAL "internal error", as a handler factory answers it;
 * - a caller that aborts, or whose deadline passes, is answered at once (CANCELED with its reason,
 *   DEADLINE_EXCEEDED) while the handler sees its signal aborted and ends as it can;
 * - full messages both ways (`create` of what was given, as `normalize` does in a transport).
 *
 * What it does not do is copy: protobuf-es v2 messages are plain objects, and the caller and the
 * handler share the request's and the answer's object graphs (`create` keeps nested messages,
 * lists and Struct fields as given). That is safe for pies' services because no handler changes
 * its request and no caller changes an answer in place (each side copies before it changes a run:
 * `withFields`, `endedRun`, `{ ...run }`), which the gateway's tests check: their in-memory pies
 * freeze both (`freezeMessages`, `checkIsolation` of createInMemoryPies). A caller that needs to change an answer copies it first
 * (`clone(schema, message)`).
 *
 * Unary methods only: pies' services have no streaming method (grpc.health.v1's Watch is served
 * by `serveConnect` over HTTP/2, never in process); a streaming method is refused UNIMPLEMENTED.
 */
export interface DirectTransportOptions {
  /** The server's interceptors (e.g. `errorInterceptor`), outermost first, as a router's. */
  interceptors?: Interceptor[];
  /** The deadline of a call that names none (`timeoutMs: 0` or less: none). Default: none. */
  defaultTimeoutMs?: number;
  /**
   * Deep-freezes every request as the handler gets it and every answer as the caller gets it, so
   * that a change of a shared message in place throws (a TypeError in strict code) where it is made.
   * For tests: it costs a walk of both messages per call.
   */
  freezeMessages?: boolean;
  /**
   * The protocol the handler context names, and the scheme of its URL (`direct:///Service/Method`
   * by default); `connect` when the server's unary path calls handlers through this (unary-server.ts).
   */
  protocolName?: string;
}

/** A method served here: its handler and its URL (for logs: `procedure` in errorInterceptor's). */
interface DirectMethod {
  spec: MethodImplSpec;
  url: string;
}

/**
 * A Transport that calls the handlers `routes` registers in this process (see above). Give it to
 * `serviceClient` (or Connect's `createClient`) for a `Client<typeof Service>`.
 */
export function directTransport(
  routes: (router: ConnectRouter) => void,
  options: DirectTransportOptions = {},
): Transport {
  const interceptors = options.interceptors ?? [];
  const freeze = options.freezeMessages
    ? <T>(value: T) => deepFreeze(value)
    : <T>(value: T) => value;
  const protocolName = options.protocolName ?? "direct";
  const methods = new Map<DescMethod, DirectMethod>();
  routes(
    recordingRouter((spec) => {
      const url = `${protocolName}:///${spec.method.parent.typeName}/${spec.method.name}`;
      methods.set(spec.method, { spec, url });
    }),
  );

  return {
    async unary(method, signal, timeoutMs, header, input, contextValues) {
      const target = methods.get(method);
      if (!target) {
        throw new ConnectError(
          `${method.parent.typeName}.${method.name} is not served in this process`,
          Code.Unimplemented,
        );
      }
      const { spec, url } = target;
      if (spec.kind !== "unary") throw streamingRefused(method);
      const deadline =
        timeoutMs === undefined ? options.defaultTimeoutMs : timeoutMs > 0 ? timeoutMs : undefined;
      const ctx = createHandlerContext({
        service: method.parent,
        method,
        protocolName,
        requestMethod: "POST",
        url,
        timeoutMs: deadline,
        requestSignal: signal,
        requestHeader: header,
        contextValues: contextValues ?? createContextValues(),
      });
      // The handler, then the interceptors around it (the first outermost), as a router runs them.
      const handler = async (req: UnaryRequest): Promise<UnaryResponse> => {
        // The request as the interceptors left it: its signal, headers and values.
        const context: HandlerContext =
          req.header === ctx.requestHeader &&
          req.contextValues === ctx.values &&
          req.signal === ctx.signal
            ? ctx
            : { ...ctx, requestHeader: req.header, values: req.contextValues, signal: req.signal };
        const answer = await spec.impl(req.message, context);
        return {
          stream: false,
          service: method.parent,
          method: spec.method,
          header: ctx.responseHeader,
          trailer: ctx.responseTrailer,
          message: create(spec.method.output, answer),
        };
      };
      if (ctx.signal.aborted) {
        // A caller that has already gone away: nothing is called (a transport would not send).
        ctx.abort(CALL_ENDED);
        throw ConnectError.from(ctx.signal.reason, Code.Canceled);
      }
      const next = interceptors.reduceRight(
        (inner, interceptor) => interceptor(inner as never) as typeof handler,
        handler,
      );
      try {
        const call = next({
          stream: false,
          service: method.parent,
          method: spec.method,
          requestMethod: "POST",
          url,
          signal: ctx.signal,
          header: ctx.requestHeader,
          contextValues: ctx.values,
          message: freeze(create(method.input, input)),
        });
        // A caller that can go away (a signal or a deadline) is answered when it does.
        const res =
          signal === undefined && deadline === undefined
            ? await call
            : await untilAborted(call, ctx.signal);
        return {
          stream: false,
          service: method.parent,
          method,
          header: res.header,
          trailer: res.trailer,
          message: freeze(res.message),
        } as never;
      } catch (err) {
        throw err instanceof CallerEnded ? err.error : received(err, ctx);
      } finally {
        // As behind a transport: the handler's signal ends with its call (and its deadline timer).
        ctx.abort(CALL_ENDED);
      }
    },

    stream(method) {
      return Promise.reject(streamingRefused(method));
    },
  };
}

const streamingRefused = (method: DescMethod) =>
  new ConnectError(
    `${method.parent.typeName}.${method.name} is a streaming method: in-process calls are unary only`,
    Code.Unimplemented,
  );

/**
 * The reason the handler's signal gives once its call is over. One shared error: an abort without
 * a reason makes a DOMException, stack trace and all, per call (its cost in the edge's profile:
 * docs/decisions/0018-direct-transport.md); the reason of a call already over matters to no one.
 */
export const CALL_ENDED = new ConnectError("the call has ended", Code.Canceled);

/** A router that keeps the implementations it is given, building no protocol handler. */
export function recordingRouter(add: (spec: MethodImplSpec) => void): ConnectRouter {
  const router: ConnectRouter = {
    // Nothing here speaks a protocol: no universal handler is built.
    handlers: [],
    service(service, implementation) {
      const spec = createServiceImplSpec(service, implementation);
      for (const method of Object.values(spec.methods)) add(method);
      return router;
    },
    rpc(method, impl) {
      add(createMethodImplSpec(method, impl));
      return router;
    },
  };
  return router;
}

/** The end of a call that its caller brought about (abort, deadline): what the caller gets. */
class CallerEnded {
  constructor(readonly error: ConnectError) {}
}

/**
 * The call's answer, or its caller's end if that comes first: CANCELED with the caller's reason
 * (a ConnectError reason kept as it is: DEADLINE_EXCEEDED when the deadline passed), as
 * Connect's transports answer it.
 */
function untilAborted<T>(call: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    // The call ends as it can, unheard (it sees its signal aborted): never an unhandled rejection.
    call.catch(() => {});
    return Promise.reject(new CallerEnded(ConnectError.from(signal.reason, Code.Canceled)));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new CallerEnded(ConnectError.from(signal.reason, Code.Canceled)));
    signal.addEventListener("abort", onAbort, { once: true });
    call.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}

/**
 * A handler's error as its caller receives it over the wire (Connect's unary error): the code and
 * message; the metadata, which is the response's headers with the error's own set over them and
 * its trailers; details encoded as the wire carries them (`{type, value, debug}`, which
 * `findDetails` reads). No `cause`: it does not cross the wire, and callers classify errors by
 * their causes (`isConnectionError`). Anything else is INTERNAL "internal error", as a handler
 * factory answers it (errorInterceptor has logged it).
 */
export function received(err: unknown, ctx: HandlerContext): ConnectError {
  const error =
    err instanceof ConnectError ? err : new ConnectError("internal error", Code.Internal);
  const metadata = new Headers(ctx.responseHeader);
  error.metadata.forEach((value, key) => metadata.set(key, value));
  ctx.responseTrailer.forEach((value, key) => metadata.append(key, value));
  const details = error.details.map((detail) => {
    if (!("desc" in detail)) return detail;
    const message = create(detail.desc, detail.value);
    let debug: JsonValue | undefined;
    try {
      debug = toJson(detail.desc, message);
    } catch {
      // As the wire: the debug form is optional (a message holding an Any may not have one).
    }
    return { type: detail.desc.typeName, value: toBinary(detail.desc, message), debug };
  });
  const answer = new ConnectError(error.rawMessage, error.code, metadata);
  answer.details = details;
  return answer;
}

/**
 * Freezes an object graph (typed arrays, which cannot be frozen, are left as they are): what is
 * shared between the two sides of an in-process call, or kept in a cache and handed out, cannot
 * be changed by one of its holders behind the others' backs (a change throws instead).
 */
export function deepFreeze<T>(value: T, seen = new Set<object>()): T {
  if (typeof value !== "object" || value === null || seen.has(value)) return value;
  seen.add(value);
  if (ArrayBuffer.isView(value)) return value;
  Object.freeze(value);
  for (const key of Reflect.ownKeys(value)) {
    deepFreeze((value as Record<PropertyKey, unknown>)[key], seen);
  }
  return value;
}
