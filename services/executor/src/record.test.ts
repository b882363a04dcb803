import { Code, ConnectError } from "@connectrpc/connect";
import { createLogger } from "@pies/common";
import { describe, expect, it } from "vitest";
import { isRetryable, untilRecorded } from "./record.js";

const logger = createLogger("record-test", "silent");

/** An attempt that fails with each of `errors` in turn, then answers "recorded". */
function attempts(...errors: unknown[]) {
  let calls = 0;
  const attempt = async () => {
    const error = errors[calls++];
    if (error !== undefined) throw error;
    return "recorded";
  };
  return { attempt, calls: () => calls };
}

describe("untilRecorded", () => {
  it("retries while the runs store is unavailable, with capped exponential pauses", async () => {
    const down = new ConnectError("the runs service is unavailable", Code.Unavailable);
    const { attempt, calls } = attempts(down, down, down, down, new Error("connection reset"));
    const pauses: number[] = [];
    const result = await untilRecorded(attempt, {
      logger,
      what: "the end of run r",
      initialDelayMs: 10,
      maxDelayMs: 50,
      sleep: async (ms) => void pauses.push(ms),
    });
    expect(result).toBe("recorded");
    expect(calls()).toBe(6);
    expect(pauses).toEqual([10, 20, 40, 50, 50]);
  });

  it("stops at an answer a retry cannot change, and throws it", async () => {
    const ended = new ConnectError("run r is completed, not processing", Code.FailedPrecondition);
    const { attempt, calls } = attempts(
      new ConnectError("x", Code.DeadlineExceeded),
      ended,
      undefined,
    );
    await expect(untilRecorded(attempt, { logger, what: "r", sleep: async () => {} })).rejects.toBe(
      ended,
    );
    expect(calls()).toBe(2);
  });

  it("stops after the attempts given, throwing the last failure", async () => {
    const down = new ConnectError("the runs service is unavailable", Code.Unavailable);
    const last = new ConnectError("still down", Code.Unavailable);
    const { attempt, calls } = attempts(down, down, last, undefined);
    await expect(
      untilRecorded(attempt, { logger, what: "r", attempts: 3, sleep: async () => {} }),
    ).rejects.toBe(last);
    expect(calls()).toBe(3);
  });

  it("tells retryable failures from final answers", () => {
    for (const code of [Code.Unavailable, Code.DeadlineExceeded, Code.Internal, Code.Aborted]) {
      expect(isRetryable(new ConnectError("x", code))).toBe(true);
    }
    for (const code of [
      Code.FailedPrecondition,
      Code.AlreadyExists,
      Code.NotFound,
      Code.InvalidArgument,
    ]) {
      expect(isRetryable(new ConnectError("x", code))).toBe(false);
    }
    expect(isRetryable(new Error("NATS: disconnected"))).toBe(true);
  });
});
