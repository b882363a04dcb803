import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createTestDatabase,
  createTestStream,
  readSse,
  startStack,
  type Stack,
  type TestDatabase,
  type TestStream,
} from "@pies/common/testing";

// The four processes with short clocks: heartbeats every second, a 3 s lease, a sweep every
// second, a 2 s stream ttl; then faults, as in production, to see that no run is left stuck.
let db: TestDatabase;
let stream: TestStream;
let stack: Stack;

beforeAll(async () => {
  db = await createTestDatabase("faults");
  stream = createTestStream();
  stack = await startStack({
    databaseUrl: db.url,
    natsEnv: stream.env,
    env: {
      PIES_RUN_HEARTBEAT_SECONDS: "1",
      PIES_RUN_LEASE_SECONDS: "3",
      PIES_SWEEP_INTERVAL_SECONDS: "1",
      PIES_SSE_HEARTBEAT_SECONDS: "1",
      PIES_RUN_TTL_SECONDS: "2",
    },
  });
});

afterAll(async () => {
  await stack?.stop();
  await stream?.remove();
  await db?.drop();
});

const api = (path: string, body?: unknown) =>
  fetch(`${stack.gatewayUrl}/api/v1${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${stack.bootstrap.key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
const json = async (r: Response) => (await r.json()) as any;

async function interaction(model: string) {
  const prompt = await json(await api("/prompts", { name: "p", content: "Say hi" }));
  return json(
    await api("/interactions", {
      name: `faults-${model}`,
      model,
      environment: stack.bootstrap.environment,
      prompts: [{ type: "template", template: prompt.id }],
    }),
  );
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("runs that nothing would end", () => {
  it("fails a streamed run that is not opened within its ttl, and its stream closes at once", async () => {
    const i = await interaction("test");
    const created = await json(await api("/runs", { interaction: i.id, stream: true }));
    expect(created.ttl).toBe(2);
    await sleep(4000);
    const run = await json(await api(`/runs/${created.id}`));
    expect(run).toMatchObject({ status: "failed", error: { code: "stream_expired" } });
    const events = await readSse(await api(`/runs/${created.id}/stream`));
    expect(events.map((e) => e.event)).toEqual(["close"]);
    expect(JSON.parse(events[0]!.data)).toMatchObject({
      status: "failed",
      error: { code: "stream_expired" },
    });
  });

  it("keeps a run that lasts longer than the lease alive while its executor heartbeats", async () => {
    const i = await interaction("test-latency-5000");
    const created = await json(await api("/runs", { interaction: i.id, stream: true }));
    const events = await readSse(await api(`/runs/${created.id}/stream`));
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ status: "completed" });
  }, 30_000);

  it("fails the runs of an executor that dies, and closes their open streams", async () => {
    const i = await interaction("test-latency-60000");
    const created = await json(await api("/runs", { interaction: i.id, stream: true }));
    const reading = api(`/runs/${created.id}/stream`).then(readSse);
    const blocking = api(`/interactions/${i.id}/execute`, {});
    await sleep(1500);
    expect((await json(await api(`/runs/${created.id}`))).status).toBe("processing");

    stack.processes.find((p) => p.name === "executor")!.child.kill("SIGKILL");

    // The caller of the blocking execution learns at once that it failed, as JSON.
    const failed = await blocking;
    expect(failed.status).toBeGreaterThanOrEqual(500);
    expect(await json(failed)).toMatchObject({ status: failed.status, code: expect.any(String) });

    // The open stream ends with the failed run once the lease has run out.
    const started = Date.now();
    const events = await reading;
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(events.at(-1)!.event).toBe("close");
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({
      status: "failed",
      error: { code: "executor_lost" },
    });

    // Neither run is left processing.
    const runs = (await json(await api(`/runs?interaction=${i.id}`))) as any[];
    expect(runs).toHaveLength(2);
    for (const run of runs)
      expect(run).toMatchObject({ status: "failed", error: { code: "executor_lost" } });
  }, 60_000);
});
