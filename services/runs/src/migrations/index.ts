import type { Migration } from "kysely";
import * as initial from "./2026-11-22T00-00_initial.js";
import * as heartbeats from "./2026-11-22T01-00_run_heartbeats.js";
import * as recordSeq from "./2026-11-23T00-00_record_seq.js";
import * as searchIndexes from "./2026-11-23T12-00_search_indexes.js";
import * as attemptsCachedFrom from "./2026-11-24T00-00_attempts_cached_from.js";
import * as runRollups from "./2026-11-25T00-00_run_rollups.js";
import * as rollupUpdateSameHour from "./2026-11-26T00-00_rollup_update_same_hour.js";
import * as deadRecords from "./2026-11-27T00-00_dead_records.js";
import * as runReferences from "./2026-11-28T00-00_run_references.js";
import * as runsAutovacuum from "./2026-11-28T12-00_runs_autovacuum.js";
import * as runCost from "./2026-12-07T00-00_run_cost.js";
import * as runsPartitioned from "./2026-12-07T06-00_runs_partitioned.js";
import * as runTagRollups from "./2026-12-07T18-00_run_tag_rollups.js";
import * as experiments from "./2026-12-07T20-00_experiments.js";

/** Every migration of the runs schema, by name (names sort in the order they apply). */
export const migrations: Record<string, Migration> = {
  "2026-11-22T00-00_initial": initial,
  "2026-11-22T01-00_run_heartbeats": heartbeats,
  "2026-11-23T00-00_record_seq": recordSeq,
  "2026-11-23T12-00_search_indexes": searchIndexes,
  "2026-11-24T00-00_attempts_cached_from": attemptsCachedFrom,
  "2026-11-25T00-00_run_rollups": runRollups,
  "2026-11-26T00-00_rollup_update_same_hour": rollupUpdateSameHour,
  "2026-11-27T00-00_dead_records": deadRecords,
  "2026-11-28T00-00_run_references": runReferences,
  "2026-11-28T12-00_runs_autovacuum": runsAutovacuum,
  "2026-12-07T00-00_run_cost": runCost,
  "2026-12-07T06-00_runs_partitioned": runsPartitioned,
  "2026-12-07T18-00_run_tag_rollups": runTagRollups,
  "2026-12-07T20-00_experiments": experiments,
};
