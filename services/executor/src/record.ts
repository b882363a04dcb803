import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "@pies/common";
import { EventTooLarge, RecordConflict, RecordTooLarge } from "@pies/common/bus";

/** Answers that retrying cannot change: the request itself is wrong, or the state moved on. */
const final = new Set([
  Code.InvalidArgument,
  Code.NotFound,
  Code.AlreadyExists,
  Code.PermissionDenied,
  Code.FailedPrecondition,
  Code.OutOfRange,
  Code.Unimplemented,
  Code.Unauthenticated,
]);

/**
 * Whether a failed attempt at recording is worth repeating (NATS, the peer or its database was
 * down); a conditional put that found the run moved on is final, and so is a record larger than
 * the log takes.
 */
export const isRetryable = (err: unknown) =>
  !(err instanceof RecordConflict) &&
  !(err instanceof RecordTooLarge) &&
  // An event too large for the bus (a stream's end) is no more publishable on the next try.
  !(err instanceof EventTooLarge) &&
  !(err instanceof ConnectError && final.has(err.code));

export interface RetryOptions {
  logger: Logger;
  /** What is being recorded, for the logs ("the end of run r_1"). */
  what: string;
  /** First pause; each next one doubles, up to `maxDelayMs`. */
  initialDelayMs?: number;
  maxDelayMs?: number;
  /** How to wait (tests pass a recorder). */
  sleep?: (ms: number) => Promise<void>;
  /** At most this many attempts, then the last failure is thrown; unbounded when not given. */
  attempts?: number;
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Repeats `attempt` with capped exponential backoff until it succeeds or fails with an answer that
 * a retry cannot change (which it throws). There is no limit on attempts unless one is given: what
 * is recorded here is mostly the result of work already done (a run's end), and giving up would
 * let the sweeper fail a run that completed. The caller keeps the run among its active runs meanwhile, so its heartbeats
 * continue. The first failure and every tenth one are logged.
 */
export async function untilRecorded<T>(
  attempt: () => Promise<T>,
  {
    logger,
    what,
    initialDelayMs = 100,
    maxDelayMs = 5000,
    sleep = pause,
    attempts = Infinity,
  }: RetryOptions,
): Promise<T> {
  for (let failures = 0, delay = initialDelayMs; ; failures++) {
    try {
      const result = await attempt();
      if (failures > 0) logger.info({ attempts: failures + 1 }, `recorded ${what}`);
      return result;
    } catch (err) {
      if (!isRetryable(err) || failures + 1 >= attempts) throw err;
      if (failures % 10 === 0) {
        logger.warn({ err, attempts: failures + 1 }, `could not record ${what}; retrying`);
      }
      await sleep(delay);
      delay = Math.min(delay * 2, maxDelayMs);
    }
  }
}
