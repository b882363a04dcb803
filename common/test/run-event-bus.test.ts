import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newId } from "@pies/common";
import {
  JetStreamRunEventBus,
  MemoryRunEventBus,
  type RunEvent,
  type RunEventBus,
} from "@pies/common/bus";
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
    for (let i = 0; i < 5; i++) await bus.publish(runId, "chunk", bytes(`c${i}`), `${runId}-${i}`);
    await bus.publish(runId, "end", bytes("final"), `${runId}-end`);
    const events = await collect(bus, runId);
    expect(events.map(text)).toEqual(["c0", "c1", "c2", "c3", "c4", "final"]);
    expect(events.map((e) => e.kind)).toEqual(["chunk", "chunk", "chunk", "chunk", "chunk", "end"]);
    const seqs = events.map((e) => e.seq);
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
    expect(new Set(seqs).size).toBe(seqs.length);
  });

  it("delivers live events to a subscriber that came first", async () => {
    const runId = newId();
    const reading = collect(bus, runId);
    await new Promise((r) => setTimeout(r, 100));
    await bus.publish(runId, "chunk", bytes("live"), `${runId}-1`);
    await bus.publish(runId, "end", bytes("done"), `${runId}-end`);
    expect((await reading).map(text)).toEqual(["live", "done"]);
  });

  it("resumes after a sequence (Last-Event-ID)", async () => {
    const runId = newId();
    for (let i = 0; i < 4; i++) await bus.publish(runId, "chunk", bytes(`c${i}`), `${runId}-${i}`);
    await bus.publish(runId, "end", bytes("end"), `${runId}-end`);
    const all = await collect(bus, runId);
    const rest = await collect(bus, runId, all[1]!.seq);
    expect(rest.map(text)).toEqual(["c2", "c3", "end"]);
  });

  it("keeps runs apart and ignores a republished dedup id", async () => {
    const a = newId();
    const b = newId();
    await bus.publish(a, "chunk", bytes("a1"), `${a}-1`);
    await bus.publish(b, "chunk", bytes("b1"), `${b}-1`);
    await bus.publish(a, "chunk", bytes("a1"), `${a}-1`);
    await bus.publish(a, "end", bytes("a-end"), `${a}-end`);
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
