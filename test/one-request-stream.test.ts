import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import {
  consumerNames,
  createTestDatabase,
  expectJson,
  gatewayApi,
  readSse,
  readSseIncrementally,
  natsSubscriptions,
  startPrivateNats,
  startStack,
  type ApiClient,
  type PrivateNats,
  type SseEvent,
  type Stack,
  type TestDatabase,
} from "@pies/testkit";

// One-request streaming against the four processes, real PostgreSQL and NATS: `POST /runs` (and
// `POST /interactions/:id/execute`) with `stream: true` and `Accept: text/event-stream` answer with
// the run's event stream itself — `run` first, then the events GET /runs/:id/stream sends, which
// resumes it — while errors stay JSON, and a client that leaves leaves nothing behind (a NATS
// server of the test's own, so that its subscriptions are the stack's alone).
const STREAMS_PER_KEY = 2;

let db: TestDatabase;
let nats: PrivateNats;
let stack: Stack;
let api: ApiClient;
let nc: NatsConnection;
let jsm: JetStreamManager;
let interaction: { id: string };

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => stack.output());

beforeAll(async () => {
  db = await createTestDatabase("one_request");
  nats = await startPrivateNats();
  stack = await startStack({
    databaseUrl: db.url,
    natsEnv: nats.env,
    env: { PIES_MAX_STREAMS_PER_KEY: String(STREAMS_PER_KEY) },
  });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
  const prompt = await json(
    await api("/prompts", {
      body: {
        name: "about",
        role: "user",
        content_type: "jst",
        content: "return `About ${topic}`",
      },
    }),
    201,
  );
  interaction = await json(
    await api("/interactions", {
      body: {
        name: "Streamer",
        environment: stack.bootstrap.environment,
        prompts: [{ type: "template", template: prompt.id }],
      },
    }),
    201,
  );
  nc = await connect({ servers: nats.url });
  jsm = await jetstreamManager(nc);
}, 120_000);

afterAll(async () => {
  try {
    await nc?.close();
    if (stack) expect(await stack.stop()).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
  } finally {
    await nats?.stop();
    await db?.drop();
  }
});

/** A one-request streamed execution: the POST with `Accept: text/event-stream`. */
function post(path: string, body: unknown, signal?: AbortSignal) {
  return fetch(`${stack.gatewayUrl}/api/v1${path}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${stack.bootstrap.key}`,
      "content-type": "application/json",
      accept: "text/event-stream",
    },
    body: JSON.stringify(body),
    signal,
  });
}

/** A one-request stream of a run of the test's interaction about `topic`. */
function streamRun(topic: string, model = "test", signal?: AbortSignal) {
  const body = { interaction: interaction.id, stream: true, data: { topic }, config: { model } };
  return post("/runs", body, signal);
}

/** The gateway's open SSE streams (pies_sse_streams_active). */
async function openStreams(): Promise<number> {
  const text = await (await fetch(`${stack.gatewayUrl}/metrics`)).text();
  return Number(/^pies_sse_streams_active (\d+)$/m.exec(text)?.[1]);
}

/** The NATS server's subscriptions: the stack's, and this test's connection's (a constant). */
const subscriptions = () => natsSubscriptions(nats.monitorUrl);

/** A failed response's body, for an assertion's message (a stream's is not read). */
const peek = async (response: Response) => (response.ok ? "" : await response.text());

const messagesOf = (events: SseEvent[]) =>
  events.filter((e) => e.event === "message").map((e) => JSON.parse(e.data) as string);

describe("one-request streaming", () => {
  it("answers POST /runs and POST /interactions/:id/execute with the run's events", async () => {
    for (const [path, body] of [
      ["/runs", { interaction: interaction.id, stream: true, data: { topic: "one" } }],
      [`/interactions/${interaction.id}/execute`, { stream: true, data: { topic: "two" } }],
    ] as const) {
      const response = await post(path, { ...body, config: { model: "test-slow" } });
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
      // The headers set before the stream took the response over are sent too.
      expect(response.headers.get("x-request-id")).not.toBeNull();
      const runId = response.headers.get("pies-run-id");
      expect(runId).toMatch(/^0[0-9a-f]+$/);
      const events = await readSse(response);
      // `run` first, without an id; then the chunks numbered from 1; `close` last.
      expect(events[0]).toMatchObject({ event: "run" });
      expect(events[0]!.id).toBeUndefined();
      expect(JSON.parse(events[0]!.data)).toMatchObject({
        id: runId,
        status: "processing",
        parameters: { topic: path === "/runs" ? "one" : "two" },
      });
      const close = events.at(-1)!;
      expect(close.event).toBe("close");
      const final = JSON.parse(close.data);
      expect(final).toMatchObject({ id: runId, status: "completed" });
      expect(messagesOf(events).length).toBeGreaterThan(1);
      expect(messagesOf(events).join("")).toBe(final.result);
      const ids = events.slice(1).map((e) => Number(e.id));
      expect(ids).toEqual(ids.map((_, n) => n + 1));
      // The run as any other: read back, and its stream replayed to the same end.
      const again = await readSse(await api(`/runs/${runId}/stream`));
      expect(messagesOf(again).join("")).toBe(final.result);
      expect(JSON.parse(again.at(-1)!.data)).toMatchObject({ id: runId, status: "completed" });
    }
  });

  it("is resumed by GET /runs/:id/stream with Last-Event-ID after the client left", async () => {
    const leaving = new AbortController();
    const response = await streamRun("resume", "test-slow", leaving.signal);
    const runId = response.headers.get("pies-run-id")!;
    const seen: SseEvent[] = [];
    await readSseIncrementally(response.body!, (event) => {
      seen.push(event);
      // Gone after the first chunk, as a client whose connection broke.
      if (event.event === "message") leaving.abort();
    }).catch((err: unknown) => {
      if (!leaving.signal.aborted) throw err;
    });
    const first = seen.find((e) => e.event === "message")!;
    expect(first.id).toBe("1");
    const rest = await readSse(
      await fetch(`${stack.gatewayUrl}/api/v1/runs/${runId}/stream`, {
        headers: { authorization: `Bearer ${stack.bootstrap.key}`, "last-event-id": first.id! },
      }),
    );
    expect(rest[0]!.id).toBe("2");
    const final = JSON.parse(rest.at(-1)!.data);
    expect(final).toMatchObject({ id: runId, status: "completed" });
    expect([JSON.parse(first.data) as string, ...messagesOf(rest)].join("")).toBe(final.result);
  });

  it("answers bad input with JSON errors, and no stream", async () => {
    const cases: [string, unknown, number][] = [
      ["/runs", { stream: true }, 400],
      ["/runs", { interaction: interaction.id, stream: true, data: "not an object" }, 400],
      ["/runs", { interaction: "0000000000000000000000ff", stream: true }, 404],
      ["/interactions/0000000000000000000000ff/execute", { stream: true }, 404],
      [
        "/runs",
        { interaction: interaction.id, stream: true, config: { environment: "nope" } },
        404,
      ],
    ];
    for (const [path, body, status] of cases) {
      const response = await post(path, body);
      expect(response.headers.get("content-type"), `${path} ${JSON.stringify(body)}`).toMatch(
        /^application\/json/,
      );
      expect(response.headers.get("pies-run-id")).toBeNull();
      const error = await json<{ status: number; code: string }>(response, status);
      expect(error).toMatchObject({ status, code: expect.any(String) });
    }
    expect(await openStreams()).toBe(0);
  });

  it("counts its stream in the key's streams (429 past them), and leaves nothing behind", async () => {
    const consumers = () => consumerNames(jsm, nats.env.PIES_NATS_STREAM!);
    const before = { consumers: await consumers(), subscriptions: await subscriptions() };
    const leaving = new AbortController();
    // Two streams held open by runs that wait before their first chunk.
    const held = await Promise.all(
      Array.from({ length: STREAMS_PER_KEY }, () =>
        streamRun("held", "test-latency-8000", leaving.signal),
      ),
    );
    for (const response of held) expect(response.status, await peek(response)).toBe(200);
    expect(await openStreams()).toBe(STREAMS_PER_KEY);
    const refused = await streamRun("refused");
    expect(refused.headers.get("retry-after")).not.toBeNull();
    expect((await json<{ code: string }>(refused, 429)).code).toBe("rate_limited");
    // Both clients leave before any chunk: their streams and subscriptions go, their runs go on.
    const ids = held.map((r) => r.headers.get("pies-run-id")!);
    leaving.abort();
    await expect.poll(openStreams, { timeout: 20_000 }).toBe(0);
    for (const id of ids) {
      await expect
        .poll(async () => (await json(await api(`/runs/${id}`))).status, { timeout: 30_000 })
        .toBe("completed");
    }
    await expect
      .poll(async () => (await consumers()).length, { timeout: 20_000 })
      .toBe(before.consumers.length);
    await expect.poll(subscriptions, { timeout: 20_000 }).toBe(before.subscriptions);
    // A slot again once they went.
    const next = await streamRun("next");
    expect(next.status).toBe(200);
    expect((await readSse(next)).at(-1)!.event).toBe("close");
  });
});
