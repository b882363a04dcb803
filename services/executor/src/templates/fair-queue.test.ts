import { describe, expect, it } from "vitest";
import { FairQueue } from "./fair-queue.js";

/** Takes every item that may run now, as `key:item`. */
function takeAll(queue: FairQueue<string>): string[] {
  const taken: string[] = [];
  for (let next = queue.take(); next; next = queue.take()) taken.push(`${next.key}:${next.item}`);
  return taken;
}

describe("FairQueue", () => {
  it("refuses an item beyond a key's maximum, queued and running together", () => {
    const queue = new FairQueue<string>({ maxHeld: 2, maxRunning: 1 });
    expect(queue.offer("a", "1")).toBe(true);
    expect(queue.offer("a", "2")).toBe(true);
    expect(queue.offer("a", "3")).toBe(false);
    expect(queue.take()).toEqual({ key: "a", item: "1" });
    // One running and one queued is still two.
    expect(queue.offer("a", "3")).toBe(false);
    expect(queue.held("a")).toBe(2);
    // Another key has a maximum of its own.
    expect(queue.offer("b", "1")).toBe(true);
    queue.done("a");
    expect(queue.offer("a", "3")).toBe(true);
  });

  it("serves the key served least recently first, not the one with the longest backlog", () => {
    const queue = new FairQueue<string>({ maxHeld: 10, maxRunning: 10 });
    for (const item of ["1", "2", "3", "4"]) queue.offer("a", item);
    queue.offer("b", "1");
    queue.offer("c", "1");
    queue.offer("b", "2");
    // One at a time, as one worker would: each done before the next take.
    const order: string[] = [];
    for (let next = queue.take(); next; next = queue.take()) {
      order.push(`${next.key}:${next.item}`);
      queue.done(next.key);
    }
    expect(order).toEqual(["a:1", "b:1", "c:1", "a:2", "b:2", "a:3", "a:4"]);
  });

  it("lets a key that arrives later go before the next item of a key already running", () => {
    const queue = new FairQueue<string>({ maxHeld: 10, maxRunning: 10 });
    queue.offer("a", "1");
    expect(queue.take()).toEqual({ key: "a", item: "1" });
    queue.offer("a", "2");
    queue.offer("b", "1");
    // a has one running, b none: b first, even though a queued earlier.
    expect(queue.take()).toEqual({ key: "b", item: "1" });
    expect(queue.take()).toEqual({ key: "a", item: "2" });
  });

  it("runs no more than maxRunning items of one key, and the rest when they finish", () => {
    const queue = new FairQueue<string>({ maxHeld: 10, maxRunning: 2 });
    for (const item of ["1", "2", "3"]) queue.offer("a", item);
    expect(takeAll(queue)).toEqual(["a:1", "a:2"]);
    queue.offer("b", "1");
    expect(takeAll(queue)).toEqual(["b:1"]);
    queue.done("a");
    expect(takeAll(queue)).toEqual(["a:3"]);
    expect(queue.size).toBe(0);
  });

  it("forgets a key once it holds nothing, and ignores a done it does not owe", () => {
    const queue = new FairQueue<string>({ maxHeld: 1, maxRunning: 1 });
    queue.offer("a", "1");
    queue.take();
    queue.done("a");
    queue.done("a");
    queue.done("unknown");
    expect(queue.held("a")).toBe(0);
    expect(queue.offer("a", "2")).toBe(true);
    expect(queue.held("a")).toBe(1);
  });

  it("drains the queued items and keeps counting the running ones until done", () => {
    const queue = new FairQueue<string>({ maxHeld: 5, maxRunning: 1 });
    for (const item of ["1", "2", "3"]) queue.offer("a", item);
    queue.offer("b", "1");
    queue.take();
    expect(queue.drain()).toEqual(["2", "3", "1"]);
    expect(queue.size).toBe(0);
    expect(queue.held("a")).toBe(1);
    expect(queue.held("b")).toBe(0);
    queue.done("a");
    expect(queue.held("a")).toBe(0);
  });
});
