import { EventTooLarge, type RunEvent, type RunEventBus } from "@pies/common/bus";
import { describe, expect, it } from "vitest";
import { ChunkPublisher } from "./chunk-publisher.js";

interface Call {
  runId: string;
  kind: RunEvent["kind"];
  text: string;
  dedupId: string;
  resolve(): void;
  reject(err: Error): void;
}

const decoder = new TextDecoder();

/** What JetStream deduplicates on: the run and the event's number, or the run's end. */
const dedupIdOf = (runId: string, kind: RunEvent["kind"], seq: number) =>
  kind === "end" ? `${runId}-end` : `${runId}-${seq}`;

/** A RunEventBus whose publishes resolve or fail only when the test says so. */
class ManualBus implements RunEventBus {
  readonly calls: Call[] = [];
  private waiters: Array<() => void> = [];

  publish(
    runId: string,
    kind: RunEvent["kind"],
    data: Uint8Array,
    seq: number,
  ): Promise<number | undefined> {
    const dedupId = dedupIdOf(runId, kind, seq);
    return new Promise<number | undefined>((resolve, reject) => {
      const text = decoder.decode(data);
      this.calls.push({ runId, kind, text, dedupId, resolve: () => resolve(undefined), reject });
      for (const wake of this.waiters.splice(0)) wake();
    });
  }

  /** Resolves once at least `n` publishes were made. */
  async untilCalls(n: number, timeoutMs = 2000): Promise<Call> {
    const deadline = Date.now() + timeoutMs;
    while (this.calls.length < n) {
      if (Date.now() > deadline)
        throw new Error(`expected ${n} publishes, got ${this.calls.length}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 50);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.calls[n - 1]!;
  }

  subscribe(): AsyncIterable<RunEvent> {
    throw new Error("not used");
  }
  async hasEnd() {
    return false;
  }
  async stored() {
    return [];
  }
  async ready() {
    return true;
  }
  async close() {}
}

interface Attempt {
  kind: string;
  text: string;
  dedupId: string;
  /** The place of the run's event before it, as the publisher linked it. */
  previous: number | undefined;
}

/** A bus that stores what it acknowledges and fails the publishes the test chooses. */
class FlakyBus implements RunEventBus {
  readonly attempts: Attempt[] = [];
  /** What was stored; its place in the store is its index plus 100. */
  readonly kept: Attempt[] = [];
  constructor(private readonly fail: (attempt: Attempt, n: number) => boolean) {}

  async publish(
    runId: string,
    kind: RunEvent["kind"],
    data: Uint8Array,
    seq: number,
    previous?: number,
  ) {
    const dedupId = dedupIdOf(runId, kind, seq);
    const attempt = { kind, text: decoder.decode(data), dedupId, previous };
    this.attempts.push(attempt);
    if (this.fail(attempt, this.attempts.length))
      throw new Error(`publish ${this.attempts.length} failed`);
    // A duplicate is answered with the place of the one stored, as JetStream does.
    let index = this.kept.findIndex((s) => s.dedupId === dedupId);
    if (index < 0) index = this.kept.push(attempt) - 1;
    return index + 100;
  }
  subscribe(): AsyncIterable<RunEvent> {
    throw new Error("not used");
  }
  async hasEnd() {
    return false;
  }
  async stored() {
    return [];
  }
  async ready() {
    return true;
  }
  async close() {}
}

const flushMicrotasks = () => new Promise<void>((resolve) => setImmediate(resolve));
const encode = (s: string) => new TextEncoder().encode(s);

describe("ChunkPublisher", () => {
  it("held, publishes nothing until opened, then what was pushed meanwhile in order", async () => {
    const bus = new FlakyBus(() => false);
    const publisher = new ChunkPublisher(bus, "run-h", 3, true);
    publisher.push("Hel");
    publisher.repair('{"attempt":2}');
    publisher.push("lo");
    await flushMicrotasks();
    expect(bus.attempts).toEqual([]);
    publisher.open();
    publisher.push("!");
    await publisher.flush();
    expect(bus.kept.map((s) => [s.kind, s.text, s.dedupId])).toEqual([
      ["chunk", "Hel", "run-h-1"],
      ["repair", '{"attempt":2}', "run-h-2"],
      ["chunk", "lo!", "run-h-3"],
    ]);
  });

  it("discarded, never publishes what was held nor what comes after", async () => {
    const bus = new FlakyBus(() => false);
    const publisher = new ChunkPublisher(bus, "run-d", 3, true);
    publisher.push("lost");
    publisher.discard();
    publisher.push("also lost");
    publisher.open();
    await flushMicrotasks();
    expect(bus.attempts).toEqual([]);
    await expect(publisher.flush()).rejects.toThrow(/discarded/);
  });

  it("publishes the first chunk at once and joins the chunks that arrive while it is in flight", async () => {
    const bus = new ManualBus();
    const publisher = new ChunkPublisher(bus, "run-1");
    publisher.push("Hel");
    const first = await bus.untilCalls(1);
    expect(first).toMatchObject({ runId: "run-1", kind: "chunk", text: "Hel", dedupId: "run-1-1" });

    publisher.push("lo");
    publisher.push(", ");
    publisher.push("world");
    await flushMicrotasks();
    // Nothing else goes out while the first publish awaits its acknowledgement.
    expect(bus.calls).toHaveLength(1);

    first.resolve();
    const second = await bus.untilCalls(2);
    expect(second).toMatchObject({ kind: "chunk", text: "lo, world", dedupId: "run-1-2" });
    publisher.push("!");
    await flushMicrotasks();
    expect(bus.calls).toHaveLength(2);
    second.resolve();
    const third = await bus.untilCalls(3);
    expect(third).toMatchObject({ text: "!", dedupId: "run-1-3" });
    third.resolve();
    await publisher.flush();
    expect(bus.calls.map((c) => c.text).join("")).toBe("Hello, world!");
  });

  it("flush waits until every chunk is acknowledged", async () => {
    const bus = new ManualBus();
    const publisher = new ChunkPublisher(bus, "run-2");
    publisher.push("a");
    const first = await bus.untilCalls(1);
    publisher.push("b");
    let flushed = false;
    const flushing = publisher.flush().then(() => (flushed = true));
    await flushMicrotasks();
    expect(flushed).toBe(false);
    first.resolve();
    const second = await bus.untilCalls(2);
    await flushMicrotasks();
    expect(flushed).toBe(false);
    second.resolve();
    await flushing;
    expect(flushed).toBe(true);
    expect(bus.calls.map((c) => c.text)).toEqual(["a", "b"]);
  });

  it("publishes the end after the chunks, with its own dedup id", async () => {
    const bus = new ManualBus();
    const publisher = new ChunkPublisher(bus, "run-3");
    publisher.push("x");
    const first = await bus.untilCalls(1);
    publisher.push("y");
    const ending = publisher.end(encode("final"));
    await flushMicrotasks();
    expect(bus.calls.map((c) => c.kind)).toEqual(["chunk"]);
    first.resolve();
    const second = await bus.untilCalls(2);
    expect(second).toMatchObject({ kind: "chunk", text: "y" });
    await flushMicrotasks();
    expect(bus.calls).toHaveLength(2);
    second.resolve();
    const end = await bus.untilCalls(3);
    expect(end).toMatchObject({ kind: "end", text: "final", dedupId: "run-3-end" });
    end.resolve();
    await ending;
  });

  it("publishes only the end when there were no chunks", async () => {
    const bus = new FlakyBus(() => false);
    const publisher = new ChunkPublisher(bus, "run-4");
    await publisher.flush();
    await publisher.end(encode("done"));
    expect(bus.kept).toEqual([{ kind: "end", text: "done", dedupId: "run-4-end" }]);
  });

  it("retries a failed publish with the same dedup id, keeping the order", async () => {
    // The first attempt of the first chunk fails, as a lost acknowledgement would.
    const bus = new FlakyBus((_attempt, n) => n === 1);
    const publisher = new ChunkPublisher(bus, "run-5");
    publisher.push("one ");
    publisher.push("two");
    await publisher.flush();
    publisher.push(" three");
    await publisher.end(encode("end"));
    expect(bus.attempts.map((a) => a.dedupId)).toEqual([
      "run-5-1",
      "run-5-1",
      "run-5-2",
      "run-5-3",
      "run-5-end",
    ]);
    expect(bus.attempts[0]!.text).toBe(bus.attempts[1]!.text);
    // "two" arrived during the retry's pause and went out next; " three" after the flush.
    expect(bus.kept.map((s) => s.text)).toEqual(["one ", "two", " three", "end"]);
  });

  it("links each event to the place of the one stored before it, a retry to the same", async () => {
    // The second chunk's first attempt fails after it was stored (a lost acknowledgement).
    let lost = false;
    const bus = new FlakyBus((attempt) => {
      if (attempt.text !== "two" || lost) return false;
      lost = true;
      bus.kept.push(attempt);
      return true;
    });
    const publisher = new ChunkPublisher(bus, "run-7");
    publisher.push("one");
    await publisher.flush();
    publisher.push("two");
    await publisher.flush();
    await publisher.end(encode("end"));
    expect(bus.attempts.map((a) => [a.text, a.previous])).toEqual([
      ["one", undefined],
      ["two", 100],
      ["two", 100],
      ["end", 101],
    ]);
  });

  it("retries the end event too", async () => {
    const bus = new FlakyBus((attempt, n) => attempt.kind === "end" && n <= 2);
    const publisher = new ChunkPublisher(bus, "run-6");
    publisher.push("a");
    await publisher.end(encode("end"));
    expect(bus.attempts.map((a) => a.dedupId)).toEqual(["run-6-1", "run-6-end", "run-6-end"]);
    expect(bus.kept.map((s) => s.kind)).toEqual(["chunk", "end"]);
  });

  it("flush throws after the attempts are used up, and later chunks are dropped", async () => {
    const bus = new FlakyBus((attempt) => attempt.kind === "chunk");
    const publisher = new ChunkPublisher(bus, "run-7", 2);
    publisher.push("a");
    await expect(publisher.flush()).rejects.toThrow("publish 2 failed");
    expect(bus.attempts.map((a) => a.dedupId)).toEqual(["run-7-1", "run-7-1"]);
    publisher.push("b");
    await expect(publisher.flush()).rejects.toThrow("publish 2 failed");
    expect(bus.attempts).toHaveLength(2);
    // The end still goes out (the run's final state must reach readers).
    await publisher.end(encode("end"));
    expect(bus.kept).toEqual([{ kind: "end", text: "end", dedupId: "run-7-end" }]);
  });

  it("end throws when the end event cannot be published", async () => {
    const bus = new FlakyBus(() => true);
    const publisher = new ChunkPublisher(bus, "run-8", 1);
    await expect(publisher.end(encode("end"))).rejects.toThrow("publish 1 failed");
  });

  it("keeps multi-byte characters intact across joined chunks", async () => {
    const bus = new FlakyBus(() => false);
    const publisher = new ChunkPublisher(bus, "run-9");
    for (const piece of ["é", "✓", "😀", " ok"]) publisher.push(piece);
    await publisher.flush();
    expect(bus.kept.map((s) => s.text).join("")).toBe("é✓😀 ok");
  });

  it("cuts what waited into events the bus takes, never inside a character", async () => {
    const limit = 16;
    const bus = new SizedBus(limit);
    const publisher = new ChunkPublisher(bus, "run-10", 3, true);
    // Pushed while held (the start not recorded yet): far more than one event takes, with
    // characters of 2, 3 and 4 bytes (a surrogate pair) where a cut by bytes would fall inside.
    const pieces = ["a😀", "é✓", "bcdefghijklm😀😀", "n".repeat(40), "✓✓✓✓✓✓😀é"];
    for (const piece of pieces) publisher.push(piece);
    publisher.open();
    await publisher.flush();
    expect(bus.kept.length).toBeGreaterThan(5);
    expect(bus.sizes.every((bytes) => bytes <= limit)).toBe(true);
    expect(bus.kept.map((s) => s.text).join("")).toBe(pieces.join(""));
    expect(bus.kept.some((s) => s.text.includes("\ufffd"))).toBe(false);
    expect(bus.kept.map((s) => s.dedupId)).toEqual(bus.kept.map((_, i) => `run-10-${i + 1}`));
    await publisher.end(encode("end"));
    expect(bus.kept.at(-1)?.dedupId).toBe("run-10-end");
  });

  it("does not retry an event the bus refuses for its size, and numbers the end after the last stored", async () => {
    const bus = new SizedBus(16);
    const publisher = new ChunkPublisher(bus, "run-11", 3);
    publisher.push("short");
    await publisher.flush();
    publisher.repair(JSON.stringify({ attempt: 1, errors: ["x".repeat(40)] }));
    await expect(publisher.flush()).rejects.toBeInstanceOf(EventTooLarge);
    expect(bus.attempts.filter((a) => a.kind === "repair")).toHaveLength(1);
    await publisher.end(encode("end"));
    expect(bus.kept.map((s) => s.dedupId)).toEqual(["run-11-1", "run-11-end"]);
  });
});

/** A bus that refuses events larger than `maxEventBytes`, as JetStream's does. */
class SizedBus extends FlakyBus {
  readonly sizes: number[] = [];
  constructor(readonly maxEventBytes: number) {
    super(() => false);
  }
  override async publish(
    runId: string,
    kind: RunEvent["kind"],
    data: Uint8Array,
    seq: number,
    previous?: number,
  ) {
    if (data.length > this.maxEventBytes) {
      this.attempts.push({
        kind,
        text: decoder.decode(data),
        dedupId: dedupIdOf(runId, kind, seq),
        previous,
      });
      throw new EventTooLarge(runId, data.length, this.maxEventBytes);
    }
    this.sizes.push(data.length);
    return super.publish(runId, kind, data, seq, previous);
  }
}
