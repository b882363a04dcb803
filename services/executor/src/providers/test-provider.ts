import { LRUCache } from "lru-cache";
import { sampleJson, seededRandom, seedOf, violateJson } from "@pies/common";
import {
  pause,
  ProviderError,
  providerAborted,
  type CompletionOptions,
  type CompletionRequest,
  type CompletionResult,
  type LlmClient,
} from "./types.js";

/**
 * Marks a repair request in the prompt (the executor's repair message starts with it), so that
 * `test-invalid-once` can tell a first attempt from a repair without keeping state.
 */
export const REPAIR_MARK = "Your previous answer was not accepted";

/**
 * The built-in `test` provider: deterministic output seeded by the prompt, generated locally, with
 * no network. With an output schema it answers JSON that validates against it; otherwise text.
 * It reports no token usage: the executor counts it with the tokenizer, as for any provider that
 * reports none. The model name picks the behaviour, so every path can be exercised:
 * - `test-fail`: the call fails (a provider error);
 * - `test-invalid`: with a schema, JSON that does not validate against it, at every attempt;
 * - `test-invalid-once`: with a schema, invalid JSON at the first attempt, valid at a repair;
 * - `test-429-once`: the first call with a prompt is refused as a 429 with `Retry-After: 0`
 *   (retried by the executor like any provider's), later ones answer;
 * - `test-fail-midstream`: the answer breaks off after its first chunk (`stream_error`);
 * - `test-refused`, `test-429`, `test-500`, `test-timeout`: every call fails as a refused
 *   connection, a 429 (without Retry-After), a 500 or a timeout would, each a failure another
 *   provider could answer (what a virtual environment fails over on; `npm start` can show it);
 * - `test-slow`: 50 ms between chunks; `test-latency-<ms>`: that long before the first chunk;
 * - anything else: a normal answer.
 */
export class TestClient implements LlmClient {
  /** Prompts `test-429-once` has refused (bounded: the oldest are forgotten). */
  private readonly refused = new LRUCache<number, true>({ max: 10_000 });

  async complete(
    request: CompletionRequest,
    options: CompletionOptions,
  ): Promise<CompletionResult> {
    const model = request.model;
    const latency = /^test-latency-(\d+)$/.exec(model);
    if (latency) await pause(Number(latency[1]), options.signal);
    if (model === "test-fail")
      throw new ProviderError("test provider: model test-fail always fails");
    const failure = FAILURES.get(model);
    if (failure) {
      const error = new ProviderError(failure[0], failure[1]);
      error.failover = true;
      throw error;
    }
    const seed = seedOf(request.messages);
    if (model === "test-429-once" && !this.refused.has(seed)) {
      this.refused.set(seed, true);
      throw new ProviderError(
        "provider answered 429: rate limited (test-429-once)",
        "provider_error",
        undefined,
        0,
      );
    }
    const invalid =
      model === "test-invalid" || (model === "test-invalid-once" && !isRepair(request));
    const content = answer(request, seededRandom(seed), invalid);
    const pieces = chunks(content);
    if (model === "test-fail-midstream") {
      options.onChunk?.(pieces[0] ?? "");
      throw new ProviderError(
        "the provider's answer broke off after its first chunk (test-fail-midstream)",
        "stream_error",
      );
    }
    if (options.onChunk) {
      for (const piece of pieces) {
        if (model === "test-slow") await pause(50, options.signal);
        if (options.signal?.aborted) throw providerAborted(options.signal.reason);
        options.onChunk(piece);
      }
    }
    return { content };
  }
}

/** The failures another provider could answer, by model: the message and the code of each. */
const FAILURES = new Map<string, [string, "provider_error" | "timeout"]>([
  ["test-refused", ["the provider could not be reached", "provider_error"]],
  ["test-429", ["provider answered 429: rate limited (test-429)", "provider_error"]],
  ["test-500", ["provider answered 500: server error (test-500)", "provider_error"]],
  ["test-timeout", ["the provider did not answer in time", "timeout"]],
]);

const isRepair = (request: CompletionRequest) =>
  request.messages.some((m) => m.role === "user" && m.content.startsWith(REPAIR_MARK));

function answer(request: CompletionRequest, random: () => number, invalid: boolean): string {
  if (request.schema) {
    if (invalid) return JSON.stringify(violateJson(request.schema));
    return JSON.stringify(sampleJson(request.schema, random));
  }
  const last = [...request.messages].reverse().find((m) => m.role === "user")?.content ?? "";
  const words = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit"];
  const tail = Array.from({ length: 12 }, () => words[Math.floor(random() * words.length)]).join(
    " ",
  );
  return `Test answer to "${last.slice(0, 200)}": ${tail}.`;
}

/** Pieces of at most 12 characters, cut after a space where there is one, as a model streams. */
export function chunks(content: string): string[] {
  return content.match(/.{1,11}(\s|$)|.{1,12}/gs) ?? [content];
}
