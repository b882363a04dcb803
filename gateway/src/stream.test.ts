import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryRunEventBus, type RunEvent } from "@pies/common";
import { parseSse } from "@pies/common/testing";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";

/** A bus that loses end events and cannot tell whether one is stored, as when NATS is away. */
class LossyBus extends MemoryRunEventBus {
  override async publish(runId: string, kind: RunEvent["kind"], data: Uint8Array, dedupId: string) {
    if (kind !== "end") await super.publish(runId, kind, data, dedupId);
  }
  override async hasEnd(): Promise<boolean> {
    throw new Error("nats unreachable");
  }
}

let pies: TestPies;

beforeAll(async () => {
  pies = await startTestPies({
    bus: new LossyBus(),
    gateway: { authCacheSeconds: 30, sseHeartbeatSeconds: 1 },
  });
});

afterAll(async () => {
  await pies.close();
});

describe("GET /runs/:id/stream without the end event", () => {
  it("closes with the run from the runs store once it has ended", async () => {
    const post = (url: string, payload: object) =>
      pies.app.inject({
        method: "POST",
        url: `/api/v1${url}`,
        headers: { authorization: `Bearer ${pies.key}` },
        payload,
      });
    const prompt = (await post("/prompts", { content: "Hello" })).json();
    const interaction = (
      await post("/interactions", {
        name: "i",
        environment: pies.environmentId,
        prompts: [{ template: prompt.id }],
      })
    ).json();
    const created = (await post("/runs", { interaction: interaction.id, stream: true })).json();
    const response = await pies.app.inject({
      url: `/api/v1/runs/${created.id}/stream`,
      headers: { authorization: `Bearer ${pies.key}` },
    });
    const events = parseSse(response.body);
    expect(events.filter((e) => e.event === "message").length).toBeGreaterThan(0);
    expect(events.at(-1)!.event).toBe("close");
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ id: created.id, status: "completed" });
  }, 20_000);
});
