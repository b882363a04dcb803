import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JetStreamRunEventBus } from "@pies/common/bus";
import { parseSse, startPrivateNats, type PrivateNats } from "@pies/testkit";
import { startTestPies, type TestPies } from "./in-memory-pies.js";
import { createStreamedRun, requester } from "./requests.js";

// The gateway and the services in memory, on a PRIVATE nats-server (never the shared one), which
// the tests kill (SIGKILL, as abrupt as a crash) and start again while streams are open.

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

let nats: PrivateNats;
let bus: JetStreamRunEventBus;
let pies: TestPies;

beforeAll(async () => {
  nats = await startPrivateNats();
  bus = await JetStreamRunEventBus.connect({
    url: nats.url,
    stream: "PIES_RUNS",
    subjectPrefix: "pies",
    maxAgeSeconds: 600,
    name: "pies-test",
  });
  pies = await startTestPies({ bus, gateway: { sseHeartbeatSeconds: 1 } });
});

afterAll(async () => {
  await pies?.close();
  await bus?.close();
  await nats?.stop();
});

async function call(method: "GET" | "POST", url: string, payload?: object) {
  return (await requester(pies.app, pies.key)(method, url, payload)).json;
}

const streamedRun = (model: string) => createStreamedRun(pies, model);

/** Opens the run's stream and resolves with its events once it has ended; waits until it runs. */
async function openStream(runId: string) {
  const reading = pies.app
    .inject({
      url: `/api/v1/runs/${runId}/stream`,
      headers: { authorization: `Bearer ${pies.key}` },
    })
    .then((r) => parseSse(r.body));
  while ((await call("GET", `/runs/${runId}`)).status !== "processing") await sleep(50);
  return reading;
}

describe("a stream across a NATS restart", () => {
  it("ends with close and every chunk when NATS restarts while the run executes", async () => {
    const runId = await streamedRun("test-latency-4000");
    const reading = openStream(runId);
    await sleep(500);
    await nats.restart(() => sleep(1500), "SIGKILL");
    const events = await reading;
    expect(events.map((e) => e.event).filter((e) => e !== "message")).toEqual(["close"]);
    const final = JSON.parse(events.at(-1)!.data);
    expect(final).toMatchObject({ id: runId, status: "completed" });
    const text = events
      .filter((e) => e.event === "message")
      .map((e) => JSON.parse(e.data))
      .join("");
    expect(text).toBe(final.result);
  }, 30_000);

  it("ends with close (the stored run) when the run ends while NATS is down", async () => {
    const runId = await streamedRun("test-latency-1000");
    const reading = openStream(runId);
    await nats.restart(async () => {
      const events = await reading;
      expect(events.map((e) => e.event).filter((e) => e !== "message")).toEqual(["close"]);
      const final = JSON.parse(events.at(-1)!.data);
      expect(final).toMatchObject({ id: runId });
      expect(["completed", "failed"]).toContain(final.status);
      expect((await call("GET", `/runs/${runId}`)).status).toBe(final.status);
    }, "SIGKILL");
  }, 30_000);
});
