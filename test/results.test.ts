import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { peerTransport, serviceClient } from "@pies/common/server";
import { jsonOf } from "@pies/common";
import { ExecutorService } from "@pies/proto/executor";
import { RunStatus } from "@pies/proto/runs";
import {
  createTestDatabase,
  createTestStream,
  expectJson,
  freePort,
  gatewayApi,
  readSse,
  startFakeOpenAI,
  startProcess,
  startStack,
  type ApiClient,
  type FakeOpenAI,
  type ManagedProcess,
  type Stack,
  type TestDatabase,
  type TestStream,
  internalToken,
} from "@pies/testkit";

// Issue 10 against the four processes, real PostgreSQL and NATS, and the OpenAI-compatible fake
// on loopback told to fail in each way: retries, failures, repairs, usage, cancellation, the
// result cache across two executor processes, test data. Blocking and streamed.
let db: TestDatabase;
let stream: TestStream;
let stack: Stack;
let upstream: FakeOpenAI;
let api: ApiClient;
let secondExecutor: ManagedProcess;
let secondUrl: string;
let environment: string;

const env = {
  PIES_ALLOWED_ENDPOINTS: "127.0.0.1",
  PIES_PROVIDER_MAX_RETRIES: "1",
  PIES_PROVIDER_TIMEOUT_MS: "1000",
};

beforeAll(async () => {
  upstream = await startFakeOpenAI({ apiKey: "sk-upstream", chunkDelayMs: 5 });
  db = await createTestDatabase("results");
  stream = createTestStream();
  stack = await startStack({ databaseUrl: db.url, natsEnv: stream.env, env });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
  // A second executor replica on the same NATS and peers.
  const port = await freePort();
  secondUrl = `http://127.0.0.1:${port}`;
  secondExecutor = startProcess("executor2", "services/executor/dist/main.js", {
    HOST: "127.0.0.1",
    ...env,
    ...stream.env,
    PORT: String(port),
    CATALOG_URL: stack.catalogUrl,
    RUNS_URL: stack.runsUrl,
  });
  environment = (
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
}, 60_000);

afterAll(async () => {
  try {
    await secondExecutor?.stop();
    if (stack) await stack.stop();
  } finally {
    await stream?.remove();
    await db?.drop();
    await upstream?.close();
  }
});

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => `${stack.output()}\n${secondExecutor?.output() ?? ""}`);

const resultSchema = {
  type: "object",
  properties: { summary: { type: "string" }, words: { type: "integer", minimum: 1 } },
  required: ["summary", "words"],
};

async function createInteraction(extra: Record<string, unknown> = {}) {
  const prompt = await json(
    await api("/prompts", {
      body: {
        name: "summarise",
        role: "user",
        content_type: "jst",
        content: "return `Summarise ${text}`",
        inputSchema: {
          type: "object",
          properties: { text: { type: "string", minLength: 3 } },
          required: ["text"],
        },
      },
    }),
    201,
  );
  return json<{ id: string }>(
    await api("/interactions", {
      body: {
        name: "Summary",
        environment,
        prompts: [{ type: "template", template: prompt.id }],
        result_schema: resultSchema,
        ...extra,
      },
    }),
    201,
  );
}

/** A streamed execution: the events of its stream, through to close. */
async function streamed(interaction: string, model: string, text: string) {
  const created = await json(
    await api("/runs", {
      body: { interaction, stream: true, data: { text }, config: { model } },
    }),
  );
  const response = await fetch(`${stack.gatewayUrl}/api/v1/runs/${created.id}/stream`, {
    headers: { authorization: `Bearer ${stack.bootstrap.key}` },
  });
  const events = await readSse(response);
  const close = events.at(-1);
  expect(close?.event).toBe("close");
  return { events, final: JSON.parse(close!.data) };
}

const chatRequests = () => upstream.requests.filter((r) => r.path.endsWith("/chat/completions"));

describe("retries and failures against the fake upstream", () => {
  it("retries a 429 with Retry-After before the first chunk: blocking and streamed complete", async () => {
    const { id } = await createInteraction();
    upstream.reset();
    const blocking = await json(
      await api(`/interactions/${id}/execute`, {
        body: { data: { text: "rate limited" }, config: { model: "rate-limit-once" } },
      }),
    );
    expect(blocking.status).toBe("completed");
    expect(chatRequests()).toHaveLength(2);
    upstream.reset();
    const { final } = await streamed(id, "rate-limit-once", "rate limited streamed");
    expect(final.status).toBe("completed");
    expect(chatRequests()).toHaveLength(2);
  });

  it("waits as long as Retry-After says before trying again", async () => {
    const { id } = await createInteraction();
    upstream.reset();
    const started = performance.now();
    const blocking = await json(
      await api(`/interactions/${id}/execute`, {
        body: { data: { text: "wait a second" }, config: { model: "rate-limit-once-1s" } },
      }),
    );
    expect(blocking.status).toBe("completed");
    expect(chatRequests()).toHaveLength(2);
    expect(performance.now() - started).toBeGreaterThanOrEqual(950);
  });

  it("fails on 500 after its retries: blocking 502 with the recorded run, streamed close failed", async () => {
    const { id } = await createInteraction();
    upstream.reset();
    const failed = await json(
      await api(`/interactions/${id}/execute`, {
        body: { data: { text: "five hundred" }, config: { model: "fail-500" } },
      }),
      502,
    );
    expect(failed.code).toBe("provider_error");
    expect(failed.message).toMatch(/^provider answered 500/);
    // One call and PIES_PROVIDER_MAX_RETRIES (1) retry.
    expect(chatRequests()).toHaveLength(2);
    expect((await json(await api(`/runs/${failed.details.run_id}`))).status).toBe("failed");
    const { events, final } = await streamed(id, "fail-500", "five hundred streamed");
    expect(events.map((e) => e.event)).toEqual(["close"]);
    expect(final).toMatchObject({ status: "failed", error: { code: "provider_error" } });
  });

  it("times out a slow upstream: blocking 504, streamed close failed with timeout", async () => {
    const { id } = await createInteraction();
    const slow = await json(
      await api(`/interactions/${id}/execute`, {
        body: { data: { text: "slowly" }, config: { model: "slow-3000" } },
      }),
      504,
    );
    expect(slow.code).toBe("timeout");
    const { final } = await streamed(id, "slow-3000", "slowly streamed");
    expect(final).toMatchObject({ status: "failed", error: { code: "timeout" } });
  });

  it("fails a stream dropped after its first chunk with stream_error (no retry); blocking drop is retried then fails", async () => {
    const { id } = await createInteraction();
    upstream.reset();
    const { events, final } = await streamed(id, "drop-mid-stream", "dropped");
    expect(events.filter((e) => e.event === "message").length).toBeGreaterThan(0);
    expect(final).toMatchObject({ status: "failed", error: { code: "stream_error" } });
    expect(final.error.message).toMatch(/broke off after \d+ characters/);
    expect(chatRequests()).toHaveLength(1);
    upstream.reset();
    const blocking = await json(
      await api(`/interactions/${id}/execute`, {
        body: { data: { text: "dropped blocking" }, config: { model: "drop-mid-stream" } },
      }),
      502,
    );
    expect(blocking.message).toBe("the provider could not be reached");
    expect(chatRequests()).toHaveLength(2);
  });
});

describe("repairs and usage against the fake upstream", () => {
  it("repairs JSON that fails the schema once, blocking and streamed (a repair event), usage summed", async () => {
    const { id } = await createInteraction();
    upstream.reset();
    const run = await json(
      await api(`/interactions/${id}/execute`, {
        body: { data: { text: "invalid once" }, config: { model: "invalid-json-once" } },
      }),
    );
    expect(run.status).toBe("completed");
    expect(run.attempts.map((a: { error?: { code: string } }) => a.error?.code)).toEqual([
      "validation_error",
      undefined,
    ]);
    // The fake's usage (its own count), both calls.
    const sent = chatRequests().map((r) => r.body as { messages: { content: string }[] });
    expect(sent).toHaveLength(2);
    expect(sent[1]!.messages.at(-1)!.content).toMatch(/required property/);
    const prompt = sent
      .map((b) => Math.ceil(b.messages.reduce((n, m) => n + m.content.length, 0) / 4))
      .reduce((a, b) => a + b);
    expect(run.token_use.prompt).toBe(prompt);
    expect(run.token_use.total).toBe(run.token_use.prompt + run.token_use.result);

    upstream.reset();
    const { events, final } = await streamed(id, "not-json-once", "not json once");
    const kinds = events.map((e) => e.event);
    expect(kinds.filter((k) => k === "repair")).toHaveLength(1);
    expect(JSON.parse(events[kinds.indexOf("repair")]!.data).errors[0]).toMatch(/not JSON/);
    expect(final.status).toBe("completed");
    expect(final.attempts).toHaveLength(2);
    // Streamed usage comes from the provider (stream_options.include_usage).
    const streamedSent = chatRequests();
    expect(streamedSent.every((r) => (r.body as any).stream_options?.include_usage)).toBe(true);
    expect(final.token_use.total).toBe(
      final.attempts[0].token_use.total + final.attempts[1].token_use.total,
    );
  });
});

describe("cancellation", () => {
  it("cancels the provider call when a blocking client disconnects, and records the run cancelled", async () => {
    const { id } = await createInteraction();
    const leaving = new AbortController();
    const started = Date.now();
    // The api client has no signal: a raw fetch that goes away.
    const gone = fetch(`${stack.gatewayUrl}/api/v1/interactions/${id}/execute`, {
      method: "POST",
      signal: leaving.signal,
      headers: {
        authorization: `Bearer ${stack.bootstrap.key}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ data: { text: "caller left" }, config: { model: "slow-3000" } }),
    }).catch((err: unknown) => err);
    setTimeout(() => leaving.abort(), 300);
    await gone;
    let cancelled: any;
    for (let i = 0; i < 40 && !cancelled; i++) {
      const runs = await json<any[]>(await api(`/runs?model=slow-3000&status=failed`));
      cancelled = runs.find((r) => r.parameters.text === "caller left");
      if (!cancelled) await new Promise((r) => setTimeout(r, 100));
    }
    expect(cancelled?.error.code).toBe("cancelled");
    // Cancelled long before the upstream's 3 s, and before its own 1 s timeout.
    expect(cancelled.execution_time).toBeLessThan(900);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it("does not cancel a streamed run whose reader leaves", async () => {
    const { id } = await createInteraction();
    const slowUpstream = await startFakeOpenAI({ apiKey: "k", chunkDelayMs: 50 });
    try {
      const env2 = await json(
        await api("/environments", {
          body: {
            name: "slow chunks",
            provider: "openai_compatible",
            endpoint_url: slowUpstream.url,
            apiKey: "k",
            default_model: "gpt-4o-mini",
          },
        }),
        201,
      );
      const created = await json(
        await api("/runs", {
          body: {
            interaction: id,
            stream: true,
            data: { text: "reader leaves" },
            config: { environment: env2.id },
          },
        }),
      );
      const leaving = new AbortController();
      const response = await fetch(`${stack.gatewayUrl}/api/v1/runs/${created.id}/stream`, {
        headers: { authorization: `Bearer ${stack.bootstrap.key}` },
        signal: leaving.signal,
      });
      const reader = response.body!.getReader();
      await reader.read();
      leaving.abort();
      let run: any;
      for (let i = 0; i < 50; i++) {
        run = await json(await api(`/runs/${created.id}`));
        if (run.status === "completed" || run.status === "failed") break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(run.status).toBe("completed");
    } finally {
      await slowUpstream.close();
    }
  });
});

describe("the result cache across executor processes", () => {
  it("answers a hit on another executor, recorded with its source run, until the ttl", async () => {
    const { id } = await createInteraction({ cache_policy: { type: "cache", ttl: 2 } });
    const first = await json(
      await api(`/interactions/${id}/execute`, { body: { data: { text: "cache me" } } }),
    );
    expect(first.cached).toBeUndefined();
    // The put is not awaited by the execution: give it a moment to reach JetStream.
    await new Promise((r) => setTimeout(r, 200));
    const second = serviceClient(
      ExecutorService,
      peerTransport(secondUrl, "executor2", internalToken),
    );
    const request = {
      caller: { accountId: stack.bootstrap.account, projectId: stack.bootstrap.project },
      interaction: { case: "interactionId" as const, value: id },
      data: { text: "cache me" },
    };
    let answer: Awaited<ReturnType<typeof second.execute>> | undefined;
    for (let i = 0; i < 50 && !answer; i++) {
      try {
        answer = await second.execute(request);
      } catch (err) {
        if (!(err instanceof ConnectError) || err.code !== Code.Unavailable) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    expect(answer!.run!.status).toBe(RunStatus.COMPLETED);
    expect(answer!.run!.cached).toBe(true);
    expect(answer!.run!.cachedFrom).toBe(first.id);
    expect(jsonOf(answer!.run!.resultJson)).toEqual(first.result);
    const stored = await json(await api(`/runs/${answer!.run!.id}`));
    expect(stored).toMatchObject({ cached: true, cached_from: first.id });
    // A streamed hit through the gateway.
    const { events, final } = await streamedDefault(id, "cache me");
    expect(final).toMatchObject({ cached: true, cached_from: first.id });
    expect(
      JSON.parse(
        events
          .filter((e) => e.event === "message")
          .map((e) => JSON.parse(e.data))
          .join(""),
      ),
    ).toEqual(first.result);
    // Past the ttl (2 s) the entry is not used.
    await new Promise((r) => setTimeout(r, 2100));
    const late = await json(
      await api(`/interactions/${id}/execute`, { body: { data: { text: "cache me" } } }),
    );
    expect(late.cached).toBeUndefined();
  });
});

async function streamedDefault(interaction: string, text: string) {
  const created = await json(
    await api("/runs", { body: { interaction, stream: true, data: { text } } }),
  );
  const response = await fetch(`${stack.gatewayUrl}/api/v1/runs/${created.id}/stream`, {
    headers: { authorization: `Bearer ${stack.bootstrap.key}` },
  });
  const events = await readSse(response);
  return { events, final: JSON.parse(events.at(-1)!.data) };
}

describe("generate-test-data against the fake upstream", () => {
  it("answers count objects valid against the input schema, with the schema enforced", async () => {
    const { id } = await createInteraction();
    upstream.reset();
    const items = await json<{ text: string }[]>(
      await api(`/interactions/${id}/generate-test-data`, {
        body: { count: 4, message: "news headlines", config: { environment } },
      }),
    );
    expect(items).toHaveLength(4);
    for (const item of items) expect(item.text.length).toBeGreaterThanOrEqual(3);
    const sent = chatRequests()[0]!.body as any;
    expect(sent.response_format.json_schema.schema.properties.items.minItems).toBe(4);
    expect(JSON.stringify(sent.messages)).toContain("news headlines");
    const missing = await json(
      await api(`/interactions/${id}/generate-test-data`, { body: { count: 1 } }),
      400,
    );
    expect(missing.message).toMatch(/^config: /);
  });
});
