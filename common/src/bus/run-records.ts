/**
 * One stored record of a run: the whole run as it stood (protobuf `pies.runs.v1.Run`), and its
 * position in the record log. A later record of the same run replaces an earlier one.
 */
export interface RunRecord {
  runId: string;
  /** Position in the log, strictly increasing; the version that a conditional put expects. */
  seq: number;
  data: Uint8Array;
  /** The trace context of the put (W3C), when tracing is on (common/src/tracing.ts). */
  traceparent?: string;
}

/** A conditional put found another last record than the one it expected. */
export class RecordConflict extends Error {
  constructor(runId: string) {
    super(`run ${runId} was recorded meanwhile`);
  }
}

/**
 * A record larger than the log takes (JetStream: one NATS message, at most the server's
 * max_payload). No retry can store it: the run has to be made smaller.
 */
export class RecordTooLarge extends Error {
  constructor(
    readonly runId: string,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(`the run record of ${bytes} bytes is larger than the record log takes (${limit} bytes)`);
  }
}

/** What a writer does with a batch of records; it throws to have the whole batch tried again. */
export type RecordBatchWriter = (records: RunRecord[]) => Promise<void>;

export interface RecordConsumer {
  stop(): Promise<void>;
}

/**
 * The log that carries every run's records from the executor to the runs store (DESIGN.md §4, the
 * hot path): a put is durable when it resolves, the runs service writes records to PostgreSQL in
 * batches, and until then the log answers for the run (read-your-writes). Deployed it is a
 * JetStream stream that keeps each run's last record; embedded, an in-process stand-in whose puts
 * resolve once the writer has stored them.
 */
export interface RunRecords {
  /**
   * Stores the run's record and resolves with its sequence. With `expectSeq`, only if the run's
   * last record has that sequence (0: the run has none), else RecordConflict: the conditional
   * update that lets exactly one request start a streamed run, and keeps a late end from
   * overwriting the sweeper's. `dedupId` makes a retried put of the same record idempotent.
   * `accepted`: resolve once the log has taken the record in its order (sequence given, condition
   * checked), which may be before it is durable where the log can tell the two apart (embedded,
   * in memory: durable means written to the store); a later put of the same run that resolves
   * durable makes this one durable too. JetStream answers once, durable.
   */
  put(
    runId: string,
    data: Uint8Array,
    options: { dedupId: string; expectSeq?: number; accepted?: boolean },
  ): Promise<number>;
  /** The run's last record, if the log still holds it. */
  last(runId: string): Promise<RunRecord | undefined>;
  /**
   * Delivers records in batches to `write`, one batch at a time, until stopped; a batch whose
   * write fails is tried again (with backoff) until it succeeds. Every replica of the runs service
   * may consume at once: each record goes to one of them.
   */
  consume(write: RecordBatchWriter, options: ConsumeOptions): RecordConsumer;
  ready(): Promise<boolean>;
  /**
   * The largest record a put takes, in bytes, when the log has a limit (a put of a larger one
   * fails with RecordTooLarge); undefined when it has none (in memory).
   */
  readonly maxRecordBytes?: number;
}

export interface ConsumeOptions {
  /** Called with each failed write (the database is down, say). */
  onError(err: unknown, attempt: number): void;
  /**
   * Called before each attempt at a batch whose oldest record is older than half the log's
   * maximum age (the log drops a record at that age, written or not): how far behind the writer
   * is, in seconds, and the log's maximum age. Not called by a log without one (in memory).
   */
  onBehind?(behindSeconds: number, maxAgeSeconds: number): void;
  /**
   * Called when the writer's pull stopped bringing records (a NATS node or the consumer's leader
   * lost) and is made anew: why. Not called by a log in memory.
   */
  onStall?(reason: string): void;
  /** Most records in one batch. */
  maxBatch?: number;
  /** Most record bytes in one batch (a larger record is a batch of its own). */
  maxBatchBytes?: number;
  /**
   * The least time from the start of one batch to the start of the next unless a full batch (by
   * count or by bytes) is waiting, or fills meanwhile (default 0): under a steady flow of records,
   * fewer and larger batches. A record that
   * arrives after a pause is written at once. Where a put waits for its record to be written (in
   * memory), there is no such wait.
   */
  batchIntervalMs?: number;
}

/** The default of ConsumeOptions.maxBatch. */
export const MAX_BATCH = 1000;
/**
 * The default of ConsumeOptions.maxBatchBytes. A batch is written as one JSON string (a row's JSON
 * is larger than its protobuf record, up to ~6x for text that is all escapes), and records may be
 * up to ~1 MiB: bounded by count alone, a backlog of big records made a string past V8's limit
 * (~512 MiB) or PostgreSQL's 1 GB parameter, and the batch failed for ever. 16 MiB keeps the
 * string, and the batch's memory, far under both, and still amortises a statement over 16 of the
 * largest records; usual records (a few KB) are bounded by the count first.
 */
export const MAX_BATCH_BYTES = 16 * 1024 * 1024;

/**
 * Takes the next batch off the front of `queue`, in order: at most `maxBatch` items and
 * `maxBatchBytes` bytes, and always the first item, however large.
 */
export function takeBatch<T>(
  queue: T[],
  bytes: (item: T) => number,
  maxBatch = MAX_BATCH,
  maxBatchBytes = MAX_BATCH_BYTES,
): T[] {
  let n = 0;
  let total = 0;
  for (const item of queue) {
    if (n === maxBatch) break;
    total += bytes(item);
    if (n > 0 && total > maxBatchBytes) break;
    n++;
  }
  return queue.splice(0, n);
}

/** Capped exponential backoff for a failed batch: 0.1 s doubling up to 5 s. */
export const retryDelayMs = (attempt: number) => Math.min(100 * 2 ** Math.min(attempt, 6), 5000);
