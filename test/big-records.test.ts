import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import {
  expectJson,
  gatewayApi,
  readSse,
  startFakeOpenAI,
  startTestStack,
  testNatsUrl,
  type ApiClient,
  type FakeOpenAI,
  type Stack,
} from "@pies/testkit";

// A run's record is one NATS message, which the server refuses over its max_payload (1 MiB by
// default) although the gateway takes bodies as large and a record carries the data, the prompt
// rendered from it and the result. Against the four processes and the real NATS: a run whose
// record would not fit is refused at once (413), one whose result would not is recorded failed.
let stack: Stack;
let upstream: FakeOpenAI;
let api: ApiClient;
let interaction: string;
let maxPayload: number;

beforeAll(async () => {
  const nc = await connect({ servers: testNatsUrl() });
  maxPayload = nc.info!.max_payload;
  await nc.close();
  upstream = await startFakeOpenAI({
    apiKey: "sk-upstream",
    streamChunkChars: 64 * 1024,
    // An answer larger than a NATS message when the prompt asks for it.
    respond: (body) =>
      body.messages.some((m) => String(m.content).includes("answer big"))
        ? "y".repeat(maxPayload + 1024)
        : "small answer",
  });
  // The gateway takes bodies up to twice the NATS limit: the body is not what is refused.
  stack = await startTestStack("big_records", {
    env: { PIES_ALLOWED_ENDPOINTS: "127.0.0.1", PIES_MAX_BODY_BYTES: String(2 * maxPayload) },
  });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
  const environment = (
    await json(
      await api("/environments", {
        body: {
          name: "upstream",
          provider: "openai_compatible",
          endpoint_url: upstream.url,
          apiKey: "sk-upstream",
          default_model: "gpt-4o-mini",
        },
      }),
      201,
    )
  ).id;
  const prompt = await json(
    await api("/prompts", {
      body: { name: "echo", role: "user", content_type: "jst", content: "return `Say ${text}`" },
    }),
    201,
  );
  interaction = (
    await json(
      await api("/interactions", {
        body: { name: "Echo", environment, prompts: [{ type: "template", template: prompt.id }] },
      }),
      201,
    )
  ).id;
}, 60_000);

afterAll(async () => {
  try {
    if (stack) await stack.stop();
  } finally {
    await upstream?.close();
  }
});

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => stack.output());

/** Data whose record (the data and the prompt that repeats it) is larger than a NATS message. */
const bigText = () => "x".repeat(Math.ceil(maxPayload * 0.6));

/** The message names the record's size (at least `least`) and a limit just under max_payload. */
function expectSizes(message: string, least: number) {
  const [, bytes, limit] = /record would be (\d+) bytes, over the limit of (\d+) bytes/.exec(
    message,
  ) ?? [undefined, "0", "0"];
  expect(Number(bytes)).toBeGreaterThan(least);
  expect(Number(limit)).toBeLessThan(maxPayload);
  expect(Number(limit)).toBeGreaterThan(maxPayload - 4096);
}

const chatRequests = () => upstream.requests.filter((r) => r.path.endsWith("/chat/completions"));

describe("runs whose record is larger than a NATS message", () => {
  it("blocking: 413 at once, naming the size and the limit; the provider is not called", async () => {
    upstream.reset();
    const started = performance.now();
    const error = await json(
      await api(`/interactions/${interaction}/execute`, { body: { data: { text: bigText() } } }),
      413,
    );
    expect(performance.now() - started).toBeLessThan(5000);
    expect(error).toMatchObject({ status: 413, code: "payload_too_large" });
    expectSizes(error.message, Math.ceil(maxPayload * 0.6) * 2);
    expect(chatRequests()).toHaveLength(0);
  });

  it("streamed: the POST is 413 and no run is created", async () => {
    const error = await json(
      await api("/runs", { body: { interaction, stream: true, data: { text: bigText() } } }),
      413,
    );
    expect(error.code).toBe("payload_too_large");
    const runs = await json(await api("/runs?limit=100"));
    expect(JSON.stringify(runs)).not.toContain("x".repeat(1000));
  });

  it("blocking: a result too large is recorded failed, 502 with the run, nothing stuck", async () => {
    const started = performance.now();
    const failed = await json(
      await api(`/interactions/${interaction}/execute`, { body: { data: { text: "answer big" } } }),
      502,
    );
    expect(performance.now() - started).toBeLessThan(8000);
    expect(failed.code).toBe("result_too_large");
    expectSizes(failed.message, maxPayload);
    const run = await json(await api(`/runs/${failed.details.run_id}`));
    expect(run).toMatchObject({ status: "failed", error: { code: "result_too_large" } });
    expect(run.result ?? null).toBeNull();
    // What fits is kept.
    expect(run.parameters).toEqual({ text: "answer big" });
    expect(run.token_use ?? run.tokenUse).toBeTruthy();
  });

  it("streamed: a result too large closes the stream with the failed run, recorded", async () => {
    const created = await json(
      await api("/runs", { body: { interaction, stream: true, data: { text: "answer big" } } }),
    );
    const response = await fetch(`${stack.gatewayUrl}/api/v1/runs/${created.id}/stream`, {
      headers: { authorization: `Bearer ${stack.bootstrap.key}` },
      signal: AbortSignal.timeout(15_000),
    });
    const events = await readSse(response);
    const close = events.at(-1);
    expect(close?.event).toBe("close");
    const final = JSON.parse(close!.data);
    expect(final).toMatchObject({ status: "failed", error: { code: "result_too_large" } });
    // The whole answer was streamed, in messages each within a NATS message.
    const streamed = events.filter((e) => e.event === "message").map((e) => JSON.parse(e.data));
    expect(streamed.join("")).toBe("y".repeat(maxPayload + 1024));
    const run = await json(await api(`/runs/${created.id}`));
    expect(run).toMatchObject({ status: "failed", error: { code: "result_too_large" } });
  });

  it("a run that fits still completes (blocking and streamed)", async () => {
    const done = await json(
      await api(`/interactions/${interaction}/execute`, { body: { data: { text: "hello" } } }),
    );
    expect(done).toMatchObject({ status: "completed", result: "small answer" });
    const created = await json(
      await api("/runs", { body: { interaction, stream: true, data: { text: "hello" } } }),
    );
    const response = await fetch(`${stack.gatewayUrl}/api/v1/runs/${created.id}/stream`, {
      headers: { authorization: `Bearer ${stack.bootstrap.key}` },
    });
    const close = (await readSse(response)).at(-1);
    expect(JSON.parse(close!.data)).toMatchObject({ status: "completed", result: "small answer" });
  });
});
