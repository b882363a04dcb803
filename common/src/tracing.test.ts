import { describe, expect, it } from "vitest";
import { inSpan, tracingEnabled } from "./tracing.js";

describe("inSpan with tracing off", () => {
  it("answers the function's own promise, not one more around it", async () => {
    expect(tracingEnabled()).toBe(false);
    const work = Promise.resolve(42);
    const spanned = inSpan("work", {}, () => work);
    expect(spanned).toBe(work);
    expect(await spanned).toBe(42);
  });

  it("answers a function that throws with a rejection, as an async function would", async () => {
    const boom = new Error("boom");
    const spanned = inSpan("work", {}, () => {
      throw boom;
    });
    await expect(spanned).rejects.toBe(boom);
  });
});
