// @ts-check
import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { newId, toValue } from "@pies/common";
import { RunSchema, RunStatus } from "@pies/proto/runs";

/**
 * A completed run as the bench's executions record it (the bench's interaction, prompt and a
 * short answer numbered `i`), with a fresh id: the record-cost scripts' sample.
 * @param {number} i
 */
export function benchRun(i) {
  const now = timestampNow();
  const text = "the quarterly report: revenue grew 12%, costs fell 3%, and headcount stayed flat.";
  return create(RunSchema, {
    id: newId(),
    projectId: "0192aa00000000000000p001",
    accountId: "0192aa00000000000000a001",
    interactionId: "0192aa00000000000000i001",
    interactionName: "Summary",
    environmentId: "0192aa00000000000000e001",
    environmentName: "bench-upstream",
    provider: "openai_compatible",
    modelId: "gpt-4o-mini",
    status: RunStatus.COMPLETED,
    parameters: { text },
    prompt: toValue([{ role: "user", content: `Summarise ${text}` }]),
    result: toValue(`fake answer ${i}: revenue up, costs down.`),
    config: { environmentId: "0192aa00000000000000e001", model: "gpt-4o-mini" },
    source: { type: "api", label: "bench", principalType: "api_key", principalId: "k1" },
    tokenUse: { prompt: 21, result: 9, total: 30 },
    executionTime: 6n,
    createdAt: now,
    updatedAt: now,
  });
}
