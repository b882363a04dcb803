import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createTestDatabase,
  createTestStream,
  expectJson,
  gatewayApi,
  readSse,
  startFakeOpenAI,
  startStack,
  type ApiClient,
  type ChatCompletionRequestBody,
  type FakeOpenAI,
  type Stack,
  type TestDatabase,
  type TestStream,
} from "@pies/testkit";

// Issue 28 against the four processes, real PostgreSQL and NATS, and a scripted upstream: an
// experiment replays exactly the runs its search selects against a draft, compares them (diffs,
// rates, a judge's scores), can be cancelled, and survives the executor's and the runs service's
// deaths mid-way without a pair replayed twice or lost.
let db: TestDatabase;
let stream: TestStream;
let stack: Stack;
let upstream: FakeOpenAI;
let api: ApiClient;
let environment: string;
let promptId: string;
let summary: { id: string };
let judge: { id: string };

/** The first user message: what the template rendered (repairs add messages after it). */
const firstUser = (body: ChatCompletionRequestBody) =>
  String(body.messages.find((m) => m.role === "user")?.content ?? "");

/**
 * The upstream's script. `Summarise <text>` answers the text whole; `Shorten <text>` (the draft)
 * its first four characters, and for a text with "broken" a summary that fails the schema (so
 * every repair fails too); `Judge {original, candidate}` scores 1 for the same summary, else 0.5.
 */
function respond(body: ChatCompletionRequestBody): string {
  const text = firstUser(body);
  if (text.startsWith("Judge ")) {
    const { original, candidate } = JSON.parse(text.slice("Judge ".length));
    return JSON.stringify({ score: original.summary === candidate.summary ? 1 : 0.5 });
  }
  const [, verb, input] = /^(Summarise|Shorten) (.*)$/s.exec(text) ?? [];
  if (verb === "Shorten" && input!.includes("broken")) return JSON.stringify({ summary: 7 });
  const words = input!.split(" ").length;
  return JSON.stringify({ summary: verb === "Shorten" ? input!.slice(0, 4) : input, words });
}

beforeAll(async () => {
  upstream = await startFakeOpenAI({ apiKey: "sk-upstream", respond });
  db = await createTestDatabase("experiments");
  stream = createTestStream();
  stack = await startStack({
    databaseUrl: db.url,
    natsEnv: stream.env,
    env: {
      PIES_ALLOWED_ENDPOINTS: "127.0.0.1",
      // A run whose executor died is failed within seconds, and an experiment whose runs
      // process died is taken over as soon, so the restarts below end in a test's time.
      PIES_RUN_LEASE_SECONDS: "3",
      PIES_RUN_HEARTBEAT_SECONDS: "1",
      PIES_SWEEP_INTERVAL_SECONDS: "1",
      PIES_EXPERIMENT_LEASE_SECONDS: "3",
    },
  });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
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
  const prompt = await json(
    await api("/prompts", {
      body: {
        name: "summarise",
        role: "user",
        content_type: "jst",
        content: "return `Summarise ${text}`",
        inputSchema: { type: "object", properties: { text: { type: "string" } } },
      },
    }),
    201,
  );
  promptId = prompt.id;
  summary = await json(
    await api("/interactions", {
      body: {
        name: "Summary",
        environment,
        prompts: [{ type: "template", template: prompt.id }],
        result_schema: {
          type: "object",
          properties: { summary: { type: "string" }, words: { type: "integer" } },
          required: ["summary", "words"],
        },
      },
    }),
    201,
  );
  await json(await api(`/interactions/${summary.id}/publish`, { body: {} }), 201);
  const judgePrompt = await json(
    await api("/prompts", {
      body: {
        name: "judge",
        role: "user",
        content_type: "jst",
        content: "return 'Judge ' + JSON.stringify({ original, candidate })",
      },
    }),
    201,
  );
  judge = await json(
    await api("/interactions", {
      body: {
        name: "Judge",
        environment,
        prompts: [{ type: "template", template: judgePrompt.id }],
        result_schema: {
          type: "object",
          properties: { score: { type: "number" } },
          required: ["score"],
        },
      },
    }),
    201,
  );
}, 90_000);

afterAll(async () => {
  try {
    if (stack) await stack.stop();
  } finally {
    await stream?.remove();
    await db?.drop();
    await upstream?.close();
  }
});

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => stack.output());

/** Executes version 1 of Summary once per text, tagged; answers the runs' ids. */
async function seed(texts: string[], tags: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const text of texts) {
    const run = await json(
      await api("/execute", { body: { interaction: "Summary@1", data: { text }, tags } }),
    );
    ids.push(run.id);
  }
  return ids;
}

/**
 * Waits until the runs store has written the runs a search should find (the record writer is
 * milliseconds behind the log; an experiment selects from the store, as a search does).
 */
async function searchable(source: object, count: number): Promise<any> {
  for (const deadline = Date.now() + 30_000; ;) {
    const found = await json(await api("/runs/search", { body: source }));
    if (found.results.length >= count || Date.now() > deadline) return found;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The draft replays with "Shorten", version 1 stays "Summarise". */
async function editDraft() {
  await json(
    await api(`/prompts/${promptId}`, {
      method: "PUT",
      body: { content: "return `Shorten ${text}`" },
    }),
  );
}

/** Polls the experiment until `done` says so (wide bounds: CI may share the machine). */
async function until(id: string, done: (e: any) => boolean, timeoutMs = 120_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const response = await api(`/experiments/${id}?pairs_limit=1000`);
    // A service restarting answers 503 for a moment: asked again.
    const experiment = response.status === 503 ? await response.text() : await json(response);
    if (typeof experiment === "object" && done(experiment)) return experiment;
    if (Date.now() > deadline) {
      throw new Error(
        `experiment ${id} not there in time: ${JSON.stringify(experiment)}\n${stack.output()}`,
      );
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * The runs an experiment made (tag experiment:<id>), once the store has `count` completed ones:
 * a replay is answered once its run is in the record log, and written to the store just after.
 */
async function replays(id: string, count: number): Promise<any[]> {
  for (const deadline = Date.now() + 30_000; ;) {
    const runs = await json(await api(`/runs?tag=experiment:${id}&limit=1000`));
    // Completed ones: lists read the store, a batch behind the record log, and a replay cut by a
    // death (failed as lost) may be listed before the last completed ones are written.
    const completed = runs.filter((r: any) => r.status === "completed").length;
    if (completed >= count || Date.now() > deadline) return runs;
    await new Promise((r) => setTimeout(r, 50));
  }
}

const median = (values: number[]) => {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};
const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);

describe("experiments", () => {
  it("replay exactly the runs their search selects, and compare them", async () => {
    const picked = [
      "alpha",
      "al",
      "alps",
      "alpine meadow",
      "altitude",
      "al broken",
      "alto",
      "alfa romeo",
      "alm",
      "almond tree",
      "alter",
      "algae",
    ];
    await seed(picked, ["pick"]);
    // Matching only the query, or only the filter: not selected.
    await seed(["beta", "gamma"], ["pick"]);
    await seed(["alpaca", "altar"], ["other"]);
    await editDraft();
    const source = { query: "text:al*", filters: { tags: ["pick"] }, limit: 100 };
    const expected = await searchable(source, picked.length);
    expect(expected.results).toHaveLength(picked.length);

    const created = await json(
      await api("/experiments", {
        body: {
          name: "shorter",
          source,
          target: { interaction: "Summary@draft" },
          judge: judge.id,
          concurrency: 3,
        },
      }),
      201,
    );
    expect(created).toMatchObject({
      name: "shorter",
      status: "running",
      source,
      target: { interaction: "Summary@draft" },
      judge: judge.id,
      concurrency: 3,
      progress: { selected: picked.length, skipped: 0, total: picked.length },
    });
    const ended = await until(created.id, (e) => e.status !== "running");
    expect(ended.status).toBe("completed");
    expect(ended.progress).toMatchObject({
      done: 12,
      completed: 11,
      failed: 1,
      pending: 0,
      running: 0,
      cancelled: 0,
    });

    // Exactly the runs the search answered, in its order.
    const pairs: any[] = ended.pairs;
    expect(pairs.map((p) => p.source_run)).toEqual(expected.results.map((r: any) => r.id));
    // Each new run is a child of the run it replays, tagged, and the only one for it.
    const made = await replays(created.id, 12);
    expect(made).toHaveLength(12);
    expect(new Set(made.map((r) => r.parent))).toEqual(new Set(pairs.map((p) => p.source_run)));
    expect(new Set(made.map((r) => r.id))).toEqual(new Set(pairs.map((p) => p.run)));
    for (const pair of pairs) {
      const text = pair.input.text as string;
      expect(pair.original.result).toEqual({ summary: text, words: text.split(" ").length });
      if (text.includes("broken")) {
        expect(pair).toMatchObject({ status: "failed", exact_match: false, diff: null });
        expect(pair.candidate).toMatchObject({
          result: null,
          schema_valid: false,
          error: { code: "validation_error" },
        });
        expect(pair.judge).toBeNull();
        continue;
      }
      const short = text.slice(0, 4);
      expect(pair.status).toBe("completed");
      expect(pair.candidate.result).toEqual({ summary: short, words: text.split(" ").length });
      expect(pair.exact_match).toBe(short === text);
      expect(pair.diff).toEqual(
        short === text ? [] : [{ op: "replace", path: "/summary", value: short }],
      );
      expect(pair.judge).toMatchObject({ score: short === text ? 1 : 0.5, error: null });
      // The judge's run is a child of the new run, tagged apart from the replays.
      const judged = await json(await api(`/runs/${pair.judge.run}`));
      expect(judged).toMatchObject({ parent: pair.run, tags: [`experiment-judge:${created.id}`] });
    }

    // The totals, against the pairs and the runs themselves.
    const exact = pairs.filter((p) => p.exact_match).length;
    expect(exact).toBe(4);
    const runsOf = async (ids: string[]) =>
      Promise.all(ids.map(async (id) => json(await api(`/runs/${id}`))));
    const originals = await runsOf(pairs.map((p) => p.source_run));
    const candidates = await runsOf(pairs.map((p) => p.run));
    const c = ended.comparison;
    expect(c.pairs).toBe(12);
    expect(c.exact_match_rate).toBeCloseTo(4 / 12, 10);
    expect(c.original.schema_valid_rate).toBe(1);
    expect(c.candidate.schema_valid_rate).toBeCloseTo(11 / 12, 10);
    expect(c.original.tokens).toBe(sum(originals.map((r) => r.token_use.total)));
    expect(c.candidate.tokens).toBe(sum(candidates.map((r) => r.token_use.total)));
    expect(c.original.cost).toBeCloseTo(sum(originals.map((r) => r.cost.total)), 12);
    expect(c.candidate.cost).toBeCloseTo(sum(candidates.map((r) => r.cost.total)), 12);
    expect(c.original.p50_latency_ms).toBe(median(originals.map((r) => r.execution_time)));
    expect(c.candidate.p50_latency_ms).toBe(median(candidates.map((r) => r.execution_time)));
    expect(c.judge).toEqual({ mean_score: (4 * 1 + 7 * 0.5) / 11, scored: 11, failed: 0 });

    // `changed`: the pairs that differ or failed, and the list.
    const changed = await json(await api(`/experiments/${created.id}?changed=true`));
    expect(changed.pairs).toHaveLength(12 - exact);
    const page = await json(await api(`/experiments/${created.id}?pairs_limit=5&pairs_offset=10`));
    expect(page.pairs.map((p: any) => p.position)).toEqual([10, 11]);
    const list = await json(await api("/experiments"));
    expect(list.map((e: any) => e.id)).toContain(created.id);
    expect(list.find((e: any) => e.id === created.id)).not.toHaveProperty("pairs");
  });

  it("skip and count the runs that kept no input", async () => {
    const quiet = await json(
      await api("/interactions", {
        body: {
          name: "Quiet",
          environment,
          store: "metadata",
          prompts: [{ type: "template", template: promptId }],
        },
      }),
      201,
    );
    for (const text of ["one", "two"]) {
      await json(
        await api(`/interactions/${quiet.id}/execute`, {
          body: { data: { text }, tags: ["mixed"] },
        }),
      );
    }
    await seed(["three"], ["mixed"]);
    await searchable({ filters: { tags: ["mixed"] } }, 3);
    const created = await json(
      await api("/experiments", {
        body: {
          name: "mixed",
          source: { filters: { tags: ["mixed"] } },
          target: { interaction: summary.id },
        },
      }),
      201,
    );
    expect(created.progress).toMatchObject({ selected: 3, skipped: 2, total: 1 });
    const ended = await until(created.id, (e) => e.status !== "running");
    expect(ended.progress).toMatchObject({ done: 1, completed: 1 });
    expect(ended.pairs.map((p: any) => p.input)).toEqual([{ text: "three" }]);
  });

  it("fail a pair the target refuses, naming its error as the API does", async () => {
    const strictPrompt = await json(
      await api("/prompts", {
        body: {
          name: "strict",
          role: "user",
          content_type: "jst",
          content: "return `Summarise ${text}`",
          inputSchema: {
            type: "object",
            properties: { text: { type: "string", maxLength: 5 } },
          },
        },
      }),
      201,
    );
    const strict = await json(
      await api("/interactions", {
        body: {
          name: "Strict",
          environment,
          prompts: [{ type: "template", template: strictPrompt.id }],
        },
      }),
      201,
    );
    await seed(["short", "far too long"], ["strict"]);
    await searchable({ filters: { tags: ["strict"] } }, 2);
    const created = await json(
      await api("/experiments", {
        body: {
          name: "strict",
          source: { filters: { tags: ["strict"] } },
          target: { interaction: strict.id },
        },
      }),
      201,
    );
    const ended = await until(created.id, (e) => e.status !== "running");
    expect(ended.progress).toMatchObject({ done: 2, completed: 1, failed: 1 });
    const refused = ended.pairs.find((p: any) => p.input.text === "far too long");
    expect(refused).toMatchObject({ status: "failed", run: null });
    // The code the same call answers over the API, not the services' own (invalid_argument).
    const direct = await json(
      await api(`/interactions/${strict.id}/execute`, { body: { data: refused.input } }),
      400,
    );
    expect(refused.candidate.error).toEqual({ code: direct.code, message: direct.message });
    expect(direct.code).toBe("invalid_request");
  });

  it("stop starting runs when cancelled, and stream their progress to the end", async () => {
    const ids = await seed(
      Array.from({ length: 8 }, (_, i) => `slow ${i}`),
      ["slow"],
    );
    await searchable({ filters: { tags: ["slow"] } }, ids.length);
    const created = await json(
      await api("/experiments", {
        body: {
          name: "to cancel",
          source: { filters: { tags: ["slow"] } },
          // The upstream waits 400 ms before each answer: one pair at a time takes seconds.
          target: { interaction: "Summary@draft", config: { model: "slow-400" } },
          concurrency: 1,
        },
      }),
      201,
    );
    expect(created.progress.total).toBe(ids.length);
    const events = readSse(
      await fetch(`${stack.gatewayUrl}/api/v1/experiments/${created.id}/stream`, {
        headers: { authorization: `Bearer ${stack.bootstrap.key}` },
      }),
    );
    await until(created.id, (e) => e.progress.done >= 1);
    const cancelled = await json(await api(`/experiments/${created.id}/cancel`, { body: {} }));
    expect(cancelled.cancel_requested, JSON.stringify(await until(created.id, () => true))).toBe(
      true,
    );
    const ended = await until(created.id, (e) => e.status !== "running");
    expect(ended.status).toBe("cancelled");
    const { done, cancelled: notRun, total } = ended.progress;
    expect(done).toBeLessThan(total);
    expect(done + notRun).toBe(total);
    // Only the pairs that ran made runs; none started after the cancel was seen.
    const made = await replays(created.id, done);
    expect(made).toHaveLength(done);
    expect(made.every((r: any) => r.status === "completed")).toBe(true);
    // One at a time (its concurrency): each replay started after the one before it ended.
    const byStart = made.sort((a: any, b: any) => a.created_at.localeCompare(b.created_at));
    for (let i = 1; i < byStart.length; i++) {
      expect(byStart[i].created_at >= byStart[i - 1].updated_at).toBe(true);
    }

    // The stream: progress as it changed, then the end, and closed.
    const got = await events;
    expect(got.length).toBeGreaterThanOrEqual(2);
    expect(got.slice(0, -1).every((e) => e.event === "progress")).toBe(true);
    const last = got.at(-1)!;
    expect(last.event).toBe("end");
    expect(JSON.parse(last.data)).toMatchObject({ id: created.id, status: "cancelled" });
    // Cancelling an ended experiment answers it as it is.
    expect((await json(await api(`/experiments/${created.id}/cancel`, { body: {} }))).status).toBe(
      "cancelled",
    );
  });

  it("answer bad input with clear errors, and keep projects apart", async () => {
    const bad = async (body: unknown, status: number, message: RegExp) => {
      const error = await json(await api("/experiments", { body }), status);
      expect(error.message).toMatch(message);
    };
    const target = { interaction: summary.id };
    await bad({ source: {}, target }, 400, /name/);
    await bad({ name: "x", source: { limit: 1001 }, target }, 400, /limit/);
    await bad({ name: "x", source: {}, target, concurrency: 17 }, 400, /concurrency/);
    await bad({ name: "x", source: { facets: {} }, target }, 400, /facets/);
    await bad({ name: "x", source: { query: "text:(" }, target }, 400, /query|parse|Lucene/i);
    await bad({ name: "x", source: {}, target: { interaction: "Nothing@draft" } }, 404, /./);
    // A judge whose result has no number `score`.
    await bad({ name: "x", source: {}, target, judge: summary.id }, 400, /score/);
    await json(await api("/experiments/0123456789abcdef01234567"), 404);
    await json(await api("/experiments/0123456789abcdef01234567/cancel", { body: {} }), 404);

    const mine = await json(
      await api("/experiments", { body: { name: "mine", source: { limit: 1 }, target } }),
      201,
    );
    const project = await json(await api("/projects", { body: { name: "other" } }), 201);
    const other = gatewayApi(stack.gatewayUrl, project.api_key.key);
    await json(await other(`/experiments/${mine.id}`), 404);
    await json(await other(`/experiments/${mine.id}/cancel`, { body: {} }), 404);
    expect(await json(await other("/experiments"))).toEqual([]);
    const stream = await fetch(`${stack.gatewayUrl}/api/v1/experiments/${mine.id}/stream`, {
      headers: { authorization: `Bearer ${project.api_key.key}` },
    });
    expect(stream.status).toBe(404);
    await stream.text();
  });

  it("survive the executor's and the runs service's deaths mid-way, no pair replayed twice", async () => {
    const texts = Array.from({ length: 40 }, (_, i) => `long text number ${i}`);
    await seed(texts, ["restart"]);
    await searchable({ filters: { tags: ["restart"] }, limit: 1000 }, texts.length);
    const created = await json(
      await api("/experiments", {
        body: {
          name: "through restarts",
          source: { filters: { tags: ["restart"] }, limit: 1000 },
          target: { interaction: "Summary@draft", config: { model: "slow-600" } },
          concurrency: 4,
        },
      }),
      201,
    );
    await until(created.id, (e) => e.progress.done >= 4);
    // The executor dies with replays in flight: their runs are failed as lost (the sweeper),
    // and those pairs replayed again once it is back.
    await stack.restart("executor", "SIGKILL");
    const after = (await until(created.id, (e) => e.progress.done >= 1)).progress.done;
    await until(created.id, (e) => e.progress.done >= after + 4);
    // The runs service dies: the replays in flight go on (detached) and are recorded; the next
    // process keeps them rather than replaying them again.
    await stack.restart("runs", "SIGKILL");
    const ended = await until(created.id, (e) => e.status !== "running", 180_000);
    expect(ended.status).toBe("completed");
    expect(ended.progress).toMatchObject({ total: 40, done: 40, completed: 40, failed: 0 });

    const made = await replays(created.id, 40);
    const completed = made.filter((r) => r.status === "completed");
    // One completed replay per source run, and it is the pair's.
    expect(completed).toHaveLength(40);
    expect(new Set(completed.map((r) => r.parent)).size).toBe(40);
    expect(new Set(completed.map((r) => r.id))).toEqual(
      new Set(ended.pairs.map((p: any) => p.run)),
    );
    // Anything else is a replay the executor's death cut, failed as lost, at most one per pair in
    // flight then.
    const lost = made.filter((r) => r.status !== "completed");
    expect(lost.length).toBeLessThanOrEqual(4);
    for (const run of lost) expect(run.error.code).toBe("executor_lost");
  }, 300_000);
});
