import { CompiledQuery, type Kysely } from "kysely";
import type { DatabaseFaults, Logger } from "@pies/common";
import { preparedStatement } from "@pies/common/db";
import {
  isLaterRecord,
  RunLog,
  type ConsumeOptions,
  type RecordConsumer,
  type RunRecord,
  type RunRecords,
} from "@pies/common/bus";
import { DAY_MS, idPrefix, isTimeId } from "./partitions.js";
import { recordRow, type RecordRow } from "./record-row.js";
import type { RunsDatabase } from "./tables.js";

/** The columns a record writes, with their SQL types (as `jsonb_to_recordset` reads them). */
const columns = {
  id: "text",
  project_id: "text",
  account_id: "text",
  interaction_id: "text",
  interaction_name: "text",
  environment_id: "text",
  environment_name: "text",
  provider: "text",
  model_id: "text",
  status: "text",
  stream: "boolean",
  parameters: "jsonb",
  result: "jsonb",
  prompt: "jsonb",
  tags: "text[]",
  config: "jsonb",
  source: "jsonb",
  prompt_tokens: "integer",
  result_tokens: "integer",
  total_tokens: "integer",
  execution_time: "bigint",
  cost_input: "float8",
  cost_output: "float8",
  cost_total: "float8",
  cost_estimated: "boolean",
  error: "jsonb",
  ttl: "integer",
  parent_id: "text",
  cache_policy: "jsonb",
  result_schema: "jsonb",
  cached: "boolean",
  attempts: "jsonb",
  cached_from: "text",
  interaction_status: "text",
  interaction_prompts: "jsonb",
  interaction_updated_at: "timestamptz",
  project_name: "text",
  account_name: "text",
  created_at: "timestamptz",
  updated_at: "timestamptz",
  record_seq: "bigint",
} as const;
type Column = keyof typeof columns;
const names = Object.keys(columns) as Column[];
const isJson = (c: Column) => columns[c] === "jsonb";

/** The run's own dates: the store's clock when a record has none. */
const STAMPED = new Set<Column>(["created_at", "updated_at"]);

/** Columns a later record of a run replaces: all but its id, project and creation time. */
const replaced = names.filter((c) => c !== "id" && c !== "project_id" && c !== "created_at");

/** A status's rank in SQL, as `statusRank` has it. */
const rank = (row: string) =>
  `(case ${row}.status when 'created' then 1 when 'processing' then 2 else 3 end)`;

/**
 * One statement for any batch: the rows travel as one JSON array (one parameter), so the text
 * never changes with the batch's size and nothing is built per column and row but the JSON. A
 * prepared statement (see preparedStatement): preparing it at each batch cost PostgreSQL more CPU
 * than writing a row with every index, and batches are a few records each at a thousand runs a
 * second (docs/decisions/0019-prepared-upsert-and-batch-interval.md). A deleted run's record is
 * not written: its tombstone (runs.deleted_runs) is read FOR SHARE, which locks that table in ROW
 * SHARE mode for the statement, so a deletion (which locks it EXCLUSIVE: deletions.ts) waits for
 * the batches in flight and the batches after it see its tombstones.
 */
const UPSERT = preparedStatement(
  "runs_record_upsert",
  `
  insert into runs.runs (${names.join(", ")}, heartbeat_at)
  select ${names.map((c) => (STAMPED.has(c) ? `coalesce(${c}, now())` : c)).join(", ")}, now()
  from jsonb_to_recordset($1::jsonb) as r(${names.map((c) => `${c} ${columns[c]}`).join(", ")})
  where not exists (select 1 from runs.deleted_runs d where d.id = r.id for share)
  on conflict (id) do update set
    ${replaced.map((c) => `${c} = excluded.${c}`).join(",\n    ")},
    heartbeat_at = case when excluded.status = 'processing' then now() else runs.heartbeat_at end
  where runs.project_id = excluded.project_id and (
    ${rank("excluded")} > ${rank("runs")} or
    (${rank("excluded")} = ${rank("runs")} and excluded.record_seq > runs.record_seq))`,
);

/** A record that can never be decoded, kept aside (runs.dead_records) instead of written. */
interface DeadRecord {
  record: RunRecord;
  error: string;
}

/**
 * The latest record of each run in the batch (status order first, then log order), and the
 * records that cannot be decoded: bytes no decoder reads will never be read, so retrying them
 * would hold back every record after them.
 */
function latestPerRun(records: RunRecord[]): {
  latest: (RecordRow & { seq: number })[];
  dead: DeadRecord[];
} {
  const latest = new Map<string, RecordRow & { seq: number }>();
  const dead: DeadRecord[] = [];
  for (const record of records) {
    let decoded: RecordRow;
    try {
      decoded = recordRow(record.data);
    } catch (err) {
      dead.push({ record, error: err instanceof Error ? err.message : String(err) });
      continue;
    }
    const known = latest.get(decoded.id);
    const later =
      !known ||
      isLaterRecord(
        { status: decoded.status, seq: record.seq },
        { status: known.status, seq: known.seq },
      );
    if (later) latest.set(decoded.id, { ...decoded, seq: record.seq });
  }
  return { latest: [...latest.values()], dead };
}

/** Keeps undecodable records (once per sequence); logs the ones not kept before. */
async function keepDead(db: Kysely<RunsDatabase>, dead: DeadRecord[], logger?: Logger) {
  const { rows } = await db.executeQuery<{ record_seq: string; run_id: string; error: string }>(
    CompiledQuery.raw(
      `insert into runs.dead_records (record_seq, run_id, data, error)
       select * from unnest($1::bigint[], $2::text[], $3::bytea[], $4::text[])
       on conflict (record_seq) do nothing
       returning record_seq, run_id, error`,
      [
        dead.map((d) => d.record.seq),
        dead.map((d) => d.record.runId),
        dead.map((d) => Buffer.from(d.record.data)),
        dead.map((d) => d.error),
      ],
    ),
  );
  for (const row of rows)
    logger?.error(
      { runId: row.run_id, seq: Number(row.record_seq), error: row.error },
      "a run record cannot be decoded: kept in runs.dead_records, not written",
    );
}

/** A row as an element of the statement's JSON array. */
function rowJson(row: Record<string, unknown>, seq: number): string {
  let text = "{";
  for (const c of names) {
    // The JSON columns are JSON text already (NUL made safe): embedded as they are.
    const v = c === "record_seq" ? seq : row[c];
    text += `${text.length > 1 ? "," : ""}"${c}":${isJson(c) ? (v as string) : JSON.stringify(v ?? null)}`;
  }
  return `${text}}`;
}

/**
 * Writes a batch of records in one statement: each run's latest record is inserted, or replaces
 * the stored row if it is later (status order, then log order). Applying a batch twice, or
 * batches out of order, leaves the rows as the latest records say. A record that cannot be
 * decoded is kept in runs.dead_records and logged, and the rest are written, but for the runs deleted
 * (runs.deleted_runs) and those created before `floorId` (the retention). A processing run's lease
 * starts when its record is written, so a store that fell behind does not fail it at once.
 */
export async function writeRecords(
  db: Kysely<RunsDatabase>,
  records: RunRecord[],
  logger?: Logger,
  options: { floorId?: string } = {},
) {
  const { latest, dead } = latestPerRun(records);
  // Kept before the rows are written: a failure of either is a database error, retried.
  if (dead.length > 0) await keepDead(db, dead, logger);
  // Past the retention (a late record of a run whose partition is dropped, or is being): not
  // written, or it would come back, and into a partition the retention no longer looks at.
  const { floorId } = options;
  const kept = floorId ? latest.filter((r) => !(isTimeId(r.id) && r.id < floorId)) : latest;
  if (kept.length < latest.length) {
    logger?.info(
      { runs: latest.length - kept.length },
      "records of runs past the retention not written",
    );
  }
  if (kept.length === 0) return;
  const rows = kept.map(({ seq, row }) => rowJson(row, seq));
  // The statement as it is: nothing for the query builder to compile per batch.
  await db.executeQuery(CompiledQuery.raw(UPSERT, [`[${rows.join(",")}]`]));
}

/** The least time between two logs of the writer falling behind (one per batch attempt). */
const BEHIND_LOG_INTERVAL_MS = 10_000;

/**
 * The runs service's writer: consumes the record log into PostgreSQL in batches until stopped
 * (bounded by count and by bytes as ConsumeOptions' defaults are; `batchIntervalMs` apart under a
 * steady flow when given). A failed batch (the database is down) is retried; the failure counts as
 * a database fault, so the sweeper waits a lease after it. Once the records it writes are older
 * than half the log's maximum age (PIES_RECORD_MAX_AGE_SECONDS), it logs an error every 10 s:
 * JetStream drops a record at that age whether or not it was written, and says nothing. Records of
 * runs created more than `retentionDays` ago are not written (0: kept for ever).
 */
export function startRecordWriter(
  db: Kysely<RunsDatabase>,
  records: RunRecords,
  logger: Logger,
  faults?: DatabaseFaults,
  options: Pick<ConsumeOptions, "batchIntervalMs"> & { retentionDays?: number } = {},
): RecordConsumer {
  let behindLoggedAt = -Infinity;
  const { retentionDays = 0, ...bounds } = options;
  const floorId = () =>
    retentionDays > 0 ? idPrefix(Date.now() - retentionDays * DAY_MS) : undefined;
  return records.consume((batch) => writeRecords(db, batch, logger, { floorId: floorId() }), {
    ...bounds,
    onBehind(behindSeconds, maxAgeSeconds) {
      const now = Date.now();
      if (now - behindLoggedAt < BEHIND_LOG_INTERVAL_MS) return;
      behindLoggedAt = now;
      const fields = { behindSeconds: Math.round(behindSeconds), maxAgeSeconds };
      if (behindSeconds >= maxAgeSeconds) {
        logger.error(
          fields,
          "the runs store is behind the record log by more than PIES_RECORD_MAX_AGE_SECONDS: run records may have been dropped unwritten",
        );
      } else {
        logger.error(
          fields,
          "the runs store is behind the record log by more than half PIES_RECORD_MAX_AGE_SECONDS: run records older than that are dropped unwritten",
        );
      }
    },
    onStall(reason) {
      logger.warn({ reason }, "the record log's consumer stopped delivering: pulling anew");
    },
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
  options: { retentionDays?: number } = {},
): { log: RunLog; stop(): Promise<void> } {
  const writer = startRecordWriter(db, records, logger, faults, options);
  return { log: new RunLog(records), stop: () => writer.stop() };
}
