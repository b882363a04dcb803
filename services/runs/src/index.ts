export { createRunsService, runsRoutes, type RunsDeps } from "./service.js";
export { migrations as runsMigrations } from "./migrations/index.js";
export { indexBuilds as runsIndexBuilds } from "./migrations/index-builds.js";
export type { RunsDatabase } from "./tables.js";
export {
  runsConfigSchema,
  runsSweepSettingsSchema,
  deadRecordSettingsSchema,
  runsLifecycleSettingsSchema,
  loadRunsConfig,
  type RunsConfig,
} from "./config.js";
export { startRuns, type RunsProcess } from "./start.js";
export { leaseObserved, startSweeper, sweepRuns, type SweepOptions } from "./sweeper.js";
export { startRecordWriter, startRunsStore, writeRecords } from "./record-writer.js";
export {
  DEFAULT_PARTITION_DAYS,
  boundLegacyRuns,
  dropPartitionsBelow,
  idPrefix,
  listPartitions,
  makePartitions,
} from "./partitions.js";
export {
  countDeadRecords,
  pruneDeadRecords,
  startDeadRecordsPruner,
  type DeadRecordBounds,
} from "./dead-records.js";
export { replayDeadRecords, type DeadRecordsReplay } from "./dead-records-replay.js";
export { applyRetention, projectRetention, startMaintenance } from "./retention.js";
export { ExperimentRunner, experimentTag, judgeTag } from "./experiments/runner.js";
