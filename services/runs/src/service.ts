import { Code, ConnectError, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import { invalid, notFound, pageSize, requireProject } from "@pies/common";
import { RunsService, RunStatus } from "@pies/proto/runs";
import { applyFilters } from "./filters.js";
import { runToProto, runToRow, statusName, updateToColumns } from "./mappers.js";
import type { RunsDatabase } from "./tables.js";

export interface RunsDeps {
  db: Kysely<RunsDatabase>;
}

/** Column values from a message; a JSON field that is not JSON (a Value of no kind) is the caller's error. */
function checked<T>(columns: () => T): T {
  try {
    return columns();
  } catch (err) {
    throw invalid(`run has a field that is not JSON: ${(err as Error).message}`);
  }
}

/**
 * A parent must be a run of the same project: NOT_FOUND naming it otherwise (another project's
 * run is as unknown as a run that never was). One lookup by primary key, only for child runs;
 * runs are never deleted, so the parent cannot vanish between this check and the insert.
 */
async function checkParent(db: Kysely<RunsDatabase>, projectId: string, parentId: string) {
  const parent = await db
    .selectFrom("runs.runs")
    .select("id")
    .where("id", "=", parentId)
    .where("project_id", "=", projectId)
    .executeTakeFirst();
  if (!parent) throw notFound("parent run", parentId);
}

/** Columns of a run reference (list results): all but the prompt and the output schema. */
const listColumns = [
  "id",
  "project_id",
  "account_id",
  "interaction_id",
  "interaction_name",
  "environment_id",
  "environment_name",
  "provider",
  "model_id",
  "status",
  "stream",
  "parameters",
  "result",
  "tags",
  "config",
  "source",
  "prompt_tokens",
  "result_tokens",
  "total_tokens",
  "execution_time",
  "error",
  "ttl",
  "parent_id",
  "cache_policy",
  "cached",
  "created_at",
  "updated_at",
] as const;

/**
 * The runs store's handlers. SearchRuns (Lucene queries, facets) is not built yet and answers
 * UNIMPLEMENTED naming the method.
 */
export function createRunsService({ db }: RunsDeps): Partial<ServiceImpl<typeof RunsService>> {
  return {
    async createRun({ run }) {
      if (!run) throw invalid("run is required");
      if (!run.id || !run.projectId || !run.interactionId) {
        throw invalid("run id, project_id and interaction_id are required");
      }
      if (run.status === RunStatus.UNSPECIFIED) throw invalid("run status is required");
      if (run.parentId) await checkParent(db, run.projectId, run.parentId);
      const row = await db
        .insertInto("runs.runs")
        .values(checked(() => runToRow(run)))
        .returningAll()
        .executeTakeFirstOrThrow()
        .catch((err: unknown) => {
          // A retried insert whose first answer was lost: the caller learns it is recorded.
          if ((err as { code?: unknown }).code !== "23505") throw err;
          throw new ConnectError(`run ${run.id} already exists`, Code.AlreadyExists);
        });
      return { run: runToProto(row) };
    },

    async updateRun(req) {
      const projectId = requireProject(req.projectId);
      const { update } = req;
      if (!update) throw invalid("update is required");
      let query = db
        .updateTable("runs.runs")
        .set(checked(() => updateToColumns(update)))
        .where("project_id", "=", projectId)
        .where("id", "=", req.id);
      if (req.expectedStatus !== RunStatus.UNSPECIFIED) {
        query = query.where("status", "=", statusName(req.expectedStatus));
      }
      const row = await query.returningAll().executeTakeFirst();
      if (row) return { run: runToProto(row) };
      const current = await db
        .selectFrom("runs.runs")
        .select("status")
        .where("project_id", "=", projectId)
        .where("id", "=", req.id)
        .executeTakeFirst();
      if (!current) throw notFound("run", req.id);
      throw new ConnectError(
        `run ${req.id} is ${current.status}, not ${statusName(req.expectedStatus)}`,
        Code.FailedPrecondition,
      );
    },

    async getRun(req) {
      const row = await db
        .selectFrom("runs.runs")
        .selectAll()
        .where("project_id", "=", requireProject(req.projectId))
        .where("id", "=", req.id)
        .executeTakeFirst();
      if (!row) throw notFound("run", req.id);
      return { run: runToProto(row) };
    },

    async listRuns(req) {
      const limit = pageSize(req.limit);
      const query = db
        .selectFrom("runs.runs")
        .select(listColumns)
        .where("project_id", "=", requireProject(req.projectId));
      const rows = await applyFilters(query, req.filters)
        .orderBy("updated_at", "desc")
        .orderBy("id", "desc")
        .limit(limit)
        .offset(Math.max(0, req.offset))
        .execute();
      return {
        runs: rows.map((row) => runToProto({ ...row, prompt: null, result_schema: null })),
      };
    },

    async heartbeatRuns(req) {
      if (req.runIds.length === 0) return { alive: 0 };
      const result = await db
        .updateTable("runs.runs")
        .set({ heartbeat_at: new Date() })
        .where("id", "in", req.runIds)
        .where("status", "=", "processing")
        .executeTakeFirst();
      return { alive: Number(result.numUpdatedRows) };
    },
  };
}

export function runsRoutes(deps: RunsDeps) {
  return (router: ConnectRouter) => router.service(RunsService, createRunsService(deps));
}
