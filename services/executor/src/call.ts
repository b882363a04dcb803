import { toValue, type JsonValue } from "@pies/common";
import { clone, create } from "@bufbuild/protobuf";
import { RunErrorSchema, RunSchema, RunStatus, TokenUsageSchema, type Run } from "@pies/proto/runs";
import type { Environment } from "@pies/proto/catalog";
import type { ExecutorDeps } from "./context.js";
import { estimateUsage } from "./providers/tokens.js";
import { ProviderError, type CompletionRequest, type TokenUsage } from "./providers/types.js";

/** How a provider call ended; never an exception, so the run is always recorded. */
export type Outcome =
  | { ok: true; result: JsonValue; usage: TokenUsage }
  | { ok: false; code: string; message: string; data?: JsonValue; usage?: TokenUsage };

/**
 * Steps 6–8 of an execution: call the provider (streaming when `onChunk` is given), parse and
 * validate the answer against the output schema, and take the token usage.
 */
export async function callProvider(
  deps: ExecutorDeps,
  environment: Environment,
  apiKey: string,
  request: CompletionRequest,
  onChunk?: (text: string) => void,
): Promise<Outcome> {
  let content: string;
  let usage: TokenUsage;
  try {
    const client = deps.providers.client(environment, apiKey);
    const answer = await client.complete(request, onChunk ? { onChunk } : {});
    content = answer.content;
    usage = answer.usage ?? estimateUsage(request.messages, content);
  } catch (err) {
    if (err instanceof ProviderError) {
      // The caller gets the generic message; what happened on the network is for the operator.
      deps.logger.warn(
        { err: err.cause ?? err, environmentId: environment.id, provider: environment.provider },
        `provider call failed: ${err.message}`,
      );
      return { ok: false, code: err.code, message: err.message };
    }
    deps.logger.error({ err }, "provider call failed unexpectedly");
    return { ok: false, code: "internal", message: "the provider call failed unexpectedly" };
  }
  if (!request.schema) return { ok: true, result: content, usage };
  let parsed: JsonValue;
  try {
    parsed = JSON.parse(content) as JsonValue;
  } catch {
    return {
      ok: false,
      code: "validation_error",
      message: "the answer is not JSON",
      data: { content },
      usage,
    };
  }
  const errors = deps.schemas.errors(request.schema, parsed);
  if (errors.length > 0) {
    return {
      ok: false,
      code: "validation_error",
      message: `the answer does not match the result schema: ${errors.join("; ")}`,
      data: { content, errors },
      usage,
    };
  }
  return { ok: true, result: parsed, usage };
}

/** The run as an outcome ends it (a copy: the run given is left as it was). */
export function endedRun(run: Run, outcome: Outcome, startedAt: number): Run {
  const ended = clone(RunSchema, run);
  ended.executionTime = BigInt(Date.now() - startedAt);
  ended.tokenUse = outcome.usage && create(TokenUsageSchema, outcome.usage);
  if (outcome.ok) {
    ended.status = RunStatus.COMPLETED;
    ended.result = toValue(outcome.result);
  } else {
    ended.status = RunStatus.FAILED;
    ended.error = create(RunErrorSchema, {
      code: outcome.code,
      message: outcome.message,
      data: toValue(outcome.data),
    });
  }
  return ended;
}
