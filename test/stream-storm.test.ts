import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  expectJson,
  gatewayApi,
  readSse,
  startTestStack,
  type ApiClient,
  type Stack,
} from "@pies/testkit";

// The four processes; 300 streamed runs opened at once that end together, just after a
// heartbeat (1 s) has fired: the gateway once died here, writing to streams that had ended.
const STREAMS = 300;
const HEARTBEAT_SECONDS = 1;
const MODEL = `test-latency-${HEARTBEAT_SECONDS * 1000 + 200}`;

let stack: Stack;
let api: ApiClient;

beforeAll(async () => {
  stack = await startTestStack("storm", {
    env: {
      PIES_SSE_HEARTBEAT_SECONDS: String(HEARTBEAT_SECONDS),
      PIES_MAX_STREAMS_PER_KEY: String(STREAMS),
      // All of them run at once: the project's share must hold them.
      PIES_PROJECT_MAX_EXECUTIONS: String(STREAMS),
    },
  });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
});

afterAll(async () => {
  await stack?.stop();
});

/** POSTs `body` and returns the JSON answer, which must have `status`. */
const post = async (path: string, body: unknown, status: number) =>
  expectJson(await api(path, { body }), status, () => stack.output());

describe("a storm of streams", () => {
  let runIds: string[];

  beforeAll(async () => {
    const prompt = await post(
      "/prompts",
      { name: "p", content: "Say hi", content_type: "text" },
      201,
    );
    const interaction = await post(
      "/interactions",
      {
        name: "storm",
        model: MODEL,
        environment: stack.bootstrap.environment,
        prompts: [{ type: "template", template: prompt.id }],
      },
      201,
    );
    runIds = [];
    for (let i = 0; i < STREAMS; i += 50) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(50, STREAMS - i) }, () =>
          post("/runs", { interaction: interaction.id, stream: true }, 200),
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
