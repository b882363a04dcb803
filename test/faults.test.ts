import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  expectJson,
  gatewayApi,
  readSse,
  startTestStack,
  type ApiClient,
  type Stack,
} from "@pies/testkit";

// The four processes with short clocks: heartbeats every second, a 3 s lease, a sweep every
// second, a 2 s stream ttl; then faults, as in production, to see that no run is left stuck.
let stack: Stack;
let api: ApiClient;

beforeAll(async () => {
  stack = await startTestStack("faults", {
    env: {
      PIES_RUN_HEARTBEAT_SECONDS: "1",
      PIES_RUN_LEASE_SECONDS: "3",
      PIES_SWEEP_INTERVAL_SECONDS: "1",
      PIES_SSE_HEARTBEAT_SECONDS: "1",
      PIES_RUN_TTL_SECONDS: "2",
    },
  });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
});

afterAll(async () => {
  await stack?.stop();
});

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => stack.output());

async function interaction(model: string) {
  const prompt = await json(await api("/prompts", { body: { name: "p", content: "Say hi" } }), 201);
  return json(
    await api("/interactions", {
      body: {
        name: `faults-${model}`,
        model,
        environment: stack.bootstrap.environment,
        prompts: [{ type: "template", template: prompt.id }],
      },
    }),
    201,
  );
}

/** A run as the gateway answers it now. */
const readRun = async (id: string) => json(await api(`/runs/${id}`));

describe("runs that nothing would end", () => {
  it("fails a streamed run that is not opened within its ttl, and its stream closes at once", async () => {
    const i = await interaction("test");
    const created = await json(await api("/runs", { body: { interaction: i.id, stream: true } }));
    expect(created).toMatchObject({ status: "created", ttl: 2 });
    // The sweeper (every second) fails it once its 2 s ttl has gone by.
    const run = await vi.waitFor(
      async () => {
        const current = await readRun(created.id);
        expect(current.status).not.toBe("created");
        return current;
      },
      { timeout: 20_000, interval: 100 },
    );
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
    const created = await json(await api("/runs", { body: { interaction: i.id, stream: true } }));
    const events = await readSse(await api(`/runs/${created.id}/stream`));
    expect(events.at(-1)!.event).toBe("close");
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ status: "completed" });
    expect(await readRun(created.id)).toMatchObject({ status: "completed" });
  }, 30_000);

  it("fails the runs of an executor that dies, and closes their open streams", async () => {
    const i = await interaction("test-latency-60000");
    const created = await json(await api("/runs", { body: { interaction: i.id, stream: true } }));
    const reading = api(`/runs/${created.id}/stream`).then(readSse);
    const blocking = api(`/interactions/${i.id}/execute`, { body: {} });
    // Both runs are with the executor (the streamed one started by its reader).
    await vi.waitFor(
      async () => {
        const runs = await json<any[]>(await api(`/runs?interaction=${i.id}`));
        expect(runs.map((r) => r.status)).toEqual(["processing", "processing"]);
      },
      { timeout: 20_000, interval: 100 },
    );

    stack.processes.find((p) => p.name === "executor")!.child.kill("SIGKILL");

    // The caller of the blocking execution learns at once that it failed, as JSON.
    expect(await json(await blocking, 503)).toMatchObject({ status: 503, code: "unavailable" });

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
    const runs = await json<any[]>(await api(`/runs?interaction=${i.id}`));
    expect(runs).toHaveLength(2);
    for (const run of runs)
      expect(run).toMatchObject({ status: "failed", error: { code: "executor_lost" } });

    // An executor again, so that the other tests find the stack whole whatever their order.
    await stack.restart("executor");
  }, 60_000);
});
