import { toValue, type JsonValue } from "@pies/common";
import { create } from "@bufbuild/protobuf";
import { RunStatus, RunUpdateSchema, type RunUpdate } from "@pies/proto/runs";
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

/** The update that records an outcome. */
export function outcomeUpdate(outcome: Outcome, startedAt: number): RunUpdate {
  const executionTime = BigInt(Date.now() - startedAt);
  if (outcome.ok) {
    return create(RunUpdateSchema, {
      status: RunStatus.COMPLETED,
      result: toValue(outcome.result),
      tokenUse: outcome.usage,
      executionTime,
    });
  }
  return create(RunUpdateSchema, {
    status: RunStatus.FAILED,
    tokenUse: outcome.usage,
    executionTime,
    error: { code: outcome.code, message: outcome.message, data: toValue(outcome.data) },
  });
}
