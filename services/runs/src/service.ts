import { Code, ConnectError, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import { sql, type CompiledQuery, type Kysely } from "kysely";
import { invalid, notFound, pageSize, requireProject } from "@pies/common";
import { RecordConflict, type RunLog } from "@pies/common/bus";
import { RunsService, RunStatus, SearchRunsResponseSchema } from "@pies/proto/runs";
import { create } from "@bufbuild/protobuf";
import { applyFilters, newestFirst } from "./filters.js";
import {
  applyUpdate,
  rowsJson,
  runToProto,
  runToRow,
  statusName,
  type ListedRun,
} from "./mappers.js";
import { deleteMatching, deleteRunById } from "./deletions.js";
import { findRun } from "./find-run.js";
import { exprToSql, usesPatterns } from "./lucene.js";
import {
  bucketNames,
  facetMeta,
  NAMED_FACETS,
  indexPresence,
  planRollup,
  planSearch,
  rollupMeta,
  searchParts,
  TRIGRAM_INDEX,
} from "./search.js";
import type { RunsDatabase } from "./tables.js";
import { experimentsRoutes } from "./experiments/service.js";
import type { ExperimentRunner } from "./experiments/runner.js";

export interface RunsDeps {
  db: Kysely<RunsDatabase>;
  /** The record log: every write goes through it, and reads see what it holds before the store. */
  log: RunLog;
  /**
   * The longest one statement of a search may run (default 10 s): a search that the indexes cannot
   * narrow scans its project, and the pool it shares with the record writer must not be held.
   */
  searchTimeoutMs?: number;
  /** How long the answer to "is the trigram index there?" is kept (default 60 s). */
  indexCheckMs?: number;
  /** Runs a search's page looks through in order before its trigram patterns (default 20,000). */
  pageWindow?: number;
  /**
   * Whether a search's total and facets are counted from the rollup (runs.run_rollups) when it
   * can answer them (default true); false counts them over the runs always (tests compare both).
   */
  facetRollups?: boolean;
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
 * run is as unknown as a run that never was). One lookup, only for child runs. A parent deleted
 * between this check and the record leaves a child whose parent answers NOT_FOUND, as the children
 * of any deleted run do.
 */
async function checkParent(deps: RunsDeps, projectId: string, parentId: string) {
  if (!(await findRun(deps, projectId, parentId, { ended: true }))) {
    throw notFound("parent run", parentId);
  }
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
  "cost_input",
  "cost_output",
  "cost_total",
  "cost_estimated",
  "error",
  "ttl",
  "parent_id",
  "cache_policy",
  "cached",
  "cached_from",
  "interaction_status",
  "interaction_prompts",
  "interaction_updated_at",
  "project_name",
  "account_name",
  "created_at",
  "updated_at",
] as const;

/**
 * A page of list rows: as messages, or (`asJson`, the gateway's ask) as the REST API's JSON,
 * rendered here once so that the gateway sends it as it is. Measured per page of 100 runs at 1M
 * runs (load 7–11): the gateway's CPU 8–13 ms → 3–5, and this service's 10–17 → 7–13 (the JSON
 * straight from the rows costs less than the messages and Connect's JSON of them).
 */
function pageOf(rows: ListedRun[], asJson: boolean) {
  return asJson ? { runsJson: rowsJson(rows) } : { runs: rows.map(runToProto) };
}

/** The runs store's handlers. */
export function createRunsService(deps: RunsDeps): ServiceImpl<typeof RunsService> {
  const { db, log } = deps;
  const searchTimeoutMs = Math.max(1, Math.trunc(deps.searchTimeoutMs ?? 10_000));
  const trigramIndex = indexPresence(db, TRIGRAM_INDEX, deps.indexCheckMs ?? 60_000);
  const pageWindow = Math.max(1, Math.trunc(deps.pageWindow ?? 20_000));
  /** `fn` in a transaction whose statements are cut at the search timeout (DEADLINE_EXCEEDED). */
  const bounded = <T>(fn: (tx: Kysely<RunsDatabase>) => Promise<T>) =>
    db
      .transaction()
      .execute(async (tx) => {
        await sql.raw(`set local statement_timeout = ${searchTimeoutMs}`).execute(tx);
        return fn(tx);
      })
      .catch((err: unknown) => {
        if ((err as { code?: unknown })?.code === "57014") {
          throw new ConnectError(
            `the search ran longer than ${searchTimeoutMs} ms: narrow it with filters or a more specific query`,
            Code.DeadlineExceeded,
          );
        }
        throw err;
      });
  return {
    async createRun({ run }) {
      if (!run) throw invalid("run is required");
      if (!run.id || !run.projectId || !run.interactionId) {
        throw invalid("run id, project_id and interaction_id are required");
      }
      if (run.status === RunStatus.UNSPECIFIED) throw invalid("run status is required");
      checked(() => runToRow(run));
      if (run.parentId) await checkParent(deps, run.projectId, run.parentId);
      try {
        await log.put(run, 0);
      } catch (err) {
        // A retried create whose first answer was lost is stored once (the same record).
        if (!(err instanceof RecordConflict)) throw err;
        throw new ConnectError(`run ${run.id} already exists`, Code.AlreadyExists);
      }
      return { run };
    },

    async updateRun(req) {
      const projectId = requireProject(req.projectId);
      const { update } = req;
      if (!update) throw invalid("update is required");
      const current = await findRun(deps, projectId, req.id, { ended: true });
      if (!current) throw notFound("run", req.id);
      const expected = req.expectedStatus;
      const conflict = () =>
        new ConnectError(
          `run ${req.id} is ${statusName(current.run.status)}, not ${statusName(expected)}`,
          Code.FailedPrecondition,
        );
      if (expected !== RunStatus.UNSPECIFIED && current.run.status !== expected) throw conflict();
      const next = applyUpdate(current.run, update);
      checked(() => runToRow(next));
      try {
        await log.put(next, current.seq);
      } catch (err) {
        if (!(err instanceof RecordConflict)) throw err;
        throw new ConnectError(`run ${req.id} changed meanwhile`, Code.FailedPrecondition);
      }
      return { run: next };
    },

    async getRun(req) {
      const found = await findRun(deps, requireProject(req.projectId), req.id);
      if (!found) throw notFound("run", req.id);
      return { run: found.run };
    },

    async listRuns(req) {
      const limit = pageSize(req.limit);
      const query = db
        .selectFrom("runs.runs")
        .select(listColumns)
        .where("project_id", "=", requireProject(req.projectId));
      const filtered = applyFilters(query, req.filters)
        .orderBy("updated_at", "desc")
        .orderBy("id", "desc")
        .limit(limit)
        .offset(Math.max(0, req.offset));
      const rows = await newestFirst(
        (floorId) => (floorId ? filtered.where("id", ">=", floorId) : filtered).execute(),
        { limit, offset: Math.max(0, req.offset) },
        req.filters,
      );
      return pageOf(rows, req.asJson);
    },

    /**
     * Lucene query, filters and facets (DESIGN.md §3). The page and the meta (total and facets
     * over every match) are two queries run side by side; meta only when facets or onlyMeta ask
     * for it.
     */
    async searchRuns(req) {
      const projectId = requireProject(req.projectId);
      const { limit, plans } = planSearch(req);
      const wantMeta = plans.length > 0 || req.onlyMeta;
      // The query is parsed once; each statement runs in its bounded transaction.
      const parts = searchParts(db, projectId, req);
      const patterns = parts.condition !== null && (await trigramIndex());
      const base = parts.where(parts.filtered, { patterns });
      /** The page's statement, over the partitions from `floorId` on (newestFirst) or all. */
      const pageFrom = (floorId?: string) =>
        (floorId ? base.where("id", ">=", floorId) : base)
          .select(listColumns)
          .orderBy("updated_at", "desc")
          .orderBy("id", "desc")
          .limit(limit)
          .offset(req.offset)
          .compile();
      const page = pageFrom();
      // With trigram patterns, the planner may take a common term for a rare one (it estimates
      // the patterns from statistics) and sort every match instead of reading the project in
      // order to the page. So the page is first looked for among the newest `pageWindow` runs the
      // filters keep, read in order: a term on more than one run in a few hundred fills its page
      // there, in milliseconds, whatever the estimate. A page the window leaves short is read
      // with the patterns (a rare term: the trigram index). Exact either way: the window is the
      // start of the ordered matches' superset, so its first matches are the first matches.
      type PageRow = typeof page extends CompiledQuery<infer R> ? R : never;
      // Only patterns: a jsonpath test alone is estimated from the column's statistics, and the
      // window would cost a rare term a read of pageWindow runs for nothing.
      const condition =
        patterns && parts.condition && usesPatterns(parts.condition) ? parts.condition : null;
      const windowedFrom = (floorId?: string) =>
        condition &&
        sql<PageRow>`select * from (${(floorId
          ? parts.filtered.where("id", ">=", floorId)
          : parts.filtered
        )
          .select(listColumns)
          .orderBy("updated_at", "desc")
          .orderBy("id", "desc")
          .limit(pageWindow)}) as w
          where ${exprToSql(condition, { patterns: false })}
          order by updated_at desc, id desc limit ${limit} offset ${req.offset}`;
      // A window with no match at all (a rare term) is not read again from an older floor: its
      // newest pageWindow runs are mostly the same ones.
      let windowMissed = false;
      const readPage = (tx: Kysely<RunsDatabase>) =>
        newestFirst(
          async (floorId) => {
            const windowed = windowMissed ? null : windowedFrom(floorId);
            if (windowed) {
              // In order: the planner takes the outer filter for rare (it cannot estimate it), so
              // it would read the whole window and sort it when the window holds little more
              // than pageWindow runs, rather than walk an index in order and stop at the page.
              await sql`set local enable_sort = off`.execute(tx);
              const first = await windowed.execute(tx);
              await sql`set local enable_sort = on`.execute(tx);
              if (first.rows.length === limit) return first.rows;
              windowMissed = first.rows.length === 0;
            }
            return (await tx.executeQuery(floorId ? pageFrom(floorId) : page)).rows;
          },
          { limit, offset: req.offset },
          req.filters,
        );
      // The total and facets from the rollup when it can answer them (planRollup), exact
      // either way; otherwise counted over every match.
      const rollup = wantMeta && deps.facetRollups !== false ? planRollup(req, plans) : undefined;
      const countMeta = (tx: Kysely<RunsDatabase>) =>
        rollup
          ? rollupMeta(tx, projectId, parts.filtered, rollup, plans)
          : facetMeta(tx, base, plans, { exactTotal: req.exactTotal });
      const [rows, meta] = await Promise.all([
        req.onlyMeta ? [] : bounded(readPage),
        wantMeta ? bounded(countMeta) : undefined,
      ]);
      // Interaction and environment buckets are named (one statement per such facet).
      const names = new Map<string, Map<string, string>>();
      for (const p of plans) {
        if (!meta || !Object.hasOwn(NAMED_FACETS, p.path)) continue;
        const ids = (meta.facets[p.name] ?? []).map((b) => String(b.id));
        names.set(
          p.name,
          await bucketNames(db, projectId, p.path as keyof typeof NAMED_FACETS, ids),
        );
      }
      return {
        ...pageOf(rows, req.asJson),
        meta: meta && {
          total: BigInt(meta.total),
          lowerBound: "lowerBound" in meta && meta.lowerBound === true,
          facets: Object.fromEntries(
            Object.entries(meta.facets).map(([name, buckets]) => [
              name,
              {
                buckets: buckets.map((b) => ({
                  id: String(b.id),
                  count: BigInt(b.count),
                  isDefault: b.isDefault ?? false,
                  name: names.get(name)?.get(String(b.id)) ?? "",
                })),
              },
            ]),
          ),
        },
      };
    },

    async deleteRun(req) {
      const projectId = requireProject(req.projectId);
      if (!req.id) throw invalid("id is required");
      // The project's run, stored or only recorded: another project's id is not found.
      if (!(await findRun(deps, projectId, req.id))) throw notFound("run", req.id);
      await deleteRunById(db, req.id);
      return {};
    },

    async deleteRuns(req) {
      const projectId = requireProject(req.projectId);
      const parts = searchParts(db, projectId, {
        query: req.query,
        defaultQueryPath: req.defaultQueryPath,
        filters: req.filters,
      });
      const patterns = parts.condition !== null && (await trigramIndex());
      const matches = parts.where(parts.filtered, { patterns }).select("id");
      // Each batch's ids found under the search's statement timeout, deleted after.
      const deleted = await deleteMatching(db, projectId, async (limit) =>
        (await bounded((tx) => tx.executeQuery(matches.limit(limit).compile()))).rows.map(
          (r) => r.id,
        ),
      );
      return { deleted: BigInt(deleted) };
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

/**
 * The runs store's service and the experiments' (which select with its search), on one router.
 * `runner` replays the experiments in this process's background (start.ts); without one, they
 * wait for a process that has one.
 */
export function runsRoutes(deps: RunsDeps & { runner?: Pick<ExperimentRunner, "kick"> }) {
  return (router: ConnectRouter) => {
    const runs = createRunsService(deps);
    router.service(RunsService, runs);
    experimentsRoutes({
      db: deps.db,
      search: async (req, ctx) => create(SearchRunsResponseSchema, await runs.searchRuns(req, ctx)),
      runner: deps.runner,
    })(router);
  };
}
