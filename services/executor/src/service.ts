import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type ServiceImpl } from "@connectrpc/connect";
import {
  answered,
  inSpan,
  jsonBytes,
  jsonOf,
  NO_JSON,
  notFound,
  SpanKind,
  tooLargeError,
  type JsonObject,
} from "@pies/common";
import {
  encodeRun,
  EventTooLarge,
  isMetadataOnly,
  newPutId,
  RecordConflict,
  RecordTooLarge,
  withFields,
} from "@pies/common/bus";
import { ExecutorService } from "@pies/proto/executor";
import { CachePolicySchema, type CachePolicy } from "@pies/proto/catalog";
import { RunErrorSchema, RunStatus, TokenUsageSchema, type Run } from "@pies/proto/runs";
import type { ChatMessage } from "./templates/render.js";
import type { CompletionRequest } from "./providers/types.js";
import { callProvider, endedRun, type Outcome } from "./call.js";
import { ChunkPublisher } from "./chunk-publisher.js";
import type { ExecutorDeps } from "./context.js";
import { prepareExecution, repairsOf, type PreparedExecution } from "./prepare.js";
import { ResultCache, type CachedResult } from "./result-cache.js";
import { prepareTestData, testDataItems } from "./test-data.js";
import { renderPrompt } from "./render-prompt.js";
import { LRUCache } from "lru-cache";
import { ActiveRuns } from "./active-runs.js";
import { untilRecorded } from "./record.js";
import { dropInput, keepInput, withKeptInput } from "./withheld-input.js";
import { deepFreeze } from "@pies/common/server";

/** The signal of an execution nothing cancels but its own timeouts. */
const NEVER_ABORTED = new AbortController().signal;

/**
 * How long a blocking caller waits for its run to be recorded once the provider has answered.
 * Past it the caller gets UNAVAILABLE (503, naming the run) while the recording goes on.
 */
const RECORD_WAIT_MS = 10_000;

/** The executor's handlers. */
export function createExecutorService(
  deps: ExecutorDeps,
  active = new ActiveRuns(),
  recordWaitMs = RECORD_WAIT_MS,
): Partial<ServiceImpl<typeof ExecutorService>> {
  const created = new CreatedRuns();
  return {
    async execute(req, ctx) {
      // A blocking execution holds one of its project's execution slots from its start to its end;
      // a streamed one takes its slot when its stream starts it (here, when started at once).
      const release =
        req.stream && !req.start ? undefined : deps.executions.take(req.caller?.projectId ?? "");
      let handedOver = false;
      try {
        const prepared = await prepareExecution(deps, req);
        checkRecordFits(deps, prepared.run);
        if (req.stream && prepared.run.parentId) {
          await checkParent(deps, prepared.run.projectId, prepared.run.parentId);
        }
        if (req.stream && release) {
          // Started at once (ExecuteRequest.start): the slot goes with the execution.
          handedOver = true;
          return { run: await startAtOnce(deps, active, prepared, release) };
        }
        if (req.stream) {
          // A metadata-only run's input waits beside its record, which has none (both before the
          // caller learns the run's id, so before anyone can start it).
          const [seq] = await Promise.all([
            deps.log.put(prepared.run, 0),
            isMetadataOnly(prepared.run) ? keepInput(deps.inputs, prepared.run) : undefined,
          ]);
          created.keep(prepared.run, seq, prepared.request);
          return { run: prepared.run };
        }
        if (prepared.cache?.mode === "read") {
          const hit = await deps.results.get(prepared.run.cacheKey);
          if (hit) {
            const recorded = recordHit(deps, prepared.run, hit);
            // Nothing to wait for but the record: at most the record wait, then 503 naming it.
            const run = await withinRecordWait(
              recorded,
              Promise.resolve(),
              prepared.run.id,
              recordWaitMs,
            );
            return { run };
          }
        }
        // A detached execution is not cancelled by its caller's going (ExecuteRequest.detached).
        const signal = req.detached ? NEVER_ABORTED : ctx.signal;
        return { run: await runBlocking(deps, active, prepared, signal, recordWaitMs) };
      } finally {
        if (!handedOver) release?.();
      }
    },

    async generateTestData(req, ctx) {
      const release = deps.executions.take(req.caller?.projectId ?? "");
      try {
        const prepared = await prepareTestData(deps, req);
        checkRecordFits(deps, prepared.run);
        const run = await runBlocking(deps, active, prepared, ctx.signal, recordWaitMs);
        const items =
          run.status === RunStatus.COMPLETED ? testDataItems(jsonOf(run.resultJson)) : [];
        return { run, itemsJson: jsonBytes(items) };
      } finally {
        release();
      }
    },

    renderPrompt(req) {
      return renderPrompt(deps, req);
    },

    async startRun(req) {
      let release: () => void;
      try {
        release = deps.executions.take(req.projectId);
      } catch (err) {
        // Over the project's limit. A run that another request started is only being read again.
        const current = await streamedRun(deps, req.projectId, req.runId);
        if (current.run.status !== RunStatus.CREATED) return { started: false, run: current.run };
        throw err;
      }
      let running = false;
      // Under way while the start is being recorded; abandoned if the start is not recorded.
      let execution: StreamedExecution | undefined;
      // Provider calls abandoned so far: the slot is given back once they have settled.
      const abandoned: Promise<unknown>[] = [];
      try {
        // The run as this executor created it, when it did (no read of the log), else as the log
        // has it. Either way exactly one request starts it: the put is conditional on the record
        // read, and a run changed since it was created here is read again.
        let current: KeptRun | undefined = created.take(req.projectId, req.runId);
        let seq: number | undefined;
        let run!: Run;
        let request: CompletionRequest | undefined;
        let late = false;
        while (seq === undefined) {
          const fromMemory = current !== undefined;
          current ??= await streamedRun(deps, req.projectId, req.runId);
          if (current.run.status !== RunStatus.CREATED) return { started: false, run: current.run };
          run = withFields(current.run, { status: RunStatus.PROCESSING });
          request = current.request;
          late = expired(run);
          // A run this executor created is called while its start is being recorded, not after
          // (a JetStream round trip less before the first chunk): its chunks are held until the
          // put is acknowledged, and if the put finds the run moved on, the call is cancelled and
          // nothing of it is published or recorded. A run read from the log is called once its
          // start is recorded, as before: another request may be starting it too (the same
          // stream opened twice, one of them here with the run in memory), and only the one
          // that wins may call the provider. A run opened too late is not called at all.
          execution = fromMemory && !late ? new StreamedExecution(deps, run, request) : undefined;
          try {
            // Started once the log has the record in order (the condition decides who starts
            // it), not once it is stored: embedded, that is one write of PGlite less before the
            // provider is called. The end's record, stored before the stream closes, stores this
            // one too; if the process dies first, the run stays `created` and the sweeper fails
            // it when its ttl runs out, as it would a stream never opened. A put that fails
            // (NATS timed out, and may have stored it all the same) is repeated a few times under
            // the same id, which JetStream stores once, before the request is answered 503.
            seq = await recordStart(deps, run, current.seq);
          } catch (err) {
            // Nothing of it is published from here on; the call stops on its own time.
            if (execution) abandoned.push(execution.abandon());
            execution = undefined;
            if (!(err instanceof RecordConflict)) throw err;
            if (!fromMemory) {
              const latest = await currentRun(deps, req.projectId, req.runId);
              return { started: false, run: latest.run };
            }
            current = undefined;
          }
        }
        if (late) return { started: true, run: await expire(deps, run, seq) };
        const started = execution ?? new StreamedExecution(deps, run, request);
        const startSeq = seq;
        void Promise.allSettled([
          active.run(run.id, () => started.finish(startSeq)),
          ...abandoned,
        ]).then(release);
        running = true;
        return { started: true, run };
      } finally {
        // Until the execution is under way, the slot is this request's to give back: once the
        // calls it abandoned have settled (answering does not wait for them).
        if (!running) {
          if (execution) abandoned.push(execution.abandon());
          if (abandoned.length === 0) release();
          else void Promise.allSettled(abandoned).then(release);
        }
      }
    },
  };
}

/** Attempts at recording a streamed run's start before its request is answered 503. */
const START_PUT_ATTEMPTS = 3;

/**
 * Records a streamed run's start: a put conditional on the run's record at `expectSeq` (0: none),
 * repeated under one id (JetStream stores it once) before its request is answered 503.
 */
function recordStart(deps: ExecutorDeps, run: Run, expectSeq: number): Promise<number> {
  const putId = newPutId();
  return inSpan("runs.record.start", { kind: SpanKind.PRODUCER }, () =>
    untilRecorded(() => deps.log.put(run, expectSeq, putId, { accepted: true }), {
      logger: deps.logger,
      what: `the start of run ${run.id}`,
      attempts: START_PUT_ATTEMPTS,
    }),
  );
}

/**
 * A streamed run started by the request that makes it (ExecuteRequest.start): recorded processing
 * in one put, with no `created` record, while the provider is called, as StartRun calls a run it
 * created (its chunks held until the put is acknowledged; nothing published if it fails). The
 * project's slot (`release`) is this function's to give back, once the execution has ended.
 */
async function startAtOnce(
  deps: ExecutorDeps,
  active: ActiveRuns,
  prepared: PreparedExecution,
  release: () => void,
): Promise<Run> {
  const run = prepared.run;
  run.status = RunStatus.PROCESSING;
  // Its input is in memory, never kept beside the record (a metadata-only run's neither).
  const execution = new StreamedExecution(deps, run, prepared.request, false);
  let seq: number;
  try {
    seq = await recordStart(deps, run, 0);
  } catch (err) {
    void execution.abandon().then(release, release);
    if (err instanceof RecordConflict) {
      throw new ConnectError(`run ${run.id} exists already`, Code.AlreadyExists);
    }
    throw err;
  }
  void active.run(run.id, () => execution.finish(seq)).then(release, release);
  return run;
}

/** A created run as this executor kept it or the log has it, with what it was prepared with. */
interface KeptRun {
  run: Run;
  seq: number;
  /** The provider request prepared with the run, when this executor created it. */
  request?: CompletionRequest;
}

/**
 * Streamed runs this executor created and nobody has started yet, with the sequence of their
 * record: the request that opens the stream usually reaches the executor that created the run (the
 * gateway's HTTP/2 connection to it, or the same process in the edge and embedded modes), and
 * then starts it without reading the log back (a JetStream request less on the way to the first
 * chunk). Bounded: a run opened later, or on another replica, is read from the log as before.
 */
class CreatedRuns {
  private readonly runs = new LRUCache<string, KeptRun>({
    max: 2_000,
    ttl: 60_000,
  });

  /**
   * Keeps the run as created, frozen: it is also the answer to the request that created it, which
   * an in-process caller holds with no copy between (directTransport); a change by either would
   * otherwise be the other's. Starting it copies it (withFields).
   */
  keep(run: Run, seq: number, request: CompletionRequest) {
    this.runs.set(run.id, { run: deepFreeze(run), seq, request });
  }

  /** The run, once, if this executor created it for that project. */
  take(projectId: string, id: string): KeptRun | undefined {
    const kept = this.runs.get(id);
    if (!kept || kept.run.projectId !== projectId) return undefined;
    this.runs.delete(id);
    return kept;
  }
}

/**
 * The run as its last record has it; a run the log no longer holds (older than its maximum age) is
 * read from the runs store. Another project's run is NOT_FOUND.
 */
async function currentRun(deps: ExecutorDeps, projectId: string, id: string) {
  const recorded = await deps.log.last(id);
  if (recorded) {
    if (recorded.run.projectId !== projectId) throw notFound("run", id);
    return recorded;
  }
  const { run } = await deps.runs.getRun({ projectId, id });
  return { seq: 0, run: answered(run, "run") };
}

/** The run a stream request names, which must have been created with stream: true. */
async function streamedRun(deps: ExecutorDeps, projectId: string, id: string) {
  const current = await currentRun(deps, projectId, id);
  if (!current.run.stream) {
    throw new ConnectError(`run ${id} was not created with stream: true`, Code.FailedPrecondition);
  }
  return current;
}

/**
 * A blocking execution from its provider call to its record. The run stays active (heartbeats go
 * on) until recorded, even if the caller stops waiting.
 */
async function runBlocking(
  deps: ExecutorDeps,
  active: ActiveRuns,
  prepared: PreparedExecution,
  signal: AbortSignal,
  recordWaitMs: number,
): Promise<Run> {
  let answered!: () => void;
  const providerAnswered = new Promise<void>((resolve) => (answered = resolve));
  const recorded = active.run(prepared.run.id, () =>
    executeBlocking(deps, prepared, answered, signal),
  );
  return withinRecordWait(recorded, providerAnswered, prepared.run.id, recordWaitMs);
}

/**
 * Steps 5–9 of a blocking execution, for a run already in status processing. Resolves once the
 * run's end is recorded (retried while NATS is down).
 */
async function executeBlocking(
  deps: ExecutorDeps,
  prepared: PreparedExecution,
  answered: () => void,
  /** Aborted when the caller goes away: the provider call is cancelled, the run recorded so. */
  signal: AbortSignal,
): Promise<Run> {
  const startedAt = Date.now();
  const run = prepared.run;
  run.status = RunStatus.PROCESSING;
  // A child run is recorded first, in one attempt: an unknown parent is a 404 before the provider
  // is called, and while the log is down the caller gets 503 at once (nothing has been done
  // that a retry would keep; retrying here held the request open for the whole outage).
  let started: Promise<number> | undefined;
  let startTimer: NodeJS.Timeout | undefined;
  if (run.parentId) {
    await checkParent(deps, run.projectId, run.parentId);
    started = Promise.resolve(await deps.log.put(run, 0));
  } else {
    // Otherwise recording the start and calling the provider overlap, and the start is recorded
    // only if the provider has not answered within recordStartAfterMs: a fast run is recorded
    // once, at its end (half the records to write); a slow one is there as processing meanwhile,
    // so that the sweeper fails it if this executor dies. The put is retried until the log
    // answers.
    const putId = newPutId();
    const recordStart = () => {
      started = untilRecorded(() => deps.log.put(run, 0, putId), {
        logger: deps.logger,
        what: `the start of run ${run.id}`,
      });
      // Awaited below; until then a failure must not count as unhandled.
      started.catch(() => {});
    };
    if (deps.recordStartAfterMs > 0) startTimer = setTimeout(recordStart, deps.recordStartAfterMs);
    else recordStart();
  }
  let outcome: Outcome;
  try {
    outcome = await callProvider(deps, prepared.environment, prepared.apiKey, prepared.request, {
      signal,
      maxRepairs: prepared.maxRepairs,
      routes: prepared.routes,
    });
  } finally {
    clearTimeout(startTimer);
  }
  answered();
  // With no start recorded, the end is the run's first record (a put conditional on none).
  const seq = started ? await started : 0;
  const final = await recordEnd(deps, endedRun(run, outcome, startedAt), seq);
  // Cached once the run it names is recorded as completed: a hit never names a run that is not.
  if (outcome.ok && prepared.cache && final.status === RunStatus.COMPLETED) {
    deps.results.put(run.cacheKey, prepared.cache.policy, {
      runId: run.id,
      result: outcome.result,
      usage: outcome.usage,
    });
  }
  return final;
}

/** A parent must be a run of the same project (NOT_FOUND naming it otherwise). */
async function checkParent(deps: ExecutorDeps, projectId: string, parentId: string) {
  try {
    await deps.runs.getRun({ projectId, id: parentId });
  } catch (err) {
    if (isCode(err, Code.NotFound)) throw notFound("parent run", parentId);
    throw err;
  }
}

/**
 * Records the end of a processing run whose last record has sequence `seq`, retrying until the
 * log answers. If the run moved on meanwhile (the sweeper failed it), the run as recorded is the
 * end.
 */
async function recordEnd(deps: ExecutorDeps, ended: Run, seq: number): Promise<Run> {
  const options = { logger: deps.logger, what: `the end of run ${ended.id}` };
  let end = ended;
  for (;;) {
    try {
      const putId = newPutId();
      await inSpan("runs.record.put", { kind: SpanKind.PRODUCER }, () =>
        untilRecorded(() => deps.log.put(end, seq, putId), options),
      );
      return end;
    } catch (err) {
      // The result (or the repairs' answers) made the record too large: the run fails, recorded
      // without them (it fits: checkRecordFits kept room for that at its start).
      if (err instanceof RecordTooLarge && end === ended) {
        deps.logger.warn({ runId: ended.id, bytes: err.bytes }, "run result too large to record");
        end = resultTooLarge(ended, err);
        continue;
      }
      if (!(err instanceof RecordConflict)) throw err;
      break;
    }
  }
  const latest = await untilRecorded(() => currentRun(deps, ended.projectId, ended.id), options);
  return latest.run;
}

/**
 * Bytes a run's record keeps free at its start for its end when that fails for a result too large:
 * the error, the token usage and the execution time (a few hundred bytes).
 */
const END_RESERVE = 512;

/**
 * Refuses a run whose record would be larger than the record log takes (JetStream: the NATS
 * server's max_payload), before anything is done: 413, as the request is too large. Otherwise
 * its put would fail at every attempt, its caller would get 503 and the run never be recorded.
 */
function checkRecordFits(deps: ExecutorDeps, run: Run) {
  try {
    deps.log.checkFits(run, END_RESERVE);
  } catch (err) {
    if (!(err instanceof RecordTooLarge)) throw err;
    throw tooLargeError(
      `the run is too large to record: its record would be ${err.bytes - END_RESERVE} bytes, over the limit ` +
        `of ${err.limit - END_RESERVE} bytes (the record log's message size less room for ` +
        `the run's end); send less data`,
    );
  }
}

/** The run failed instead, without its result and repairs, which made its record too large. */
function resultTooLarge(ended: Run, err: RecordTooLarge): Run {
  return withFields(ended, {
    status: RunStatus.FAILED,
    resultJson: NO_JSON,
    attempts: [],
    error: create(RunErrorSchema, {
      code: "result_too_large",
      message:
        `the model's answer is too large to record: the run's record would be ${err.bytes} ` +
        `bytes, over the limit of ${err.limit} bytes (the record log's message size)`,
    }),
  });
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
            `run ${id} ended but is not recorded yet (the record log is unavailable); it will be`,
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
async function expire(deps: ExecutorDeps, run: Run, seq: number): Promise<Run> {
  dropInput(deps.inputs, run, deps.logger);
  const failed = withFields(run, {
    status: RunStatus.FAILED,
    error: create(RunErrorSchema, {
      code: "stream_expired",
      message: `the stream was not opened within ${run.ttl} s`,
    }),
  });
  const ended = await recordEnd(deps, failed, seq);
  await new ChunkPublisher(deps.bus, run.id).end(encodeRun(ended));
  return ended;
}

/**
 * A streamed run's execution, begun while its start is being recorded: the catalog's environment,
 * the result cache and the provider call go ahead at once, and the chunks wait in a held publisher.
 * Then either `finish` (the start is recorded: the chunks go out, the end is recorded and
 * published) or `abandon` (it is not: the provider call is cancelled, nothing is published).
 */
class StreamedExecution {
  private readonly startedAt = Date.now();
  private readonly publisher: ChunkPublisher;
  private readonly cancel = new AbortController();
  /** The provider's outcome or a cache hit; never rejects. */
  private readonly called: Promise<Called>;
  /** Created by this executor: its request (and a metadata-only run's input) was in memory. */
  private readonly ownRequest: boolean;

  constructor(
    private readonly deps: ExecutorDeps,
    /** The run; a metadata-only one read from the log gets its kept input back in `call`. */
    private run: Run,
    /** The request prepared when this executor created the run; rebuilt from the run otherwise. */
    request?: CompletionRequest,
    /** Whether a metadata-only run's input was kept beside its record (it then goes at start). */
    private readonly inputKept = true,
  ) {
    this.ownRequest = request !== undefined;
    this.publisher = new ChunkPublisher(deps.bus, run.id, undefined, true);
    // `call` answers every failure with an outcome; this is for a fault in that answer itself.
    this.called = this.call(request).catch((): Called => ({
      outcome: { ok: false, code: "internal", message: "the execution failed" },
    }));
  }

  private async call(prepared: CompletionRequest | undefined): Promise<Called> {
    const { deps, publisher } = this;
    let { run } = this;
    try {
      if (!prepared && isMetadataOnly(run)) {
        const restored = await withKeptInput(deps.inputs, run);
        if (!restored) {
          return {
            outcome: {
              ok: false,
              code: "input_unavailable",
              message:
                `the input of metadata-only run ${run.id} is gone: it is kept only until the run ` +
                `starts, for ${deps.inputs.maxAgeSeconds} s at most (embedded: while the process runs)`,
            },
          };
        }
        // The run's end, which its stream's close carries, has its input again. Read from the
        // log, the run is called once its start is recorded: nobody reads the input again.
        this.run = run = restored;
        dropInput(deps.inputs, run, deps.logger);
      }
      const { environment, apiKey, routes } = await deps.resolver.resolve({
        projectId: run.projectId,
        environmentId: run.environmentId,
        environmentOnly: true,
      });
      if (!environment) throw new Error("catalog answered no environment");
      const request = prepared ?? {
        model: run.modelId,
        messages: (jsonOf(run.promptJson) ?? []) as unknown as ChatMessage[],
        temperature: run.config?.temperature,
        maxTokens: run.config?.maxTokens,
        schema: jsonOf(run.resultSchemaJson) as JsonObject | undefined,
      };
      const policy = run.cacheKey
        ? policyOf(jsonOf(run.cachePolicyJson) as JsonObject | undefined)
        : undefined;
      const mode = ResultCache.mode(policy);
      if (mode === "read") {
        const hit = await deps.results.get(run.cacheKey);
        if (hit) return { hit };
      }
      if (this.cancel.signal.aborted) return { abandoned: true };
      const outcome = await callProvider(deps, environment, apiKey, request, {
        onChunk: (t) => publisher.push(t),
        onRepair: (repair) => publisher.repair(JSON.stringify(repair)),
        maxRepairs: repairsOf(run.config?.maxRepairs, environment),
        signal: this.cancel.signal,
        routes,
      });
      return { outcome, cacheable: outcome.ok && policy && mode ? policy : undefined };
    } catch (err) {
      if (this.cancel.signal.aborted) return { abandoned: true };
      return { outcome: failedExecution(deps, run.id, err) };
    }
  }

  /**
   * The start was not recorded: from now on nothing of it is published, and the provider call is
   * cancelled. Resolves once the call has settled (not awaited before answering: the catalog's
   * answer or a cache read it waits on cannot be cancelled).
   */
  abandon(): Promise<unknown> {
    this.publisher.discard();
    this.cancel.abort();
    return this.called;
  }

  /** The start is recorded (sequence `seq`): publishes the chunks, then records and publishes the end. */
  async finish(seq: number): Promise<void> {
    const { deps, publisher } = this;
    publisher.open();
    // Created here, the run's input was in memory; started for good, nobody reads its copy.
    if (this.ownRequest && this.inputKept) dropInput(deps.inputs, this.run, deps.logger);
    const called = await this.called;
    if ("abandoned" in called) return;
    const { run } = this;
    let outcome: Outcome;
    try {
      if ("hit" in called) {
        // Streamed like any run: the cached answer as one chunk, then the end.
        const { hit } = called;
        publisher.push(typeof hit.result === "string" ? hit.result : JSON.stringify(hit.result));
        await publisher.flush();
        const final = await recordEnd(deps, cachedRun(run, hit, this.startedAt), seq);
        await untilRecorded(() => publisher.end(encodeRun(final)), {
          logger: deps.logger,
          what: `the end event of run ${run.id}`,
        });
        return;
      }
      outcome = called.outcome;
      try {
        await publisher.flush();
      } catch (err) {
        deps.logger.error({ err, runId: run.id }, "chunks could not be published");
        // An event too large for the bus (a repair's; chunks are cut to size) is not a failure of
        // the run: its end carries the whole answer, and its record decides whether it fits.
        if (!(err instanceof EventTooLarge)) {
          outcome = {
            ok: false,
            code: "stream_error",
            message: "the result could not be streamed",
          };
        }
      }
    } catch (err) {
      outcome = failedExecution(deps, run.id, err);
    }
    // Until both are done the run stays active, so its heartbeats go on while the runs service, its
    // database or NATS is down.
    try {
      const final = await recordEnd(deps, endedRun(run, outcome, this.startedAt), seq);
      // Cached once the run it names is recorded as completed (after its chunks were published).
      const cacheable = "cacheable" in called ? called.cacheable : undefined;
      if (cacheable && outcome.ok && final.status === RunStatus.COMPLETED) {
        deps.results.put(run.cacheKey, cacheable, {
          runId: run.id,
          result: outcome.result,
          usage: outcome.usage,
        });
      }
      const end = encodeRun(final);
      await untilRecorded(() => publisher.end(end), {
        logger: deps.logger,
        what: `the end event of run ${run.id}`,
      });
    } catch (err) {
      deps.logger.error({ err, runId: run.id }, "the end of a streamed run could not be recorded");
    }
  }
}

/** What a streamed execution came to before its start was known to be recorded. */
type Called =
  { abandoned: true } | { hit: CachedResult } | { outcome: Outcome; cacheable?: CachePolicy };

/** A streamed execution that failed outside its provider call: logged, and `internal`. */
function failedExecution(deps: ExecutorDeps, runId: string, err: unknown): Outcome {
  deps.logger.error({ err, runId }, "streamed execution failed");
  const message = err instanceof ConnectError ? err.rawMessage : "the execution failed";
  return { ok: false, code: "internal", message };
}

/** A run answered from the result cache: completed with the cached result, no tokens spent. */
function cachedRun(run: Run, hit: CachedResult, startedAt: number): Run {
  return withFields(run, {
    status: RunStatus.COMPLETED,
    resultJson: jsonBytes(hit.result),
    tokenUse: create(TokenUsageSchema, { prompt: 0, result: 0, total: 0 }),
    executionTime: BigInt(Date.now() - startedAt),
    cached: true,
    cachedFrom: hit.runId,
  });
}

/** Records a blocking execution answered from the cache (one put: it is over at once). */
async function recordHit(deps: ExecutorDeps, run: Run, hit: CachedResult): Promise<Run> {
  const ended = cachedRun(run, hit, Number(run.createdAt?.seconds ?? 0) * 1000);
  ended.executionTime = 0n;
  if (run.parentId) await checkParent(deps, run.projectId, run.parentId);
  return recordEnd(deps, ended, 0);
}

/** The cache policy a run recorded (SPEC.md's field names), as the catalog's message. */
function policyOf(json: JsonObject | undefined): CachePolicy | undefined {
  if (!json || typeof json.type !== "string") return undefined;
  return create(CachePolicySchema, {
    type: json.type,
    ttl: typeof json.ttl === "number" ? json.ttl : undefined,
    variesOn: Array.isArray(json.varies_on) ? (json.varies_on as string[]) : [],
    refreshProbability:
      typeof json.refresh_probability === "number" ? json.refresh_probability : undefined,
  });
}

export function executorRoutes(deps: ExecutorDeps, active?: ActiveRuns, recordWaitMs?: number) {
  return (router: ConnectRouter) =>
    router.service(ExecutorService, createExecutorService(deps, active, recordWaitMs));
}
