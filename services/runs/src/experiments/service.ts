import { create, toBinary } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type HandlerContext,
  type ServiceImpl,
} from "@connectrpc/connect";
import type { Kysely } from "kysely";
import {
  EXPERIMENT_LIMITS,
  invalid,
  jsonBytes,
  jsonOf,
  newId,
  notFound,
  requireProject,
  type JsonObject,
  type JsonValue,
} from "@pies/common";
import { ExperimentsService } from "@pies/proto/experiments";
import { ExecuteRequestSchema } from "@pies/proto/executor";
import {
  RunStatus,
  RunStore,
  SearchRunsRequestSchema,
  type SearchRunsRequest,
  type SearchRunsResponse,
} from "@pies/proto/runs";
import type { RunsDatabase } from "../tables.js";
import { experimentJson } from "./json.js";
import type { ExperimentRunner } from "./runner.js";
import {
  findExperiment,
  insertExperiment,
  listExperiments,
  pairsPage,
  requestCancel,
  summaries,
  TooManyRunning,
  type ExperimentRow,
  type NewPair,
} from "./store.js";

export interface ExperimentsDeps {
  db: Kysely<RunsDatabase>;
  /** This process's search of runs (the runs service's handler): the selection is a search. */
  search: (req: SearchRunsRequest, ctx: HandlerContext) => Promise<SearchRunsResponse>;
  /** Told of a new experiment, to start it at once (else its next look for work finds it). */
  runner?: Pick<ExperimentRunner, "kick">;
}

/** The experiments' handlers. */
export function createExperimentsService(
  deps: ExperimentsDeps,
): ServiceImpl<typeof ExperimentsService> {
  const { db } = deps;
  const answer = async (
    row: ExperimentRow,
    pairs?: { limit: number; offset: number; changed: boolean },
  ) => {
    const [summary, page] = await Promise.all([
      summaries(db, [row.id]),
      pairs && pairs.limit > 0 ? pairsPage(db, row.id, pairs) : undefined,
    ]);
    return {
      experiment: {
        json: jsonBytes(experimentJson(row, summary.get(row.id), page ?? (pairs ? [] : undefined))),
        ended: row.status !== "running",
      },
    };
  };
  const found = async (projectId: string, id: string) => {
    const row = await findExperiment(db, requireProject(projectId), id);
    if (!row) throw notFound("experiment", id);
    return row;
  };

  return {
    async createExperiment(req, ctx) {
      const projectId = requireProject(req.projectId);
      const name = req.name.trim();
      if (!name || name.length > EXPERIMENT_LIMITS.nameLength) {
        throw invalid(`name: 1 to ${EXPERIMENT_LIMITS.nameLength} characters`);
      }
      const concurrency = req.concurrency || EXPERIMENT_LIMITS.concurrency.default;
      if (concurrency < 1 || concurrency > EXPERIMENT_LIMITS.concurrency.max) {
        throw invalid(`concurrency: 1 to ${EXPERIMENT_LIMITS.concurrency.max}`);
      }
      const source = req.source;
      if (!source) throw invalid("source is required");
      const limit = source.limit || 100;
      if (limit < 1 || limit > EXPERIMENT_LIMITS.runs) {
        throw invalid(`source.limit: 1 to ${EXPERIMENT_LIMITS.runs}`);
      }
      if (!req.target?.interaction.case) throw invalid("target.interaction is required");
      const judge = req.judge?.interaction.case ? req.judge : undefined;

      // Selected once, here: the set is fixed whatever the runs become.
      const { runs } = await deps.search(
        create(SearchRunsRequestSchema, {
          projectId,
          query: source.query,
          defaultQueryPath: source.defaultQueryPath,
          filters: source.filters,
          limit,
        }),
        ctx,
      );
      const pairs: NewPair[] = [];
      let skipped = 0;
      for (const run of runs) {
        // A metadata-only run kept no input to replay.
        if (run.store === RunStore.METADATA) {
          skipped++;
          continue;
        }
        pairs.push({
          position: pairs.length,
          source_run_id: run.id,
          input: JSON.stringify(jsonOf(run.parametersJson) ?? {}),
          original: JSON.stringify((jsonOf(run.resultJson) ?? null) as JsonValue | null),
          original_valid: run.status === RunStatus.COMPLETED,
          original_latency_ms: run.executionTime === undefined ? null : Number(run.executionTime),
          original_tokens: run.tokenUse?.total ?? null,
          original_cost: run.cost?.total ?? null,
        });
      }
      const id = newId();
      const now = new Date();
      const empty = pairs.length === 0;
      await insertExperiment(
        db,
        {
          id,
          project_id: projectId,
          name,
          // Nothing to replay: ended at once.
          status: empty ? "completed" : "running",
          source: JSON.stringify(objectOf(req.sourceJson)),
          target: JSON.stringify(objectOf(req.targetJson)),
          judge: judge ? (judge.interaction.value ?? null) : null,
          request: toBinary(ExecuteRequestSchema, req.target),
          judge_request: judge ? toBinary(ExecuteRequestSchema, judge) : null,
          concurrency,
          selected: runs.length,
          skipped,
          created_at: now,
          updated_at: now,
          ended_at: empty ? now : null,
        },
        pairs,
        EXPERIMENT_LIMITS.runningPerProject,
      ).catch((err: unknown) => {
        if (!(err instanceof TooManyRunning)) throw err;
        throw new ConnectError(
          `${err.message}: wait for one to end, or cancel one (POST /experiments/:id/cancel)`,
          Code.ResourceExhausted,
        );
      });
      deps.runner?.kick();
      return answer(await found(projectId, id), { limit: 0, offset: 0, changed: false });
    },

    async getExperiment(req) {
      const row = await found(req.projectId, req.id);
      const limit = Math.max(0, Math.min(req.pairsLimit, EXPERIMENT_LIMITS.runs));
      return answer(row, {
        limit,
        offset: Math.max(0, req.pairsOffset),
        changed: req.pairsChanged,
      });
    },

    async listExperiments(req) {
      const projectId = requireProject(req.projectId);
      const { page } = EXPERIMENT_LIMITS;
      const limit = req.limit <= 0 ? page.default : Math.min(req.limit, page.max);
      const rows = await listExperiments(db, projectId, limit, Math.max(0, req.offset));
      const all = await summaries(
        db,
        rows.map((r) => r.id),
      );
      return {
        experimentsJson: jsonBytes(rows.map((r) => experimentJson(r, all.get(r.id)))),
      };
    },

    async cancelExperiment(req) {
      const row = await found(req.projectId, req.id);
      if (row.status === "running") {
        await requestCancel(db, row.project_id, row.id);
        deps.runner?.kick();
      }
      return answer(await found(row.project_id, row.id));
    },
  };
}

const objectOf = (bytes: Uint8Array): JsonObject => {
  const value = jsonOf(bytes);
  return value && typeof value === "object" && !Array.isArray(value) ? value : {};
};

export function experimentsRoutes(deps: ExperimentsDeps) {
  return (router: ConnectRouter) =>
    router.service(ExperimentsService, createExperimentsService(deps));
}
