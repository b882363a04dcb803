import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  expectJson,
  gatewayApi,
  readSse,
  startTestStack,
  type ApiClient,
  type Stack,
} from "@pies/testkit";

// The hot path on the four processes, real PostgreSQL and NATS: runs are recorded through the
// JetStream record log and written to the store in batches, so these check what that must keep:
// a run is readable the moment its execution is answered, none is lost or doubled while the runs
// service is down, and streams stay whole under concurrency.
let stack: Stack;
let api: ApiClient;
let interaction: { id: string };

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => stack.output());

beforeAll(async () => {
  stack = await startTestStack("hotpath");
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
  const prompt = await json(
    await api("/prompts", {
      body: {
        name: "write",
        role: "user",
        content_type: "jst",
        content: "return `Write about ${topic}`",
        inputSchema: { type: "object", properties: { topic: { type: "string" } } },
      },
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
  if (stack) expect(await stack.stop()).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
});

const execute = (topic: string) =>
  api(`/interactions/${interaction.id}/execute`, { body: { data: { topic } } });

describe("the hot path", () => {
  it("finds a run by id right after its blocking execution answered (read-your-writes)", async () => {
    const readBack = async (topic: string) => {
      const run = await json(await execute(topic));
      expect(run.status).toBe("completed");
      const read = await json(await api(`/runs/${run.id}`));
      expect(read).toMatchObject({ id: run.id, status: "completed", result: run.result });
    };
    for (let i = 0; i < 20; i++) await readBack(`sequential ${i}`);
    await Promise.all(Array.from({ length: 32 }, (_, i) => readBack(`concurrent ${i}`)));
  });

  it("streams 64 runs at once, each with its chunks complete and in order", async () => {
    // Half slow (50 ms between chunks), half as fast as the test provider answers: those race
    // the live subscription the stream sets up while their run starts.
    const stream = async (i: number) => {
      const created = await json(
        await api("/runs", {
          body: {
            interaction: interaction.id,
            stream: true,
            data: { topic: `stream ${i}` },
            config: { model: i % 2 === 0 ? "test-slow" : "test" },
          },
        }),
      );
      const events = await readSse(await api(`/runs/${created.id}/stream`));
      const close = events.at(-1);
      expect(close?.event).toBe("close");
      const final = JSON.parse(close!.data);
      expect(final).toMatchObject({ id: created.id, status: "completed" });
      const messages = events.filter((e) => e.event === "message");
      // A fast answer's chunks may go out joined (those that came while the start was being
      // recorded, or while a publish was in flight); a slow one's come one by one.
      expect(messages.length).toBeGreaterThan(i % 2 === 0 ? 1 : 0);
      // Every chunk, in order: together they are the result, and their ids only go up.
      expect(messages.map((e) => JSON.parse(e.data) as string).join("")).toBe(final.result);
      // Numbered 1, 2, … (the close one more than the last chunk): none missing, none twice.
      const ids = events.map((e) => Number(e.id));
      expect(ids).toEqual(ids.map((_, n) => n + 1));
    };
    await Promise.all(Array.from({ length: 64 }, (_, i) => stream(i)));
  });

  it("records runs executed while the runs service is down once it is back, none twice", async () => {
    const tag = `outage-${Date.now()}`;
    await stack.kill("runs");
    const answered: string[] = [];
    try {
      // Executions do not wait on the runs store: each is answered, its record waits in JetStream.
      for (let i = 0; i < 12; i++) {
        const run = await json(
          await api(`/interactions/${interaction.id}/execute`, {
            body: { data: { topic: `while down ${i}` }, tags: [tag] },
          }),
        );
        expect(run.status).toBe("completed");
        answered.push(run.id);
      }
      expect(await json(await api(`/runs?tag=${tag}`), 503)).toMatchObject({ code: "unavailable" });
    } finally {
      await stack.start("runs");
    }
    const listed = async () => {
      const page = await json<any[]>(await api(`/runs?tag=${tag}&limit=1000`));
      return page.map((r) => `${r.id} ${r.status}`).sort();
    };
    await expect
      .poll(listed, { timeout: 20_000, interval: 200 })
      .toEqual(answered.map((id) => `${id} completed`).sort());
  });
});
