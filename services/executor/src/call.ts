import {
  inSpan,
  jsonProblem,
  MAX_JSON_DEPTH,
  SpanKind,
  jsonBytes,
  VIRTUAL_PROVIDER,
  type JsonValue,
} from "@pies/common";
import { create } from "@bufbuild/protobuf";
import { copyRun } from "@pies/common/bus";
import {
  RunAttemptSchema,
  RunErrorSchema,
  RunStatus,
  TokenUsageSchema,
  type Run,
  type RunAttempt,
  type RunCost,
} from "@pies/proto/runs";
import type { Environment, RoutedEnvironment } from "@pies/proto/catalog";
import type { ExecutorDeps } from "./context.js";
import type { RouteTry } from "./providers/router.js";
import { REPAIR_MARK } from "./providers/test-provider.js";
import { RunCostSum } from "./run-cost.js";
import { countUsage } from "./providers/tokens.js";
import {
  pause,
  ProviderError,
  type CompletionRequest,
  type CompletionResult,
  type LlmClient,
  type TokenUsage,
} from "./providers/types.js";
import type { ChatMessage } from "./templates/render.js";
import { formatError } from "./schemas.js";

/** How a provider call ended; never an exception, so the run is always recorded. */
export type Outcome = (
  | { ok: true; result: JsonValue; usage: TokenUsage }
  | { ok: false; code: string; message: string; data?: JsonValue; usage?: TokenUsage }
) & {
  /**
   * Every provider call, when an answer failed validation (a repair, or the run failed), and
   * every call of a virtual environment.
   */
  attempts?: RunAttempt[];
  /** The model that answered (or was called last), when a virtual environment chose it. */
  model?: string;
  /** What the calls' tokens cost, when every model called has a known price. */
  cost?: RunCost;
};

/** Repairs of an answer that fails the output schema, unless the environment or request says. */
export const DEFAULT_MAX_REPAIRS = 2;

export interface CallOptions {
  /** Streams: called with each piece of the content as it arrives. */
  onChunk?: (text: string) => void;
  /** Streams: called before a repair attempt, whose chunks then follow. */
  onRepair?: (repair: { attempt: number; errors: string[] }) => void;
  /** Aborts the provider call (the blocking caller went away). */
  signal?: AbortSignal;
  maxRepairs?: number;
  /** A virtual environment's: the environments its entries name (the catalog's answer). */
  routes?: RoutedEnvironment[];
}

/**
 * Steps 6–8 of an execution: call the provider (streaming when `onChunk` is given), parse and
 * validate the answer against the output schema, and repair: an answer that does not parse or does
 * not validate is sent back with its errors, up to `maxRepairs` times. Token usage is the
 * provider's, else counted with the tokenizer, summed over every attempt.
 */
export async function callProvider(
  deps: ExecutorDeps,
  environment: Environment,
  apiKey: string,
  request: CompletionRequest,
  options: CallOptions = {},
): Promise<Outcome> {
  // A virtual environment's calls, each to one of its entries (several when it fails over).
  const tries: RouteTry[] = [];
  let client: LlmClient;
  try {
    client =
      environment.provider === VIRTUAL_PROVIDER
        ? deps.providers.router.client(environment, options.routes ?? [], tries)
        : deps.providers.client(environment, apiKey);
  } catch (err) {
    return failure(deps, environment, err);
  }
  const maxRepairs = options.maxRepairs ?? DEFAULT_MAX_REPAIRS;
  const attempts: RunAttempt[] = [];
  const cost = new RunCostSum(environment, options.routes);
  let usage: TokenUsage | undefined;
  let messages = request.messages;
  let added: ChatMessage[] = [];
  for (let round = 1; ; round++) {
    let answer: CompletionResult;
    const partial: string[] = [];
    const before = tries.length;
    try {
      answer = await completeWithRetries(deps, client, { ...request, messages }, options, partial);
    } catch (err) {
      // An answer that broke off after its first chunk was generated, and billed, as far as it
      // came: its prompt and what arrived count (the tokenizer's count; the provider reports none).
      const used = partial.length > 0 ? countUsage(messages, partial.join("")) : undefined;
      if (used) usage = usage ? sum(usage, used) : used;
      const failed = failure(deps, environment, err, usage);
      const routed = tries.slice(before);
      const lastTry = routed[routed.length - 1];
      if (used) cost.add(lastTry?.model ?? request.model, used, true, lastTry?.environmentId);
      failed.cost = cost.result();
      if (routed.length > 0) {
        // Every call of the round failed: each is an attempt, the last one with what arrived.
        for (const [i, t] of routed.entries()) {
          const last = i === routed.length - 1;
          attempts.push(
            routeAttempt(attempts.length + 1, i === 0 ? added : [], last ? used : undefined, t),
          );
        }
        failed.model = routed[routed.length - 1]?.model;
      } else if (attempts.length > 0) {
        attempts.push(
          attempt(attempts.length + 1, added, used, { code: failed.code, message: failed.message }),
        );
      }
      if (attempts.length > 0) failed.attempts = attempts;
      return failed;
    }
    const content = answer.content;
    const used = answer.usage ?? countUsage(messages, content);
    usage = usage ? sum(usage, used) : used;
    // The calls a virtual environment failed over from, then the one that answered.
    const routed = tries.slice(before);
    const answered = routed.pop();
    cost.add(answered?.model ?? request.model, used, !answer.usage, answered?.environmentId);
    for (const [i, t] of routed.entries()) {
      attempts.push(routeAttempt(attempts.length + 1, i === 0 ? added : [], undefined, t));
    }
    const ownAdded = routed.length > 0 ? [] : added;
    const model = answered?.model;
    let checked: Checked;
    try {
      checked = check(deps, request, content);
    } catch (err) {
      // A schema that does not compile (prepare compiles them first): the run fails, never hangs,
      // and keeps what its calls were and cost.
      const failed = failure(deps, environment, err, usage);
      if (answered)
        attempts.push(withRoute(attempt(attempts.length + 1, ownAdded, used), answered));
      if (attempts.length > 0) failed.attempts = attempts;
      failed.model = model;
      failed.cost = cost.result();
      return failed;
    }
    if (checked.ok) {
      if (attempts.length === 0 && !answered) {
        return { ok: true, result: checked.result, usage, cost: cost.result() };
      }
      attempts.push(withRoute(attempt(attempts.length + 1, ownAdded, used), answered));
      return { ok: true, result: checked.result, usage, attempts, model, cost: cost.result() };
    }
    attempts.push(withRoute(attempt(attempts.length + 1, ownAdded, used, checked), answered));
    if (round > maxRepairs) {
      return {
        ok: false,
        code: "validation_error",
        message:
          round > 1
            ? `the answer still does not match the result schema after ${round - 1} repair${round > 2 ? "s" : ""}: ${checked.message}`
            : checked.message,
        data: checked.data,
        usage,
        attempts,
        model,
        cost: cost.result(),
      };
    }
    added = [
      { role: "assistant", content },
      { role: "user", content: repairMessage(checked.errors) },
    ];
    messages = [...messages, ...added];
    options.onRepair?.({ attempt: round + 1, errors: checked.errors });
  }
}

/**
 * One provider call, retried while it is refused with a Retry-After (429/5xx) by a client that
 * does not retry itself (the `test` provider; the OpenAI client retries on its own, as the openai
 * SDK did: backoff and jitter, honouring Retry-After). Never after the first chunk: a chunk sent is an answer begun.
 * The chunks of the attempt that failed are left in `partial` (the caller counts their tokens).
 */
async function completeWithRetries(
  deps: ExecutorDeps,
  client: LlmClient,
  request: CompletionRequest,
  options: CallOptions,
  partial: string[],
): Promise<CompletionResult> {
  const onChunk = options.onChunk;
  const callOptions = {
    signal: options.signal,
    onChunk: onChunk && ((text: string) => (partial.push(text), onChunk(text))),
  };
  for (let retry = 0; ; retry++) {
    try {
      // Its own span when tracing is on: the provider's time, apart from pies' own.
      return await inSpan(
        "provider.complete",
        { kind: SpanKind.CLIENT, attributes: { "pies.model": request.model, "pies.retry": retry } },
        () => client.complete(request, callOptions),
      );
    } catch (err) {
      const retryAfterMs = err instanceof ProviderError ? err.retryAfterMs : undefined;
      if (retryAfterMs === undefined || partial.length > 0 || retry >= deps.providerMaxRetries)
        throw err;
      await pause(retryDelayMs(retry, retryAfterMs), options.signal);
    }
  }
}

/** The first retry's backoff; each later one doubles it, up to RETRY_MAX_MS. */
export const RETRY_BASE_MS = 100;
export const RETRY_MAX_MS = 8_000;

/**
 * How long to wait before retry `retry` (0 for the first): exponential backoff with jitter (75–100%
 * of RETRY_BASE_MS × 2^retry, at most RETRY_MAX_MS), and never less than the provider's
 * Retry-After. `Retry-After: 0` ("now") still waits the backoff: a provider that refuses again and
 * again is not hammered.
 */
export function retryDelayMs(retry: number, retryAfterMs: number, random = Math.random()): number {
  const backoff = Math.min(RETRY_BASE_MS * 2 ** retry, RETRY_MAX_MS) * (1 - random / 4);
  return Math.max(retryAfterMs, backoff);
}

type Checked =
  | { ok: true; result: JsonValue }
  | { ok: false; code: "validation_error"; message: string; data: JsonValue; errors: string[] };

/** An answer invalid before its schema is checked: the reason is its only error. */
const unreadable = (content: string, reason: string): Checked => ({
  ok: false,
  code: "validation_error",
  message: reason,
  data: { content, errors: [] },
  errors: [reason],
});

/** The answer parsed and validated against the output schema, when there is one. */
function check(deps: ExecutorDeps, request: CompletionRequest, content: string): Checked {
  if (!request.schema) return { ok: true, result: content };
  let parsed: JsonValue;
  try {
    parsed = JSON.parse(content) as JsonValue;
  } catch (err) {
    return unreadable(content, `the answer is not JSON: ${parseFailure(err as Error)}`);
  }
  // Deeper than a run's result can nest (protobuf's recursion limit), or with a number beyond a
  // double (JSON.parse makes it Infinity, which a Value cannot carry), the run could not be read
  // back: invalid, as an answer that is not JSON. (A NUL is stored as U+FFFD.)
  const problem = jsonProblem(parsed, MAX_JSON_DEPTH);
  if (problem && problem.kind !== "nul") {
    const at = problem.path.length > 0 ? problem.path.join(".") : "the top";
    return unreadable(
      content,
      problem.kind === "depth"
        ? `the answer is nested deeper than ${MAX_JSON_DEPTH} levels (at ${at})`
        : `the answer has a number beyond a double's range (at ${at})`,
    );
  }
  const errors = deps.schemas.check(request.schema, parsed);
  if (errors.length === 0) return { ok: true, result: parsed };
  const texts = errors.map(formatError);
  return {
    ok: false,
    code: "validation_error",
    message: `the answer does not match the result schema: ${texts.join("; ")}`,
    // ajv's own error objects: instancePath, schemaPath, keyword, params, message.
    data: { content, errors: JSON.parse(JSON.stringify(errors)) as JsonValue },
    errors: texts,
  };
}

/**
 * JSON.parse's reason without the excerpt of the text it quotes (`Unexpected token 'H', "Hello
 * worl"... is not valid JSON`): the answer is in the error's data, which a metadata-only run's
 * records withhold, and its message must not carry it past them.
 */
const parseFailure = (err: Error) => err.message.replace(/, ".*"(\.\.\.)? is not valid JSON$/s, "");

/** What the model is told when its answer is sent back. */
function repairMessage(errors: string[]): string {
  return (
    `${REPAIR_MARK}: it does not validate against the required JSON Schema.\n` +
    `Errors:\n${errors.map((e) => `- ${e}`).join("\n")}\n` +
    "Answer again with JSON only, that validates against the schema."
  );
}

function attempt(
  number: number,
  added: ChatMessage[],
  usage?: TokenUsage,
  error?: { code: string; message: string; data?: JsonValue },
): RunAttempt {
  return create(RunAttemptSchema, {
    number,
    promptAddedJson: jsonBytes(added),
    tokenUse: usage && create(TokenUsageSchema, usage),
    error:
      error &&
      create(RunErrorSchema, {
        code: error.code,
        message: error.message,
        dataJson: jsonBytes(error.data),
      }),
  });
}

/** An attempt with the environment, model and time of the call a virtual environment made. */
function withRoute(a: RunAttempt, t: RouteTry | undefined): RunAttempt {
  if (t) {
    a.environmentId = t.environmentId;
    a.model = t.model;
    a.durationMs = t.durationMs;
  }
  return a;
}

/** A call of a virtual environment as an attempt (its failure, when it failed). */
const routeAttempt = (
  number: number,
  added: ChatMessage[],
  usage: TokenUsage | undefined,
  t: RouteTry,
): RunAttempt =>
  withRoute(
    attempt(number, added, usage, t.error && { code: t.error.code, message: t.error.message }),
    t,
  );

const sum = (a: TokenUsage, b: TokenUsage): TokenUsage => ({
  prompt: a.prompt + b.prompt,
  result: a.result + b.result,
  total: a.total + b.total,
});

function failure(
  deps: ExecutorDeps,
  environment: Environment,
  err: unknown,
  usage?: TokenUsage,
): Extract<Outcome, { ok: false }> {
  if (err instanceof ProviderError) {
    // The caller gets the generic message; what happened on the network is for the operator.
    if (err.code !== "cancelled") {
      deps.logger.warn(
        { err: err.cause ?? err, environmentId: environment.id, provider: environment.provider },
        `provider call failed: ${err.message}`,
      );
    }
    return { ok: false, code: err.code, message: err.message, usage };
  }
  deps.logger.error({ err }, "provider call failed unexpectedly");
  return { ok: false, code: "internal", message: "the provider call failed unexpectedly", usage };
}

/**
 * The run as an outcome ends it: a copy, so the run given is left as it was (a retried put of the
 * start still records the start). Shallow: only top-level fields change, and the nested messages
 * (prompt, parameters, config, source) are never changed once prepared, so a deep clone would
 * only copy them. The copy is copyRun's (@pies/common/bus), with every field already there: fields added to a
 * `{ ...run }` copy (executionTime, tokenUse, result) each made V8 build a new hidden class for
 * it (docs/decisions/0013-per-call-costs-cut.md), and left every ended run with a shape of its own, so
 * that whatever read them (the record's encoding, the answer's JSON) did so through megamorphic
 * property lookups.
 */
export function endedRun(run: Run, outcome: Outcome, startedAt: number): Run {
  const ended = copyRun(run);
  ended.executionTime = BigInt(Date.now() - startedAt);
  ended.tokenUse = outcome.usage && create(TokenUsageSchema, outcome.usage);
  if (outcome.attempts) ended.attempts = outcome.attempts;
  if (outcome.model) ended.modelId = outcome.model;
  if (outcome.cost) ended.cost = outcome.cost;
  if (outcome.ok) {
    ended.status = RunStatus.COMPLETED;
    ended.resultJson = jsonBytes(outcome.result);
  } else {
    ended.status = RunStatus.FAILED;
    ended.error = create(RunErrorSchema, {
      code: outcome.code,
      message: outcome.message,
      dataJson: jsonBytes(outcome.data),
    });
  }
  return ended;
}
