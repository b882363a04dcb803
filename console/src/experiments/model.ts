import type { paths } from "../api/schema";

/** An experiment as `GET /experiments/:id` answers it (with a page of its pairs). */
export type Experiment =
  paths["/api/v1/experiments/{id}"]["get"]["responses"][200]["content"]["application/json"];
/** An experiment without its pairs: a line of `GET /experiments`, an event of its stream. */
export type ExperimentSummary = Omit<Experiment, "pairs">;
/** One pair: the run replayed, its replay, and their difference. */
export type Pair = NonNullable<Experiment["pairs"]>[number];
export type Comparison = Experiment["comparison"];
export type Progress = Experiment["progress"];
/** What `POST /experiments` takes. */
export type CreateExperimentBody =
  paths["/api/v1/experiments"]["post"]["requestBody"]["content"]["application/json"];
/** One operation of a pair's `diff` (JSON Patch, RFC 6902). */
export type PatchOp = NonNullable<Pair["diff"]>[number];

/** The most runs an experiment selects, and the most pairs replayed at once (the API's bounds). */
export const MAX_RUNS = 1000;
export const MAX_CONCURRENCY = 16;
export const DEFAULT_RUNS = 100;
export const DEFAULT_CONCURRENCY = 4;
