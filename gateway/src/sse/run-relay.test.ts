import { Agent, createServer, get as httpGet, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs, timestampNow } from "@bufbuild/protobuf/wkt";
import type { Client } from "@connectrpc/connect";
import { createLogger } from "@pies/common";
import { LiveGap, MemoryRunEventBus, type RunEventBus } from "@pies/common/bus";
import { parseSse } from "@pies/testkit";
import { RunSchema, RunStatus, type Run, type RunsService } from "@pies/proto/runs";
import { EventStream } from "./event-stream.js";
import { relayRun, type RelayOptions } from "./run-relay.js";

const logger = createLogger("test", "silent");
const bytes = (s: string) => new TextEncoder().encode(s);
const run = (status: RunStatus, result?: string) =>
  create(RunSchema, { id: "r1", status, stream: true, ...(result ? { modelId: result } : {}) });
const endOf = (r: Run) => toBinary(RunSchema, r);

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});

/**
 * Serves one relayed stream on a real HTTP server (a real ServerResponse, whose write after end
 * is an `error` event) and returns its body once it ends, with what the relay's promise did.
 */
async function relay(options: Omit<RelayOptions, "logger" | "projectId">) {
  let settled: Promise<unknown> | undefined;
  server = createServer((_req, res) => {
    settled = relayRun(new EventStream(res, logger), { ...options, logger, projectId: "p1" });
  });
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const started = Date.now();
  const body = await (await fetch(`http://127.0.0.1:${port}/`)).text();
  return { events: parseSse(body), ms: Date.now() - started, settled: settled! };
}

/** A runs client whose getRun answers with what the test says, when it says. */
function runsStore(getRun: () => Promise<Run>) {
  return {
    getRun: async () => ({ run: await getRun() }),
  } as unknown as Client<typeof RunsService>;
}

describe("relayRun", () => {
  it("writes one close when the end arrives while a heartbeat's store check is in flight", async () => {
    const bus = new MemoryRunEventBus();
    await bus.publish("r1", "chunk", bytes("hi"), 1);
    let beats = 0;
    const store = runsStore(async () => {
      // First beat: the run has ended (the executor records it before it publishes the end).
      // Second beat: while this check is in flight, the end arrives and the stream closes; the
      // check then finds the run ended twice in a row and closes too, on an ended response.
      if (++beats === 2) {
        await bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 99);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      return run(RunStatus.COMPLETED);
    });
    const { events, settled } = await relay({
      runs: store,
      bus,
      heartbeatMs: 20,
      run: run(RunStatus.PROCESSING),
    });
    expect(events.map((e) => e.event)).toEqual(["message", "close"]);
    await expect(settled).resolves.toBeUndefined();
    // The in-flight check finishes after the response ended, and must not write to it.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(beats).toBeGreaterThanOrEqual(2);
  });

  it("closes from the runs store when the bus has the end but never delivers it", async () => {
    const bus = new MemoryRunEventBus();
    await bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 99);
    const stalled: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      async *subscribe(_runId: string, { signal }: { signal: AbortSignal }) {
        await new Promise((resolve) => signal.addEventListener("abort", resolve));
      },
    });
    const { events } = await relay({
      runs: runsStore(async () => run(RunStatus.COMPLETED, "stored")),
      bus: stalled,
      heartbeatMs: 20,
      run: run(RunStatus.PROCESSING),
    });
    expect(events.map((e) => e.event)).toEqual(["close"]);
    expect(JSON.parse(events[0]!.data)).toMatchObject({ id: "r1", modelId: "stored" });
  });

  it("replays an ended run's messages when the bus could not say at first (NATS restarting)", async () => {
    const bus = new MemoryRunEventBus();
    for (let i = 1; i <= 3; i++) await bus.publish("r1", "chunk", bytes(`c${i}`), i);
    await bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 99);
    let asked = 0;
    const restarting: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      async hasEnd(runId: string) {
        if (++asked <= 2) throw new Error("TIMEOUT: the JetStream API did not answer");
        return bus.hasEnd(runId);
      },
    });
    const { events } = await relay({
      runs: runsStore(async () => run(RunStatus.COMPLETED, "stored")),
      bus: restarting,
      heartbeatMs: 60_000,
      run: run(RunStatus.COMPLETED),
    });
    // Not the store's close alone: the run's messages, then its end.
    expect(events.map((e) => e.event)).toEqual(["message", "message", "message", "close"]);
    expect(asked).toBe(3);
  });

  it("replays what the bus holds of a run that ended without its end there, then closes", async () => {
    // The executor died after publishing three chunks; the runs service failed the run (lease
    // expired), and no end reached the bus. A reconnect, from the start or after the first.
    const bus = new MemoryRunEventBus();
    for (let i = 1; i <= 3; i++) await bus.publish("r1", "chunk", bytes(`c${i}`), i);
    const failed = create(RunSchema, { ...run(RunStatus.FAILED), modelId: "swept" });
    for (const [afterSeq, expected] of [
      [undefined, ['"c1"', '"c2"', '"c3"']],
      [1, ['"c2"', '"c3"']],
    ] as const) {
      const replays: string[] = [];
      const { events } = await relay({
        runs: runsStore(async () => failed),
        bus,
        heartbeatMs: 60_000,
        run: failed,
        afterSeq,
        onReplay: (reason) => replays.push(reason),
      });
      expect(events.map((e) => e.event)).toEqual([...expected.map(() => "message"), "close"]);
      expect(events.slice(0, -1).map((e) => e.data)).toEqual(expected);
      expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ id: "r1", modelId: "swept" });
      expect(replays).toEqual([afterSeq === undefined ? "reopened" : "resumed"]);
      await new Promise<void>((resolve) => server!.close(() => resolve()));
      server = undefined;
    }
  });

  it("closes with the bus's end of a run whose end was recorded a moment before it was published", async () => {
    // The executor records the end, then publishes it: a stream opened in between reads the run
    // ended from the store while the bus has its chunks only. A metadata-only run's stored copy
    // has no payloads, so the close must be the bus's end, not the store's run.
    const bus = new MemoryRunEventBus();
    await bus.publish("r1", "chunk", bytes("c1"), 1);
    const stored = create(RunSchema, {
      ...run(RunStatus.COMPLETED, "stored"),
      updatedAt: timestampNow(),
    });
    setTimeout(
      () => void bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED, "final")), 2),
      300,
    );
    const { events } = await relay({
      runs: runsStore(async () => stored),
      bus,
      heartbeatMs: 60_000,
      run: stored,
    });
    expect(events.map((e) => e.event)).toEqual(["message", "close"]);
    expect(JSON.parse(events[1]!.data)).toMatchObject({ id: "r1", modelId: "final" });
  });

  it("closes at once with the stored run of one that ended long ago without its end on the bus", async () => {
    const bus = new MemoryRunEventBus();
    const stored = create(RunSchema, {
      ...run(RunStatus.FAILED, "swept"),
      updatedAt: timestampFromMs(Date.now() - 60_000),
    });
    let asked = 0;
    const counting: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      async hasEnd(runId: string) {
        asked++;
        return bus.hasEnd(runId);
      },
    });
    const { events } = await relay({
      runs: runsStore(async () => stored),
      bus: counting,
      heartbeatMs: 60_000,
      run: stored,
    });
    expect(events.map((e) => e.event)).toEqual(["close"]);
    expect(JSON.parse(events[0]!.data)).toMatchObject({ modelId: "swept" });
    // Asked once: its end is not waited for.
    expect(asked).toBe(1);
  });

  it("subscribes again after the last event sent when a subscription fails or ends early", async () => {
    const bus = new MemoryRunEventBus();
    for (let i = 1; i <= 3; i++) await bus.publish("r1", "chunk", bytes(`c${i}`), i);
    await bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 99);
    const afterSeqs: (number | undefined)[] = [];
    const flaky: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      async *subscribe(runId: string, options: { afterSeq?: number; signal: AbortSignal }) {
        afterSeqs.push(options.afterSeq);
        const attempt = afterSeqs.length;
        let n = 0;
        for await (const event of bus.subscribe(runId, options)) {
          yield event;
          // The first subscription fails after one event, the second ends after one more.
          if (attempt === 1 && ++n === 1) throw new Error("nats: connection lost");
          if (attempt === 2 && ++n === 1) return;
        }
      },
    });
    const { events } = await relay({
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus: flaky,
      heartbeatMs: 60_000,
      run: run(RunStatus.PROCESSING),
    });
    expect(events.map((e) => e.data)).toEqual(['"c1"', '"c2"', '"c3"', expect.any(String)]);
    expect(events.at(-1)!.event).toBe("close");
    const ids = events.map((e) => Number(e.id));
    expect(afterSeqs).toEqual([undefined, ids[0], ids[1]]);
  });

  it("relays a live subscription first, and after a gap subscribes after the last event it sent", async () => {
    const bus = new MemoryRunEventBus();
    for (let i = 1; i <= 3; i++) await bus.publish("r1", "chunk", bytes(`c${i}`), i);
    await bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 4);
    const afterSeqs: (number | undefined)[] = [];
    const subscribing: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      subscribe(runId: string, options: { afterSeq?: number; signal: AbortSignal }) {
        afterSeqs.push(options.afterSeq);
        return bus.subscribe(runId, options);
      },
    });
    // Live delivered c1, then missed c2 (c3 came next).
    async function* live() {
      yield { seq: 1, kind: "chunk" as const, data: bytes("c1") };
      throw new LiveGap(1);
    }
    const { events } = await relay({
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus: subscribing,
      heartbeatMs: 60_000,
      run: run(RunStatus.PROCESSING),
      live: live(),
    });
    expect(events.map((e) => e.data)).toEqual(['"c1"', '"c2"', '"c3"', expect.any(String)]);
    expect(events.map((e) => e.id)).toEqual(["1", "2", "3", "4"]);
    expect(afterSeqs).toEqual([1]);
  });

  it("replays a run whose events all went out before its live subscription was in place", async () => {
    const bus = new MemoryRunEventBus();
    for (let i = 1; i <= 3; i++) await bus.publish("r1", "chunk", bytes(`c${i}`), i);
    await bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 4);
    const afterSeqs: (number | undefined)[] = [];
    const subscribing: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      subscribe(runId: string, options: { afterSeq?: number; signal: AbortSignal }) {
        afterSeqs.push(options.afterSeq);
        return bus.subscribe(runId, options);
      },
    });
    // In place after the end: nothing ever reaches it, until it is stopped.
    const stopping = new AbortController();
    async function* live() {
      await new Promise((resolve) => stopping.signal.addEventListener("abort", resolve));
      yield* [];
    }
    const { events, ms } = await relay({
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus: subscribing,
      heartbeatMs: 100,
      run: run(RunStatus.PROCESSING),
      live: live(),
      stopLive: () => stopping.abort(),
    });
    expect(events.map((e) => e.data)).toEqual(['"c1"', '"c2"', '"c3"', expect.any(String)]);
    expect(events.map((e) => e.id)).toEqual(["1", "2", "3", "4"]);
    expect(afterSeqs).toEqual([undefined]);
    // One quiet beat, not the two of a reconcile with the store.
    expect(ms).toBeLessThan(1000);
  });

  it("replays at once, not a heartbeat later, when the bus says the live subscription missed the run", async () => {
    const bus = new MemoryRunEventBus();
    for (let i = 1; i <= 2; i++) await bus.publish("r1", "chunk", bytes(`c${i}`), i);
    await bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 3);
    const stopping = new AbortController();
    async function* live() {
      await new Promise((resolve) => stopping.signal.addEventListener("abort", resolve));
      yield* [];
    }
    const { events, ms } = await relay({
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus,
      heartbeatMs: 10_000,
      run: run(RunStatus.PROCESSING),
      live: live(),
      missed: async () => true,
      stopLive: () => stopping.abort(),
    });
    expect(events.map((e) => e.id)).toEqual(["1", "2", "3"]);
    expect(ms).toBeLessThan(2000);
  });

  it("tells why it replays: resumed, reopened, the live subscription's setup, missed or gap", async () => {
    const bus = new MemoryRunEventBus();
    await bus.publish("r1", "chunk", bytes("c1"), 1);
    await bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 2);
    const reasons: string[] = [];
    const common = {
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus,
      heartbeatMs: 10_000,
      run: run(RunStatus.PROCESSING),
      onReplay: (reason: string) => reasons.push(reason),
    };
    await relay({ ...common, afterSeq: 1 });
    await relay(common);
    await relay({ ...common, replayReason: "live_setup" });
    const stopping = new AbortController();
    async function* quiet() {
      await new Promise((resolve) => stopping.signal.addEventListener("abort", resolve));
      yield* [];
    }
    await relay({
      ...common,
      live: quiet(),
      missed: async () => true,
      stopLive: () => stopping.abort(),
    });
    async function* skipping() {
      yield* [];
      throw new LiveGap(0);
    }
    await relay({ ...common, live: skipping() });
    expect(reasons).toEqual(["resumed", "reopened", "live_setup", "missed", "gap"]);
    // A stream that got every event live replays nothing.
    async function* whole() {
      yield { seq: 1, kind: "chunk" as const, data: bytes("c1") };
      yield { seq: 2, kind: "end" as const, data: endOf(run(RunStatus.COMPLETED)) };
    }
    await relay({ ...common, live: whole() });
    expect(reasons).toHaveLength(5);
  });

  /** A bus that counts its subscriptions (replays); its events are the memory bus's. */
  function countingSubscriptions(bus: MemoryRunEventBus) {
    const afterSeqs: (number | undefined)[] = [];
    const counting: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      subscribe(runId: string, options: { afterSeq?: number; signal: AbortSignal }) {
        afterSeqs.push(options.afterSeq);
        return bus.subscribe(runId, options);
      },
    });
    return { counting, afterSeqs };
  }

  it("keeps a live subscription through a pause of many beats after the run's first event", async () => {
    const { counting, afterSeqs } = countingSubscriptions(new MemoryRunEventBus());
    let stopped = false;
    let asked = 0;
    async function* live() {
      yield { seq: 1, kind: "chunk" as const, data: bytes("thinking…") };
      // A reasoning model between two answers: five beats with nothing.
      await new Promise((resolve) => setTimeout(resolve, 500));
      yield { seq: 2, kind: "chunk" as const, data: bytes("done") };
      yield { seq: 3, kind: "end" as const, data: endOf(run(RunStatus.COMPLETED)) };
    }
    const { events } = await relay({
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus: counting,
      heartbeatMs: 100,
      run: run(RunStatus.PROCESSING),
      live: live(),
      missed: async () => (asked++, false),
      stopLive: () => (stopped = true),
    });
    expect(events.filter((e) => e.event !== "").map((e) => e.id)).toEqual(["1", "2", "3"]);
    expect(stopped).toBe(false);
    expect(afterSeqs).toEqual([]);
    // Asked once, at the start: not while events are known to come live.
    expect(asked).toBe(1);
  });

  it("keeps a live subscription the bus says missed nothing through a long wait for the first event", async () => {
    const { counting, afterSeqs } = countingSubscriptions(new MemoryRunEventBus());
    let stopped = false;
    let asked = 0;
    async function* live() {
      await new Promise((resolve) => setTimeout(resolve, 500));
      yield { seq: 1, kind: "chunk" as const, data: bytes("at last") };
      yield { seq: 2, kind: "end" as const, data: endOf(run(RunStatus.COMPLETED)) };
    }
    const { events } = await relay({
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus: counting,
      heartbeatMs: 100,
      run: run(RunStatus.PROCESSING),
      live: live(),
      missed: async () => (asked++, false),
      stopLive: () => (stopped = true),
    });
    expect(events.filter((e) => e.event !== "").map((e) => e.id)).toEqual(["1", "2"]);
    expect(stopped).toBe(false);
    expect(afterSeqs).toEqual([]);
    // Asked at the start and again at the quiet beats before the first event (cheap lookups).
    expect(asked).toBeGreaterThan(1);
  });

  it("keeps a live subscription that delivers between beats", async () => {
    const bus = new MemoryRunEventBus();
    let stopped = false;
    async function* live() {
      for (let i = 1; i <= 4; i++) {
        await new Promise((resolve) => setTimeout(resolve, 60));
        yield { seq: i, kind: "chunk" as const, data: bytes(`c${i}`) };
      }
      yield { seq: 5, kind: "end" as const, data: endOf(run(RunStatus.COMPLETED)) };
    }
    const { events } = await relay({
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus,
      heartbeatMs: 100,
      run: run(RunStatus.PROCESSING),
      live: live(),
      stopLive: () => (stopped = true),
    });
    expect(events.filter((e) => e.event !== "").map((e) => e.id)).toEqual([
      "1",
      "2",
      "3",
      "4",
      "5",
    ]);
    expect(stopped).toBe(false);
  });

  it("closes from a live subscription alone, never subscribing", async () => {
    const bus = new MemoryRunEventBus();
    let subscribed = false;
    const untouched: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      subscribe() {
        subscribed = true;
        throw new Error("not expected");
      },
    });
    async function* live() {
      yield { seq: 1, kind: "chunk" as const, data: bytes("c1") };
      yield { seq: 2, kind: "end" as const, data: endOf(run(RunStatus.COMPLETED)) };
    }
    const { events } = await relay({
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus: untouched,
      heartbeatMs: 60_000,
      run: run(RunStatus.PROCESSING),
      live: live(),
    });
    expect(events.map((e) => e.event)).toEqual(["message", "close"]);
    expect(subscribed).toBe(false);
  });

  it("gives a reconnect at or past the end `close` again at once", async () => {
    const bus = new MemoryRunEventBus();
    await bus.publish("r1", "chunk", bytes("c1"), 1);
    await bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 99);
    const first = await relay({
      runs: runsStore(async () => run(RunStatus.COMPLETED)),
      bus,
      heartbeatMs: 60_000,
      run: run(RunStatus.COMPLETED),
    });
    const closeId = Number(first.events.at(-1)!.id);
    for (const afterSeq of [closeId, 99_999_999]) {
      await new Promise<void>((resolve) => server!.close(() => resolve()));
      const again = await relay({
        runs: runsStore(async () => run(RunStatus.COMPLETED)),
        bus,
        heartbeatMs: 60_000,
        run: run(RunStatus.COMPLETED),
        afterSeq,
      });
      expect(again.events.map((e) => [e.event, Number(e.id)])).toEqual([["close", closeId]]);
      expect(again.ms).toBeLessThan(2000);
    }
  });

  it("closes a run that was still running when the reconnect came with an id past its end", async () => {
    const bus = new MemoryRunEventBus();
    let status = RunStatus.PROCESSING;
    setTimeout(() => {
      void bus.publish("r1", "chunk", bytes("c1"), 1);
      status = RunStatus.COMPLETED;
      void bus.publish("r1", "end", endOf(run(RunStatus.COMPLETED)), 99);
    }, 100);
    const { events, ms } = await relay({
      runs: runsStore(async () => run(status)),
      bus,
      heartbeatMs: 50,
      run: run(RunStatus.PROCESSING),
      afterSeq: 99_999_999,
    });
    expect(events.map((e) => e.event)).toEqual(["close"]);
    expect(JSON.parse(events[0]!.data)).toMatchObject({ status: "completed" });
    expect(ms).toBeLessThan(2000);
  });

  it("ends the response and resolves when the bus throws at once, every time", async () => {
    const bus = new MemoryRunEventBus();
    const broken: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      async *subscribe() {
        throw new Error("nats: no responders");
      },
    });
    let ended = false;
    const { events, settled } = await relay({
      runs: runsStore(async () => {
        if (ended) return run(RunStatus.FAILED);
        ended = true;
        return run(RunStatus.PROCESSING);
      }),
      bus: broken,
      heartbeatMs: 20,
      run: run(RunStatus.PROCESSING),
    });
    expect(events.map((e) => e.event)).toEqual(["close"]);
    expect(JSON.parse(events[0]!.data)).toMatchObject({ status: "failed" });
    await expect(settled).resolves.toBeUndefined();
  });
});

describe("relayRun's error event", () => {
  it("answers an end event it cannot read with `error` in pies' error shape, and ends", async () => {
    const bus = new MemoryRunEventBus();
    await bus.publish("r1", "chunk", bytes("hi"), 1);
    await bus.publish("r1", "end", bytes("\u00ff\u00ff not a run"), 99);
    const closed: Run[] = [];
    const { events, settled } = await relay({
      runs: runsStore(async () => run(RunStatus.PROCESSING)),
      bus,
      heartbeatMs: 1000,
      run: run(RunStatus.PROCESSING),
      onClose: (final) => closed.push(final),
    });
    expect(events.map((e) => e.event)).toEqual(["message", "error"]);
    expect(JSON.parse(events[1]!.data)).toEqual({
      error: "Bad Gateway",
      status: 502,
      code: "bad_event",
      message: "the end event of run r1 could not be read; read the run at GET /runs/r1",
    });
    // Not a close: the run is not counted as ended by this stream.
    expect(closed).toEqual([]);
    await expect(settled).resolves.toBeUndefined();
  });

  it("closes with the stored run instead when the runs store has it ended", async () => {
    const bus = new MemoryRunEventBus();
    await bus.publish("r1", "chunk", bytes("hi"), 1);
    await bus.publish("r1", "end", bytes("\u00ff\u00ff not a run"), 2);
    const closed: Run[] = [];
    const { events } = await relay({
      runs: runsStore(async () => run(RunStatus.COMPLETED, "stored")),
      bus,
      heartbeatMs: 60_000,
      run: run(RunStatus.PROCESSING),
      onClose: (final) => closed.push(final),
    });
    expect(events.map((e) => [e.event, e.id])).toEqual([
      ["message", "1"],
      ["close", "2"],
    ]);
    expect(JSON.parse(events[1]!.data)).toMatchObject({ id: "r1", modelId: "stored" });
    expect(closed).toHaveLength(1);
  });
});

describe("EventStream", () => {
  it("drops writes after the end and after the client went away, without an error event", async () => {
    let stream: EventStream | undefined;
    const ended = new Promise<void>((resolve) => {
      server = createServer((_req, res) => {
        stream = new EventStream(res, logger);
        stream.event("message", '"a"', 1);
        stream.end();
        stream.end();
        stream.event("message", '"b"', 2);
        stream.comment("keep-alive");
        res.on("close", () => resolve());
      });
    });
    await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
    const { port } = server!.address() as AddressInfo;
    const body = await (await fetch(`http://127.0.0.1:${port}/`)).text();
    await ended;
    expect(parseSse(body).map((e) => e.data)).toEqual(['"a"']);
    expect(stream!.open).toBe(false);
    expect(stream!.signal.aborted).toBe(true);
  });

  it("leaves no listener on a keep-alive connection once its stream has closed", async () => {
    // Every stream of a connection that serves many in turn (a client reading runs one after
    // another) must release what it put on the socket, or each keeps its response alive.
    const sockets = new Set<Socket>();
    const baseline = new Map<Socket, number>();
    server = createServer((req, res) => {
      const socket = req.socket;
      sockets.add(socket);
      if (!baseline.has(socket)) baseline.set(socket, socket.listenerCount("error"));
      const stream = new EventStream(res, logger);
      stream.last("close", "{}");
    });
    await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
    const { port } = server!.address() as AddressInfo;
    // One keep-alive connection, as a client reading runs one after another holds.
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const get = () =>
      new Promise<void>((resolve, reject) => {
        httpGet(`http://127.0.0.1:${port}/`, { agent }, (res) => {
          res.resume();
          res.on("end", resolve);
        }).on("error", reject);
      });
    for (let i = 0; i < 20; i++) await get();
    agent.destroy();
    // Node runs the response's `close` listeners after the client has read the body.
    await new Promise((resolve) => setTimeout(resolve, 50));
    // One connection served them all (what makes a leak here grow).
    expect(sockets.size).toBe(1);
    for (const socket of sockets) {
      expect(socket.listenerCount("error")).toBe(baseline.get(socket));
    }
  });
});
