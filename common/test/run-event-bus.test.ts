import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newId } from "@pies/common";
import {
  EventTooLarge,
  JetStreamRunEventBus,
  LiveGap,
  MemoryRunEventBus,
  type RunEvent,
  type RunEventBus,
} from "@pies/common/bus";
import { jetstream } from "@nats-io/jetstream";
import { createTestStream, type TestStream } from "@pies/testkit";

const text = (e: RunEvent) => new TextDecoder().decode(e.data);
const bytes = (s: string) => new TextEncoder().encode(s);

/** Reads events until the end event (or `count` events), with a time limit. */
async function collect(bus: RunEventBus, runId: string, afterSeq?: number, count = Infinity) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 5000);
  const events: RunEvent[] = [];
  for await (const event of bus.subscribe(runId, { afterSeq, signal: controller.signal })) {
    events.push(event);
    if (event.kind === "end" || events.length >= count) break;
  }
  clearTimeout(timer);
  controller.abort();
  return events;
}

// One contract, two implementations: the embedded stand-in must behave as JetStream does.
const implementations: [
  string,
  () => Promise<{ bus: RunEventBus; cleanup: () => Promise<void> }>,
][] = [
  [
    "MemoryRunEventBus",
    async () => ({ bus: new MemoryRunEventBus(60_000), cleanup: async () => {} }),
  ],
  [
    "JetStreamRunEventBus (real NATS)",
    async () => {
      const stream: TestStream = createTestStream();
      const bus = await JetStreamRunEventBus.connect({
        url: stream.url,
        stream: stream.stream,
        subjectPrefix: stream.subjectPrefix,
        maxAgeSeconds: 60,
        name: "pies-test",
      });
      return {
        bus,
        cleanup: async () => {
          await bus.close();
          await stream.remove();
        },
      };
    },
  ],
];

describe.each(implementations)("%s", (_name, make) => {
  let bus: RunEventBus;
  let cleanup: () => Promise<void>;
  beforeAll(async () => ({ bus, cleanup } = await make()));
  afterAll(async () => cleanup());

  it("replays stored events to a late subscriber, in order, ending with the end event", async () => {
    const runId = newId();
    for (let i = 0; i < 5; i++) await bus.publish(runId, "chunk", bytes(`c${i}`), i + 1);
    await bus.publish(runId, "end", bytes("final"), 6);
    const events = await collect(bus, runId);
    expect(events.map(text)).toEqual(["c0", "c1", "c2", "c3", "c4", "final"]);
    expect(events.map((e) => e.kind)).toEqual(["chunk", "chunk", "chunk", "chunk", "chunk", "end"]);
    // The run's own numbers, whatever else the stream holds.
    expect(events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it("delivers live events to a subscriber that came first", async () => {
    const runId = newId();
    const reading = collect(bus, runId);
    await new Promise((r) => setTimeout(r, 100));
    await bus.publish(runId, "chunk", bytes("live"), 1);
    await bus.publish(runId, "end", bytes("done"), 2);
    expect((await reading).map(text)).toEqual(["live", "done"]);
  });

  it("resumes after a sequence (Last-Event-ID)", async () => {
    const runId = newId();
    for (let i = 0; i < 4; i++) await bus.publish(runId, "chunk", bytes(`c${i}`), i + 1);
    await bus.publish(runId, "end", bytes("end"), 5);
    const all = await collect(bus, runId);
    const rest = await collect(bus, runId, all[1]!.seq);
    expect(rest.map(text)).toEqual(["c2", "c3", "end"]);
  });

  it("gives the stored events without waiting for more, an end last once it is there", async () => {
    // A run whose executor died after three chunks: no end on the bus.
    const runId = newId();
    let previous: number | undefined;
    for (let i = 1; i <= 3; i++) {
      previous = await bus.publish(runId, "chunk", bytes(`c${i}`), i, previous);
    }
    expect((await bus.stored(runId)).map(text)).toEqual(["c1", "c2", "c3"]);
    expect((await bus.stored(runId, 1)).map(text)).toEqual(["c2", "c3"]);
    expect(await bus.stored(newId())).toEqual([]);
    await bus.publish(runId, "end", bytes("final"), 4, previous);
    const all = await bus.stored(runId, 2);
    expect(all.map(text)).toEqual(["c3", "final"]);
    expect(all.map((e) => e.kind)).toEqual(["chunk", "end"]);
  });

  it("keeps runs apart and ignores a republished dedup id", async () => {
    const a = newId();
    const b = newId();
    await bus.publish(a, "chunk", bytes("a1"), 1);
    await bus.publish(b, "chunk", bytes("b1"), 1);
    await bus.publish(a, "chunk", bytes("a1"), 1);
    await bus.publish(a, "end", bytes("a-end"), 2);
    expect((await collect(bus, a)).map(text)).toEqual(["a1", "a-end"]);
    expect(await bus.hasEnd(a)).toBe(true);
    expect(await bus.hasEnd(b)).toBe(false);
    expect((await collect(bus, b, undefined, 1)).map(text)).toEqual(["b1"]);
  });

  it("stops a subscription when its signal aborts", async () => {
    const controller = new AbortController();
    const done = (async () => {
      for await (const _ of bus.subscribe(newId(), { signal: controller.signal })) void _;
    })();
    setTimeout(() => controller.abort(), 50);
    await expect(done).resolves.toBeUndefined();
  });

  it("reports ready", async () => {
    expect(await bus.ready()).toBe(true);
  });
});

describe("JetStreamRunEventBus live (real NATS)", () => {
  let stream: TestStream;
  let bus: JetStreamRunEventBus;
  beforeAll(async () => {
    stream = createTestStream();
    bus = await JetStreamRunEventBus.connect({
      url: stream.url,
      stream: stream.stream,
      subjectPrefix: stream.subjectPrefix,
      maxAgeSeconds: 60,
      name: "pies-test-live",
    });
  });
  afterAll(async () => {
    await bus.close();
    await stream.remove();
  });

  it("takes events up to its maxEventBytes, just under max_payload, and refuses a larger one as EventTooLarge", async () => {
    const limit = bus.maxEventBytes!;
    const maxPayload = bus.connection.info!.max_payload;
    expect(limit).toBeLessThan(maxPayload);
    expect(limit).toBeGreaterThan(maxPayload - 4096);
    const runId = newId();
    await bus.publish(runId, "chunk", new Uint8Array(limit).fill(120), 1);
    const refused = await bus
      .publish(runId, "chunk", new Uint8Array(limit + 1).fill(120), 2)
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(EventTooLarge);
    await bus.publish(runId, "end", bytes("{}"), 2);
    const events = await collect(bus, runId);
    expect(events.map((e) => [e.kind, e.data.length])).toEqual([
      ["chunk", limit],
      ["end", 2],
    ]);
  });

  /** Everything the live subscription yields, and how it ended (the error, if it threw). */
  async function drain(events: AsyncIterable<RunEvent>) {
    const got: RunEvent[] = [];
    try {
      for await (const e of events) got.push(e);
      return { got, error: undefined };
    } catch (error) {
      return { got, error };
    }
  }

  it("delivers every event published after it resolved, in order, and ends after the end", async () => {
    const runId = newId();
    const controller = new AbortController();
    const live = await bus.live(runId, controller.signal);
    const reading = drain(live);
    for (let i = 1; i <= 3; i++) await bus.publish(runId, "chunk", bytes(`c${i}`), i);
    await bus.publish(runId, "repair", bytes("{}"), 4);
    await bus.publish(runId, "end", bytes("final"), 5);
    const { got, error } = await reading;
    expect(error).toBeUndefined();
    expect(got.map(text)).toEqual(["c1", "c2", "c3", "{}", "final"]);
    expect(got.map((e) => e.kind)).toEqual(["chunk", "chunk", "chunk", "repair", "end"]);
    expect(got.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    controller.abort();
  });

  it("drops a repeated number (a retried publish reaches core subscribers twice)", async () => {
    const runId = newId();
    const live = await bus.live(runId, new AbortController().signal);
    const reading = drain(live);
    await bus.publish(runId, "chunk", bytes("c1"), 1);
    await bus.publish(runId, "chunk", bytes("c1"), 1);
    await bus.publish(runId, "end", bytes("final"), 2);
    const { got, error } = await reading;
    expect(error).toBeUndefined();
    expect(got.map(text)).toEqual(["c1", "final"]);
  });

  it("throws LiveGap after the last event it delivered when a number is skipped", async () => {
    const runId = newId();
    const live = await bus.live(runId, new AbortController().signal);
    const reading = drain(live);
    await bus.publish(runId, "chunk", bytes("c1"), 1);
    await bus.publish(runId, "chunk", bytes("c3"), 3);
    const { got, error } = await reading;
    expect(got.map(text)).toEqual(["c1"]);
    expect(error).toBeInstanceOf(LiveGap);
    expect((error as LiveGap).lastSeq).toBe(1);
    // The stored events are all there for the subscription that takes over.
    expect((await collect(bus, runId, 1, 1)).map(text)).toEqual(["c3"]);
  });

  it("throws LiveGap when the end says an event came before it that was not delivered", async () => {
    const runId = newId();
    const live = await bus.live(runId, new AbortController().signal);
    const reading = drain(live);
    await bus.publish(runId, "end", bytes("final"), 3);
    const { got, error } = await reading;
    expect(got).toEqual([]);
    expect(error).toBeInstanceOf(LiveGap);
  });

  it("tells whether it missed the run's events: stored, none of them received", async () => {
    // Nothing stored yet: nothing missed.
    const before = new AbortController();
    const early = await bus.live(newId(), before.signal);
    expect(await early.missed()).toBe(false);
    before.abort();

    // Published before it was in place: missed (they never come to it).
    const runId = newId();
    await bus.publish(runId, "chunk", bytes("c1"), 1);
    await bus.publish(runId, "end", bytes("final"), 2);
    const late = new AbortController();
    expect(await (await bus.live(runId, late.signal)).missed()).toBe(true);
    late.abort();

    // Published once it was in place: received, so not missed, even asked right after.
    const other = newId();
    const inTime = new AbortController();
    const live = await bus.live(other, inTime.signal);
    await bus.publish(other, "chunk", bytes("c1"), 1);
    expect(await live.missed()).toBe(false);
    inTime.abort();
  });

  it.each(["chunk", "repair", "end"] as const)(
    "tells it missed a run whose only stored event is a %s",
    async (kind) => {
      const runId = newId();
      await bus.publish(runId, kind, bytes("x"), 1);
      const late = new AbortController();
      expect(await (await bus.live(runId, late.signal)).missed()).toBe(true);
      late.abort();
    },
  );

  it("stops when its signal aborts, iterated or not", async () => {
    const controller = new AbortController();
    const live = await bus.live(newId(), controller.signal);
    const reading = drain(live);
    setTimeout(() => controller.abort(), 50);
    expect(await reading).toEqual({ got: [], error: undefined });
    const unread = new AbortController();
    await bus.live(newId(), unread.signal);
    unread.abort();
  });
});

describe("JetStreamRunEventBus live on a stream that holds many runs (real NATS)", () => {
  // A stream keeps an hour of every run's events. Whether a live subscription missed its run's
  // events is asked for nearly every stream a client opens: it must not cost the server a scan
  // of all it holds (a lookup by the wildcard `<run>.>` does, on NATS 2.9: milliseconds per
  // ask at this size, growing with the stream).
  const OTHER_RUNS = 60_000;
  let stream: TestStream;
  let bus: JetStreamRunEventBus;
  beforeAll(async () => {
    stream = createTestStream();
    bus = await JetStreamRunEventBus.connect({
      url: stream.url,
      stream: stream.stream,
      subjectPrefix: stream.subjectPrefix,
      maxAgeSeconds: 300,
      name: "pies-test-live-big",
    });
    const js = jetstream(bus.connection);
    const data = bytes("{}");
    for (let i = 0; i < OTHER_RUNS;) {
      const batch: Promise<unknown>[] = [];
      for (let j = 0; j < 2000 && i < OTHER_RUNS; j++, i++) {
        batch.push(js.publish(`${stream.subjectPrefix}.run.other${i}.end`, data));
      }
      await Promise.all(batch);
    }
  });
  afterAll(async () => {
    await bus.close();
    await stream.remove();
  });

  /** The median time of `n` calls of `call`, one after another, in ms. */
  async function medianMs(n: number, call: (i: number) => Promise<unknown>) {
    const times: number[] = [];
    for (let i = 0; i < n; i++) {
      const started = performance.now();
      await call(i);
      times.push(performance.now() - started);
    }
    return times.sort((a, b) => a - b)[Math.floor(n / 2)]!;
  }

  it("asks whether it missed a run's events about as fast as one lookup of a run's end", async () => {
    const lives = await Promise.all(
      Array.from({ length: 15 }, () => bus.live(newId(), new AbortController().signal)),
    );
    // The same question of the stream by a literal subject (the end of a run it does not hold).
    const lookup = await medianMs(15, () => bus.hasEnd(newId()));
    const missed = await medianMs(15, async (i) => expect(await lives[i]!.missed()).toBe(false));
    expect(missed).toBeLessThan(4 * lookup + 1);

    // And it still tells a run whose events all went out before it was in place.
    const runId = newId();
    await bus.publish(runId, "repair", bytes("{}"), 1);
    const late = new AbortController();
    expect(await (await bus.live(runId, late.signal)).missed()).toBe(true);
    late.abort();
  });
});
