import Fastify, { type FastifyInstance } from "fastify";
import { Authenticator } from "./auth.js";
import { trackInFlight } from "./drain.js";
import type { GatewayDeps } from "./deps.js";
import { HttpError, sendError, toHttpError } from "./errors.js";
import { jsonBodyParser } from "./json-body.js";
import { nulInParams } from "./request-params.js";
import { catalogRoutes } from "./routes/catalog.js";
import { runRoutes } from "./routes/runs.js";
import { streamRoutes } from "./routes/stream.js";

/** The public HTTP surface: REST and SSE under /api/v1, probes at the root. No business logic. */
export function createGateway(deps: GatewayDeps): FastifyInstance {
  const app = Fastify({
    logger: false,
    bodyLimit: deps.options.maxBodyBytes,
    trustProxy: deps.options.trustProxy,
    // Streams stay open as long as a run executes; the server must not cut them.
    requestTimeout: 0,
    return503OnClosing: true,
    // Errors Fastify meets before a route runs (an over-long path parameter, say) get the same
    // JSON body as the rest.
    frameworkErrors: (err, _request, reply) => sendError(reply, toHttpError(err)),
  });
  // JSON only: text/plain and the rest are 415.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(
    "application/json",
    { parseAs: "string" },
    jsonBodyParser(deps.options.maxJsonDepth),
  );
  app.addHook("onRequest", async (request) => {
    const nul = nulInParams(request);
    if (nul) throw nul;
  });
  const ctx = { deps, auth: new Authenticator(deps) };
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
    },
    { prefix: "/api/v1" },
  );
  return app;
}
