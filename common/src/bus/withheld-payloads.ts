import { RunStore, type Run, type RunAttempt, type RunError } from "@pies/proto/runs";
import { jsonBytes, NO_JSON } from "../json-bytes.js";
import { copyRun } from "./run-copy.js";

/** `{}`: a run's parameters as the store answers them when it has none (never written into). */
const EMPTY_OBJECT = jsonBytes({});

/** Whether a run is metadata-only (its interaction's `store: "metadata"`, DESIGN.md §8). */
export const isMetadataOnly = (run: Pick<Run, "store">) => run.store === RunStore.METADATA;

/**
 * The run as a record of a metadata-only run holds it: without its parameters, prompt and result,
 * nor the payloads its error and attempts carry (a repair's prompt holds the answer it rejected,
 * a validation error's data the answer itself); their codes and messages stay. A shallow copy:
 * the run itself, which its caller is answered with, keeps everything
 * (docs/decisions/0063-metadata-only-runs.md).
 */
export function withoutPayloads(run: Run): Run {
  // copyRun's one shape, not a spread with fields set after it: that made V8 build the copy as a
  // dictionary, 20 µs a record where the encoding itself takes 4 (decision 0013 has the why).
  const copy = copyRun(run);
  copy.parametersJson = EMPTY_OBJECT;
  copy.promptJson = NO_JSON;
  copy.resultJson = NO_JSON;
  if (run.error) copy.error = errorWithoutData(run.error);
  if (run.attempts.length > 0) copy.attempts = run.attempts.map(attemptWithoutPayloads);
  return copy;
}

const errorWithoutData = (error: RunError): RunError =>
  error.dataJson.length === 0 ? error : { ...error, dataJson: NO_JSON };

const attemptWithoutPayloads = (attempt: RunAttempt): RunAttempt => ({
  ...attempt,
  promptAddedJson: NO_JSON,
  error: attempt.error && errorWithoutData(attempt.error),
});
