import { sql, type Kysely } from "kysely";
import { DatabaseFaults, type Logger } from "@pies/common";
import type { RunsDatabase } from "./tables.js";

export interface SweepOptions {
  /** A processing run without a heartbeat for this long has lost its executor. */
  leaseSeconds: number;
  /** Most runs failed per kind and sweep (the next sweep takes the rest). */
  batch?: number;
  /** Whether to fail runs with `executor_lost` in this sweep (default true); see `leaseObserved`. */
  orphans?: boolean;
}

export interface SweepResult {
  expired: number;
  orphaned: number;
}

/**
 * Ends the runs that nothing will end: streamed runs not opened within their ttl fail with
 * `stream_expired`, processing runs whose executor stopped sending heartbeats fail with
 * `executor_lost`. Every replica may sweep at once: rows are claimed with `skip locked` and
 * updated only while still in the state that qualified them.
 */
export async function sweepRuns(
  db: Kysely<RunsDatabase>,
  { leaseSeconds, batch = 1000, orphans = true }: SweepOptions,
): Promise<SweepResult> {
  const expired = await sql<{ id: string }>`
    update runs.runs set status = 'failed', updated_at = now(),
      error = jsonb_build_object('code', 'stream_expired', 'message',
        'the stream was not opened within ' || ttl || ' s')
    where id in (
      select id from runs.runs
      where status = 'created' and stream and created_at + make_interval(secs => ttl) < now()
      limit ${batch} for update skip locked)
    and status = 'created'
    returning id`.execute(db);
  if (!orphans) return { expired: expired.rows.length, orphaned: 0 };
  const orphaned = await sql<{ id: string }>`
    update runs.runs set status = 'failed', updated_at = now(),
      error = jsonb_build_object('code', 'executor_lost', 'message',
        'the executor stopped before the run ended')
    where id in (
      select id from runs.runs
      where status = 'processing' and heartbeat_at < now() - make_interval(secs => ${leaseSeconds})
      limit ${batch} for update skip locked)
    and status = 'processing'
    returning id`.execute(db);
  return { expired: expired.rows.length, orphaned: orphaned.rows.length };
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
    running = sweepRuns(db, { ...options, orphans }).then(
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
