import { fromBinary } from "@bufbuild/protobuf";
import { sql, type Kysely } from "kysely";
import type { DatabaseFaults, Logger } from "@pies/common";
import {
  RunLog,
  statusRank,
  type RecordConsumer,
  type RunRecord,
  type RunRecords,
} from "@pies/common/bus";
import { RunSchema, type Run } from "@pies/proto/runs";
import { runToRow } from "./mappers.js";
import type { RunsDatabase } from "./tables.js";

/** A status's rank in SQL, as `statusRank` has it. */
const rank = (column: "runs.status" | "excluded.status") =>
  sql`(case ${sql.ref(column)} when 'created' then 1 when 'processing' then 2 else 3 end)`;

/** Columns a later record of a run replaces (not its id, project or creation time). */
const replaced = [
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
  "prompt",
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
  "result_schema",
  "cached",
  "updated_at",
  "record_seq",
] as const;

/** The latest record of each run in the batch (status order first, then log order). */
export function latestPerRun(records: RunRecord[]): { seq: number; run: Run }[] {
  const latest = new Map<string, { seq: number; run: Run }>();
  for (const record of records) {
    const run = fromBinary(RunSchema, record.data);
    const known = latest.get(run.id);
    const later =
      !known ||
      statusRank(run.status) > statusRank(known.run.status) ||
      (statusRank(run.status) === statusRank(known.run.status) && record.seq > known.seq);
    if (later) latest.set(run.id, { seq: record.seq, run });
  }
  return [...latest.values()];
}

/**
 * Writes a batch of records in one statement: each run's latest record is inserted, or replaces
 * the stored row if it is later (status order, then log order). Applying a batch twice, or
 * batches out of order, leaves the rows as the latest records say. A processing run's lease
 * starts when its record is written, so a store that fell behind does not fail it at once.
 */
export async function writeRecords(db: Kysely<RunsDatabase>, records: RunRecord[]) {
  const rows = latestPerRun(records).map(({ seq, run }) => ({
    ...runToRow(run),
    record_seq: seq,
  }));
  if (rows.length === 0) return;
  await db
    .insertInto("runs.runs")
    .values(rows)
    .onConflict((oc) =>
      oc.column("id").doUpdateSet((eb) => ({
        ...Object.fromEntries(replaced.map((c) => [c, eb.ref(`excluded.${c}`)])),
        heartbeat_at: sql<Date>`case when excluded.status = 'processing' then now()
            else runs.heartbeat_at end`,
      })).where(sql<boolean>`runs.project_id = excluded.project_id and (
          ${rank("excluded.status")} > ${rank("runs.status")} or
          (${rank("excluded.status")} = ${rank("runs.status")}
            and excluded.record_seq > runs.record_seq))`),
    )
    .execute();
}

/**
 * The runs service's writer: consumes the record log into PostgreSQL in batches until stopped. A
 * failed batch (the database is down) is retried; the failure counts as a database fault, so the
 * sweeper waits a lease after it.
 */
export function startRecordWriter(
  db: Kysely<RunsDatabase>,
  records: RunRecords,
  logger: Logger,
  faults?: DatabaseFaults,
): RecordConsumer {
  return records.consume((batch) => writeRecords(db, batch), {
    onError(err, attempt) {
      faults?.note();
      if (attempt % 10 === 0)
        logger.warn({ err, attempt }, "run records could not be written; retrying");
    },
  });
}

/** The runs store's write side over a record log: the log in terms of runs, and its writer. */
export function startRunsStore(
  db: Kysely<RunsDatabase>,
  records: RunRecords,
  logger: Logger,
  faults?: DatabaseFaults,
): { log: RunLog; stop(): Promise<void> } {
  const writer = startRecordWriter(db, records, logger, faults);
  return { log: new RunLog(records), stop: () => writer.stop() };
}
