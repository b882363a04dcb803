import type { JsonObject, JsonValue } from "@pies/common";
import type { ExperimentRow, PairRow, Summary } from "./store.js";

/**
 * An experiment in the REST API's shape (GET /experiments/:id): rendered here, once, from its
 * rows; the gateway sends it as it is. `pairs` only when asked for (GET of one experiment).
 */
export function experimentJson(
  row: ExperimentRow,
  summary: Summary | undefined,
  pairs?: PairRow[],
): JsonObject {
  const s = summary ?? EMPTY;
  const done = s.completed + s.failed;
  const out: JsonObject = {
    id: row.id,
    name: row.name,
    status: row.status,
    cancel_requested: row.cancel_requested,
    source: row.source,
    target: row.target,
    judge: row.judge,
    concurrency: row.concurrency,
    error: row.error,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    ended_at: row.ended_at?.toISOString() ?? null,
    progress: {
      // The runs the source matched; those with no input to replay are skipped (metadata-only).
      selected: row.selected,
      skipped: row.skipped,
      total: row.selected - row.skipped,
      done,
      completed: s.completed,
      failed: s.failed,
      running: s.running,
      pending: s.pending,
      cancelled: s.cancelled,
    },
    comparison: {
      // Over the pairs done (the candidate completed or failed), so both sides count the same.
      pairs: done,
      exact_match_rate: s.exact,
      original: side(s.originalValid, s.originalP50, s.originalTokens, s.originalCost),
      candidate: side(s.candidateValid, s.candidateP50, s.candidateTokens, s.candidateCost),
      judge:
        row.judge === null
          ? null
          : { mean_score: s.judgeMean, scored: s.judgeScored, failed: s.judgeFailed },
    },
  };
  if (pairs) out.pairs = pairs.map(pairJson);
  return out;
}

const side = (
  valid: number | null,
  p50: number | null,
  tokens: number | null,
  cost: number | null,
): JsonObject => ({
  schema_valid_rate: valid,
  p50_latency_ms: p50,
  tokens,
  cost,
});

/** One pair: the run replayed and its result, the new run and its result, their difference. */
export function pairJson(p: PairRow): JsonObject {
  const ended = p.status === "completed" || p.status === "failed";
  return {
    position: p.position,
    status: p.status,
    source_run: p.source_run_id,
    run: p.run_id,
    input: p.input,
    original: {
      result: p.original,
      schema_valid: p.original_valid,
      latency_ms: p.original_latency_ms,
      tokens: p.original_tokens,
      cost: p.original_cost,
    },
    candidate: ended
      ? {
          result: p.candidate,
          schema_valid: p.candidate_valid,
          latency_ms: p.candidate_latency_ms,
          tokens: p.candidate_tokens,
          cost: p.candidate_cost,
          error: p.error,
        }
      : null,
    exact_match: p.exact_match,
    diff: p.diff as JsonValue,
    judge:
      p.judge_run_id === null && p.judge_error === null
        ? null
        : { score: p.judge_score, run: p.judge_run_id, error: p.judge_error },
    attempts: p.attempts,
  };
}

const EMPTY: Summary = {
  pending: 0,
  running: 0,
  completed: 0,
  failed: 0,
  cancelled: 0,
  exact: null,
  originalValid: null,
  candidateValid: null,
  originalP50: null,
  candidateP50: null,
  originalTokens: null,
  candidateTokens: null,
  originalCost: null,
  candidateCost: null,
  judgeMean: null,
  judgeScored: 0,
  judgeFailed: 0,
};
