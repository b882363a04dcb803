import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { newId } from "../ids.js";
import { MemoryRunEventBus } from "./memory-bus.js";

const bytes = (n: number) => new Uint8Array(n);

describe("MemoryRunEventBus bounds", () => {
  it("forgets the runs whose last event is oldest once all weigh more than maxBytes", async () => {
    const bus = new MemoryRunEventBus({ maxBytes: 100_000 });
    for (let i = 0; i < 1000; i++) {
      await bus.publish(`r${i}`, "chunk", bytes(1000), 1);
      await bus.publish(`r${i}`, "end", bytes(10), 2);
    }
    // Held within the bound, whatever was published: the newest runs.
    expect(bus.held.bytes).toBeLessThanOrEqual(100_000);
    expect(bus.held.runs).toBeGreaterThan(50);
    expect(bus.held.runs).toBeLessThan(100);
    expect(await bus.hasEnd("r999")).toBe(true);
    expect(await bus.hasEnd("r0")).toBe(false);
    await bus.close();
  });

  it("keeps a run that got an event lately over one that ended before it", async () => {
    const bus = new MemoryRunEventBus({ maxBytes: 6_000 });
    await bus.publish("old", "chunk", bytes(1000), 1);
    await bus.publish("done", "chunk", bytes(1000), 1);
    await bus.publish("done", "end", bytes(10), 2);
    // "old" goes on: its last event is now the newest.
    await bus.publish("old", "chunk", bytes(1000), 2);
    for (let i = 0; i < 3; i++) await bus.publish(`n${i}`, "chunk", bytes(500), 1);
    expect(await bus.hasEnd("done")).toBe(false);
    const kept = [];
    for await (const e of bus.subscribe("old", { signal: AbortSignal.timeout(50) })) kept.push(e);
    expect(kept.map((e) => e.seq)).toEqual([1, 2]);
    await bus.close();
  });

  it("forgets runs older than maxAgeMs, even with nothing published after them", async () => {
    const bus = new MemoryRunEventBus({ maxAgeMs: 100 });
    await bus.publish("r1", "end", bytes(10), 1);
    expect(await bus.hasEnd("r1")).toBe(true);
    await new Promise((r) => setTimeout(r, 300));
    expect(await bus.hasEnd("r1")).toBe(false);
    expect(bus.held).toEqual({ runs: 0, bytes: 0, maxBytes: 64 * 2 ** 20 });
    await bus.close();
  });

  it("cuts a run's buffer to its size at its end, and counts it so", async () => {
    const bus = new MemoryRunEventBus();
    for (let seq = 1; seq <= 3; seq++) await bus.publish("r", "chunk", bytes(100), seq);
    const whileRunning = bus.held.bytes;
    await bus.publish("r", "end", bytes(10), 4);
    // 310 bytes of events (from a buffer of 512 while the chunks came), four events' numbers.
    expect(bus.held.bytes).toBeLessThan(whileRunning);
    expect(bus.held.bytes).toBe(400 + 310 + 4 * 3 * 8);
    const events = await bus.stored("r");
    expect(events.map((e) => [e.seq, e.kind, e.data.length])).toEqual([
      [1, "chunk", 100],
      [2, "chunk", 100],
      [3, "chunk", 100],
      [4, "end", 10],
    ]);
    await bus.close();
  });

  it("counts what its runs weigh in memory, and keeps nothing of what it was given", async () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const used = () => {
      gc();
      const { heapUsed, arrayBuffers } = process.memoryUsage();
      return heapUsed + arrayBuffers;
    };
    const bus = new MemoryRunEventBus({ maxBytes: 2 ** 40 });
    const before = used();
    // Runs as the soak's streamed ones: a few small chunks, then the run itself as the end.
    for (let i = 0; i < 20_000; i++) {
      const runId = newId();
      for (let seq = 1; seq <= 5; seq++) await bus.publish(runId, "chunk", bytes(40), seq);
      await bus.publish(runId, "end", bytes(1200), 6);
    }
    const measured = used() - before;
    expect(bus.held.runs).toBe(20_000);
    // Within a quarter either way: maxBytes bounds what the bus really holds.
    expect(measured / bus.held.bytes).toBeGreaterThan(0.75);
    expect(measured / bus.held.bytes).toBeLessThan(1.25);
    await bus.close();
  });
});
