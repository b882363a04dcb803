import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  expectJson,
  freePort,
  gatewayApi,
  readSse,
  startFakeOpenAI,
  startTestStack,
  type ApiClient,
  type FakeOpenAI,
  type Stack,
} from "@pies/testkit";

// The four processes as Kubernetes runs them, real PostgreSQL and NATS, over HTTP as a client would.
// Each test makes what it needs (environments, interactions, runs), so they pass in any order
// (`vitest --sequence.shuffle`); the clean shutdown is checked once all are done, in afterAll.
let stack: Stack;
let upstream: FakeOpenAI;
let api: ApiClient;
/** The executor's own metrics port (PIES_METRICS_PORT). */
let executorMetrics: number;

beforeAll(async () => {
  upstream = await startFakeOpenAI({ apiKey: "sk-upstream-secret" });
  executorMetrics = await freePort();
  stack = await startTestStack("e2e", {
    // The fake upstream listens on loopback, which the deployed default refuses.
    env: { PIES_ALLOWED_ENDPOINTS: "127.0.0.1" },
    // The executor's alone: the runs service has a metrics port setting of the same name.
    processEnv: { executor: { PIES_METRICS_PORT: String(executorMetrics) } },
  });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
});

afterAll(async () => {
  try {
    // Every process shuts down cleanly on SIGTERM, after whatever the tests did.
    if (stack) expect(await stack.stop()).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
  } finally {
    await upstream?.close();
  }
});

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => stack.output());

async function createInteraction(environment: string, extra: Record<string, unknown> = {}) {
  const prompt = await json(
    await api("/prompts", {
      body: {
        name: "greet",
        role: "user",
        content_type: "jst",
        content: "return `Write a greeting for ${name}`",
        inputSchema: {
          type: "object",
          properties: { name: { type: "string" } },
          required: ["name"],
        },
      },
    }),
    201,
  );
  return json(
    await api("/interactions", {
      body: {
        name: "Greeting",
        environment,
        prompts: [{ type: "template", template: prompt.id }],
        ...extra,
      },
    }),
    201,
  );
}

const resultSchema = {
  type: "object",
  properties: { greeting: { type: "string" }, words: { type: "integer", minimum: 1 } },
  required: ["greeting", "words"],
};

describe("four processes over HTTP", () => {
  it("creates, executes blocking and streamed with the test provider, and reads runs back", async () => {
    const environment = await json(
      await api("/environments", {
        body: { name: "local", provider: "test", default_model: "test" },
      }),
      201,
    );
    const interaction = await createInteraction(environment.id, { result_schema: resultSchema });
    const fetched = await json(await api(`/interactions/${interaction.id}`));
    expect(fetched.prompts[0].template).toMatchObject({ name: "greet", content_type: "jst" });
    expect(fetched.resultSchema).toEqual(resultSchema);

    const blocking = await json(
      await api(`/interactions/${interaction.id}/execute`, {
        body: { data: { name: "Ada" }, tags: "a,b" },
      }),
    );
    expect(blocking).toMatchObject({
      status: "completed",
      modelId: "test",
      parameters: { name: "Ada" },
      tags: ["a", "b"],
      prompt: [{ role: "user", content: "Write a greeting for Ada" }],
      source: { type: "api", principal_type: "apikey" },
    });
    expect(typeof blocking.result.greeting).toBe("string");
    expect(blocking.result.words).toBeGreaterThanOrEqual(1);
    expect(blocking.token_use.total).toBe(blocking.token_use.prompt + blocking.token_use.result);

    const created = await json(
      await api("/runs", {
        body: { interaction: interaction.id, stream: true, data: { name: "Grace" } },
      }),
    );
    expect(created.status).toBe("created");
    const sse = await api(`/runs/${created.id}/stream`);
    expect(sse.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const events = await readSse(sse);
    const messages = events.filter((e) => e.event === "message");
    const close = events.at(-1)!;
    // The test provider answers at once: its chunks may go out joined (those that came while the
    // start was being recorded, or while a publish was in flight), in one message or more.
    expect(messages.length).toBeGreaterThan(0);
    expect(events.map((e) => Number(e.id))).toEqual(events.map((_, n) => n + 1));
    expect(close.event).toBe("close");
    const final = JSON.parse(close.data);
    expect(final.status).toBe("completed");
    // The chunks, joined, are the answer the run recorded.
    expect(JSON.parse(messages.map((m) => JSON.parse(m.data) as string).join(""))).toEqual(
      final.result,
    );

    const readBack = await json(await api(`/runs/${created.id}`));
    expect(readBack).toMatchObject({ id: created.id, status: "completed", result: final.result });
    // Lists read the store, which the record writer fills a batch behind the log
    // (docs/decisions/0032-read-your-writes.md): the runs are listed once their batch is written.
    await expect
      .poll(
        async () =>
          (await json<any[]>(await api(`/runs?interaction=${interaction.id}`)))
            .map((r) => r.id)
            .sort(),
        { timeout: 10_000, interval: 50 },
      )
      .toEqual([blocking.id, created.id].sort());

    // A second reader after the end gets the same events replayed, then close.
    const replay = await readSse(
      await fetch(
        `${stack.gatewayUrl}/api/v1/runs/${created.id}/stream?access_token=${stack.bootstrap.key}`,
      ),
    );
    expect(replay.map((e) => e.event)).toEqual(events.map((e) => e.event));
  });

  it("executes through the openai_compatible provider against a loopback OpenAI server", async () => {
    const environment = await json(
      await api("/environments", {
        body: {
          name: "upstream",
          provider: "openai_compatible",
          endpoint_url: upstream.url,
          apiKey: "sk-upstream-secret",
          default_model: "gpt-4o-mini",
        },
      }),
      201,
    );
    expect(JSON.stringify(environment)).not.toContain("sk-upstream-secret");
    // Allowed: 127.0.0.1. Still refused: any other non-public address, by name or by number.
    for (const endpoint_url of [
      "http://localhost:9/v1",
      "http://169.254.169.254/",
      "http://10.0.0.1/",
    ]) {
      const refused = await json(
        await api("/environments", { body: { provider: "openai_compatible", endpoint_url } }),
        400,
      );
      expect(refused.message).toMatch(/^endpoint_url: .*endpoint policy refuses/);
    }
    const interaction = await createInteraction(environment.id, { result_schema: resultSchema });

    const blocking = await json(
      await api(`/interactions/${interaction.id}/execute`, { body: { data: { name: "Linus" } } }),
    );
    expect(blocking.status).toBe("completed");
    expect(blocking.result).toMatchObject({
      greeting: expect.any(String),
      words: expect.any(Number),
    });
    expect(blocking.token_use.prompt).toBeGreaterThan(0);
    const sent = upstream.requests.at(-1)!.body as any;
    expect(sent.model).toBe("gpt-4o-mini");
    expect(sent.response_format.type).toBe("json_schema");
    expect(sent.messages).toEqual([{ role: "user", content: "Write a greeting for Linus" }]);

    const created = await json(
      await api("/runs", {
        body: { interaction: interaction.id, stream: true, data: { name: "Margaret" } },
      }),
    );
    const events = await readSse(await api(`/runs/${created.id}/stream`));
    const messages = events
      .filter((e) => e.event === "message")
      .map((e) => JSON.parse(e.data) as string);
    expect(messages.length).toBeGreaterThan(0);
    const final = JSON.parse(events.at(-1)!.data);
    expect(events.at(-1)!.event).toBe("close");
    expect(final.status).toBe("completed");
    expect(JSON.parse(messages.join(""))).toEqual(final.result);
    expect(final.token_use.total).toBeGreaterThan(0);
    const streamed = upstream.requests.at(-1)!.body as any;
    expect(streamed.stream).toBe(true);
    expect(streamed.stream_options).toEqual({ include_usage: true });

    // A provider failure in blocking mode: 502, the failed run recorded and named.
    const failing = await createInteraction(environment.id, { model: "fail-500" });
    const failed = await api(`/interactions/${failing.id}/execute`, {
      body: { data: { name: "x" } },
    });
    const error = await json(failed, 502);
    expect(error).toMatchObject({ status: 502, code: "provider_error" });
    const run = await json(await api(`/runs/${error.details.run_id}`));
    expect(run).toMatchObject({ status: "failed", error: { code: "provider_error" } });
  });

  it("executes through the native anthropic, google and azure_openai providers", async () => {
    for (const [provider, model, path] of [
      ["anthropic", "claude-x", "/v1/messages"],
      ["google", "gemini-x", "/v1beta/models/gemini-x:streamGenerateContent"],
      ["azure_openai", "my-deployment", "/openai/deployments/my-deployment/chat/completions"],
    ] as const) {
      const environment = await json(
        await api("/environments", {
          body: {
            provider,
            endpoint_url: upstream.origin,
            apiKey: "sk-upstream-secret",
            default_model: model,
          },
        }),
        201,
      );
      const interaction = await createInteraction(environment.id, { result_schema: resultSchema });
      const blocking = await json(
        await api(`/interactions/${interaction.id}/execute`, { body: { data: { name: "Ada" } } }),
      );
      expect(blocking, provider).toMatchObject({ status: "completed", modelId: model });
      expect(blocking.result, provider).toMatchObject({
        greeting: expect.any(String),
        words: expect.any(Number),
      });
      expect(blocking.token_use.prompt, provider).toBeGreaterThan(0);

      const created = await json(
        await api("/runs", {
          body: { interaction: interaction.id, stream: true, data: { name: "Grace" } },
        }),
      );
      const events = await readSse(await api(`/runs/${created.id}/stream`));
      const final = JSON.parse(events.at(-1)!.data);
      expect(final.status, provider).toBe("completed");
      const messages = events.filter((e) => e.event === "message");
      expect(JSON.parse(messages.map((m) => JSON.parse(m.data) as string).join(""))).toEqual(
        final.result,
      );
      expect(final.token_use.result, provider).toBeGreaterThan(0);
      // The last request the upstream saw is the streamed one, on the provider's own path.
      expect(upstream.requests.at(-1)!.path, provider).toBe(path);
    }
  });

  it("routes a virtual environment's executions, failing over, blocking and streamed", async () => {
    const member = await json(
      await api("/environments", {
        body: {
          provider: "test",
          default_model: "test",
          enabled_models: ["test", "test-refused", "test-500"],
        },
      }),
      201,
    );
    const entries = ["test-refused", "test-500", "test"].map((m) => ({
      model: `${member.id}::${m}`,
    }));
    const virtual = await json(
      await api("/environments", {
        body: { name: "routed", provider: "virtual_lb", config: { entries, failover: true } },
      }),
      201,
    );
    const interaction = await createInteraction(virtual.id, { result_schema: resultSchema });
    const check = (run: any) => {
      expect(run.status).toBe("completed");
      expect(run.modelId).toBe("test");
      expect(run.environment.id).toBe(virtual.id);
      // Every call, in order: those failed over from (each failed as another provider could
      // answer), then the one that answered, last.
      const last = run.attempts.at(-1);
      expect(last).toMatchObject({ environment: member.id, model: "test" });
      expect(last.error).toBeUndefined();
      expect(typeof last.duration_ms).toBe("number");
      for (const failed of run.attempts.slice(0, -1)) {
        expect(["test-refused", "test-500"]).toContain(failed.model);
        expect(failed.error.code).toBe("provider_error");
      }
      expect(run.attempts.map((a: any) => a.number)).toEqual(
        run.attempts.map((_: any, n: number) => n + 1),
      );
    };
    const blocking = await json(
      await api(`/interactions/${interaction.id}/execute`, { body: { data: { name: "Ada" } } }),
    );
    check(blocking);
    check(await json(await api(`/runs/${blocking.id}`)));

    const created = await json(
      await api("/runs", {
        body: { interaction: interaction.id, stream: true, data: { name: "Bo" } },
      }),
    );
    const events = await readSse(await api(`/runs/${created.id}/stream`));
    expect(events.at(-1)!.event).toBe("close");
    const streamed = JSON.parse(events.at(-1)!.data);
    check(streamed);

    // The executor's metrics: each entry's circuit, and the calls that failed over (each failed
    // attempt but a run's last).
    const metrics = await (await fetch(`http://127.0.0.1:${executorMetrics}/metrics`)).text();
    expect(metrics).toContain(
      `pies_route_breaker_state{virtual_environment="${virtual.id}",environment="${member.id}",model="test",state="closed"} 1`,
    );
    const failedOver = [blocking, streamed].reduce(
      (n, run) => n + run.attempts.filter((a: any) => a.error).length,
      0,
    );
    const counted = new RegExp(
      `pies_route_failovers_total\\{virtual_environment="${virtual.id}"\\} (\\d+)`,
    ).exec(metrics);
    expect(Number(counted?.[1] ?? 0)).toBe(failedOver);

    // Without failover, the first entry's failure is the run's.
    const single = await json(
      await api("/environments", {
        body: {
          provider: "virtual_lb",
          config: { entries: [{ model: `${member.id}::test-500` }] },
        },
      }),
      201,
    );
    const failing = await createInteraction(single.id);
    const error = await json(
      await api(`/interactions/${failing.id}/execute`, { body: { data: { name: "x" } } }),
      502,
    );
    const failed = await json(await api(`/runs/${error.details.run_id}`));
    expect(failed).toMatchObject({
      status: "failed",
      modelId: "test-500",
      error: { code: "provider_error" },
      attempts: [{ number: 1, environment: member.id, model: "test-500" }],
    });
    // An entry naming an environment of no one's is refused when it is written.
    expect(
      (
        await json(
          await api("/environments", {
            body: { provider: "virtual_lb", config: { entries: [{ model: "nope::test" }] } },
          }),
          400,
        )
      ).message,
    ).toMatch(/environment nope is not one of this project's/);
  });

  it("records what each run cost, and lists, searches and facets runs by it", async () => {
    const environment = await json(
      await api("/environments", {
        body: {
          provider: "openai_compatible",
          endpoint_url: upstream.url,
          apiKey: "sk-upstream-secret",
          default_model: "gpt-4o-mini",
          config: { prices: { "house-model": { input: 1, output: 2 } } },
        },
      }),
      201,
    );
    const interaction = await createInteraction(environment.id);
    const execute = (config?: object) =>
      api(`/interactions/${interaction.id}/execute`, {
        body: { data: { name: "Ada" }, ...(config ? { config } : {}) },
      }).then((r) => json(r));
    const usd = (tokens: number, perMillion: number) =>
      Math.round(((tokens * perMillion) / 1e6) * 1e10) / 1e10;
    const expected = (run: any, input: number, output: number, estimated = false) => {
      const i = usd(run.token_use.prompt, input);
      const o = usd(run.token_use.result, output);
      return {
        input: i,
        output: o,
        total: Math.round((i + o) * 1e10) / 1e10,
        currency: "USD",
        estimated,
      };
    };
    // The list price of gpt-4o-mini ($0.15 / $0.60 per million), the provider's usage.
    const listed = await execute();
    expect(listed.cost).toEqual(expected(listed, 0.15, 0.6));
    // The environment's own price.
    const house = await execute({ model: "house-model" });
    expect(house.cost).toEqual(expected(house, 1, 2));
    // No known price: no cost.
    const unknown = await execute({ model: "some-local-model" });
    expect(unknown.status).toBe("completed");
    expect(unknown.cost).toBeUndefined();
    // Tokens the tokenizer counted (the test provider reports none): estimated.
    const local = await json(
      await api("/environments", {
        body: {
          provider: "test",
          default_model: "test",
          config: { prices: { test: { input: 3, output: 4 } } },
        },
      }),
      201,
    );
    const counted = await json(
      await api(`/interactions/${(await createInteraction(local.id)).id}/execute`, {
        body: { data: { name: "Ada" } },
      }),
    );
    expect(counted.cost).toEqual(expected(counted, 3, 4, true));
    expect(
      (
        await json(
          await api("/environments", {
            body: { provider: "test", config: { prices: { test: { input: "cheap" } } } },
          }),
          400,
        )
      ).message,
    ).toMatch(/^config\.prices\.test\.input must be a number/);

    // Read back, listed by cost (the store, a batch behind), searched and faceted by it.
    expect((await json(await api(`/runs/${house.id}`))).cost).toEqual(house.cost);
    const ids = (runs: any[]) => runs.map((r) => r.id).sort();
    await expect
      .poll(
        async () =>
          ids(await json(await api(`/runs?interaction=${interaction.id}&min_cost=0.0000001`))),
        { timeout: 10_000, interval: 50 },
      )
      .toEqual(ids([listed, house]));
    const cheap = await json(
      await api(`/runs?interaction=${interaction.id}&max_cost=${listed.cost.total}`),
    );
    expect(ids(cheap)).toEqual([listed.id]);
    const found = await json(
      await api("/runs/search", {
        body: {
          filters: { interaction: [interaction.id], cost: { gt: listed.cost.total } },
          facets: {
            spend: { type: "number", path: "cost", boundaries: [0, house.cost.total, 1] },
          },
        },
      }),
    );
    expect(ids(found.results)).toEqual([house.id]);
    expect(found.meta.facet.spend.buckets).toEqual([
      { _id: 0, count: 0 },
      { _id: house.cost.total, count: 1 },
    ]);
    // And counted by project and model in the gateway's metrics.
    const metrics = await (await fetch(`${stack.gatewayUrl}/metrics`)).text();
    expect(metrics).toMatch(
      new RegExp(
        `pies_cost_usd_total\\{project="${listed.project.id}",model="gpt-4o-mini"\\} [0-9.e-]+`,
      ),
    );
  });

  it("answers errors as JSON with the right status", async () => {
    expect(await json(await api("/runs", { token: "sk-not-a-key" }), 401)).toMatchObject({
      code: "unauthorized",
    });
    expect(await json(await api("/runs/000000000000000000000000"), 404)).toMatchObject({
      code: "not_found",
    });
    expect(await json(await api("/runs", { body: { stream: "yes" } }), 400)).toMatchObject({
      code: "invalid_request",
    });
    // A blocking run of its own, which has no stream to open.
    const interaction = await createInteraction(stack.bootstrap.environment);
    const blocking = await json(
      await api(`/interactions/${interaction.id}/execute`, { body: { data: { name: "Ada" } } }),
    );
    expect(blocking).toMatchObject({ status: "completed", stream: false });
    expect(await json(await api(`/runs/${blocking.id}/stream`), 409)).toMatchObject({
      code: "conflict",
    });
  });
});
