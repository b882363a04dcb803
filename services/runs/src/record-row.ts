import { decodeStoredRun } from "@pies/common/bus";
import type { RunStatus } from "@pies/proto/runs";
import { runToRow } from "./mappers.js";

/** A run's columns as runToRow gives them. */
export type RunColumns = ReturnType<typeof runToRow>;

/** A decoded record: the run's id and status (which record of a run wins) and its columns. */
export interface RecordRow {
  id: string;
  status: RunStatus;
  row: RunColumns;
}

/**
 * A record's columns: its run (pies.runs.v1.Run, read by run-binary.ts's decodeRun, or by
 * protobuf-es for anything that reader leaves to it, the old payload fields moved into their
 * bytes) as runToRow maps it. Throws for a record that cannot be read or stored (bytes that do not
 * decode, a payload that is not JSON): the writer keeps it aside (see writeRecords).
 */
export function recordRow(data: Uint8Array): RecordRow {
  const run = decodeStoredRun(data);
  return { id: run.id, status: run.status, row: runToRow(run) };
}
