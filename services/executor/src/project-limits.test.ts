import { Code } from "@connectrpc/connect";
import { retryAfterSeconds } from "@pies/common";
import { expectCode } from "@pies/testkit";
import { describe, expect, it } from "vitest";
import { ProjectExecutions } from "./project-limits.js";

describe("ProjectExecutions", () => {
  it("refuses a project's execution beyond its limit with RESOURCE_EXHAUSTED and a retry-after", async () => {
    const executions = new ProjectExecutions(2);
    executions.take("a");
    executions.take("a");
    const err = await expectCode(() => executions.take("a"), Code.ResourceExhausted);
    expect(err.rawMessage).toBe("project a has 2 executions running, its limit; try again shortly");
    expect(retryAfterSeconds(err)).toBe(1);
    // Another project is not affected.
    executions.take("b");
    expect(executions.count("b")).toBe(1);
  });

  it("frees a slot once per release, and forgets a project that holds none", async () => {
    const executions = new ProjectExecutions(1);
    const release = executions.take("a");
    release();
    release();
    expect(executions.count("a")).toBe(0);
    const again = executions.take("a");
    await expectCode(() => executions.take("a"), Code.ResourceExhausted);
    again();
    expect(executions.count("a")).toBe(0);
  });

  it("has no limit at 0", () => {
    const executions = new ProjectExecutions(0);
    for (let i = 0; i < 1000; i++) executions.take("a");
    expect(executions.count("a")).toBe(1000);
  });
});
