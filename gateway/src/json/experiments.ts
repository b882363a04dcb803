import { z } from "zod";
import { EXPERIMENT_LIMITS, jsonOf, type JsonValue } from "@pies/common";
import { executeBody, searchRunsBody } from "./runs.js";
import { int32, interactionRef, queryInt32, type InputLimits } from "./limits.js";

/** The body of POST /experiments (DESIGN.md §13). */
export const createExperimentBody = (limits: InputLimits) => {
  const search = searchRunsBody(limits);
  return z
    .object({
      name: z.string().trim().min(1).max(EXPERIMENT_LIMITS.nameLength),
      source: z
        .object({
          query: search.shape.query,
          defaultQueryPath: search.shape.defaultQueryPath,
          filters: search.shape.filters,
          limit: int32(1, EXPERIMENT_LIMITS.runs)
            .optional()
            .describe("Runs selected at most, newest first (default 100)"),
        })
        .strict()
        .describe("The runs to replay: a search of POST /runs/search, taken once at the start"),
      target: z
        .object({
          interaction: interactionRef(limits).describe(
            "The interaction to replay against: an id, `Name@draft`, `Name@3`, `Name@latest`",
          ),
          config: executeBody(limits).shape.config,
        })
        .strict(),
      judge: interactionRef(limits)
        .optional()
        .describe(
          "An interaction that scores each pair from {input, original, candidate}: its result's number field `score`",
        ),
      concurrency: int32(1, EXPERIMENT_LIMITS.concurrency.max)
        .optional()
        .describe(`Pairs replayed at once (default ${EXPERIMENT_LIMITS.concurrency.default})`),
    })
    .strict();
};

export type CreateExperimentBody = z.infer<ReturnType<typeof createExperimentBody>>;

/** `?pairs_limit=&pairs_offset=&changed=` of GET /experiments/:id. */
export const experimentQuery = z
  .object({
    pairs_limit: queryInt32(0, EXPERIMENT_LIMITS.runs)
      .default(100)
      .describe("Pairs answered (0: none)"),
    pairs_offset: queryInt32(0).default(0),
    changed: z
      .enum(["true", "false"])
      .optional()
      .describe("true: only the pairs whose results differ or whose replay failed"),
  })
  .passthrough();

export const listExperimentsQuery = z
  .object({
    limit: queryInt32(1, EXPERIMENT_LIMITS.page.max).default(EXPERIMENT_LIMITS.page.default),
    offset: queryInt32(0).default(0),
  })
  .passthrough();

/**
 * Whether a judge's output schema gives its result a number field `score` (the score read from
 * each of its runs). No schema: the judge is taken at its word, and a result without one fails.
 */
export function scoresAsNumber(resultSchemaJson: Uint8Array): boolean {
  const schema = jsonOf(resultSchemaJson) as { [k: string]: JsonValue } | undefined;
  if (!schema || typeof schema !== "object") return true;
  const score = (schema.properties as { [k: string]: { type?: JsonValue } } | undefined)?.score;
  const type = score?.type;
  const types = Array.isArray(type) ? type : [type];
  return types.includes("number") || types.includes("integer");
}

const side = z.object({
  schema_valid_rate: z.number().nullable().describe("Share of the pairs done with a valid result"),
  p50_latency_ms: z.number().nullable(),
  tokens: z.number().nullable(),
  cost: z.number().nullable().describe("USD, over the pairs done (null: no known price)"),
});

const pair = z.object({
  position: z.number().int(),
  status: z.enum(["pending", "running", "completed", "failed", "cancelled"]),
  source_run: z.string().describe("The run replayed"),
  run: z.string().nullable().describe("The new run (parent: source_run)"),
  input: z.record(z.string(), z.unknown()),
  original: z.object({
    result: z.unknown(),
    schema_valid: z.boolean(),
    latency_ms: z.number().nullable(),
    tokens: z.number().nullable(),
    cost: z.number().nullable(),
  }),
  candidate: z
    .object({
      result: z.unknown(),
      schema_valid: z.boolean().nullable(),
      latency_ms: z.number().nullable(),
      tokens: z.number().nullable(),
      cost: z.number().nullable(),
      error: z
        .object({ code: z.string(), message: z.string() })
        .nullable()
        .describe(
          "The replay's error: its run's, or, where no run could start, the code and message " +
            "the API answers the same call with (invalid_request, not_found, …)",
        ),
    })
    .nullable(),
  exact_match: z.boolean().nullable(),
  diff: z
    .array(z.object({ op: z.string(), path: z.string() }).passthrough())
    .nullable()
    .describe("JSON Patch (RFC 6902) from the original result to the candidate's"),
  judge: z
    .object({
      score: z.number().nullable(),
      run: z.string().nullable(),
      error: z.string().nullable(),
    })
    .nullable(),
  attempts: z.number().int(),
});

/** An experiment as answered (the runs service renders it: services/runs/src/experiments/json.ts). */
export const experimentResponse = z.object({
  id: z.string(),
  name: z.string(),
  status: z.enum(["running", "completed", "cancelled", "failed"]),
  cancel_requested: z.boolean(),
  source: z.record(z.string(), z.unknown()),
  target: z.record(z.string(), z.unknown()),
  judge: z.string().nullable(),
  concurrency: z.number().int(),
  error: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
  ended_at: z.string().nullable(),
  progress: z.object({
    selected: z.number().int().describe("Runs the source matched"),
    skipped: z.number().int().describe("Of them, runs with no stored input (metadata-only)"),
    total: z.number().int().describe("Pairs to replay"),
    done: z.number().int(),
    completed: z.number().int(),
    failed: z.number().int(),
    running: z.number().int(),
    pending: z.number().int(),
    cancelled: z.number().int(),
  }),
  comparison: z.object({
    pairs: z.number().int().describe("The pairs done, over which the rest is counted"),
    exact_match_rate: z.number().nullable(),
    original: side,
    candidate: side,
    judge: z
      .object({
        mean_score: z.number().nullable(),
        scored: z.number().int(),
        failed: z.number().int(),
      })
      .nullable(),
  }),
  pairs: z.array(pair).optional(),
});
