import { toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import { fromValue } from "@pies/common";
import { ExecutorService } from "@pies/proto/executor";
import { RunSchema, RunStatus, type Run } from "@pies/proto/runs";
import type { ChatMessage } from "./templates/render.js";
import { callProvider, outcomeUpdate, type Outcome } from "./call.js";
import { ChunkPublisher } from "./chunk-publisher.js";
import type { ExecutorDeps } from "./context.js";
import { prepareExecution } from "./prepare.js";

/** Background executions of streamed runs, awaited on shutdown. */
export class InFlight {
  private readonly tasks = new Set<Promise<void>>();
  track(task: Promise<void>) {
    this.tasks.add(task);
    void task.finally(() => this.tasks.delete(task));
  }
  get size() {
    return this.tasks.size;
  }
  async settle(timeoutMs: number) {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.tasks]),
      new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs))),
    ]);
    clearTimeout(timer);
  }
}

/**
 * The executor's handlers. GenerateTestData is not built yet and answers UNIMPLEMENTED naming the
 * method.
 */
export function createExecutorService(
  deps: ExecutorDeps,
  inFlight = new InFlight(),
): Partial<ServiceImpl<typeof ExecutorService>> {
  return {
    async execute(req) {
      const prepared = await prepareExecution(deps, req);
      if (req.stream) {
        const { run } = await deps.runs.createRun({ run: prepared.run });
        return { run };
      }
      const startedAt = Date.now();
      prepared.run.status = RunStatus.PROCESSING;
      // Recording the run and calling the provider overlap: the insert costs the caller nothing.
      const created = deps.runs.createRun({ run: prepared.run }).then(
        () => undefined,
        (err: unknown) => err,
      );
      const outcome = await callProvider(
        deps,
        prepared.environment,
        prepared.apiKey,
        prepared.request,
      );
      const createError = await created;
      if (createError) throw createError;
      const { run } = await deps.runs.updateRun({
        projectId: prepared.run.projectId,
        id: prepared.run.id,
        update: outcomeUpdate(outcome, startedAt),
        expectedStatus: RunStatus.PROCESSING,
      });
      return { run };
    },

    async startRun(req) {
      let run: Run | undefined;
      try {
        ({ run } = await deps.runs.updateRun({
          projectId: req.projectId,
          id: req.runId,
          update: { status: RunStatus.PROCESSING },
          expectedStatus: RunStatus.CREATED,
        }));
      } catch (err) {
        if (err instanceof ConnectError && err.code === Code.FailedPrecondition) {
          const current = await deps.runs.getRun({ projectId: req.projectId, id: req.runId });
          return { started: false, run: current.run };
        }
        throw err;
      }
      if (!run) throw new ConnectError("runs answered no run", Code.Internal);
      inFlight.track(executeStreamed(deps, run));
      return { started: true, run };
    },
  };
}

/** Executes a streamed run that has just moved to processing, publishing its chunks and end. */
async function executeStreamed(deps: ExecutorDeps, run: Run): Promise<void> {
  const startedAt = Date.now();
  const publisher = new ChunkPublisher(deps.bus, run.id);
  let outcome: Outcome;
  try {
    const { environment, apiKey } = await deps.catalog.resolveExecution({
      projectId: run.projectId,
      interaction: { case: "interactionId", value: run.interactionId },
      environmentId: run.environmentId,
    });
    if (!environment) throw new Error("catalog answered no environment");
    const request = {
      model: run.modelId,
      messages: (fromValue(run.prompt) ?? []) as unknown as ChatMessage[],
      temperature: run.config?.temperature,
      maxTokens: run.config?.maxTokens,
      schema: run.resultSchema,
    };
    outcome = await callProvider(deps, environment, apiKey, request, (t) => publisher.push(t));
    try {
      await publisher.flush();
    } catch (err) {
      deps.logger.error({ err, runId: run.id }, "chunks could not be published");
      outcome = { ok: false, code: "stream_error", message: "the result could not be streamed" };
    }
  } catch (err) {
    deps.logger.error({ err, runId: run.id }, "streamed execution failed");
    const message = err instanceof ConnectError ? err.rawMessage : "the execution failed";
    outcome = { ok: false, code: "internal", message };
  }
  try {
    const { run: final } = await deps.runs.updateRun({
      projectId: run.projectId,
      id: run.id,
      update: outcomeUpdate(outcome, startedAt),
      expectedStatus: RunStatus.PROCESSING,
    });
    if (final) await publisher.end(toBinary(RunSchema, final));
  } catch (err) {
    deps.logger.error({ err, runId: run.id }, "the end of a streamed run could not be recorded");
  }
}

export function executorRoutes(deps: ExecutorDeps, inFlight?: InFlight) {
  return (router: ConnectRouter) =>
    router.service(ExecutorService, createExecutorService(deps, inFlight));
}
