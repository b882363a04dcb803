import { create } from "@bufbuild/protobuf";
import { sql, type Kysely } from "kysely";
import { DatabaseFaults, type Logger } from "@pies/common";
import { RecordConflict, RecordTooLarge, withFields, type RunLog } from "@pies/common/bus";
import { RunErrorSchema, RunStatus, type Run } from "@pies/proto/runs";
import { runToProto } from "./mappers.js";
import type { RunRow, RunsDatabase } from "./tables.js";

export interface SweepOptions {
  /** A processing run without a heartbeat for this long has lost its executor. */
  leaseSeconds: number;
  /** Most runs failed per kind and sweep (the next sweep takes the rest). */
  batch?: number;
  /** Whether to fail runs with `executor_lost` in this sweep (default true); see `leaseObserved`. */
  orphans?: boolean;
  /** Told of a run that could not be failed (its record too large for the log). */
  logger?: Logger;
}

export interface SweepResult {
  expired: number;
  orphaned: number;
}

/**
 * Ends the runs that nothing will end: streamed runs not opened within their ttl fail with
 * `stream_expired`, processing runs whose executor stopped sending heartbeats fail with
 * `executor_lost`. Candidates come from the store; each is failed by a conditional put to the
 * record log, only if the log's last record of it is still the one in the state that qualified it
 * (a run that ended meanwhile, recorded but not yet written, is left alone). Every replica may
 * sweep at once: of two sweepers that fail the same run, one put succeeds and the other conflicts.
 */
export async function sweepRuns(
  db: Kysely<RunsDatabase>,
  log: RunLog,
  { leaseSeconds, batch = 1000, orphans = true, logger }: SweepOptions,
): Promise<SweepResult> {
  const late = await db
    .selectFrom("runs.runs")
    .selectAll()
    .where("status", "=", "created")
    .where("stream", "=", true)
    .where(sql<boolean>`created_at + make_interval(secs => ttl) < now()`)
    .limit(batch)
    .execute();
  const expired = await failAll(log, logger, late, (run) => ({
    code: "stream_expired",
    message: `the stream was not opened within ${run.ttl} s`,
  }));
  if (!orphans) return { expired, orphaned: 0 };
  const lost = await db
    .selectFrom("runs.runs")
    .selectAll()
    .where("status", "=", "processing")
    .where(sql<boolean>`heartbeat_at < now() - make_interval(secs => ${leaseSeconds})`)
    .limit(batch)
    .execute();
  const orphaned = await failAll(log, logger, lost, () => ({
    code: "executor_lost",
    message: "the executor stopped before the run ended",
  }));
  return { expired, orphaned };
}

/** Fails each run unless it moved on meanwhile; resolves with how many this sweep failed. */
async function failAll(
  log: RunLog,
  logger: Logger | undefined,
  rows: RunRow[],
  error: (run: Run) => { code: string; message: string },
): Promise<number> {
  let failed = 0;
  for (const row of rows) {
    const stored = runToProto(row);
    const last = await log.last(row.id);
    if (last && last.run.status !== stored.status) continue;
    const run = last?.run ?? stored;
    try {
      const ended = withFields(run, {
        status: RunStatus.FAILED,
        error: create(RunErrorSchema, error(run)),
      });
      await log.put(ended, last?.seq ?? 0);
      failed++;
    } catch (err) {
      // A run whose record the log cannot take (stored before records were checked against its
      // size) is left as it is: stopping here would leave every run after it unswept too.
      if (err instanceof RecordTooLarge) {
        logger?.error({ runId: row.id, bytes: err.bytes }, "run too large to record as failed");
        continue;
      }
      if (!(err instanceof RecordConflict)) throw err;
    }
  }
  return failed;
}

/**
 * Whether this process has watched a full lease go by with its database working: since it started
 * and since the last failed database access. Before that, a run's missing heartbeats may be ones
 * the executor sent while this service or its database was down, so they prove nothing.
 */
export function leaseObserved(options: {
  now: number;
  startedAt: number;
  lastFaultAt: number;
  leaseSeconds: number;
}): boolean {
  const since = Math.max(options.startedAt, options.lastFaultAt);
  return options.now - since >= options.leaseSeconds * 1000;
}

/**
 * Sweeps every `intervalMs` until stopped; a failed sweep is logged, noted as a database fault and
 * tried again. Runs are failed as `executor_lost` only once `leaseObserved`.
 */
export function startSweeper(
  db: Kysely<RunsDatabase>,
  log: RunLog,
  logger: Logger,
  options: SweepOptions & { intervalMs: number },
  faults = new DatabaseFaults(),
): { stop(): Promise<void> } {
  const startedAt = Date.now();
  let running: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    const orphans = leaseObserved({
      now: Date.now(),
      startedAt,
      lastFaultAt: faults.lastAt,
      leaseSeconds: options.leaseSeconds,
    });
    running = sweepRuns(db, log, { ...options, orphans, logger }).then(
      (result) => {
        if (result.expired || result.orphaned) logger.info(result, "swept runs");
      },
      (err: unknown) => {
        faults.note();
        logger.warn({ err }, "run sweep failed");
      },
    );
  }, options.intervalMs);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
