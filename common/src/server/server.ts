import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { Code, ConnectError, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { Health } from "@pies/proto/health";
import type { Logger } from "../logger.js";
import { createHealthService } from "./health.js";
import { internalAuthInterceptor } from "./internal-auth.js";
import { payloadsInterceptor } from "./payloads-interceptor.js";
import { unaryHandler } from "./unary-server.js";
import { serverTracingInterceptor, tracingEnabled } from "../tracing.js";
import { databaseUnavailable, isDatabaseUnavailable, type DatabaseFaults } from "../unavailable.js";
import { RecordTooLarge } from "../bus/run-records.js";
import { tooLargeError } from "../retry-after.js";

export interface ServeOptions {
  name: string;
  host: string;
  port: number;
  logger: Logger;
  routes: (router: ConnectRouter) => void;
  /** Service names registered by `routes`, answered by the health service. */
  serviceNames: string[];
  isReady: () => Promise<boolean>;
  /** Told when a call fails because the database is unavailable (services with a database). */
  databaseFaults?: DatabaseFaults;
  /** When set, every call but health checks must carry it (see internal-auth.ts). */
  internalToken?: string;
  /** The largest request message read (READ_MAX_BYTES by default). */
  readMaxBytes?: number;
}

/**
 * The largest request message a service reads, on either server path: beyond it the call is
 * RESOURCE_EXHAUSTED, unread. Internal requests carry what the gateway took in (its bodies are at
 * most PIES_MAX_BODY_BYTES, 1 MiB by default), as JSON bytes: about its own size. A release before
 * decision 0059 sent it as google.protobuf.Struct, where a JSON array of small numbers grows up to
 * 5.5 times, and PIES_WRITE_LEGACY_PAYLOADS still writes that form beside the bytes;
 * PIES_MAX_BODY_BYTES is bounded by a sixth of this (gateway/src/config.ts), so the largest body
 * allowed fits either way but for that setting's 6.5 times (docs/operations.md, "Upgrading").
 * connect-node's own default was 4 GiB, i.e. none.
 */
export const READ_MAX_BYTES = 32 * 1024 * 1024;

export interface RunningServer {
  port: number;
  url: string;
  /** Stops accepting, lets in-flight calls finish (up to `graceMs`), then closes. */
  close(graceMs?: number): Promise<void>;
}

/**
 * Keeps unexpected errors out of responses: a handler's ConnectError passes through; a database
 * that is down or restarting is UNAVAILABLE (logged at warn, noted in `faults`), so that callers
 * answer 503 and may retry; a run record larger than the record log takes (a put anywhere: a
 * start, a create, the sweeper's) is the request's size, answered as tooLargeError (413, not to
 * be retried); anything else is logged with its stack and answered as INTERNAL with no detail.
 * The one place where errors of PostgreSQL are classified.
 */
export function errorInterceptor(logger: Logger, faults?: DatabaseFaults): Interceptor {
  return (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      if (err instanceof ConnectError && err.code !== Code.Internal && err.code !== Code.Unknown) {
        throw err;
      }
      if (err instanceof RecordTooLarge) {
        logger.warn(
          { runId: err.runId, bytes: err.bytes, procedure: req.url },
          "run too large to record",
        );
        throw tooLargeError(
          `the run is too large to record: its record would be ${err.bytes} bytes, over the ` +
            `limit of ${err.limit} bytes (the record log's message size); send less data`,
        );
      }
      if (isDatabaseUnavailable(err)) {
        faults?.note();
        logger.warn({ err, procedure: req.url }, "database unavailable");
        throw databaseUnavailable(err);
      }
      if (err instanceof ConnectError) {
        logger.error({ err, procedure: req.url }, "internal error");
        throw err;
      }
      logger.error({ err, procedure: req.url }, "unhandled error");
      throw new ConnectError("internal error", Code.Internal);
    }
  };
}

/**
 * Calls `routes` once, keeping what it registers, and returns a `routes` that registers the same
 * implementations again on any router.
 */
export function replayableRoutes(
  routes: (router: ConnectRouter) => void,
): (router: ConnectRouter) => void {
  const calls: ((router: ConnectRouter) => void)[] = [];
  const recorder: ConnectRouter = {
    handlers: [],
    service(service, implementation, options) {
      calls.push((router) => router.service(service, implementation, options));
      return recorder;
    },
    rpc(method, impl, options) {
      calls.push((router) => router.rpc(method, impl as never, options));
      return recorder;
    },
  };
  routes(recorder);
  return (router) => {
    for (const call of calls) call(router);
  };
}

/** Serves Connect, gRPC and gRPC-Web on one cleartext HTTP/2 port, with grpc.health.v1. */
export async function serveConnect(options: ServeOptions): Promise<RunningServer> {
  let shuttingDown = false;
  const interceptors = [
    ...(tracingEnabled() ? [serverTracingInterceptor()] : []),
    ...(options.internalToken ? [internalAuthInterceptor(options.internalToken)] : []),
    errorInterceptor(options.logger, options.databaseFaults),
    payloadsInterceptor("server"),
  ];
  // The services are made once and served by both paths below (a `routes` function may build its
  // service, and its state, anew at each call).
  const routes = replayableRoutes((router) => {
    options.routes(router);
    router.service(
      Health,
      createHealthService(options.isReady, options.serviceNames, () => shuttingDown),
    );
  });
  const readMaxBytes = options.readMaxBytes ?? READ_MAX_BYTES;
  const connect = connectNodeAdapter({
    interceptors,
    readMaxBytes,
    // Answers are never compressed, whatever a client accepts (grpc-js asks for gzip): callers are
    // internal, and gzip cost more CPU per call than the call itself
    // (docs/decisions/0007-internal-calls-uncompressed.md). Compressed requests are still accepted.
    compressMinBytes: Number.MAX_SAFE_INTEGER,
    routes,
  });
  // pies' own calls (Connect unary, from unary-client.ts) on the lean path, the rest (gRPC,
  // gRPC-Web, streaming, GET, compressed) through connect-node.
  const unary = unaryHandler(routes, interceptors, {
    readMaxBytes,
  });
  const server = http2.createServer((req, res) => {
    if (!unary(req, res)) connect(req, res);
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.on("close", () => sessions.delete(session));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = options.host === "0.0.0.0" || options.host === "::" ? "127.0.0.1" : options.host;
  options.logger.info({ port }, `${options.name} listening`);
  return {
    port,
    url: `http://${host}:${port}`,
    async close(graceMs = 10_000) {
      shuttingDown = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // GOAWAY: clients open no new streams here, the streams in flight complete.
      for (const session of sessions) session.close();
      const timer = setTimeout(() => {
        for (const session of sessions) session.destroy();
      }, graceMs);
      await closed;
      clearTimeout(timer);
    },
  };
}
