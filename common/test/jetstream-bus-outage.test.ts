import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JetStreamRunEventBus } from "@pies/common/bus";
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
});
