import { PGlite } from "@electric-sql/pglite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDatabase, createLogger, MemoryRunEventBus, type RunEvent } from "@pies/common";
import { parseSse } from "@pies/common/testing";
import { createInMemoryPies, type InMemoryPies } from "./embedded/wiring.js";

/** A bus that loses end events and cannot tell whether one is stored, as when NATS is away. */
class LossyBus extends MemoryRunEventBus {
  override async publish(runId: string, kind: RunEvent["kind"], data: Uint8Array, dedupId: string) {
    if (kind !== "end") await super.publish(runId, kind, data, dedupId);
  }
  override async hasEnd(): Promise<boolean> {
    throw new Error("nats unreachable");
  }
}

let pies: InMemoryPies;
let db: ReturnType<typeof createDatabase>;
let key: string;
let environmentId: string;

beforeAll(async () => {
  db = createDatabase({ pglite: await PGlite.create() });
  pies = await createInMemoryPies({
    db,
    bus: new LossyBus(),
    secretKey: Buffer.alloc(32, 2).toString("base64"),
    logger: createLogger("test", "silent"),
    executor: {
      PIES_RUN_TTL_SECONDS: 300,
      PIES_PROVIDER_TIMEOUT_MS: 5000,
      PIES_PROVIDER_MAX_RETRIES: 0,
      PIES_TEMPLATE_TIMEOUT_MS: 100,
      PIES_TEMPLATE_MEMORY_BYTES: 16 * 1024 * 1024,
      PIES_TEMPLATE_WORKERS: 1,
      PIES_RUN_HEARTBEAT_SECONDS: 10,
    },
    sweep: { leaseSeconds: 60, intervalMs: 10_000 },
    gateway: {
      maxBodyBytes: 65536,
      authCacheSeconds: 30,
      sseHeartbeatSeconds: 1,
      trustProxy: false,
    },
  });
  const { project } = await pies.catalog.createAccount({ name: "lossy" });
  key = (await pies.catalog.createApiKey({ projectId: project!.id })).secret;
  environmentId = (
    await pies.catalog.createEnvironment({
      projectId: project!.id,
      environment: { name: "test", provider: "test", defaultModel: "test" },
    })
  ).environment!.id;
});

afterAll(async () => {
  await pies.stop(5000);
  await pies.app.close();
  await db.destroy();
});

describe("GET /runs/:id/stream without the end event", () => {
  it("closes with the run from the runs store once it has ended", async () => {
    const post = (url: string, payload: object) =>
      pies.app.inject({
        method: "POST",
        url: `/api/v1${url}`,
        headers: { authorization: `Bearer ${key}` },
        payload,
      });
    const prompt = (await post("/prompts", { content: "Hello" })).json();
    const interaction = (
      await post("/interactions", {
        name: "i",
        environment: environmentId,
        prompts: [{ template: prompt.id }],
      })
    ).json();
    const created = (await post("/runs", { interaction: interaction.id, stream: true })).json();
    const response = await pies.app.inject({
      url: `/api/v1/runs/${created.id}/stream`,
      headers: { authorization: `Bearer ${key}` },
    });
    const events = parseSse(response.body);
    expect(events.filter((e) => e.event === "message").length).toBeGreaterThan(0);
    expect(events.at(-1)!.event).toBe("close");
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ id: created.id, status: "completed" });
  }, 20_000);
});
