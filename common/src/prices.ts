import type { JsonObject } from "./json.js";

/** USD per million tokens of a model: its prompt's and its answer's. */
export interface Price {
  input: number;
  output: number;
}

/**
 * List prices of well-known models, USD per million tokens (standard tier, text, no batch, no
 * cache discount; Gemini 2.5 Pro's for prompts up to 200k tokens). As of PRICES_AS_OF, from the
 * providers' pricing pages: https://platform.openai.com/docs/pricing,
 * https://www.anthropic.com/pricing, https://ai.google.dev/gemini-api/docs/pricing (as copied by
 * the pricing summaries that cite them). Prices change: an environment's `config.prices` overrides
 * any of them, and names any other model (an Azure deployment, a local model).
 */
export const PRICES_AS_OF = "2026-12-07";

export const LIST_PRICES: Readonly<Record<string, Price>> = Object.freeze({
  "gpt-5": { input: 1.25, output: 10 },
  "gpt-5-mini": { input: 0.25, output: 2 },
  "gpt-5-nano": { input: 0.05, output: 0.4 },
  "gpt-4.1": { input: 2, output: 8 },
  "gpt-4.1-mini": { input: 0.4, output: 1.6 },
  "gpt-4.1-nano": { input: 0.1, output: 0.4 },
  "gpt-4o": { input: 2.5, output: 10 },
  // The first snapshot, listed at its own (higher) price.
  "gpt-4o-2024-05-13": { input: 5, output: 15 },
  "gpt-4o-mini": { input: 0.15, output: 0.6 },
  o3: { input: 2, output: 8 },
  "o3-mini": { input: 1.1, output: 4.4 },
  "o4-mini": { input: 1.1, output: 4.4 },
  "claude-opus-4-5": { input: 5, output: 25 },
  "claude-opus-4-1": { input: 15, output: 75 },
  "claude-sonnet-4-5": { input: 3, output: 15 },
  "claude-sonnet-4": { input: 3, output: 15 },
  "claude-haiku-4-5": { input: 1, output: 5 },
  "claude-3-5-haiku": { input: 0.8, output: 4 },
  "gemini-2.5-pro": { input: 1.25, output: 10 },
  "gemini-2.5-flash": { input: 0.3, output: 2.5 },
  "gemini-2.5-flash-lite": { input: 0.1, output: 0.4 },
  "gemini-2.0-flash": { input: 0.1, output: 0.4 },
});

/** An environment's `config.prices` (model → price), or what is wrong with it. */
export function pricesOf(config: JsonObject): Map<string, Price> | { invalid: string } {
  const prices = new Map<string, Price>();
  const given = config.prices;
  if (given === undefined) return prices;
  if (!given || typeof given !== "object" || Array.isArray(given)) {
    return { invalid: 'config.prices: an object of {"<model>": {"input": …, "output": …}}' };
  }
  for (const [model, price] of Object.entries(given)) {
    const at = `config.prices.${model}`;
    if (!price || typeof price !== "object" || Array.isArray(price)) {
      return { invalid: `${at}: {"input": …, "output": …}, USD per million tokens` };
    }
    const { input, output } = price;
    for (const [name, value] of [
      ["input", input],
      ["output", output],
    ] as const) {
      if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
        return { invalid: `${at}.${name} must be a number of USD per million tokens, 0 or more` };
      }
    }
    prices.set(model, { input: input as number, output: output as number });
  }
  return prices;
}

/** The suffix of a dated snapshot: OpenAI's `-2024-08-06`, Anthropic's `-20250929`, Gemini's `-001`. */
const SNAPSHOT = /^-(\d{4}-\d{2}-\d{2}|\d{8}|\d{3})$/;

/**
 * The listed model `model` is priced as: itself, or the listed model it is a dated snapshot of
 * (`gpt-4o-2024-08-06`, `claude-sonnet-4-5-20250929`, `gemini-2.0-flash-001`), Gemini's `models/`
 * prefix dropped. Undefined for a model the list does not price. One of the list's few names, so
 * fit for a metric's label.
 */
export function listedModelOf(model: string): string | undefined {
  const id = model.startsWith("models/") ? model.slice("models/".length) : model;
  if (Object.hasOwn(LIST_PRICES, id)) return id;
  let best: string | undefined;
  for (const known of Object.keys(LIST_PRICES)) {
    if (id.startsWith(known) && SNAPSHOT.test(id.slice(known.length))) {
      if (!best || known.length > best.length) best = known;
    }
  }
  return best;
}

/**
 * The price of `model`: the environment's (by its exact name), else the list's (listedModelOf).
 * Undefined for a model of no known price.
 */
export function priceOf(model: string, configured?: ReadonlyMap<string, Price>): Price | undefined {
  const own = configured?.get(model);
  if (own) return own;
  const listed = listedModelOf(model);
  return listed === undefined ? undefined : LIST_PRICES[listed];
}

/** A cost in USD, to a tenth of a nanodollar (no float noise in what a run records). */
export const usd = (value: number) => Math.round(value * 1e10) / 1e10;

/** What `prompt` and `result` tokens cost at `price`. */
export function costOf(
  prompt: number,
  result: number,
  price: Price,
): { input: number; output: number; total: number } {
  const input = usd((prompt * price.input) / 1e6);
  const output = usd((result * price.output) / 1e6);
  return { input, output, total: usd(input + output) };
}
