import Fastify, { type FastifyInstance } from "fastify";
import { Authenticator } from "./auth.js";
import { createClientErrorHandler } from "./client-errors.js";
import { trackInFlight } from "./drain.js";
import type { GatewayDeps } from "./deps.js";
import { HttpError, sendError, toHttpError } from "./errors.js";
import { jsonBodyParser } from "./json-body.js";
import { nulInParams } from "./request-params.js";
import { catalogRoutes } from "./routes/catalog.js";
import { runRoutes } from "./routes/runs.js";
import { streamRoutes } from "./routes/stream.js";
import { testDataRoutes } from "./routes/test-data.js";

/** The public HTTP surface: REST and SSE under /api/v1, probes at the root. No business logic. */
export function createGateway(deps: GatewayDeps): FastifyInstance {
  const app = Fastify({
    logger: false,
    bodyLimit: deps.options.maxBodyBytes,
    trustProxy: deps.options.trustProxy,
    // Slow clients (slowloris) are cut with 408: these bound receiving the request, headers and
    // body; Node stops the clock once the request is complete, so an SSE response that lasts as
    // long as its run is not cut by them (gateway/test/http-edges.test.ts shows both).
    requestTimeout: deps.options.requestTimeoutMs,
    http: {
      headersTimeout: deps.options.headersTimeoutMs,
      // Node looks for expired requests this often (30 s by default, which would let a timeout
      // run up to 30 s late).
      connectionsCheckingInterval: Math.min(1000, deps.options.headersTimeoutMs),
    },
    clientErrorHandler: createClientErrorHandler(deps.logger),
    return503OnClosing: true,
    // Errors Fastify meets before a route runs (an over-long path parameter, say) get the same
    // JSON body as the rest. The hook returns nothing: the reply is sent, and a reply is thenable
    // only for `await reply`, so there is nothing to wait for.
    frameworkErrors: (err, _request, reply) => {
      void sendError(reply, toHttpError(err));
    },
  });
  // JSON only: text/plain and the rest are 415.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(
    "application/json",
    { parseAs: "string" },
    jsonBodyParser(deps.options.maxJsonDepth),
  );
  app.addHook("onRequest", (request, _reply, done) => done(nulInParams(request)));
  const auth = new Authenticator(deps);
  app.addHook("onClose", async () => auth.close());
  const ctx = { deps, auth };
  trackInFlight(app);

  app.setErrorHandler((err, _request, reply) => {
    const error = toHttpError(err);
    if (error.status >= 500 && !(err instanceof HttpError)) {
      deps.logger.error({ err }, "request failed");
    }
    return sendError(reply, error);
  });
  app.setNotFoundHandler((request, reply) =>
    sendError(
      reply,
      new HttpError(404, "not_found", `no route ${request.method} ${request.url.split("?")[0]}`),
    ),
  );

  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async (_request, reply) => {
    const ready = await deps.isReady();
    return reply.status(ready ? 200 : 503).send({ status: ready ? "ready" : "not ready" });
  });

  app.register(
    async (api) => {
      catalogRoutes(api, ctx);
      runRoutes(api, ctx);
      streamRoutes(api, ctx);
      testDataRoutes(api, ctx);
    },
    { prefix: "/api/v1" },
  );
  return app;
}
