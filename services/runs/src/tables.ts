import type { ColumnType, Selectable } from "kysely";
import type { JsonObject, JsonValue } from "@pies/common";

type Json<T = JsonValue> = ColumnType<T, string | undefined, string>;
/** A column with a default: optional on insert. */
type Defaulted<T> = ColumnType<T, T | undefined, T>;

export interface RunsTable {
  id: string;
  project_id: string;
  account_id: string;
  interaction_id: string;
  interaction_name: string;
  environment_id: string;
  environment_name: string;
  provider: string;
  model_id: string;
  status: string;
  stream: boolean;
  parameters: Json<JsonObject>;
  result: Json<JsonValue | null>;
  prompt: Json<JsonValue | null>;
  tags: string[];
  config: Json<JsonObject>;
  source: Json<JsonObject>;
  prompt_tokens: number | null;
  result_tokens: number | null;
  total_tokens: number | null;
  execution_time: number | null;
  error: Json<JsonObject | null>;
  ttl: number;
  parent_id: string | null;
  cache_policy: Json<JsonObject | null>;
  result_schema: Json<JsonObject | null>;
  cached: boolean;
  /** The run's provider calls when there was more than one (RunAttempt as JSON). */
  attempts: Json<JsonValue[] | null>;
  cached_from: string | null;
  /** The interaction's status, segments (promptRefJson's) and last update at the execution. */
  interaction_status: Defaulted<string>;
  interaction_prompts: Json<JsonValue[] | null>;
  interaction_updated_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** The names of the project and account the run's caller acted in. */
  project_name: Defaulted<string>;
  account_name: Defaulted<string>;
  created_at: ColumnType<Date, Date | undefined, never>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
  /** Position in the record log of the record this row holds (0: written directly). */
  record_seq: ColumnType<number, number | undefined, number>;
  /** What the run's tokens cost, USD; null without a known price (RunCost). */
  cost_input: number | null;
  cost_output: number | null;
  cost_total: number | null;
  cost_estimated: boolean | null;
  /** Last sign of life from the executor of a processing run. */
  heartbeat_at: ColumnType<Date, Date | undefined, Date>;
}

/** Runs counted by project, hour and day of updated_at, status, model and top level (by triggers). */
export interface RunRollupsTable {
  project_id: string;
  /** The bucket's width: 1 (an hour) or 24 (a day, in UTC). */
  hours: number;
  bucket: Date;
  status: string;
  model_id: string;
  top_level: boolean;
  n: ColumnType<string | number, number, number>;
}

/** Runs counted as in run_rollups but not by model, and by each of their tags (by triggers). */
export interface RunTagRollupsTable extends Omit<RunRollupsTable, "model_id"> {
  tag: string;
}

/** An experiment (DESIGN.md §13; migrations/2026-12-07T20-00_experiments.ts says each column). */
export interface ExperimentsTable {
  id: string;
  project_id: string;
  name: string;
  status: string;
  cancel_requested: Defaulted<boolean>;
  source: Json<JsonObject>;
  target: Json<JsonObject>;
  judge: string | null;
  request: Uint8Array;
  judge_request: Uint8Array | null;
  concurrency: number;
  selected: number;
  skipped: number;
  error: string | null;
  owner: string | null;
  lease_until: Date | null;
  created_at: ColumnType<Date, Date | undefined, never>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
  ended_at: Date | null;
}

/** One selected run of an experiment and its replay. */
export interface ExperimentPairsTable {
  experiment_id: string;
  position: number;
  source_run_id: string;
  status: Defaulted<string>;
  attempts: Defaulted<number>;
  input: Json<JsonObject>;
  original: Json<JsonValue | null>;
  original_valid: boolean;
  original_latency_ms: number | null;
  original_tokens: number | null;
  original_cost: number | null;
  run_id: string | null;
  candidate: Json<JsonValue | null>;
  candidate_valid: boolean | null;
  candidate_latency_ms: number | null;
  candidate_tokens: number | null;
  candidate_cost: number | null;
  exact_match: boolean | null;
  diff: Json<JsonValue[] | null>;
  error: Json<JsonObject | null>;
  judge_run_id: string | null;
  judge_score: number | null;
  judge_error: string | null;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

export interface RunsDatabase {
  "runs.runs": RunsTable;
  "runs.run_rollups": RunRollupsTable;
  "runs.run_tag_rollups": RunTagRollupsTable;
  "runs.experiments": ExperimentsTable;
  "runs.experiment_pairs": ExperimentPairsTable;
}

export type RunRow = Selectable<RunsTable>;
