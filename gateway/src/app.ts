import { randomUUID } from "node:crypto";
import { createRequire } from "node:module";
import type { IncomingMessage } from "node:http";
import cors from "@fastify/cors";
import rateLimit from "@fastify/rate-limit";
import Fastify, { type FastifyInstance, type FastifyRequest } from "fastify";
import { Authenticator, credentialHash } from "./auth.js";
import { createClientErrorHandler } from "./client-errors.js";
import { consoleDistDir, consoleFallback, isConsolePath, loadConsole } from "./console.js";
import { trackInFlight } from "./drain.js";
import type { GatewayDeps } from "./deps.js";
import { HttpError, sendError, toHttpError, tooManyRequests } from "./errors.js";
import { GatewayMetrics } from "./metrics.js";
import { startProbeServer, type ProbeServer } from "./probe-server.js";
import { Readiness } from "./readiness.js";
import { installRequestTracing } from "./tracing.js";
import { healthResponse, openApiResponse } from "./json/responses.js";
import { installOpenApi, serializerCompiler, validatorCompiler } from "./openapi.js";
import { installAuthentication } from "./routes/context.js";
import { jsonBodyParser } from "./json-body.js";
import { nulInParams } from "./request-params.js";
import { environmentRoutes } from "./routes/environments.js";
import { interactionRoutes } from "./routes/interactions.js";
import { tenancyRoutes } from "./routes/tenancy.js";
import { promptRoutes } from "./routes/prompts.js";
import { runDeletionRoutes, runRoutes } from "./routes/runs.js";
import { streamRoutes } from "./routes/stream.js";
import { tokenRoutes } from "./routes/tokens.js";
import { testDataRoutes } from "./routes/test-data.js";
import { experimentRoutes } from "./routes/experiments.js";
import { StreamSlots } from "./sse/stream-slots.js";
import { RUN_ID_HEADER } from "./sse/run-streams.js";

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
    // x-request-id: the caller's when it is a sane token, else a new one; echoed on the response
    // and on every log line about the request.
    requestIdHeader: false,
    genReqId: requestIdOf,
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
  app.addHook("onRequest", (request, reply, done) => {
    reply.header("x-request-id", request.id);
    done(nulInParams(request));
  });
  const auth = new Authenticator(deps);
  app.addHook("onClose", async () => auth.close());
  const readiness = new Readiness(deps.isReady);
  app.addHook("onClose", async () => readiness.stop());
  const { probe } = deps.options;
  if (probe) {
    // Before the API's port opens; a probe port that cannot be had fails the start.
    let probes: ProbeServer | undefined;
    app.addHook("onReady", async () => {
      probes = await startProbeServer({
        ...probe,
        readiness,
        onError: (err) => deps.logger.error({ err }, "the probe thread failed"),
      });
    });
    app.addHook("onClose", async () => probes?.close());
  }
  installRequestTracing(app);
  const metrics = new GatewayMetrics(deps.bus);
  deps.metrics?.(metrics.registry);
  metrics.install(app);
  const ctx = { deps, auth, metrics, streamSlots: new StreamSlots(deps.options.maxStreamsPerKey) };
  if (deps.options.corsOrigins.length > 0) {
    const origins = deps.options.corsOrigins;
    void app.register(cors, {
      origin: origins.includes("*") ? "*" : origins,
      exposedHeaders: ["x-request-id", "retry-after", RUN_ID_HEADER],
      maxAge: 600,
    });
  }
  if (deps.options.rateLimitPerMinute > 0) {
    const max = deps.options.rateLimitPerMinute;
    void app.register(rateLimit, {
      global: true,
      max,
      timeWindow: 60_000,
      // Per key: by the credential's hash (never the key in clear); requests without one by address.
      keyGenerator: rateKey,
      allowList: (request) => UNLIMITED.has(request.routeOptions.url ?? ""),
      errorResponseBuilder: (_request, context) =>
        tooManyRequests(
          `more than ${max} requests in a minute with this credential`,
          Math.ceil(context.ttl / 1000),
        ),
    });
  }
  trackInFlight(app);

  app.setErrorHandler((err, request, reply) => {
    const error = toHttpError(err);
    if (error.status >= 500 && !(err instanceof HttpError)) {
      deps.logger.error({ err, reqId: request.id }, "request failed");
    }
    return sendError(reply, error);
  });
  const consoleDir =
    deps.options.consoleDir === undefined ? consoleDistDir() : deps.options.consoleDir || undefined;
  const consoleFiles = consoleDir ? loadConsole(consoleDir) : undefined;
  // The web console (DESIGN.md §12, docs/console.md), when it was built: what is not the API's.
  app.setNotFoundHandler((request, reply) => {
    if (consoleFiles && isConsolePath(request, consoleFiles)) {
      return consoleFallback(request, reply, consoleFiles);
    }
    return sendError(
      reply,
      new HttpError(404, "not_found", `no route ${request.method} ${request.url.split("?")[0]}`),
    );
  });

  // Routes declare their params, query, body and responses as zod schemas (fastify-type-provider-
  // zod types the handlers): Fastify validates requests with them and the OpenAPI document is
  // made of them (openapi.ts).
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  installOpenApi(app, version);

  void app.register(async (root) => {
    const probe = { 200: healthResponse, 503: healthResponse };
    root.get(
      "/healthz",
      { schema: { summary: "Liveness", tags: ["operations"], response: probe } },
      async () => ({ status: "ok" }),
    );
    root.get(
      "/readyz",
      {
        schema: {
          summary: "Readiness: the services answer",
          tags: ["operations"],
          response: probe,
        },
      },
      async (_request, reply) => {
        const ready = await readiness.ready();
        return reply.status(ready ? 200 : 503).send({ status: ready ? "ready" : "not ready" });
      },
    );
    metrics.serve(root);
    tokenRoutes(root, ctx);
  });
  let openApiText: string | undefined;
  void app.register(
    async (api) => {
      installAuthentication(api, ctx);
      api.get(
        "/openapi.json",
        {
          config: { auth: "public" },
          schema: {
            summary: "This document (OpenAPI 3.1)",
            tags: ["operations"],
            response: { 200: openApiResponse },
          },
        },
        // Serialized once (some 70 KB, asked for without a key): the routes do not change.
        async (_request, reply) =>
          reply.type("application/json").send((openApiText ??= JSON.stringify(app.swagger()))),
      );
      tokenRoutes(api, ctx);
      interactionRoutes(api, ctx);
      promptRoutes(api, ctx);
      environmentRoutes(api, ctx);
      tenancyRoutes(api, ctx);
      runRoutes(api, ctx);
      runDeletionRoutes(api, ctx);
      streamRoutes(api, ctx);
      testDataRoutes(api, ctx);
      experimentRoutes(api, ctx);
    },
    { prefix: "/api/v1" },
  );
  return app;
}

const { version } = createRequire(import.meta.url)("../package.json") as { version: string };

/** Probes and metrics are never rate limited. */
const UNLIMITED = new Set(["/healthz", "/readyz", "/metrics"]);

const REQUEST_ID = /^[\w.:@/+=-]{1,128}$/;

function requestIdOf(request: IncomingMessage): string {
  const given = request.headers["x-request-id"];
  return typeof given === "string" && REQUEST_ID.test(given) ? given : randomUUID();
}

function rateKey(request: FastifyRequest): string {
  const header = request.headers.authorization;
  const query = (request.query as Record<string, unknown> | undefined)?.access_token;
  // The token as the key look-up reads it, so that both use one hash of it.
  const token = header ? (/^Bearer\s+(\S+)$/i.exec(header)?.[1] ?? header) : query;
  return typeof token === "string" && token ? credentialHash(request, token) : `ip:${request.ip}`;
}
