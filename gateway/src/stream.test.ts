import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryRunEventBus, type RunEvent, type SubscribeOptions } from "@pies/common/bus";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { createStreamedRun } from "../test/requests.js";

/** A bus that loses end events and cannot tell whether one is stored, as when NATS is away. */
class LossyBus extends MemoryRunEventBus {
  override async publish(runId: string, kind: RunEvent["kind"], data: Uint8Array, seq: number) {
    return kind === "end" ? undefined : super.publish(runId, kind, data, seq);
  }
  override async hasEnd(): Promise<boolean> {
    throw new Error("nats unreachable");
  }
}

/** A bus whose first subscription fails after delivering one event, as when NATS restarts. */
class FailOnceBus extends MemoryRunEventBus {
  subscriptions = 0;
  override async *subscribe(runId: string, options: SubscribeOptions) {
    const first = ++this.subscriptions === 1;
    for await (const event of super.subscribe(runId, options)) {
      yield event;
      if (first) throw new Error("nats: connection lost");
    }
  }
}

const read = (pies: TestPies, runId: string, headers: Record<string, string> = {}) =>
  pies.app.inject({
    url: `/api/v1/runs/${runId}/stream`,
    headers: { authorization: `Bearer ${pies.key}`, ...headers },
  });

describe("GET /runs/:id/stream without the end event", () => {
  let pies: TestPies;
  beforeAll(async () => {
    pies = await startTestPies({
      bus: new LossyBus(),
      gateway: { authCacheSeconds: 30, sseHeartbeatSeconds: 1 },
    });
  }, 30_000);
  afterAll(async () => pies?.close());

  it("closes with the run from the runs store once it has ended", async () => {
    const runId = await createStreamedRun(pies);
    const events = parseSse((await read(pies, runId)).body);
    expect(events.filter((e) => e.event === "message").length).toBeGreaterThan(0);
    expect(events.at(-1)!.event).toBe("close");
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ id: runId, status: "completed" });
  }, 20_000);
});

describe("GET /runs/:id/stream over a failing subscription, and its bounds", () => {
  let pies: TestPies;
  let bus: FailOnceBus;
  let base: string;
  beforeAll(async () => {
    bus = new FailOnceBus();
    // The default 15 s heartbeat: anything that ends "at once" cannot be the heartbeat's doing.
    pies = await startTestPies({ bus, gateway: { authCacheSeconds: 30, maxStreamsPerKey: 2 } });
    await pies.app.listen({ host: "127.0.0.1", port: 0 });
    base = `http://127.0.0.1:${(pies.app.server.address() as AddressInfo).port}/api/v1`;
  }, 30_000);
  afterAll(async () => pies?.close());

  it("subscribes again after the last event sent and ends with close", async () => {
    const runId = await createStreamedRun(pies);
    const events = parseSse((await read(pies, runId)).body);
    expect(bus.subscriptions).toBe(2);
    expect(events.at(-1)!.event).toBe("close");
    const final = JSON.parse(events.at(-1)!.data);
    expect(final).toMatchObject({ id: runId, status: "completed" });
    const messages = events.filter((e) => e.event === "message");
    expect(messages.map((e) => JSON.parse(e.data)).join("")).toBe(final.result);
    const ids = events.map((e) => Number(e.id));
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("answers a Last-Event-ID at or past the end with close at once", async () => {
    const runId = await createStreamedRun(pies);
    const first = parseSse((await read(pies, runId)).body);
    const closeId = first.at(-1)!.id!;
    for (const lastEventId of [closeId, "99999999", "123456789012345678901234567890"]) {
      const started = Date.now();
      const again = parseSse((await read(pies, runId, { "last-event-id": lastEventId })).body);
      expect(Date.now() - started).toBeLessThan(3000);
      expect(again.map((e) => [e.event, e.id])).toEqual([["close", closeId]]);
      expect(JSON.parse(again[0]!.data)).toMatchObject({ id: runId, status: "completed" });
    }
    // The same as `?lastEventId=`, for clients that cannot set headers; a first event's id
    // replays what follows it.
    const byQuery = await pies.app.inject({
      url: `/api/v1/runs/${runId}/stream?lastEventId=${closeId}&access_token=${pies.key}`,
    });
    expect(parseSse(byQuery.body).map((e) => [e.event, e.id])).toEqual([["close", closeId]]);
    const afterFirst = await pies.app.inject({
      url: `/api/v1/runs/${runId}/stream?lastEventId=${first[0]!.id}`,
      headers: { authorization: `Bearer ${pies.key}` },
    });
    expect(parseSse(afterFirst.body).map((e) => e.id)).toEqual(first.slice(1).map((e) => e.id));
    // Given twice, the first value counts (not a 400).
    const twice = await pies.app.inject({
      url: `/api/v1/runs/${runId}/stream?lastEventId=${first[0]!.id}&lastEventId=1`,
      headers: { authorization: `Bearer ${pies.key}` },
    });
    expect(twice.statusCode).toBe(200);
    expect(parseSse(twice.body).map((e) => e.id)).toEqual(first.slice(1).map((e) => e.id));
    // HEAD is not served: it would start the run and hold a stream for nothing.
    const head = await pies.app.inject({
      method: "HEAD",
      url: `/api/v1/runs/${runId}/stream`,
      headers: { authorization: `Bearer ${pies.key}` },
    });
    expect(head.statusCode).toBe(404);
  });

  it("bounds the open streams of a key: 429 with Retry-After, a slot again once one ends", async () => {
    const runIds = await Promise.all(
      [1, 2, 3].map(() => createStreamedRun(pies, "test-latency-3000")),
    );
    const open = (runId: string, signal?: AbortSignal) =>
      fetch(`${base}/runs/${runId}/stream`, {
        headers: { authorization: `Bearer ${pies.key}` },
        signal,
      });
    const first = new AbortController();
    const held = [await open(runIds[0]!, first.signal), await open(runIds[1]!)];
    expect(held.map((r) => r.status)).toEqual([200, 200]);

    const refused = await open(runIds[2]!);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("5");
    expect(await refused.json()).toEqual({
      error: "Too Many Requests",
      status: 429,
      code: "rate_limited",
      message: "this API key has 2 streams open, the most allowed",
    });

    first.abort();
    let third: Response | undefined;
    for (let i = 0; i < 50 && third?.status !== 200; i++) {
      if (i) await new Promise((resolve) => setTimeout(resolve, 100));
      third = await open(runIds[2]!);
    }
    expect(third!.status).toBe(200);
    const events = parseSse(await third!.text());
    expect(events.at(-1)!.event).toBe("close");
    expect(parseSse(await held[1]!.text()).at(-1)!.event).toBe("close");
  }, 20_000);
});
