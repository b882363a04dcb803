import type { ChatMessage } from "../templates/render.js";
import type { TokenUsage } from "./types.js";

/** About four characters a token, as the OpenAI tokenizers average on English text. */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

/** Token usage estimated from the prompt and the answer, for providers that report none. */
export function estimateUsage(messages: ChatMessage[], content: string): TokenUsage {
  const prompt = estimateTokens(messages.map((m) => m.content).join("\n"));
  const result = estimateTokens(content);
  return { prompt, result, total: prompt + result };
}
