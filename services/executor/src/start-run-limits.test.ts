import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { createLogger, retryAfterSeconds } from "@pies/common";
import { RecordConflict } from "@pies/common/bus";
import { expectCode } from "@pies/testkit";
import { ExecutorService } from "@pies/proto/executor";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import { describe, expect, it } from "vitest";
import type { ExecutorDeps } from "./context.js";
import { ProjectExecutions } from "./project-limits.js";
import { createExecutorService } from "./service.js";

/** An executor whose record log answers `status` for every run and fails puts with `update`. */
function executor(status: RunStatus, update: () => never, executions = new ProjectExecutions(1)) {
  let updates = 0;
  const deps = {
    executions,
    // A failed start put is repeated (and logged) before the request is answered.
    logger: createLogger("start-run-limits-test", "silent"),
    log: {
      last: async () => ({
        seq: 1,
        run: create(RunSchema, { id: "r", projectId: "p", status, stream: true }),
      }),
      put: async () => {
        updates++;
        update();
      },
    },
  } as unknown as ExecutorDeps;
  const client = createClient(
    ExecutorService,
    createRouterTransport((router) => router.service(ExecutorService, createExecutorService(deps))),
  );
  return { client, executions, updates: () => updates };
}

const mustNotStart = (): never => {
  throw new Error("the run must not be started");
};

describe("startRun and the project's execution limit", () => {
  it("refuses to start a created run of a project at its limit, with a retry-after", async () => {
    const { client, executions, updates } = executor(RunStatus.CREATED, mustNotStart);
    executions.take("p");
    const err = await expectCode(
      client.startRun({ projectId: "p", runId: "r" }),
      Code.ResourceExhausted,
    );
    expect(retryAfterSeconds(err)).toBe(1);
    expect(updates()).toBe(0);
    expect(executions.count("p")).toBe(1);
  });

  it("answers a reader of a run that already started without starting it, even at the limit", async () => {
    const { client, executions, updates } = executor(RunStatus.PROCESSING, mustNotStart);
    executions.take("p");
    const answer = await client.startRun({ projectId: "p", runId: "r" });
    expect(answer.started).toBe(false);
    expect(answer.run?.status).toBe(RunStatus.PROCESSING);
    expect(updates()).toBe(0);
  });

  it("gives the slot back when the run cannot be started", async () => {
    const raced = executor(RunStatus.CREATED, () => {
      throw new RecordConflict("r");
    });
    expect((await raced.client.startRun({ projectId: "p", runId: "r" })).started).toBe(false);
    expect(raced.executions.count("p")).toBe(0);

    const down = executor(RunStatus.CREATED, () => {
      throw new ConnectError("runs is down", Code.Unavailable);
    });
    await expectCode(down.client.startRun({ projectId: "p", runId: "r" }), Code.Unavailable);
    expect(down.executions.count("p")).toBe(0);
  });
});
