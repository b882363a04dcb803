import { sql, type Kysely } from "kysely";
import type { RunRecord } from "@pies/common/bus";
import { DAY_MS, idPrefix } from "./partitions.js";
import { recordRow } from "./record-row.js";
import { writeRecords } from "./record-writer.js";
import type { RunsDatabase } from "./tables.js";

/** What a replay of the dead records did. */
export interface DeadRecordsReplay {
  /** Records the current decoder read: written as the writer writes them, and deleted. */
  replayed: number;
  /** Records it still cannot read: kept. */
  undecodable: number;
  /** A few of those, with the current decoder's error. */
  examples: { seq: number; runId: string; error: string }[];
}

/** Dead records read, written and deleted per transaction. */
const BATCH = 100;

/**
 * Reads runs.dead_records in stream order and tries each record with the current decoder (after a
 * release that reads what an earlier one could not): each batch of those that now decode is
 * written with `writeRecords` and deleted from dead_records in one transaction, so a record is
 * never both written and deleted only in part; those that still fail stay. Writing is idempotent
 * and a run's later record wins, so replaying a record whose run moved on since changes nothing,
 * and a replay may run beside the runs service. As the writer, it leaves out deleted runs and those
 * created more than `retentionDays` ago (0: none), which would otherwise come back.
 */
export async function replayDeadRecords(
  db: Kysely<RunsDatabase>,
  { retentionDays = 0 }: { retentionDays?: number } = {},
): Promise<DeadRecordsReplay> {
  const report: DeadRecordsReplay = { replayed: 0, undecodable: 0, examples: [] };
  const floorId = retentionDays > 0 ? idPrefix(Date.now() - retentionDays * DAY_MS) : undefined;
  for (let after = "-1"; ;) {
    const { rows } = await sql<{ record_seq: string; run_id: string; data: Uint8Array }>`
      select record_seq, run_id, data from runs.dead_records
      where record_seq > ${after}::bigint order by record_seq limit ${BATCH}`.execute(db);
    const last = rows.at(-1);
    if (!last) return report;
    after = last.record_seq;
    const decoded: RunRecord[] = [];
    for (const row of rows) {
      const record = { runId: row.run_id, seq: Number(row.record_seq), data: row.data };
      try {
        recordRow(record.data);
        decoded.push(record);
      } catch (err) {
        report.undecodable++;
        if (report.examples.length < 5) {
          const error = err instanceof Error ? err.message : String(err);
          report.examples.push({ seq: record.seq, runId: record.runId, error });
        }
      }
    }
    if (decoded.length === 0) continue;
    await db.transaction().execute(async (trx) => {
      await writeRecords(trx, decoded, undefined, { floorId });
      await sql`delete from runs.dead_records
        where record_seq = any(${decoded.map((r) => r.seq)}::bigint[])`.execute(trx);
    });
    report.replayed += decoded.length;
  }
}
