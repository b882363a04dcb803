import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  expectJson,
  gatewayApi,
  readSse,
  startTestStack,
  type ApiClient,
  type Stack,
} from "@pies/testkit";

// The edge: the gateway and an executor in one process (embedded/dist/edge-main.js), catalog and
// runs as their own processes, real PostgreSQL and NATS. The same API, one Connect hop less.
let stack: Stack;
let api: ApiClient;
let interaction: { id: string };

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => stack.output());

beforeAll(async () => {
  stack = await startTestStack("edge", { edge: true });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
  const prompt = await json(
    await api("/prompts", {
      body: { name: "write", role: "user", content_type: "jst", content: "Write about ${topic}" },
    }),
    201,
  );
  interaction = await json(
    await api("/interactions", {
      body: {
        name: "Writer",
        environment: stack.bootstrap.environment,
        prompts: [{ type: "template", template: prompt.id }],
      },
    }),
    201,
  );
});

afterAll(async () => {
  // SIGTERM: the edge drains its requests and its executions, then NATS.
  if (stack) expect(await stack.stop()).toEqual({ edge: 0, runs: 0, catalog: 0 });
});

describe("the edge", () => {
  it("executes blocking and reads the run back at once", async () => {
    const run = await json(
      await api(`/interactions/${interaction.id}/execute`, { body: { data: { topic: "edges" } } }),
    );
    expect(run).toMatchObject({ status: "completed", prompt: [{ content: "Write about edges" }] });
    expect(await json(await api(`/runs/${run.id}`))).toMatchObject({
      id: run.id,
      status: "completed",
    });
  });

  it("streams a run whole, and answers errors in pies' shape", async () => {
    const created = await json(
      await api("/runs", {
        body: { interaction: interaction.id, stream: true, data: { topic: "streams" } },
      }),
    );
    const events = await readSse(await api(`/runs/${created.id}/stream`));
    const close = events.at(-1)!;
    expect(close.event).toBe("close");
    const final = JSON.parse(close.data);
    const chunks = events.filter((e) => e.event === "message").map((e) => JSON.parse(e.data));
    expect(chunks.join("")).toBe(final.result);
    const blocking = await json(
      await api(`/interactions/${interaction.id}/execute`, { body: { data: { topic: "x" } } }),
    );
    expect(await json(await api(`/runs/${blocking.id}/stream`), 409)).toMatchObject({
      code: "conflict",
    });
    expect(
      await json(await api("/interactions/000000000000000000000000/execute", { body: {} }), 404),
    ).toMatchObject({ code: "not_found" });
  });
});
