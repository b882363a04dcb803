import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { newId } from "@pies/common";
import { JetStreamRunEventBus, type RunEvent, type RunEventBus } from "@pies/common/bus";
import {
  createTestStream,
  fillEventStream,
  natsSubscriptions,
  startPrivateNats,
  type PrivateNats,
  type TestStream,
} from "@pies/testkit";

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (e: RunEvent) => new TextDecoder().decode(e.data);

/** Publishes a run's events as the executor does: each linked to the one before it. */
async function publishRun(bus: RunEventBus, runId: string, chunks: number, end = true) {
  let previous: number | undefined;
  for (let seq = 1; seq <= chunks; seq++) {
    previous = await bus.publish(runId, "chunk", bytes(`c${seq}`), seq, previous);
  }
  if (end) await bus.publish(runId, "end", bytes("final"), chunks + 1, previous);
  return previous;
}

/** Reads a subscription to its end (or `count` events), within 10 s. */
async function read(bus: RunEventBus, runId: string, afterSeq?: number, count = Infinity) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 10_000);
  const got: RunEvent[] = [];
  try {
    for await (const e of bus.subscribe(runId, { afterSeq, signal: controller.signal })) {
      got.push(e);
      if (e.kind === "end" || got.length >= count) break;
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  return got;
}

describe("JetStreamRunEventBus leaves nothing on the server once streams end (private NATS)", () => {
  // Each stream that replayed used to leave an ordered consumer on the server for its 5-minute
  // inactivity threshold; under load they piled up into thousands, and every message stored was
  // matched against each of them. Counted here through the JetStream API and the server's
  // monitoring endpoint, after streams of every path have ended.
  let nats: PrivateNats;
  let bus: JetStreamRunEventBus;
  let jsm: JetStreamManager;
  const STREAM = "PIES_STATE";
  beforeAll(async () => {
    nats = await startPrivateNats();
    bus = await JetStreamRunEventBus.connect({
      url: nats.url,
      stream: STREAM,
      subjectPrefix: "state",
      maxAgeSeconds: 300,
      name: "pies-test-state",
    });
    jsm = await jetstreamManager(bus.connection);
  });
  afterAll(async () => {
    await bus?.close();
    await nats?.stop();
  });

  const consumers = async () => (await jsm.streams.info(STREAM)).state.consumer_count;
  const subscriptions = async () => {
    // Unsubscribed: told the server by the time a flush comes back.
    await bus.connection.flush();
    return natsSubscriptions(nats.monitorUrl);
  };

  it("holds no consumer or subscription of theirs, whichever path they took", async () => {
    // The bus's own request inbox exists after its first request.
    await bus.hasEnd(newId());
    const before = { consumers: await consumers(), subscriptions: await subscriptions() };
    const RUNS = 20;
    const ended = Array.from({ length: RUNS }, () => newId());
    await Promise.all(ended.map((runId) => publishRun(bus, runId, 5)));

    // A replay of an ended run from its start (a client that opens its stream again).
    for (const runId of ended) {
      expect((await read(bus, runId)).map(text)).toEqual(["c1", "c2", "c3", "c4", "c5", "final"]);
    }
    // A reconnect with Last-Event-ID.
    for (const runId of ended) {
      expect((await read(bus, runId, 3)).map(text)).toEqual(["c4", "c5", "final"]);
    }
    // A live subscription that fell behind (a gap), then a subscription after its last event
    // while the run goes on: what the gateway does on a LiveGap.
    for (let i = 0; i < RUNS; i++) {
      const runId = newId();
      const live = new AbortController();
      const events = await bus.live(runId, live.signal);
      let previous = await bus.publish(runId, "chunk", bytes("c1"), 1);
      // Number 2 reaches the stream but not this subscription (published before it: a skip).
      const seen: RunEvent[] = [];
      const reading = (async () => {
        for await (const e of events) seen.push(e);
      })().catch((err: unknown) => err);
      await new Promise((r) => setTimeout(r, 20));
      live.abort();
      await reading;
      previous = await bus.publish(runId, "chunk", bytes("c2"), 2, previous);
      const resumed = read(bus, runId, seen.at(-1)?.seq ?? 0);
      await new Promise((r) => setTimeout(r, 20));
      previous = await bus.publish(runId, "chunk", bytes("c3"), 3, previous);
      await bus.publish(runId, "end", bytes("final"), 4, previous);
      expect((await resumed).map(text)).toEqual(["c2", "c3", "final"]);
    }
    // Streams cut by their client part-way, live and replayed.
    for (let i = 0; i < RUNS; i++) {
      const runId = newId();
      await publishRun(bus, runId, 2, false);
      expect((await read(bus, runId, 0, 1)).map(text)).toEqual(["c1"]);
    }
    expect(await consumers()).toBe(before.consumers);
    // Unsubscribed by the time the iteration ended: nothing left to time out.
    expect(await subscriptions()).toBe(before.subscriptions);
  });
});

describe("JetStreamRunEventBus replays at a cost that does not grow with the stream (real NATS)", () => {
  // A stream holds an hour of every run's events. A replay read through a consumer filtered by
  // the run's wildcard cost the server a scan of what it holds (9x slower at 10x the events);
  // read by literal subjects and stream sequences it costs the same.
  const SMALL = 5_000;
  let small: { stream: TestStream; bus: JetStreamRunEventBus };
  let large: { stream: TestStream; bus: JetStreamRunEventBus };

  async function filled(events: number) {
    const stream = createTestStream();
    const bus = await JetStreamRunEventBus.connect({
      url: stream.url,
      stream: stream.stream,
      subjectPrefix: stream.subjectPrefix,
      maxAgeSeconds: 600,
      name: "pies-test-replay-cost",
    });
    await fillEventStream({
      url: stream.url,
      stream: stream.stream,
      subjectPrefix: stream.subjectPrefix,
      events,
    });
    return { stream, bus };
  }

  beforeAll(async () => {
    small = await filled(SMALL);
    large = await filled(SMALL * 10);
  }, 240_000);
  afterAll(async () => {
    for (const s of [small, large]) {
      await s?.bus.close();
      await s?.stream.remove();
    }
  });

  it("replays an ended run as fast on a stream holding 10x more events", async () => {
    const runs = { small: [] as string[], large: [] as string[] };
    for (const [name, s] of [
      ["small", small],
      ["large", large],
    ] as const) {
      for (let i = 0; i < 40; i++) {
        const runId = newId();
        await publishRun(s.bus, runId, 5);
        runs[name].push(runId);
      }
    }
    // Alternated, so that the machine's load falls on both alike; medians.
    const times = { small: [] as number[], large: [] as number[] };
    for (let i = 0; i < 40; i++) {
      for (const [name, s] of [
        ["small", small],
        ["large", large],
      ] as const) {
        const started = performance.now();
        expect(await read(s.bus, runs[name][i]!)).toHaveLength(6);
        times[name].push(performance.now() - started);
      }
    }
    const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    expect(median(times.large)).toBeLessThan(2.5 * median(times.small) + 1);
  });
});

describe("JetStreamRunEventBus replays events published without links (a version before)", () => {
  let stream: TestStream;
  let bus: JetStreamRunEventBus;
  beforeAll(async () => {
    stream = createTestStream();
    bus = await JetStreamRunEventBus.connect({
      url: stream.url,
      stream: stream.stream,
      subjectPrefix: stream.subjectPrefix,
      maxAgeSeconds: 60,
      name: "pies-test-unlinked",
    });
  });
  afterAll(async () => {
    await bus?.close();
    await stream?.remove();
  });

  it("finds every one of them, in order, from the start and after a Last-Event-ID", async () => {
    const runId = newId();
    await bus.publish(runId, "chunk", bytes("c1"), 1);
    await bus.publish(runId, "repair", bytes("{}"), 2);
    await bus.publish(runId, "chunk", bytes("c3"), 3);
    await bus.publish(runId, "end", bytes("final"), 4);
    expect((await read(bus, runId)).map((e) => [e.kind, e.seq])).toEqual([
      ["chunk", 1],
      ["repair", 2],
      ["chunk", 3],
      ["end", 4],
    ]);
    expect((await read(bus, runId, 2)).map(text)).toEqual(["c3", "final"]);
  });
});
