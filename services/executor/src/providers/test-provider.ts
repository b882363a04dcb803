import { sampleJson, seededRandom, seedOf, violateJson } from "@pies/common";
import { estimateUsage } from "./tokens.js";
import {
  ProviderError,
  type CompletionOptions,
  type CompletionRequest,
  type CompletionResult,
  type LlmClient,
} from "./types.js";

/**
 * The built-in `test` provider: deterministic output seeded by the prompt, generated locally, with
 * no network. With an output schema it answers JSON that validates against it; otherwise text.
 * The model name picks the behaviour, so every path can be exercised:
 * - `test-fail`: the call fails (a provider error);
 * - `test-invalid`: with a schema, JSON that does not validate against it;
 * - `test-slow`: 50 ms between chunks; `test-latency-<ms>`: that long before the first chunk;
 * - anything else: a normal answer.
 */
export class TestClient implements LlmClient {
  async complete(
    request: CompletionRequest,
    options: CompletionOptions,
  ): Promise<CompletionResult> {
    const model = request.model;
    const latency = /^test-latency-(\d+)$/.exec(model);
    if (latency) await sleep(Number(latency[1]), options.signal);
    if (model === "test-fail")
      throw new ProviderError("test provider: model test-fail always fails");
    const content = answer(
      request,
      seededRandom(seedOf(request.messages)),
      model === "test-invalid",
    );
    if (options.onChunk) {
      for (const piece of chunks(content)) {
        if (model === "test-slow") await sleep(50, options.signal);
        options.onChunk(piece);
      }
    }
    return { content, usage: estimateUsage(request.messages, content) };
  }
}

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

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new ProviderError("aborted"));
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new ProviderError("aborted"));
    });
  });
}
