import type { Kysely } from "kysely";
import { isEnded, isLaterRecord, type RecordedRun, type RunLog } from "@pies/common/bus";
import { isDeleted } from "./deletions.js";
import { runToProto } from "./mappers.js";
import type { RunsDatabase } from "./tables.js";

/**
 * A run as it stands: the stored row, or the record log's last record of it when that is later
 * (recorded but not yet written: read-your-writes). A row of an ended run is final and the log is
 * not asked, unless `ended` is set (the caller needs the log's sequence to make a conditional put).
 * `seq` is the log's sequence of the run's last record, 0 when the log no longer holds one. Another
 * project's run is not found, nor a deleted one.
 */
export async function findRun(
  deps: { db: Kysely<RunsDatabase>; log: RunLog },
  projectId: string,
  id: string,
  options: { ended?: boolean } = {},
): Promise<RecordedRun | undefined> {
  const row = await deps.db
    .selectFrom("runs.runs")
    .selectAll()
    .where("id", "=", id)
    .where("project_id", "=", projectId)
    .executeTakeFirst();
  const stored = row && runToProto(row);
  if (stored && isEnded(stored.status) && !options.ended) return { seq: 0, run: stored };
  const recorded = await deps.log.last(id);
  if (!recorded || recorded.run.projectId !== projectId) {
    return stored && { seq: 0, run: stored };
  }
  // Only in the log: written yet, or deleted (the log keeps its records for a while).
  if (!stored) return (await isDeleted(deps.db, id)) ? undefined : recorded;
  // The same record in both (equal sequences) is answered from the store.
  const later = isLaterRecord(
    { status: recorded.run.status, seq: recorded.seq },
    { status: stored.status, seq: Number(row.record_seq) },
  );
  return later ? recorded : { seq: recorded.seq, run: stored };
}
