import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JetStreamRunEventBus, LiveGap } from "@pies/common/bus";
import { startPrivateNats, type PrivateNats } from "@pies/testkit";

// A NATS server of the test's own, so that it can be restarted.
let nats: PrivateNats | undefined;
let bus: JetStreamRunEventBus | undefined;

beforeAll(async () => {
  nats = await startPrivateNats();
  bus = await JetStreamRunEventBus.connect({
    url: nats.url,
    stream: "PIES_OUTAGE",
    subjectPrefix: "outage",
    maxAgeSeconds: 60,
    name: "outage-test",
  });
});

afterAll(async () => {
  await bus?.close().catch(() => {});
  await nats?.stop();
});

const encode = (text: string) => new TextEncoder().encode(text);

describe("the JetStream bus during a NATS outage", () => {
  it("answers not ready at once while NATS is down, reconnects by itself, and publishes again", async () => {
    expect(await bus!.ready()).toBe(true);
    await nats!.restart(async () => {
      const started = Date.now();
      expect(await bus!.ready(500)).toBe(false);
      expect(Date.now() - started).toBeLessThan(2000);
    });
    const deadline = Date.now() + 15_000;
    while (!(await bus!.ready(500)) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(await bus!.ready()).toBe(true);
    await bus!.publish("r1", "end", encode("done"), 99);
    expect(await bus!.hasEnd("r1")).toBe(true);
  }, 30_000);

  it("ends a live subscription with a gap when the connection comes back before it is read", async () => {
    const controller = new AbortController();
    const live = await bus!.live("r2", controller.signal);
    // NATS restarts after the subscription resolved and before anything reads it: whatever was
    // published meanwhile reached no core subscriber, so reading it must not wait for events.
    await nats!.restart();
    const deadline = Date.now() + 15_000;
    while (!(await bus!.ready(500)) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const read = (async () => {
      for await (const _event of live) return "an event";
      return "ended without a gap";
    })().catch((err: unknown) => err);
    const outcome = await Promise.race([
      read,
      new Promise((resolve) => setTimeout(() => resolve("still waiting after 3 s"), 3000)),
    ]);
    expect(outcome).toBeInstanceOf(LiveGap);
    expect((outcome as LiveGap).lastSeq).toBe(0);
    controller.abort();
  }, 30_000);
});
