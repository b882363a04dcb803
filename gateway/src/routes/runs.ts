import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import type { ExecuteRequest } from "@pies/proto/executor";
import { RunStatus, type Run } from "@pies/proto/runs";
import { badRequest, HttpError } from "../errors.js";
import {
  answeredRun,
  executeBody as executeBodySchema,
  executeRequest,
  type AnsweredRun,
  listRunsQuery as listRunsQuerySchema,
  runFilters,
  runJson,
  searchRunsBody as searchRunsBodySchema,
  searchRunsBodyBytes,
  searchRunsRequest,
  type ExecuteBody,
  facetsSearch,
  filterOptionFacet,
  filterOptionsJson,
  runFacetsBody as runFacetsBodySchema,
  runFacetsJson,
} from "../json/runs.js";
import { answered, newId } from "@pies/common";
import {
  errorResponse,
  filterOptionsResponse,
  idParams,
  noContent,
  runFacetsResponse,
  runResponse,
  searchRunsResponse,
} from "../json/responses.js";
import { RunStreams } from "../sse/run-streams.js";
import { callerGone, callerOf, principalOf, sendJson, type RouteContext } from "./context.js";

const ONE_REQUEST_EVENTS =
  "first `run` (the run as started, without an `id:`; its id is also in the `pies-run-id` " +
  "header), then the events of GET /runs/{id}/stream, which resumes it with Last-Event-ID.";

/** Whether the caller asked for the run's event stream (one-request streaming). */
function wantsEventStream(request: FastifyRequest): boolean {
  return request.headers.accept?.includes("text/event-stream") ?? false;
}

/** Executions (blocking or streamed), and reading runs back. */
export function runRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const { executor, runs } = ctx.deps;
  const executeBody = executeBodySchema(ctx.deps.options);
  const listRunsQuery = listRunsQuerySchema(ctx.deps.options);
  const searchRunsBody = searchRunsBodySchema(ctx.deps.options);
  const runFacetsBody = runFacetsBodySchema(ctx.deps.options);
  const errors = { default: errorResponse };
  const streams = new RunStreams(ctx.deps, ctx.metrics, ctx.streamSlots);
  const executed = {
    200: {
      description:
        "The run: ended (blocking), or created (stream: true; read it at /runs/{id}/stream). " +
        "With stream: true and `Accept: text/event-stream`, the run's event stream itself: " +
        ONE_REQUEST_EVENTS,
      content: {
        "application/json": { schema: runResponse },
        "text/event-stream": { schema: z.string() },
      },
    },
    502: errorResponse.describe("The provider failed; the run is recorded, `details.run_id`"),
    504: errorResponse.describe("The provider timed out; the run is recorded, `details.run_id`"),
    413: errorResponse.describe(
      "The body is too large, or the run it makes is too large to record (nothing is done)",
    ),
    ...errors,
  };

  const execute = async (
    request: FastifyRequest,
    body: ExecuteBody,
    interaction: ExecuteRequest["interaction"],
    reply: FastifyReply,
  ) => {
    const principal = principalOf(request);
    const caller = callerOf(request, principal);
    if (body.stream && wantsEventStream(request)) {
      // One request: the run is made started, under an id made here, and streamed in this
      // response, its live subscription set up while the executor starts it.
      const runId = newId();
      const start = () =>
        executor
          .execute({ ...executeRequest(body, interaction, caller), start: true, runId })
          .then(({ run }) => answered(run, "run"));
      return streams.open(principal, { runId, start }, reply);
    }
    // A blocking caller that goes away cancels the provider call; a streamed execution only
    // creates its run here.
    const signal = body.stream ? undefined : callerGone(reply);
    const { run } = await executor.execute(
      executeRequest(body, interaction, caller),
      signal && { signal },
    );
    const ran = answeredRun(answered(run, "run"));
    // A streamed run is counted when its stream relays its end, not at its creation.
    if (ran.status !== RunStatus.CREATED) ctx.metrics.execution(ran);
    return sendAnswered(ran, reply);
  };

  app.post(
    "/interactions/:id/execute",
    {
      schema: {
        summary: "Execute an interaction",
        params: idParams,
        body: executeBody,
        response: executed,
      },
    },
    (request, reply) =>
      execute(request, request.body, { case: "interactionId", value: request.params.id }, reply),
  );

  app.post(
    "/runs",
    {
      schema: {
        summary: "Execute the interaction `interaction` (its id)",
        body: executeBody,
        response: executed,
      },
    },
    (request, reply) => {
      const id = request.body.interaction ?? request.body.interactionId;
      if (!id) throw badRequest("interaction: the id of the interaction to execute is required");
      return execute(request, request.body, { case: "interactionId", value: id }, reply);
    },
  );

  app.post(
    "/execute",
    {
      schema: {
        summary: "Execute an interaction by name: `Name`, `Name@3`, `Name@latest`, `Name@draft`",
        body: executeBody,
        response: executed,
      },
    },
    (request, reply) => {
      const name = request.body.interaction ?? request.body.interactionId;
      if (!name)
        throw badRequest(
          "interaction: `Name`, `Name@3`, `Name@latest` or `Name@draft` is required",
        );
      return execute(request, request.body, { case: "interactionName", value: name }, reply);
    },
  );

  app.get(
    "/runs",
    {
      schema: {
        summary: "List runs, newest first",
        querystring: listRunsQuery,
        response: { 200: z.array(runResponse), ...errors },
      },
    },
    async (request, reply) => {
      const q = request.query;
      // The runs service renders the page in the REST shape (runs_json); it is sent as it is,
      // neither parsed nor serialized here: decoding a page of 100 runs into messages and writing
      // it again was most of the gateway's CPU for a list (bench/runs-passthrough-ab.mjs; figures
      // in docs/decisions/0020-runs-pages-passed-through.md).
      const result = await runs.listRuns({
        projectId: principalOf(request).projectId,
        limit: q.limit,
        offset: q.offset,
        filters: runFilters(q),
        asJson: true,
      });
      return sendJson(reply, pageJson(result));
    },
  );

  app.get(
    "/runs/:id",
    {
      schema: { summary: "Get a run", params: idParams, response: { 200: runResponse, ...errors } },
    },
    async (request) => {
      const { run } = await runs.getRun({
        projectId: principalOf(request).projectId,
        id: request.params.id,
      });
      return runJson(answered(run, "run"));
    },
  );

  app.post(
    "/runs/facets",
    {
      schema: {
        summary: "Count runs by field (interaction, environment, modelId, status, tags)",
        body: runFacetsBody,
        response: { 200: runFacetsResponse, ...errors },
      },
    },
    async (request) => {
      const body = request.body;
      const { meta } = await runs.searchRuns(
        searchRunsRequest(facetsSearch(body), principalOf(request).projectId),
      );
      return runFacetsJson(
        meta,
        body.facets.map((f) => f.name),
      );
    },
  );

  app.get(
    "/runs/filter-options/:field",
    {
      schema: {
        summary:
          "The values a field (interaction, environment, model, status, tag) takes over the runs GET /runs' filters select",
        params: z.object({ field: z.string().min(1).max(100) }),
        querystring: listRunsQuery,
        response: { 200: filterOptionsResponse, ...errors },
      },
    },
    async (request) => {
      const { meta } = await runs.searchRuns({
        projectId: principalOf(request).projectId,
        onlyMeta: true,
        filters: runFilters(request.query),
        facets: { options: filterOptionFacet(request.params.field) },
      });
      return filterOptionsJson(meta, "options");
    },
  );

  app.post(
    "/runs/search",
    {
      schema: {
        summary: "Search runs (Lucene query over the input data, filters, facets)",
        body: searchRunsBody,
        response: { 200: searchRunsResponse, ...errors },
      },
    },
    async (request, reply) => {
      const body = request.body;
      const result = await runs.searchRuns({
        ...searchRunsRequest(body, principalOf(request).projectId),
        asJson: true,
      });
      // The page as the runs service rendered it, as for GET /runs.
      return sendJson(reply, searchRunsBodyBytes(body, { ...result, runsJson: pageJson(result) }));
    },
  );
}

/**
 * Deleting runs (admin keys; DESIGN.md §8): one by id, or every stored run a search's query and
 * filters match. A deleted run never comes back; its children keep their `parent`, which answers
 * 404 from then on.
 */
export function runDeletionRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const { runs } = ctx.deps;
  const searchRunsBody = searchRunsBodySchema(ctx.deps.options);
  const admin = { auth: "admin" } as const;
  const errors = { default: errorResponse };

  app.delete(
    "/runs/:id",
    {
      config: admin,
      schema: {
        summary: "Delete a run (admin key); it never comes back",
        params: idParams,
        response: { 204: noContent, ...errors },
      },
    },
    async (request, reply) => {
      await runs.deleteRun({ projectId: principalOf(request).projectId, id: request.params.id });
      return reply.status(204).send();
    },
  );

  app.post(
    "/runs/delete",
    {
      config: admin,
      schema: {
        summary:
          "Delete every stored run a search's query and filters match (admin key; no facets, limit or offset)",
        body: searchRunsBody,
        response: { 200: z.object({ deleted: z.number().int() }), ...errors },
      },
    },
    async (request) => {
      const body = request.body;
      for (const key of ["facets", "limit", "offset", "onlyMeta", "exactTotal"] as const) {
        if (body[key] !== undefined) {
          throw badRequest(`${key}: a deletion takes a search's query and filters only`);
        }
      }
      const search = searchRunsRequest(body, principalOf(request).projectId);
      const { deleted } = await runs.deleteRuns({
        projectId: search.projectId,
        query: search.query,
        defaultQueryPath: search.defaultQueryPath,
        filters: search.filters,
      });
      return { deleted: Number(deleted) };
    },
  );
}

/**
 * The page as the runs service rendered it; rendered here from its runs when it answered none (a
 * runs service older than as_json, during a rolling upgrade: it ignores the field and answers
 * runs; a page it renders is never empty, `[]` at least).
 */
const pageJson = (answer: { runs: Run[]; runsJson: Uint8Array }) =>
  answer.runsJson.length > 0
    ? answer.runsJson
    : Buffer.from(JSON.stringify(answer.runs.map(runJson)));

/**
 * A blocking execution that failed is still recorded; it answers 502 (504 when the provider timed
 * out) with the run's id and the run itself in `details`.
 */
export const failedAsError = (run: Run, reply: FastifyReply) =>
  sendAnswered(answeredRun(run), reply);

function sendAnswered(run: AnsweredRun, reply: FastifyReply) {
  if (run.status !== RunStatus.FAILED) return reply.send(run.json());
  const timeout = run.error?.code === "timeout";
  throw new HttpError(
    timeout ? 504 : 502,
    run.error?.code || "provider_error",
    run.error?.message || "the execution failed",
    { run_id: run.id, run: run.json() },
  );
}
