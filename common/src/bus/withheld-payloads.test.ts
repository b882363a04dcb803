import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { RunSchema, RunStatus, RunStore, type Run } from "@pies/proto/runs";
import { jsonBytes, jsonOf } from "../json-bytes.js";
import { MemoryRunRecords } from "./memory-records.js";
import { decodeStoredRun } from "./run-binary.js";
import { RunLog } from "./run-log.js";
import type { RunRecord } from "./run-records.js";

const MARK = "marker-4f1c";

/** A run with a payload in every place one can be: each holds MARK. */
const runWithPayloads = (store: RunStore): Run =>
  create(RunSchema, {
    id: `r_${store}`,
    projectId: "p_1",
    status: RunStatus.FAILED,
    store,
    tags: ["t"],
    parametersJson: jsonBytes({ secret: MARK }),
    promptJson: jsonBytes([{ role: "user", content: `about ${MARK}` }]),
    resultJson: jsonBytes({ answer: MARK }),
    error: { code: "validation_error", message: "the answer failed", dataJson: jsonBytes(MARK) },
    attempts: [
      { number: 1, error: { code: "validation_error", dataJson: jsonBytes({ content: MARK }) } },
      { number: 2, promptAddedJson: jsonBytes([{ role: "assistant", content: MARK }]) },
    ],
    tokenUse: { prompt: 3, result: 4, total: 7 },
    cost: { input: 1, output: 2, total: 3, currency: "USD" },
    executionTime: 12n,
  });

/** A log whose writer keeps every record it is given. */
function recordingLog() {
  const records = new MemoryRunRecords();
  const written: RunRecord[] = [];
  const consumer = records.consume(async (batch) => void written.push(...batch), {
    onError: () => {},
  });
  return { log: new RunLog(records), records, written, consumer };
}

const decoder = new TextDecoder();

describe("the records of a metadata-only run", () => {
  it("hold none of its payloads, while the run put keeps them all", async () => {
    const { log, records, written, consumer } = recordingLog();
    const run = runWithPayloads(RunStore.METADATA);
    await log.put(run, 0);
    await consumer.stop();
    const [record] = written;
    expect(decoder.decode(record!.data)).not.toContain(MARK);
    const stored = decodeStoredRun(record!.data);
    expect(jsonOf(stored.parametersJson)).toEqual({});
    expect(stored.promptJson).toHaveLength(0);
    expect(stored.resultJson).toHaveLength(0);
    // The rest stays, the codes and messages of its error and attempts with it.
    expect(stored).toMatchObject({
      id: run.id,
      status: RunStatus.FAILED,
      store: RunStore.METADATA,
      tags: ["t"],
      tokenUse: { prompt: 3, result: 4, total: 7 },
      cost: { total: 3 },
      executionTime: 12n,
      error: { code: "validation_error", message: "the answer failed" },
    });
    expect(stored.error!.dataJson).toHaveLength(0);
    expect(stored.attempts.map((a) => [a.number, a.error?.code, a.promptAddedJson.length])).toEqual(
      [
        [1, "validation_error", 0],
        [2, undefined, 0],
      ],
    );
    expect(decodeStoredRun((await records.last(run.id))!.data)).toEqual(stored);
    // The caller's run is as it was, but for what every put sets (its dates).
    expect(jsonOf(run.resultJson)).toEqual({ answer: MARK });
    expect(jsonOf(run.attempts[1]!.promptAddedJson)).toEqual([
      { role: "assistant", content: MARK },
    ]);
    expect(jsonOf(run.error!.dataJson)).toBe(MARK);
    expect(run.updatedAt).toEqual(stored.updatedAt);
  });

  it("leaves the records of every other run whole", async () => {
    const { log, written, consumer } = recordingLog();
    for (const store of [RunStore.UNSPECIFIED, RunStore.FULL])
      await log.put(runWithPayloads(store));
    await consumer.stop();
    for (const record of written) {
      const text = decoder.decode(record.data);
      // Six: parameters, prompt, result, the error's data and both attempts' payloads.
      expect(text.split(MARK)).toHaveLength(7);
    }
  });
});
