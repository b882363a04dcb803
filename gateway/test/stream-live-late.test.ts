import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JetStreamRunEventBus, type RunEvent } from "@pies/common/bus";
import { createTestStream, parseSse, type TestStream } from "@pies/testkit";
import { startTestPies, type TestPies } from "./in-memory-pies.js";
import { createStreamedRun } from "./requests.js";

// The stream that starts a run sets its live subscription up while the run starts, so the run's
// first events may go out before the subscription is in place at NATS. On the shared NATS server
// (a stream of its own), with a bus whose live subscription is made only once the run's first
// event (or its end) is stored: the stream must still be complete and in order.

const HEARTBEAT_SECONDS = 15;
/** Well under a heartbeat: the stream was not waiting for one. */
const PROMPT_MS = 2000;

let stream: TestStream;
let bus: JetStreamRunEventBus;
let pies: TestPies;
/** What the live subscription waits for before it is made: a first event, or the end. */
let lateUntil: "first" | "end" = "first";
const madeAfter: { runId: string; stored: RunEvent["kind"][] }[] = [];

/** The run's stored events until `until` is among them. */
async function storedUntil(runId: string, until: "first" | "end"): Promise<RunEvent["kind"][]> {
  const controller = new AbortController();
  const kinds: RunEvent["kind"][] = [];
  const timer = setTimeout(() => controller.abort(), 10_000);
  try {
    for await (const event of bus.subscribe(runId, { signal: controller.signal })) {
      kinds.push(event.kind);
      if (until === "first" || event.kind === "end") return kinds;
    }
    throw new Error(`run ${runId} stored no ${until} event`);
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
}

beforeAll(async () => {
  stream = createTestStream();
  bus = await JetStreamRunEventBus.connect({
    url: stream.url,
    stream: stream.stream,
    subjectPrefix: stream.subjectPrefix,
    maxAgeSeconds: 600,
    name: "pies-test-live-late",
  });
  const late = Object.assign(Object.create(bus) as JetStreamRunEventBus, {
    async live(runId: string, signal: AbortSignal) {
      const stored = await storedUntil(runId, lateUntil);
      madeAfter.push({ runId, stored });
      return bus.live(runId, signal);
    },
  });
  // The default heartbeat: a stream must not wait for one to find what its live subscription
  // missed.
  pies = await startTestPies({ bus: late, gateway: { sseHeartbeatSeconds: HEARTBEAT_SECONDS } });
}, 30_000);

afterAll(async () => {
  await pies?.close();
  await bus?.close();
  await stream?.remove();
});

/** Reads the run's stream to its end and checks it: every chunk once, in order, then close. */
async function readWhole(runId: string, minMessages: number) {
  const started = Date.now();
  const res = await pies.app.inject({
    url: `/api/v1/runs/${runId}/stream`,
    headers: { authorization: `Bearer ${pies.key}` },
  });
  expect(Date.now() - started).toBeLessThan(PROMPT_MS);
  const events = parseSse(res.body);
  expect(events.at(-1)!.event).toBe("close");
  const final = JSON.parse(events.at(-1)!.data);
  expect(final).toMatchObject({ id: runId, status: "completed" });
  const messages = events.filter((e) => e.event === "message");
  expect(messages.length).toBeGreaterThanOrEqual(minMessages);
  expect(messages.map((e) => JSON.parse(e.data)).join("")).toBe(final.result);
  // Numbered 1, 2, … with none missing or repeated, the close one more than the last.
  expect(events.filter((e) => e.id !== undefined).map((e) => Number(e.id))).toEqual(
    events.filter((e) => e.id !== undefined).map((_, i) => i + 1),
  );
  return events;
}

/** pies_sse_replays_total{reason} now. */
async function replays(reason: string): Promise<number> {
  const text = (await pies.app.inject({ url: "/metrics" })).body;
  const line = text
    .split("\n")
    .find((l) => l.startsWith(`pies_sse_replays_total{reason="${reason}"}`));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

describe("a stream whose live subscription is in place only after the run's first events", () => {
  it("replays what it missed when it is made after the first chunk went out", async () => {
    lateUntil = "first";
    const late = (await replays("gap")) + (await replays("missed"));
    const runId = await createStreamedRun(pies, "test-slow");
    // 50 ms apart: the subscription made after the first sees the second first (a gap).
    await readWhole(runId, 2);
    expect(madeAfter.find((m) => m.runId === runId)?.stored).toEqual(["chunk"]);
    // Told by the bus (missed) or by the second chunk's number (a gap), whichever came first.
    expect((await replays("gap")) + (await replays("missed"))).toBe(late + 1);
  }, 20_000);

  it("replays the whole run when it is made after the run's end", async () => {
    lateUntil = "end";
    const missed = await replays("missed");
    const runId = await createStreamedRun(pies);
    // As fast as the test provider answers: its chunks may go out joined, in one message.
    await readWhole(runId, 1);
    expect(madeAfter.find((m) => m.runId === runId)?.stored.at(-1)).toBe("end");
    expect(await replays("missed")).toBe(missed + 1);
    // A second reader of the ended run replays it too, for its own reason.
    const reopened = await replays("reopened");
    await readWhole(runId, 1);
    expect(await replays("reopened")).toBe(reopened + 1);
  }, 20_000);
});
