import { describe, expect, it } from "vitest";
import { RETRY_BASE_MS, RETRY_MAX_MS, retryDelayMs } from "./call.js";

describe("retryDelayMs", () => {
  it("doubles from the base with each retry, jittered down by at most a quarter", () => {
    expect(retryDelayMs(0, 0, 0)).toBe(RETRY_BASE_MS);
    expect(retryDelayMs(1, 0, 0)).toBe(RETRY_BASE_MS * 2);
    expect(retryDelayMs(3, 0, 0)).toBe(RETRY_BASE_MS * 8);
    expect(retryDelayMs(0, 0, 1)).toBe(RETRY_BASE_MS * 0.75);
    for (let i = 0; i < 100; i++) {
      const d = retryDelayMs(2, 0);
      expect(d).toBeGreaterThanOrEqual(RETRY_BASE_MS * 4 * 0.75);
      expect(d).toBeLessThanOrEqual(RETRY_BASE_MS * 4);
    }
  });

  it("is capped", () => {
    expect(retryDelayMs(30, 0, 0)).toBe(RETRY_MAX_MS);
  });

  it("never waits less than the provider's Retry-After", () => {
    expect(retryDelayMs(0, 2_000, 0)).toBe(2_000);
    expect(retryDelayMs(10, 20_000, 0)).toBe(20_000);
    // A Retry-After shorter than the backoff: the backoff.
    expect(retryDelayMs(1, 10, 0)).toBe(RETRY_BASE_MS * 2);
  });
});
