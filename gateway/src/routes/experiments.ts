import { setTimeout as sleep } from "node:timers/promises";
import type { FastifyInstance } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { answered, jsonBytes } from "@pies/common";
import type { ExecuteRequest } from "@pies/proto/executor";
import { badRequest } from "../errors.js";
import {
  createExperimentBody as createExperimentBodySchema,
  experimentQuery,
  experimentResponse,
  listExperimentsQuery,
  scoresAsNumber,
  type CreateExperimentBody,
} from "../json/experiments.js";
import { errorResponse, idParams } from "../json/responses.js";
import { executeRequest, searchRunsRequest } from "../json/runs.js";
import { EventStream } from "../sse/event-stream.js";
import { callerOf, principalOf, sendJson, type RouteContext } from "./context.js";

/** How often an experiment's stream reads its progress again. */
const PROGRESS_INTERVAL_MS = 1_000;

const EVENTS =
  "Server-Sent Events: `progress` (the experiment, as GET /experiments/{id} without its pairs), " +
  "each time it changes, then `end` (the same, once it has ended), and `error` (an error body) " +
  "when the stream cannot go on.";

/**
 * Experiments (DESIGN.md §13): replays of the runs a search selects against a draft, a version or
 * another model, compared pair by pair. The runs service selects, keeps and replays them
 * (services/runs/src/experiments); these routes check the request and pass its answers on as the
 * runs service rendered them.
 */
export function experimentRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const { catalog, experiments, logger, options } = ctx.deps;
  const createBody = createExperimentBodySchema(options);
  const errors = { default: errorResponse };

  app.post(
    "/experiments",
    {
      schema: {
        summary: "Replay the runs a search selects against a target, and compare",
        body: createBody,
        response: { 201: experimentResponse, ...errors },
      },
    },
    async (request, reply) => {
      const principal = principalOf(request);
      const body = request.body;
      const caller = callerOf(request, principal);
      const target = await pinned(body.target.interaction, body.target.config);
      let judge: ExecuteRequest["interaction"] | undefined;
      if (body.judge) {
        const resolved = await ctx.deps.catalog.resolveInteraction({
          projectId: principal.projectId,
          ref: body.judge,
        });
        const interaction = answered(resolved.interaction, "interaction");
        if (!scoresAsNumber(interaction.resultSchemaJson)) {
          throw badRequest("judge: its result schema must give `score` the type number");
        }
        judge = { case: "interactionId", value: interaction.id };
      }
      const { experiment } = await experiments.createExperiment({
        projectId: principal.projectId,
        name: body.name,
        source: searchRunsRequest(body.source, principal.projectId),
        target: executeRequest({ config: body.target.config }, target, caller),
        judge: judge && executeRequest({}, judge, caller),
        concurrency: body.concurrency ?? 0,
        sourceJson: jsonBytes(body.source),
        targetJson: jsonBytes(body.target),
      });
      reply.code(201);
      return sendJson(reply, answered(experiment, "experiment").json);

      /**
       * The target as the catalog resolves it now, by id: a `Name@latest` replays the version that
       * was the latest at the start throughout (an unknown one, or an environment it cannot use,
       * is the caller's 404 or 400 here rather than a failure of every pair).
       */
      async function pinned(
        ref: string,
        config: CreateExperimentBody["target"]["config"],
      ): Promise<ExecuteRequest["interaction"]> {
        const resolved = await catalog.resolveInteraction({
          projectId: principal.projectId,
          ref,
          environmentId: config?.environment ?? "",
          model: config?.model ?? "",
        });
        return { case: "interactionId", value: answered(resolved.interaction, "interaction").id };
      }
    },
  );

  app.get(
    "/experiments",
    {
      schema: {
        summary: "List the project's experiments, newest first (without their pairs)",
        querystring: listExperimentsQuery,
        response: { 200: z.array(experimentResponse.omit({ pairs: true })), ...errors },
      },
    },
    async (request, reply) => {
      const { experimentsJson } = await experiments.listExperiments({
        projectId: principalOf(request).projectId,
        limit: request.query.limit,
        offset: request.query.offset,
      });
      return sendJson(reply, experimentsJson);
    },
  );

  app.get(
    "/experiments/:id",
    {
      schema: {
        summary: "An experiment: its progress, comparison and a page of its pairs",
        params: idParams,
        querystring: experimentQuery,
        response: { 200: experimentResponse, ...errors },
      },
    },
    async (request, reply) => {
      const q = request.query;
      const { experiment } = await experiments.getExperiment({
        projectId: principalOf(request).projectId,
        id: request.params.id,
        pairsLimit: q.pairs_limit,
        pairsOffset: q.pairs_offset,
        pairsChanged: q.changed === "true",
      });
      return sendJson(reply, answered(experiment, "experiment").json);
    },
  );

  app.post(
    "/experiments/:id/cancel",
    {
      schema: {
        summary: "Stop starting runs; those in flight end and are compared",
        params: idParams,
        // No fields. Declared so that a body which is not an object is a 400, as on every route.
        body: z.object({}).passthrough(),
        response: { 200: experimentResponse, ...errors },
      },
    },
    async (request, reply) => {
      const { experiment } = await experiments.cancelExperiment({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return sendJson(reply, answered(experiment, "experiment").json);
    },
  );

  app.get(
    "/experiments/:id/stream",
    {
      config: { auth: "stream" },
      exposeHeadRoute: false,
      schema: {
        summary: "Stream an experiment's progress (Server-Sent Events)",
        params: idParams,
        querystring: z
          .object({ access_token: z.string().optional().describe("As on /runs/{id}/stream") })
          .passthrough(),
        response: {
          200: { description: EVENTS, content: { "text/event-stream": { schema: z.string() } } },
          default: errorResponse,
        },
      },
    },
    async (request, reply) => {
      const principal = principalOf(request);
      const read = () =>
        experiments
          .getExperiment({ projectId: principal.projectId, id: request.params.id, pairsLimit: 0 })
          .then(({ experiment }) => answered(experiment, "experiment"));
      // An unknown experiment is a plain 404, before the stream opens.
      let current = await read();
      const release = ctx.streamSlots.take(principal.apiKeyId);
      let stream: EventStream;
      try {
        reply.hijack();
        stream = new EventStream(reply.raw, logger, reply.getHeaders());
      } catch (err) {
        // The slot goes back if the stream never opened (it is given back once: release).
        release();
        throw err;
      }
      // Counted with the runs' streams (pies_sse_streams_active), given back as it ends.
      ctx.metrics.streams.inc();
      stream.signal.addEventListener(
        "abort",
        () => {
          release();
          ctx.metrics.streams.dec();
        },
        { once: true },
      );
      let last = "";
      const heartbeatMs = options.sseHeartbeatSeconds * 1000;
      let quietSince = Date.now();
      try {
        while (stream.open) {
          const text = Buffer.from(current.json).toString("utf8");
          if (current.ended) return stream.last("end", text);
          if (text !== last) {
            stream.event("progress", text);
            last = text;
            quietSince = Date.now();
          } else if (Date.now() - quietSince >= heartbeatMs) {
            stream.comment("keep-alive");
            quietSince = Date.now();
          }
          await sleep(PROGRESS_INTERVAL_MS, undefined, { signal: stream.signal }).catch(() => {});
          if (!stream.open) return;
          current = await read();
        }
      } catch (err) {
        logger.debug({ err }, "an experiment's stream could not go on");
        stream.last(
          "error",
          JSON.stringify({
            error: "Service Unavailable",
            status: 503,
            code: "unavailable",
            message: "the experiment's progress could not be read; reconnect",
          }),
        );
      } finally {
        stream.end();
      }
    },
  );
}
