import type { FastifyReply, FastifyRequest } from "fastify";
import type { FastifyInstance } from "fastify";
import type { ExecuteRequest } from "@pies/proto/executor";
import { RunStatus, type Run } from "@pies/proto/runs";
import type { Principal } from "@pies/proto/catalog";
import { badRequest, HttpError } from "../errors.js";
import {
  executeBody as executeBodySchema,
  executeRequest,
  listRunsQuery as listRunsQuerySchema,
  runFilters,
  runJson,
  searchRunsBody as searchRunsBodySchema,
  searchRunsJson,
  searchRunsRequest,
  type ExecuteBody,
} from "../json/runs.js";
import { answered } from "@pies/common";
import { authed, callerGone, callerOf, routeId, type RouteContext } from "./context.js";

/** Executions (blocking or streamed), and reading runs back. */
export function runRoutes(app: FastifyInstance, ctx: RouteContext) {
  const { executor, runs } = ctx.deps;
  const executeBody = executeBodySchema(ctx.deps.options);
  const listRunsQuery = listRunsQuerySchema(ctx.deps.options);
  const searchRunsBody = searchRunsBodySchema(ctx.deps.options);

  const execute = async (
    request: FastifyRequest,
    principal: Principal,
    body: ExecuteBody,
    interaction: ExecuteRequest["interaction"],
    reply: FastifyReply,
  ) => {
    const { run } = await executor.execute(
      executeRequest(body, interaction, callerOf(request, principal)),
      // A blocking caller that goes away cancels the provider call; a streamed execution only
      // creates its run here.
      body.stream ? undefined : { signal: callerGone(reply) },
    );
    const ran = answered(run, "run");
    // A streamed run is counted when its stream relays its end, not at its creation.
    if (ran.status !== RunStatus.CREATED) ctx.metrics.execution(ran);
    return failedAsError(ran, reply);
  };

  app.post(
    "/interactions/:id/execute",
    authed(ctx, async (request, principal, reply) => {
      const body = executeBody.parse(request.body ?? {});
      return execute(
        request,
        principal,
        body,
        { case: "interactionId", value: routeId(request) },
        reply,
      );
    }),
  );

  app.post(
    "/runs",
    authed(ctx, async (request, principal, reply) => {
      const body = executeBody.parse(request.body ?? {});
      const id = body.interaction ?? body.interactionId;
      if (!id) throw badRequest("interaction: the id of the interaction to execute is required");
      return execute(request, principal, body, { case: "interactionId", value: id }, reply);
    }),
  );

  app.post(
    "/execute",
    authed(ctx, async (request, principal, reply) => {
      const body = executeBody.parse(request.body ?? {});
      const name = body.interaction ?? body.interactionId;
      if (!name)
        throw badRequest(
          "interaction: `Name`, `Name@3`, `Name@latest` or `Name@draft` is required",
        );
      return execute(request, principal, body, { case: "interactionName", value: name }, reply);
    }),
  );

  app.get(
    "/runs",
    authed(ctx, async (request, principal) => {
      const q = listRunsQuery.parse(request.query ?? {});
      const result = await runs.listRuns({
        projectId: principal.projectId,
        limit: q.limit,
        offset: q.offset,
        filters: runFilters(q),
      });
      return result.runs.map(runJson);
    }),
  );

  app.get(
    "/runs/:id",
    authed(ctx, async (request, principal) => {
      const { run } = await runs.getRun({
        projectId: principal.projectId,
        id: routeId(request),
      });
      return runJson(answered(run, "run"));
    }),
  );

  app.post(
    "/runs/search",
    authed(ctx, async (request, principal) => {
      const body = searchRunsBody.parse(request.body ?? {});
      const result = await runs.searchRuns(searchRunsRequest(body, principal.projectId));
      return searchRunsJson(body, result);
    }),
  );
}

/**
 * A blocking execution that failed is still recorded; it answers 502 (504 when the provider timed
 * out) with the run's id and the run itself in `details`.
 */
export function failedAsError(run: Run, reply: FastifyReply) {
  if (run.status !== RunStatus.FAILED) return reply.send(runJson(run));
  const timeout = run.error?.code === "timeout";
  throw new HttpError(
    timeout ? 504 : 502,
    run.error?.code || "provider_error",
    run.error?.message || "the execution failed",
    { run_id: run.id, run: runJson(run) },
  );
}
