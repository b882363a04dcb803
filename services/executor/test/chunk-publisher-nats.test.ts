import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newId } from "@pies/common";
import { JetStreamRunEventBus, type RunEvent, type RunEventBus } from "@pies/common/bus";
import { createTestStream, type TestStream } from "@pies/testkit";
import { ChunkPublisher } from "../src/chunk-publisher.js";

// A run's chunks on the shared NATS server (a stream of its own): how many events they become
// depends on when they come against the acknowledgements of the publishes before them.

let stream: TestStream;
let bus: JetStreamRunEventBus;

beforeAll(async () => {
  stream = createTestStream();
  bus = await JetStreamRunEventBus.connect({
    url: stream.url,
    stream: stream.stream,
    subjectPrefix: stream.subjectPrefix,
    maxAgeSeconds: 60,
    name: "pies-test-chunks",
  });
});

afterAll(async () => {
  await bus.close();
  await stream.remove();
});

const decoder = new TextDecoder();

/** The run's stored events, through its end. */
async function stored(runId: string): Promise<RunEvent[]> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 10_000);
  const events: RunEvent[] = [];
  try {
    for await (const event of bus.subscribe(runId, { signal: controller.signal })) {
      events.push(event);
      if (event.kind === "end") return events;
    }
    throw new Error(`run ${runId} has no end event`);
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
}

/**
 * The real bus, telling `onAck` of each publish acknowledged, as the publish's caller is about to
 * learn of it (a chunk pushed from there comes in the same turn of the event loop as the ack).
 */
function watched(onAck: (seq: number) => void): RunEventBus {
  return {
    maxEventBytes: bus.maxEventBytes,
    publish: async (runId, kind, data, seq, previous) => {
      const stored = await bus.publish(runId, kind, data, seq, previous);
      onAck(seq);
      return stored;
    },
    subscribe: (runId, options) => bus.subscribe(runId, options),
    hasEnd: (runId) => bus.hasEnd(runId),
    stored: (runId, afterSeq) => bus.stored(runId, afterSeq),
    ready: () => bus.ready(),
    close: async () => {},
  };
}

describe("ChunkPublisher on JetStream", () => {
  it("joins the chunks that come while a publish is in flight into one event, in order and whole", async () => {
    const runId = newId();
    const publisher = new ChunkPublisher(bus, runId);
    // Pushed in one go: the first goes out at once, the rest wait for its acknowledgement.
    const pieces = ["Hel", "lo", ", ", "wörld", " 😀", "!"];
    for (const piece of pieces) publisher.push(piece);
    await publisher.end(new TextEncoder().encode("final"));
    const events = await stored(runId);
    expect(events.map((e) => [e.seq, e.kind, decoder.decode(e.data)])).toEqual([
      [1, "chunk", "Hel"],
      [2, "chunk", "lo, wörld 😀!"],
      [3, "end", "final"],
    ]);
  });

  it("joins the chunks that come in the turn of the event loop that acknowledged the publish before them", async () => {
    const runId = newId();
    // A busy executor reads its provider's next chunks in the same turn as an acknowledgement:
    // here, the first chunk's acknowledgement comes while "b" waits, and "c" comes in its turn.
    const publisher: ChunkPublisher = new ChunkPublisher(
      watched((seq) => {
        if (seq === 1) setImmediate(() => publisher.push("c"));
      }),
      runId,
    );
    publisher.push("a");
    publisher.push("b");
    await publisher.end(new TextEncoder().encode("final"));
    const events = await stored(runId);
    expect(events.map((e) => [e.seq, e.kind, decoder.decode(e.data)])).toEqual([
      [1, "chunk", "a"],
      [2, "chunk", "bc"],
      [3, "end", "final"],
    ]);
  });

  it("publishes each chunk as its own event when each comes after the last was acknowledged", async () => {
    const runId = newId();
    const publisher = new ChunkPublisher(bus, runId);
    for (const piece of ["one", " two", " three"]) {
      publisher.push(piece);
      await publisher.flush();
    }
    await publisher.end(new TextEncoder().encode("final"));
    const events = await stored(runId);
    expect(events.map((e) => decoder.decode(e.data))).toEqual(["one", " two", " three", "final"]);
  });
});
