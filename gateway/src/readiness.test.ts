import { describe, expect, it } from "vitest";
import { Readiness } from "./readiness.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("Readiness", () => {
  it("answers probes from the last check, and checks again in the background", async () => {
    let calls = 0;
    let up = true;
    const readiness = new Readiness(async () => (calls++, up), 50);
    expect(await readiness.ready()).toBe(true);
    expect(calls).toBe(1);
    // Probes between two checks ask nothing.
    for (let i = 0; i < 10; i++) expect(await readiness.ready()).toBe(true);
    expect(calls).toBe(1);
    // A dependency goes away: the next background check tells the probes.
    up = false;
    await sleep(200);
    expect(calls).toBeGreaterThan(1);
    expect(await readiness.ready()).toBe(false);
    readiness.stop();
  });

  it("makes one check at a time, and a failed one is not ready", async () => {
    let calls = 0;
    let release!: () => void;
    const readiness = new Readiness(async () => {
      calls++;
      await new Promise<void>((resolve) => (release = resolve));
      throw new Error("the runs service is away");
    }, 10);
    const probes = [readiness.ready(), readiness.ready(), readiness.ready()];
    await sleep(50);
    expect(calls).toBe(1);
    release();
    expect(await Promise.all(probes)).toEqual([false, false, false]);
    readiness.stop();
  });

  it("stops checking once stopped", async () => {
    let calls = 0;
    const readiness = new Readiness(async () => (calls++, true), 20);
    await readiness.ready();
    readiness.stop();
    const stoppedAt = calls;
    await sleep(100);
    expect(calls).toBe(stoppedAt);
  });
});
