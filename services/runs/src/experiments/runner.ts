import { fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import {
  jsonBytes,
  jsonOf,
  newId,
  restErrorOf,
  type JsonObject,
  type JsonValue,
  type Logger,
} from "@pies/common";
import {
  ExecuteRequestSchema,
  type ExecuteRequest,
  type ExecutorService,
} from "@pies/proto/executor";
import { RunStatus, type Run } from "@pies/proto/runs";
import type { RunsDatabase } from "../tables.js";
import { canonical, judgeScore, resultDiff } from "./compare.js";
import {
  claimExperiment,
  endExperiment,
  finishPair,
  putBack,
  releaseLease,
  renewLease,
  replaysOf,
  runningPairs,
  takePending,
  type ExperimentRow,
  type PairOutcome,
  type PairRow,
} from "./store.js";

export interface ExperimentRunnerOptions {
  db: Kysely<RunsDatabase>;
  executor: Client<typeof ExecutorService>;
  logger: Logger;
  /** How long a claim holds without renewal (default 15 s): a dead process's experiments wait it. */
  leaseMs?: number;
  /** How often running experiments no process holds are looked for (default 2 s). */
  pollMs?: number;
  /** Experiments this process replays at once (default 4). */
  maxExperiments?: number;
}

/** The tag of an experiment's replays (DESIGN.md §13), and of its judge's runs. */
export const experimentTag = (id: string) => `experiment:${id}`;
export const judgeTag = (id: string) => `experiment-judge:${id}`;

/**
 * Faults after which an execution is asked again: the executor was not there or is draining
 * (UNAVAILABLE), the project is at its share of the executor (RESOURCE_EXHAUSTED). A call cut
 * while the run may have started is settled first (a replay already recorded is kept).
 */
const RETRIED = new Set([
  Code.Unavailable,
  Code.ResourceExhausted,
  Code.Aborted,
  Code.Canceled,
  // The wait ended, not the replay (it is detached): settled from what the store records.
  Code.DeadlineExceeded,
]);

/**
 * Replays the running experiments (DESIGN.md §13) in the background of a runs process: claims
 * one no process holds (a lease in its row, renewed while it works), executes its pending pairs
 * through the executor, at most its concurrency at once, and records each as it ends. A process
 * that stops lets the pairs in flight end, then releases its claims; one that dies leaves them
 * to whoever claims them after the lease, which settles the pairs it left running from what the
 * runs store has recorded (docs/decisions/0067-experiments.md).
 */
export class ExperimentRunner {
  readonly owner = `runs-${newId()}`;
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private readonly max: number;
  private readonly active = new Map<string, Replay>();
  private timer: NodeJS.Timeout | undefined;
  private stopping = false;
  private ticking: Promise<void> | undefined;

  constructor(private readonly options: ExperimentRunnerOptions) {
    this.leaseMs = options.leaseMs ?? 15_000;
    this.pollMs = options.pollMs ?? 2_000;
    this.max = options.maxExperiments ?? 4;
  }

  start(): this {
    this.timer = setInterval(() => this.kick(), this.pollMs);
    this.timer.unref();
    this.kick();
    return this;
  }

  /** Looks for experiments to claim now (one was just created). */
  kick(): void {
    if (this.stopping || this.ticking) return;
    this.ticking = this.claimSome()
      .catch((err: unknown) =>
        this.options.logger.warn({ err }, "looking for experiments to replay failed"),
      )
      .finally(() => (this.ticking = undefined));
  }

  private async claimSome() {
    while (!this.stopping && this.active.size < this.max) {
      const row = await claimExperiment(this.options.db, this.owner, this.leaseMs, [
        ...this.active.keys(),
      ]);
      if (!row) return;
      const replay = new Replay(row, this.options, this.owner, this.leaseMs);
      this.active.set(row.id, replay);
      void replay.run().finally(() => this.active.delete(row.id));
    }
  }

  /** Stops claiming; the pairs in flight end (within `graceMs`), then the claims are released. */
  async stop(graceMs = 30_000): Promise<void> {
    this.stopping = true;
    clearInterval(this.timer);
    await this.ticking;
    await Promise.all([...this.active.values()].map((r) => r.stop(graceMs)));
  }

  /** Experiments this process is replaying now (tests, metrics). */
  get replaying(): number {
    return this.active.size;
  }
}

/** One experiment's replay in this process. */
class Replay {
  private readonly db: Kysely<RunsDatabase>;
  private readonly logger: Logger;
  private readonly template: ExecuteRequest;
  private readonly judge: ExecuteRequest | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  private stopped = false;
  private lost = false;
  private cancelled = false;
  private wake: (() => void) | undefined;
  private done: Promise<void> | undefined;

  constructor(
    private readonly row: ExperimentRow,
    private readonly options: ExperimentRunnerOptions,
    private readonly owner: string,
    private readonly leaseMs: number,
  ) {
    this.db = options.db;
    this.logger = options.logger;
    this.template = fromBinary(ExecuteRequestSchema, row.request);
    this.judge = row.judge_request
      ? fromBinary(ExecuteRequestSchema, row.judge_request)
      : undefined;
    this.cancelled = row.cancel_requested;
  }

  run(): Promise<void> {
    this.done = this.replay().catch((err: unknown) => {
      this.logger.error({ err, experiment: this.row.id }, "an experiment's replay failed");
    });
    return this.done;
  }

  async stop(graceMs: number): Promise<void> {
    this.stopped = true;
    this.wake?.();
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise((r) => (timer = setTimeout(r, graceMs)));
    try {
      await Promise.race([this.done, grace]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async replay(): Promise<void> {
    const { id } = this.row;
    const renewal = setInterval(() => void this.renew(), Math.max(100, this.leaseMs / 3));
    renewal.unref();
    try {
      await this.settleLeftRunning();
      const concurrency = Math.max(1, this.row.concurrency);
      while (!this.stopped && !this.lost && !this.cancelled) {
        const free = concurrency - this.inFlight.size;
        const pairs = free > 0 ? await takePending(this.db, id, free) : [];
        for (const pair of pairs) this.track(this.replayPair(pair));
        if (this.inFlight.size === 0) break;
        // Until a pair ends, or the lease's renewal sees a cancel, or the process stops.
        await new Promise<void>((resolve) => {
          this.wake = resolve;
          void Promise.race(this.inFlight).then(resolve);
        });
        this.wake = undefined;
      }
      // Those in flight end and are recorded, whatever stopped the loop.
      while (this.inFlight.size > 0) await Promise.race(this.inFlight);
      if (this.lost) return;
      if (this.stopped && !this.cancelled) {
        // Put back what was taken but not replayed, for the next process to claim at once.
        await putBack(
          this.db,
          id,
          (await runningPairs(this.db, id)).map((p) => p.position),
        );
        await releaseLease(this.db, id, this.owner);
        return;
      }
      await endExperiment(this.db, id, this.owner, this.cancelled ? "cancelled" : "completed");
      this.logger.info({ experiment: id, cancelled: this.cancelled }, "experiment ended");
    } finally {
      // A read that failed above left pairs in flight: the lease is held until they are recorded,
      // or another process would claim the experiment and replay them again.
      while (this.inFlight.size > 0) await Promise.race(this.inFlight);
      clearInterval(renewal);
    }
  }

  private track(p: Promise<void>) {
    const tracked: Promise<void> = p
      .catch((err: unknown) =>
        this.logger.error({ err, experiment: this.row.id }, "a pair's replay failed"),
      )
      .finally(() => this.inFlight.delete(tracked));
    this.inFlight.add(tracked);
  }

  private async renew() {
    try {
      const state = await renewLease(this.db, this.row.id, this.owner, this.leaseMs);
      if (!state) {
        // Ended (cancelled and finished elsewhere), or another process claimed it after a lapse.
        this.lost = true;
        this.wake?.();
      } else if (state.cancelRequested && !this.cancelled) {
        this.cancelled = true;
        this.wake?.();
      }
    } catch (err) {
      this.logger.warn({ err, experiment: this.row.id }, "an experiment's lease renewal failed");
    }
  }

  /**
   * Pairs a process left running when it stopped or died: each kept if a replay of it completed
   * (recorded in the runs store but not in the pair), waited for if one is still running, put
   * back otherwise.
   */
  private async settleLeftRunning() {
    const left = await runningPairs(this.db, this.row.id);
    if (left.length === 0) return;
    await Promise.all(
      left.map(async (pair) => {
        const kept = await this.settled(pair);
        if (kept) await finishPair(this.db, this.row.id, pair.position, kept);
        else await putBack(this.db, this.row.id, [pair.position]);
      }),
    );
  }

  /**
   * The outcome of a replay of `pair` the runs store holds as completed, if any: waited for while
   * one is still under way (a call cut on this side goes on on the executor's, and ends).
   */
  private async settled(pair: PairRow): Promise<PairOutcome | undefined> {
    for (;;) {
      const replays = await replaysOf(
        this.db,
        this.row.project_id,
        this.row.id,
        pair.source_run_id,
      );
      const run = replays.find((r) => r.status === "completed");
      if (run) {
        const candidate = (run.result ?? null) as JsonValue | null;
        return this.withJudge(pair, {
          status: "completed",
          run_id: run.id,
          candidate,
          candidate_valid: true,
          candidate_latency_ms: run.execution_time === null ? null : Number(run.execution_time),
          candidate_tokens: run.total_tokens,
          candidate_cost: run.cost_total,
          exact_match: canonical(pair.original) === canonical(candidate),
          diff: resultDiff(pair.original, candidate),
          error: null,
          judge_run_id: null,
          judge_score: null,
          judge_error: null,
        });
      }
      const live = replays.some((r) => r.status === "created" || r.status === "processing");
      if (!live || this.lost) return undefined;
      await sleep(1_000);
    }
  }

  private async replayPair(pair: PairRow): Promise<void> {
    let outcome: PairOutcome | undefined;
    for (let attempt = 0; !outcome; attempt++) {
      try {
        const { run } = await this.options.executor.execute(
          this.request(this.template, pair.input, pair.source_run_id, experimentTag(this.row.id)),
        );
        outcome = await this.withJudge(pair, this.outcomeOf(pair, run));
      } catch (err) {
        const e = ConnectError.from(err);
        const answer = restErrorOf(e);
        // Named as the API names it; a request too large (413) is refused again if asked again.
        if (!RETRIED.has(e.code) || answer.status === 413) {
          outcome = failedOutcome({ code: answer.code, message: answer.message });
          break;
        }
        // The call may have been cut after its run started: a replay already recorded is kept.
        await sleep(Math.min(5_000, 250 * 2 ** attempt));
        outcome = await this.settled(pair);
        // Left running: put back by the stop, cancelled with the experiment.
        if (!outcome && (this.stopped || this.lost || this.cancelled)) return;
      }
    }
    await finishPair(this.db, this.row.id, pair.position, outcome);
  }

  private request(
    template: ExecuteRequest,
    data: JsonValue,
    parent: string,
    tag: string,
  ): MessageInitShape<typeof ExecuteRequestSchema> {
    return {
      ...template,
      dataJson: jsonBytes(data),
      parentRunId: parent,
      tags: [...template.tags, tag],
      stream: false,
      // Goes on if this process dies: the next one keeps what it recorded (settled()).
      detached: true,
    };
  }

  private outcomeOf(pair: PairRow, run: Run | undefined): PairOutcome {
    if (!run) return failedOutcome({ code: "internal", message: "the executor answered no run" });
    const completed = run.status === RunStatus.COMPLETED;
    const candidate = completed ? ((jsonOf(run.resultJson) ?? null) as JsonValue | null) : null;
    return {
      status: completed ? "completed" : "failed",
      run_id: run.id,
      candidate,
      candidate_valid: completed,
      candidate_latency_ms: run.executionTime === undefined ? null : Number(run.executionTime),
      candidate_tokens: run.tokenUse?.total ?? null,
      candidate_cost: run.cost?.total ?? null,
      exact_match: completed && canonical(pair.original) === canonical(candidate),
      diff: completed ? resultDiff(pair.original, candidate) : null,
      error: completed
        ? null
        : { code: run.error?.code ?? "failed", message: run.error?.message ?? "" },
      judge_run_id: null,
      judge_score: null,
      judge_error: null,
    };
  }

  /** The judge's score of a completed pair: {input, original, candidate} in, `score` out. */
  private async withJudge(pair: PairRow, outcome: PairOutcome): Promise<PairOutcome> {
    if (!this.judge || outcome.status !== "completed" || !outcome.run_id) return outcome;
    const data: JsonObject = {
      input: pair.input,
      original: pair.original,
      candidate: outcome.candidate,
    };
    for (let attempt = 0; ; attempt++) {
      try {
        const { run } = await this.options.executor.execute(
          this.request(this.judge, data, outcome.run_id, judgeTag(this.row.id)),
        );
        const score =
          run?.status === RunStatus.COMPLETED
            ? judgeScore((jsonOf(run.resultJson) ?? null) as JsonValue | null)
            : undefined;
        return {
          ...outcome,
          judge_run_id: run?.id ?? null,
          judge_score: score ?? null,
          judge_error:
            score !== undefined
              ? null
              : run?.status === RunStatus.COMPLETED
                ? "the judge's result has no number field `score`"
                : `the judge's run failed: ${run?.error?.message ?? "no run"}`,
        };
      } catch (err) {
        const e = ConnectError.from(err);
        if (!RETRIED.has(e.code) || attempt >= 5 || this.stopped) {
          return { ...outcome, judge_error: `the judge could not run: ${e.rawMessage}` };
        }
        await sleep(Math.min(5_000, 250 * 2 ** attempt));
      }
    }
  }
}

function failedOutcome(error: JsonObject): PairOutcome {
  return {
    status: "failed",
    run_id: null,
    candidate: null,
    candidate_valid: false,
    candidate_latency_ms: null,
    candidate_tokens: null,
    candidate_cost: null,
    exact_match: false,
    diff: null,
    error,
    judge_run_id: null,
    judge_score: null,
    judge_error: null,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
