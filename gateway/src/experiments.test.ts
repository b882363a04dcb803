import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXPERIMENT_LIMITS } from "@pies/common";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { requester } from "../test/requests.js";

// Experiments in the embedded mode's wiring (PGlite, handlers called directly): the replay and
// its totals on PGlite, and what an experiment's stream holds on the gateway, given back when its
// client goes.
let pies: TestPies;
let call: ReturnType<typeof requester>;
let base: string;
let promptId: string;
let interactionId: string;

beforeAll(async () => {
  pies = await startTestPies({ gateway: { maxStreamsPerKey: 2, sseHeartbeatSeconds: 1 } });
  await pies.app.listen({ host: "127.0.0.1", port: 0 });
  base = `http://127.0.0.1:${(pies.app.server.address() as AddressInfo).port}/api/v1`;
  call = requester(pies.app, pies.key);
  const prompt = await call("POST", "/prompts", {
    name: "p",
    content_type: "jst",
    content: "return `About ${text}`",
  });
  promptId = prompt.json.id;
  const interaction = await call("POST", "/interactions", {
    name: "About",
    environment: pies.environmentId,
    prompts: [{ template: promptId }],
    result_schema: {
      type: "object",
      properties: { word: { type: "string" } },
      required: ["word"],
    },
  });
  interactionId = interaction.json.id;
  for (const text of ["one", "two", "three", "four", "five"]) {
    const run = await call("POST", `/interactions/${interactionId}/execute`, {
      data: { text },
      tags: ["source"],
    });
    expect(run.status).toBe(200);
  }
}, 60_000);

afterAll(async () => pies?.close());

/** SSE streams the gateway holds open now (its metrics: runs' and experiments' streams). */
async function streamsOpen(): Promise<number> {
  const text = (await pies.app.inject({ url: "/metrics" })).body;
  return Number(/^pies_sse_streams_active (\d+)$/m.exec(text)?.[1]);
}

async function until(id: string, done: (e: any) => boolean, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { json } = await call("GET", `/experiments/${id}?pairs_limit=1000`);
    if (done(json)) return json;
    if (Date.now() > deadline) throw new Error(`experiment ${id}: ${JSON.stringify(json)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("experiments in memory", () => {
  it("replay against the draft and count their totals on PGlite", async () => {
    await call("PUT", `/prompts/${promptId}`, { content: "return `Only ${text}`" });
    const created = await call("POST", "/experiments", {
      name: "draft",
      source: { filters: { tags: ["source"] } },
      target: { interaction: "About@draft" },
    });
    expect(created.status).toBe(201);
    const ended = await until(created.json.id, (e) => e.status !== "running");
    expect(ended).toMatchObject({
      status: "completed",
      progress: { total: 5, done: 5, completed: 5, failed: 0 },
    });
    // The test provider answers by the prompt: a new template, new answers.
    const changed = ended.pairs.filter((p: any) => !p.exact_match);
    expect(changed.length).toBeGreaterThan(0);
    for (const pair of changed) {
      expect(pair.diff).toEqual([
        { op: "replace", path: "/word", value: pair.candidate.result.word },
      ]);
    }
    const latencies = ended.pairs
      .map((p: any) => p.candidate.latency_ms)
      .sort((a: number, b: number) => a - b);
    expect(ended.comparison).toMatchObject({
      pairs: 5,
      exact_match_rate: (5 - changed.length) / 5,
      candidate: { schema_valid_rate: 1, p50_latency_ms: latencies[2] },
      original: { schema_valid_rate: 1 },
    });
  });

  it("give a stream's slot back when its client goes, and end the others on the end", async () => {
    const created = await call("POST", "/experiments", {
      name: "slow",
      source: { filters: { tags: ["source"] } },
      // 300 ms a pair, one at a time: running for a second and a half at least.
      target: { interaction: interactionId, config: { model: "test-latency-300" } },
      concurrency: 1,
    });
    const id = created.json.id as string;
    const open = (signal?: AbortSignal) =>
      fetch(`${base}/experiments/${id}/stream`, {
        headers: { authorization: `Bearer ${pies.key}` },
        signal,
      });
    const first = new AbortController();
    const gone = await open(first.signal);
    const staying = await open();
    expect([gone.status, staying.status]).toEqual([200, 200]);
    // Two per key: a third waits for one of them.
    const third = await open();
    expect(third.status).toBe(429);
    expect(third.headers.get("retry-after")).toBeTruthy();
    await third.text();
    expect(await streamsOpen()).toBe(2);

    // The first client reads one event and goes: its stream, timer and slot go with it.
    const reader = gone.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toContain("event: progress");
    first.abort();
    for (const deadline = Date.now() + 10_000; (await streamsOpen()) > 1;) {
      if (Date.now() > deadline) throw new Error(`${await streamsOpen()} streams open`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const again = await open();
    expect(again.status).toBe(200);

    // The end closes the others: their last event is `end`, and nothing stays open.
    const [events, moreEvents] = await Promise.all([
      staying.text().then(parseSse),
      again.text().then(parseSse),
    ]);
    for (const got of [events, moreEvents]) {
      expect(got.at(-1)?.event).toBe("end");
      expect(JSON.parse(got.at(-1)!.data)).toMatchObject({ id, status: "completed" });
    }
    expect(events.filter((e) => e.event === "progress").length).toBeGreaterThanOrEqual(2);
    expect(await streamsOpen()).toBe(0);
  });

  it("run at most EXPERIMENT_LIMITS.runningPerProject at once in a project: the next is a 429", async () => {
    // The project's running experiments, made below the API: held by another process for an
    // hour, so that none ends while the test looks (as a replay's pace would not promise).
    const held = Array.from({ length: EXPERIMENT_LIMITS.runningPerProject }, (_, i) => ({
      id: `held-${i}-${Date.now()}`,
      project_id: pies.projectId,
      name: `held ${i}`,
      status: "running",
      source: "{}",
      target: "{}",
      request: new Uint8Array(),
      concurrency: 1,
      selected: 1,
      skipped: 0,
      owner: "another process",
      lease_until: new Date(Date.now() + 3_600_000),
    }));
    await pies.db.insertInto("runs.experiments").values(held).execute();
    const body = (name: string) => ({
      name,
      source: { filters: { tags: ["source"] } },
      target: { interaction: interactionId },
    });
    try {
      const refused = await call("POST", "/experiments", body("one more"));
      expect(refused.status).toBe(429);
      expect(JSON.stringify(refused.json)).toContain(
        `at most ${EXPERIMENT_LIMITS.runningPerProject} experiments at once`,
      );
      // One ended: the next is taken.
      await pies.db
        .updateTable("runs.experiments")
        .set({ status: "cancelled" })
        .where("id", "=", held[0]!.id)
        .execute();
      const next = await call("POST", "/experiments", body("next"));
      expect(next.status).toBe(201);
      await until(next.json.id, (e) => e.status === "completed");
    } finally {
      await pies.db
        .deleteFrom("runs.experiments")
        .where(
          "id",
          "in",
          held.map((h) => h.id),
        )
        .execute();
    }
  });
});
