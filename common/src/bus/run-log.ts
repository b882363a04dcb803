import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { RunConfigSchema, RunSchema, RunSourceSchema, RunStatus, type Run } from "@pies/proto/runs";
import { jsonBytes } from "../json-bytes.js";
import { decodeStoredRun, encodedRunLength, encodeRun } from "./run-binary.js";
import { RecordConflict, RecordTooLarge, type RunRecords } from "./run-records.js";
import { isMetadataOnly, withoutPayloads } from "./withheld-payloads.js";

/** `{}` as a run's parameters (read only: never written into). */
const EMPTY_OBJECT = jsonBytes({});

let putCount = 0;
const putPrefix = randomBytes(6).toString("hex");
/** An id for one put and its repeats, unique across processes (a random prefix and a count). */
export const newPutId = () => `${putPrefix}${(putCount++).toString(36)}`;

/** A run as its last record holds it, with the record's sequence (for a conditional put). */
export interface RecordedRun {
  seq: number;
  run: Run;
}

/**
 * Statuses in the order a run moves through them; a record replaces another of the same run only
 * if it is later in this order, or as late and later in the log.
 */
export const statusRank = (status: RunStatus): number =>
  status === RunStatus.CREATED
    ? 1
    : status === RunStatus.PROCESSING
      ? 2
      : status === RunStatus.COMPLETED || status === RunStatus.FAILED
        ? 3
        : 0;

export const isEnded = (status: RunStatus) => statusRank(status) === 3;

/**
 * Whether record `a` comes after record `b` of the same run: later in the status order, or as late
 * and later in the log (the store's writer applies the same rule in SQL).
 */
export const isLaterRecord = (
  a: { status: RunStatus; seq: number },
  b: { status: RunStatus; seq: number },
): boolean =>
  statusRank(a.status) > statusRank(b.status) ||
  (statusRank(a.status) === statusRank(b.status) && a.seq > b.seq);

/** The run record log in terms of runs: what the executor, the runs service and the sweeper use. */
export class RunLog {
  constructor(readonly records: RunRecords) {}

  /**
   * Records the run as it stands now (its `updatedAt` is set to now) and resolves with the
   * record's sequence once it is durable. `expectSeq` makes it conditional (RecordConflict).
   * Attempts that repeat one put (after a failure whose answer was lost) pass the same `putId`,
   * so that it is stored once; two different puts never share one, or the second would be taken
   * for a repeat of the first and "succeed" without being stored. `accepted`: see RunRecords.put.
   * A metadata-only run is recorded without its payloads (withoutPayloads), whoever puts it: the
   * executor, the runs service's writes or its sweeper.
   */
  put(
    run: Run,
    expectSeq?: number,
    putId = newPutId(),
    options: { accepted?: boolean } = {},
  ): Promise<number> {
    const recorded = completed(run);
    const data = encodeRun(isMetadataOnly(recorded) ? withoutPayloads(recorded) : recorded);
    return this.records
      .put(run.id, data, { dedupId: putId, expectSeq, ...options })
      .catch(unavailable);
  }

  /**
   * Throws RecordTooLarge if the run's record, as it stands now with `reserve` bytes more, is
   * larger than the log takes (nothing to check when the log has no limit: in memory). Measured
   * with the payloads even for a metadata-only run: its stream's end event carries them.
   */
  checkFits(run: Run, reserve = 0) {
    const limit = this.records.maxRecordBytes;
    if (limit === undefined) return;
    const bytes = encodedRunLength(completed(run)) + reserve;
    if (bytes > limit) throw new RecordTooLarge(run.id, bytes, limit);
  }

  /** The run's last record, if the log still holds it. */
  async last(runId: string): Promise<RecordedRun | undefined> {
    const record = await this.records.last(runId).catch(unavailable);
    return record && { seq: record.seq, run: decodeStoredRun(record.data) };
  }
}

/** The run as a put records it: `updatedAt` now, and the fields the store always answers. */
function completed(run: Run): Run {
  run.updatedAt = timestampNow();
  run.createdAt ??= run.updatedAt;
  // As the store answers it: without a configuration, the run's own environment and model are
  // its configuration; the source is always there.
  run.config ??= create(RunConfigSchema, {
    environmentId: run.environmentId,
    model: run.modelId,
  });
  run.source ??= create(RunSourceSchema);
  if (run.parametersJson.length === 0) run.parametersJson = EMPTY_OBJECT;
  return run;
}

/** A failure of the log other than a conflict: NATS is down or restarting, and a retry may do. */
function unavailable(err: unknown): never {
  if (
    err instanceof RecordConflict ||
    err instanceof RecordTooLarge ||
    err instanceof ConnectError
  ) {
    throw err;
  }
  throw new ConnectError(
    "the record log is unavailable",
    Code.Unavailable,
    undefined,
    undefined,
    err,
  );
}

/** A copy of the run with the fields given (the rest as they were). */
export const withFields = (run: Run, fields: Partial<Run>): Run =>
  create(RunSchema, { ...run, ...fields });
