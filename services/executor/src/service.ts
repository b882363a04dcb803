import { toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import { answered, fromValue } from "@pies/common";
import { ExecutorService } from "@pies/proto/executor";
import { RunSchema, RunStatus, type Run } from "@pies/proto/runs";
import type { ChatMessage } from "./templates/render.js";
import { callProvider, outcomeUpdate, type Outcome } from "./call.js";
import { ChunkPublisher } from "./chunk-publisher.js";
import type { ExecutorDeps } from "./context.js";
import { prepareExecution, type PreparedExecution } from "./prepare.js";
import { ActiveRuns } from "./active-runs.js";
import { untilRecorded } from "./record.js";

/**
 * How long a blocking caller waits for its run to be recorded once the provider has answered.
 * Past it the caller gets UNAVAILABLE (503, naming the run) while the recording goes on.
 */
const RECORD_WAIT_MS = 10_000;

/**
 * The executor's handlers. GenerateTestData is not built yet and answers UNIMPLEMENTED naming the
 * method.
 */
export function createExecutorService(
  deps: ExecutorDeps,
  active = new ActiveRuns(),
  recordWaitMs = RECORD_WAIT_MS,
): Partial<ServiceImpl<typeof ExecutorService>> {
  return {
    async execute(req) {
      // A blocking execution holds one of its project's execution slots from its start to its end;
      // a streamed one takes its slot when its stream starts it.
      const release = req.stream ? undefined : deps.executions.take(req.caller?.projectId ?? "");
      try {
        const prepared = await prepareExecution(deps, req);
        if (req.stream) {
          const { run } = await deps.runs.createRun({ run: prepared.run });
          return { run };
        }
        // The run stays active (heartbeats go on) until recorded, even if the caller stops waiting.
        let answered!: () => void;
        const providerAnswered = new Promise<void>((resolve) => (answered = resolve));
        const recorded = active.run(prepared.run.id, () =>
          executeBlocking(deps, prepared, answered),
        );
        const run = await withinRecordWait(
          recorded,
          providerAnswered,
          prepared.run.id,
          recordWaitMs,
        );
        return { run };
      } finally {
        release?.();
      }
    },

    async startRun(req) {
      let release: () => void;
      try {
        release = deps.executions.take(req.projectId);
      } catch (err) {
        // Over the project's limit. A run that another request started is only being read again.
        const { run: current } = await deps.runs.getRun({
          projectId: req.projectId,
          id: req.runId,
        });
        if (current && current.status !== RunStatus.CREATED)
          return { started: false, run: current };
        throw err;
      }
      let running = false;
      try {
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
        if (expired(run)) return { started: true, run: await expire(deps, run) };
        const started = run;
        void active.run(started.id, () => executeStreamed(deps, started)).then(release, release);
        running = true;
        return { started: true, run: started };
      } finally {
        // Until the execution is under way, the slot is this request's to give back.
        if (!running) release();
      }
    },
  };
}

/**
 * Steps 5–9 of a blocking execution, for a run already in status processing. Resolves once the
 * run's end is recorded (retried while the runs service or its database is down).
 */
async function executeBlocking(
  deps: ExecutorDeps,
  prepared: PreparedExecution,
  answered: () => void,
): Promise<Run> {
  const startedAt = Date.now();
  const { id, projectId } = prepared.run;
  prepared.run.status = RunStatus.PROCESSING;
  // A child run is recorded first, in one attempt: an unknown parent is a 404 before the provider
  // is called, and while the runs store is down the caller gets 503 at once (nothing has been done
  // that a retry would keep; retrying here held the request open for the whole outage).
  if (prepared.run.parentId) await deps.runs.createRun({ run: prepared.run });
  // Otherwise recording the run and calling the provider overlap: the insert costs the caller
  // nothing, and it is retried until the runs store answers.
  const created = prepared.run.parentId
    ? Promise.resolve(undefined)
    : untilRecorded(() => deps.runs.createRun({ run: prepared.run }), {
        logger: deps.logger,
        what: `the start of run ${id}`,
      }).then(
        () => undefined,
        // A retry after an insert whose answer was lost finds the run there: it is recorded.
        (err: unknown) => (isCode(err, Code.AlreadyExists) ? undefined : err),
      );
  const outcome = await callProvider(deps, prepared.environment, prepared.apiKey, prepared.request);
  answered();
  const createError = await created;
  if (createError) throw createError;
  return recordEnd(deps, projectId, id, outcomeUpdate(outcome, startedAt));
}

/**
 * Records the end of a processing run, retrying until the runs service answers. If the run is no
 * longer processing (an earlier attempt was stored though its answer was lost, or the sweeper
 * failed it), the run as stored is the end.
 */
async function recordEnd(
  deps: ExecutorDeps,
  projectId: string,
  id: string,
  update: ReturnType<typeof outcomeUpdate>,
): Promise<Run> {
  const options = { logger: deps.logger, what: `the end of run ${id}` };
  try {
    const { run } = await untilRecorded(
      () => deps.runs.updateRun({ projectId, id, update, expectedStatus: RunStatus.PROCESSING }),
      options,
    );
    if (run) return run;
  } catch (err) {
    if (!isCode(err, Code.FailedPrecondition)) throw err;
  }
  const { run } = await untilRecorded(() => deps.runs.getRun({ projectId, id }), options);
  if (!run) throw new ConnectError("runs answered no run", Code.Internal);
  return run;
}

const isCode = (err: unknown, code: Code) => err instanceof ConnectError && err.code === code;

/**
 * The recorded run, or UNAVAILABLE if recording takes longer than `ms` after the provider answered
 * (it goes on meanwhile).
 */
async function withinRecordWait(
  recorded: Promise<Run>,
  answered: Promise<void>,
  id: string,
  ms: number,
): Promise<Run> {
  const early = await Promise.race([recorded, answered.then(() => undefined)]);
  if (early) return early;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new ConnectError(
            `run ${id} ended but is not recorded yet (the runs store is unavailable); it will be`,
            Code.Unavailable,
          ),
        ),
      ms,
    );
  });
  try {
    return await Promise.race([recorded, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Whether a streamed run was opened after its ttl. */
function expired(run: Run): boolean {
  const createdAt = run.createdAt ? Number(run.createdAt.seconds) * 1000 : Date.now();
  return run.ttl > 0 && createdAt + run.ttl * 1000 < Date.now();
}

/** Fails a streamed run opened too late, and publishes its end so that the stream closes. */
async function expire(deps: ExecutorDeps, run: Run): Promise<Run> {
  const { run: failed } = await deps.runs.updateRun({
    projectId: run.projectId,
    id: run.id,
    update: {
      status: RunStatus.FAILED,
      error: { code: "stream_expired", message: `the stream was not opened within ${run.ttl} s` },
    },
    expectedStatus: RunStatus.PROCESSING,
  });
  const ended = answered(failed, "run");
  await new ChunkPublisher(deps.bus, run.id).end(toBinary(RunSchema, ended));
  return ended;
}

/** Executes a streamed run that has just moved to processing, publishing its chunks and end. */
async function executeStreamed(deps: ExecutorDeps, run: Run): Promise<void> {
  const startedAt = Date.now();
  const publisher = new ChunkPublisher(deps.bus, run.id);
  let outcome: Outcome;
  try {
    const { environment, apiKey } = await deps.resolver.resolve({
      projectId: run.projectId,
      environmentId: run.environmentId,
      environmentOnly: true,
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
  // Until both are done the run stays active, so its heartbeats go on while the runs service, its
  // database or NATS is down.
  try {
    const final = await recordEnd(deps, run.projectId, run.id, outcomeUpdate(outcome, startedAt));
    const end = toBinary(RunSchema, final);
    await untilRecorded(() => publisher.end(end), {
      logger: deps.logger,
      what: `the end event of run ${run.id}`,
    });
  } catch (err) {
    deps.logger.error({ err, runId: run.id }, "the end of a streamed run could not be recorded");
  }
}

export function executorRoutes(deps: ExecutorDeps, active?: ActiveRuns, recordWaitMs?: number) {
  return (router: ConnectRouter) =>
    router.service(ExecutorService, createExecutorService(deps, active, recordWaitMs));
}
