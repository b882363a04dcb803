import { Code, ConnectError } from "@connectrpc/connect";
import { retryAfterSeconds } from "@pies/common";
import { describe, expect, it } from "vitest";
import { ProjectExecutions } from "./project-limits.js";

/** The error `fn` throws (fails the test when it throws nothing). */
function thrown(fn: () => unknown): ConnectError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    return err as ConnectError;
  }
  throw new Error("nothing was thrown");
}

describe("ProjectExecutions", () => {
  it("refuses a project's execution beyond its limit with RESOURCE_EXHAUSTED and a retry-after", () => {
    const executions = new ProjectExecutions(2);
    executions.take("a");
    executions.take("a");
    const err = thrown(() => executions.take("a"));
    expect(err.code).toBe(Code.ResourceExhausted);
    expect(err.rawMessage).toBe("project a has 2 executions running, its limit; try again shortly");
    expect(retryAfterSeconds(err)).toBe(1);
    // Another project is not affected.
    executions.take("b");
    expect(executions.count("b")).toBe(1);
  });

  it("frees a slot once per release, and forgets a project that holds none", () => {
    const executions = new ProjectExecutions(1);
    const release = executions.take("a");
    release();
    release();
    expect(executions.count("a")).toBe(0);
    const again = executions.take("a");
    expect(thrown(() => executions.take("a")).code).toBe(Code.ResourceExhausted);
    again();
    expect(executions.count("a")).toBe(0);
  });

  it("has no limit at 0", () => {
    const executions = new ProjectExecutions(0);
    for (let i = 0; i < 1000; i++) executions.take("a");
    expect(executions.count("a")).toBe(1000);
  });
});
