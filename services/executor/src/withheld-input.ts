import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "@pies/common";
import {
  copyRun,
  decodeRun,
  encodeRun,
  isMetadataOnly,
  zeroRun,
  type RunInputs,
} from "@pies/common/bus";
import type { Run } from "@pies/proto/runs";

/**
 * A metadata-only streamed run's record carries no input (docs/decisions/0063-metadata-only-runs.md):
 * the parameters and the rendered prompt wait for its stream in RunInputs instead, whichever
 * executor starts it. They travel as a run's bytes holding those two fields.
 */
export async function keepInput(inputs: RunInputs, run: Run): Promise<void> {
  const input = zeroRun();
  input.id = run.id;
  input.parametersJson = run.parametersJson;
  input.promptJson = run.promptJson;
  try {
    await inputs.put(run.id, encodeRun(input));
  } catch (err) {
    throw new ConnectError(
      "the inputs of streamed runs are unavailable",
      Code.Unavailable,
      undefined,
      undefined,
      err,
    );
  }
}

/**
 * The run with the input kept for it, read back at its start; undefined when it is gone (older
 * than the inputs are kept, or lost with an embedded process).
 */
export async function withKeptInput(inputs: RunInputs, run: Run): Promise<Run | undefined> {
  const data = await inputs.get(run.id);
  if (!data) return undefined;
  const input = decodeRun(data);
  const restored = copyRun(run);
  restored.parametersJson = input.parametersJson;
  restored.promptJson = input.promptJson;
  return restored;
}

/**
 * Forgets a started (or expired) metadata-only run's input, without holding its execution up: a
 * drop that fails leaves the input to age out.
 */
export function dropInput(inputs: RunInputs, run: Run, logger: Logger): void {
  if (!isMetadataOnly(run)) return;
  inputs.drop(run.id).catch((err: unknown) => {
    logger.warn({ err, runId: run.id }, "a started run's input could not be dropped; it ages out");
  });
}
