import { createRequire } from "node:module";
import type { ChatMessage } from "../templates/render.js";
import type { TokenUsage } from "./types.js";

/**
 * Tokens a chat message costs beyond its content (role and separators), and the tokens that prime
 * the answer, as OpenAI's chat format counts them.
 */
const PER_MESSAGE = 3;
const PER_ANSWER = 3;

type CountTokens = (text: string) => number;
let countTokens: CountTokens | undefined;

/**
 * The tokenizer, loaded on first use: its tables take about a second and 65 MB to load, which an
 * executor whose providers all report usage (OpenAI and most compatible servers) never needs.
 */
function tokenizer(): CountTokens {
  countTokens ??= (
    createRequire(import.meta.url)("gpt-tokenizer/cjs/encoding/o200k_base") as {
      countTokens: CountTokens;
    }
  ).countTokens;
  return countTokens;
}

/**
 * Loads the tokenizer now (the embedded mode, whose `test` environment reports no usage, does it
 * once it is serving, so that its first execution does not wait the second).
 */
export function loadTokenizer(): void {
  tokenizer();
}

/**
 * Runs of this many characters without white space are counted piece by piece: byte-pair merging
 * is quadratic in the length of a run (a 1 MB prompt of one repeated letter took minutes), while
 * no token is anywhere near this long, so the count changes by a token at most per piece.
 */
const LONG_RUN = 256;
const longRun = new RegExp(`\\S{${LONG_RUN},}`);
const runPieces = new RegExp(`(\\S{${LONG_RUN}})`);

/** Tokens of a text in o200k_base, the encoding of the GPT-4o and later OpenAI models. */
export function countTextTokens(text: string): number {
  if (!text) return 0;
  const count = tokenizer();
  if (!longRun.test(text)) return count(text);
  let total = 0;
  for (const piece of text.split(runPieces)) if (piece) total += count(piece);
  return total;
}

/**
 * Token usage counted with the tokenizer, for providers that report none: the prompt's messages in
 * the chat format, and the answer.
 */
export function countUsage(messages: ChatMessage[], content: string): TokenUsage {
  let prompt = PER_ANSWER;
  for (const m of messages) prompt += PER_MESSAGE + countTextTokens(m.content);
  const result = countTextTokens(content);
  return { prompt, result, total: prompt + result };
}
