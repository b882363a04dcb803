import { describe, expect, it } from "vitest";
import { costOf, LIST_PRICES, priceOf, pricesOf } from "./prices.js";

describe("prices and costs", () => {
  it("costs tokens at USD per million, exactly, for a table of cases", () => {
    const cases: [number, number, { input: number; output: number }, [number, number, number]][] = [
      [1_000_000, 1_000_000, { input: 2.5, output: 10 }, [2.5, 10, 12.5]],
      [1234, 567, { input: 0.15, output: 0.6 }, [0.0001851, 0.0003402, 0.0005253]],
      [1, 1, { input: 0.1, output: 0.4 }, [0.0000001, 0.0000004, 0.0000005]],
      [0, 250, { input: 3, output: 15 }, [0, 0.00375, 0.00375]],
      [7, 3, { input: 0, output: 0 }, [0, 0, 0]],
      // 0.1 + 0.2 is not 0.3 in floating point: the cost is.
      [1_000_000, 1_000_000, { input: 0.1, output: 0.2 }, [0.1, 0.2, 0.3]],
    ];
    for (const [prompt, result, price, [input, output, total]] of cases) {
      expect(costOf(prompt, result, price)).toEqual({ input, output, total });
    }
  });

  it("prices a listed model, a dated snapshot of one, and nothing else", () => {
    expect(priceOf("gpt-4o-mini")).toEqual({ input: 0.15, output: 0.6 });
    expect(priceOf("gpt-4o-mini-2024-07-18")).toEqual(LIST_PRICES["gpt-4o-mini"]);
    expect(priceOf("gpt-4o-2024-08-06")).toEqual(LIST_PRICES["gpt-4o"]);
    expect(priceOf("claude-sonnet-4-5-20250929")).toEqual(LIST_PRICES["claude-sonnet-4-5"]);
    expect(priceOf("models/gemini-2.0-flash-001")).toEqual(LIST_PRICES["gemini-2.0-flash"]);
    // Not a snapshot: another model that shares a prefix, or a suffix that is no date.
    expect(priceOf("gpt-4o-audio-preview")).toBeUndefined();
    expect(priceOf("gpt-4o-123456")).toBeUndefined();
    // A snapshot listed at its own price.
    expect(priceOf("gpt-4o-2024-05-13")).toEqual({ input: 5, output: 15 });
    expect(priceOf("my-deployment")).toBeUndefined();
    expect(priceOf("constructor")).toBeUndefined();
    // The environment's own prices first.
    const own = new Map([["gpt-4o-mini", { input: 1, output: 2 }]]);
    expect(priceOf("gpt-4o-mini", own)).toEqual({ input: 1, output: 2 });
  });

  it("reads an environment's config.prices, naming what is wrong", () => {
    expect(pricesOf({})).toEqual(new Map());
    expect(pricesOf({ prices: { "my-model": { input: 1, output: 3 } } })).toEqual(
      new Map([["my-model", { input: 1, output: 3 }]]),
    );
    expect(pricesOf({ prices: [1] })).toEqual({
      invalid: 'config.prices: an object of {"<model>": {"input": …, "output": …}}',
    });
    expect(pricesOf({ prices: { m: { input: 1 } } })).toEqual({
      invalid: "config.prices.m.output must be a number of USD per million tokens, 0 or more",
    });
    expect(pricesOf({ prices: { m: { input: -1, output: 1 } } })).toMatchObject({
      invalid: expect.stringContaining("config.prices.m.input"),
    });
  });
});
