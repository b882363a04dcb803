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

// The four processes; 300 streamed runs opened at once that end together, just after a
// heartbeat (1 s) has fired: the gateway once died here, writing to streams that had ended.
const STREAMS = 300;
const HEARTBEAT_SECONDS = 1;
const MODEL = `test-latency-${HEARTBEAT_SECONDS * 1000 + 200}`;

let db: TestDatabase;
let stream: TestStream;
let stack: Stack;

beforeAll(async () => {
  db = await createTestDatabase("storm");
  stream = createTestStream();
  stack = await startStack({
    databaseUrl: db.url,
    natsEnv: stream.env,
    env: {
      PIES_SSE_HEARTBEAT_SECONDS: String(HEARTBEAT_SECONDS),
      PIES_MAX_STREAMS_PER_KEY: String(STREAMS),
      // All of them run at once: the project's share must hold them.
      PIES_PROJECT_MAX_EXECUTIONS: String(STREAMS),
    },
  });
});

afterAll(async () => {
  await stack?.stop();
  await stream?.remove();
  await db?.drop();
});

const api = async (path: string, body?: unknown) => {
  const response = await fetch(`${stack.gatewayUrl}/api/v1${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${stack.bootstrap.key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return response;
};
const json = async (path: string, body?: unknown) => (await (await api(path, body)).json()) as any;

describe("a storm of streams", () => {
  let runIds: string[];

  beforeAll(async () => {
    const prompt = await json("/prompts", { name: "p", content: "Say hi", content_type: "text" });
    const interaction = await json("/interactions", {
      name: "storm",
      model: MODEL,
      environment: stack.bootstrap.environment,
      prompts: [{ type: "template", template: prompt.id }],
    });
    runIds = [];
    for (let i = 0; i < STREAMS; i += 50) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(50, STREAMS - i) }, () =>
          json("/runs", { interaction: interaction.id, stream: true }),
        ),
      );
      runIds.push(...batch.map((run) => run.id as string));
    }
    expect(new Set(runIds).size).toBe(STREAMS);
  });

  it(`ends ${STREAMS} streams that end together with close, and the gateway stays up`, async () => {
    const results = await Promise.all(
      runIds.map(async (id) => {
        const events = await readSse(await api(`/runs/${id}/stream`));
        return { id, last: events.at(-1) };
      }),
    );
    const notClosed = results.filter((r) => r.last?.event !== "close");
    expect(notClosed.map((r) => r.id)).toEqual([]);
    for (const { id, last } of results) {
      expect(JSON.parse(last!.data)).toMatchObject({ id, status: "completed" });
    }

    const gateway = stack.processes.find((p) => p.name === "gateway")!;
    expect(gateway.child.exitCode).toBeNull();
    expect((await fetch(`${stack.gatewayUrl}/healthz`)).status).toBe(200);
    expect(gateway.output()).not.toMatch(/ERR_STREAM_WRITE_AFTER_END|Unhandled/);
    // Bounded: the storm took 22-27 s on two cores shared with four other engineers' test runs.
  }, 45_000);
});
