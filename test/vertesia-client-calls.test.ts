import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { VertesiaClient } from "@vertesia/client";
import { startTestStack, type Stack } from "@pies/testkit";
import { startTestPies, type TestPies } from "../gateway/test/in-memory-pies.js";

// The calls of @vertesia/client's current release (1.5) whose meaning pies' model has, made as a
// user's application makes them, against the four processes (PostgreSQL, NATS) and the embedded
// mode's wiring (PGlite, the in-process bus) listening on a port. docs/api.md, "The published
// client" lists every call of the client's RunsApi, InteractionsApi, PromptsApi and EnvironmentsApi
// and what pies answers to each.

interface Target {
  url: string;
  key: string;
  environment: string;
  stop(): Promise<void>;
}

const targets: [string, () => Promise<Target>][] = [
  [
    "the four processes",
    async () => {
      const stack: Stack = await startTestStack("vertesia_calls");
      return {
        url: stack.gatewayUrl,
        key: stack.bootstrap.key,
        environment: stack.bootstrap.environment,
        stop: async () => {
          expect(await stack.stop()).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
        },
      };
    },
  ],
  [
    "the embedded mode",
    async () => {
      const pies: TestPies = await startTestPies();
      const url = await pies.app.listen({ port: 0, host: "127.0.0.1" });
      return { url, key: pies.key, environment: pies.environmentId, stop: () => pies.close() };
    },
  ],
];

/** Retries `check` until it passes (runs reach the store in batches in the four processes). */
async function eventually<T>(check: () => Promise<T>, ms = 10_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

describe.each(targets)("@vertesia/client 1.5 against %s", (_, start) => {
  let target: Target;
  let client: VertesiaClient;
  let prompt: { id: string };
  let draft: { id: string };
  let other: { id: string };
  let v1: { id: string };
  let runs: { [k: string]: { id: string } };
  let before: string;

  beforeAll(async () => {
    target = await start();
    client = new VertesiaClient({
      serverUrl: target.url,
      storeUrl: target.url,
      tokenServerUrl: target.url,
      apikey: target.key,
    });
    prompt = await client.prompts.create({
      name: "calls-prompt",
      role: "user",
      content_type: "jst",
      content: "return `Describe ${thing}`",
      inputSchema: {
        type: "object",
        properties: { thing: { type: "string" } },
        required: ["thing"],
      },
    } as any);
    const interaction = (name: string) =>
      client.interactions.create({
        name,
        environment: target.environment,
        prompts: [{ type: "template", template: prompt.id }],
        tags: ["client"],
      } as any);
    draft = await interaction("CallsDescribe");
    other = await interaction("CallsOther");
    v1 = await client.interactions.publish(draft.id, { tags: ["stable"] } as any);
    before = new Date(Date.now() - 1000).toISOString();
    runs = {
      pie: await client.interactions.execute(draft.id, { data: { thing: "a pie" }, tags: ["t1"] }),
      cake: await client.interactions.execute(draft.id, {
        data: { thing: "a cake" },
        tags: ["t2"],
      }),
      version: await client.interactions.executeByName("CallsDescribe@1", {
        data: { thing: "a tart" },
      }),
      other: await client.interactions.execute(other.id, { data: { thing: "bread" } }),
      failed: await client.interactions
        .execute(other.id, { data: { thing: "x" }, config: { model: "test-fail" } } as any)
        .catch((err: { details?: { run_id: string } }) => ({ id: err.details!.run_id })),
    };
    // Every run is in the store before the searches.
    await eventually(async () => {
      const all = (await client.runs.search({ limit: 100 } as any)) as any;
      expect(all.results).toHaveLength(5);
    });
  }, 120_000);

  afterAll(async () => target?.stop());

  const ids = (found: any) =>
    ((Array.isArray(found) ? found : found.results) as { id: string }[]).map((r) => r.id).sort();

  it("retrieves a run with SPEC.md's references (interaction, environment, project, account)", async () => {
    const run = (await client.runs.retrieve(runs.version!.id)) as any;
    expect(run.interaction).toMatchObject({
      id: v1.id,
      name: "CallsDescribe",
      status: "published",
      prompts: [{ type: "template", template: prompt.id }],
    });
    expect(typeof run.interaction.updated_at).toBe("string");
    expect(run.environment).toMatchObject({ id: target.environment, name: "test" });
    expect(run.project).toEqual({ id: expect.any(String), name: expect.stringMatching(/./) });
    expect(run.account).toEqual({ id: expect.any(String), name: expect.stringMatching(/./) });
  });

  it("searches runs with an object query: interaction and status", async () => {
    const found = await client.runs.search({
      query: { interaction: draft.id, status: "completed" },
      limit: 10,
    } as any);
    expect(ids(found)).toEqual([runs.pie!.id, runs.cake!.id].sort());
    const failed = await client.runs.search({ query: { status: "failed" } } as any);
    expect(ids(failed)).toEqual([runs.failed!.id]);
  });

  it("searches runs with an object query: model, environment, tags, root runs, a date range", async () => {
    const byModel = await client.runs.search({ query: { model: "test-fail" } } as any);
    expect(ids(byModel)).toEqual([runs.failed!.id]);
    const byEnv = await client.runs.search({
      query: { environment: target.environment, interaction: other.id },
    } as any);
    expect(ids(byEnv)).toEqual([runs.other!.id, runs.failed!.id].sort());
    const byTags = await client.runs.search({ query: { tags: ["t2"] } } as any);
    expect(ids(byTags)).toEqual([runs.cake!.id]);
    const roots = await client.runs.search({ query: { is_root: true }, limit: 100 } as any);
    expect(ids(roots)).toHaveLength(5);
    const since = await client.runs.search({ query: { start: before } } as any);
    expect(ids(since)).toHaveLength(5);
    const until = await client.runs.search({ query: { end: before } } as any);
    expect(ids(until)).toEqual([]);
    const children = await client.runs.search({ query: { parent: [runs.pie!.id] } } as any);
    expect(ids(children)).toEqual([]);
  });

  it("searches with the Lucene query inside the object query, and as a string still", async () => {
    const inside = await client.runs.search({
      query: { query: 'thing:"a pie"', interaction: draft.id },
    } as any);
    expect(ids(inside)).toEqual([runs.pie!.id]);
    const string = await client.runs.search({ query: 'thing:"a cake"' } as any);
    expect(ids(string)).toEqual([runs.cake!.id]);
  });

  it("refuses what pies has no model of in an object query (400 naming it)", async () => {
    await expect(
      client.runs.search({ query: { finish_reason: "stop" } } as any),
    ).rejects.toMatchObject({ status: 400 });
    await expect(
      client.runs.search({
        query: { interaction: draft.id },
        filters: { interaction: other.id },
      } as any),
    ).rejects.toMatchObject({ status: 400 });
  });

  it("counts runs by field (computeFacets), interactions and environments named", async () => {
    const facets = (await client.runs.computeFacets({
      facets: [
        { name: "statuses", field: "status" },
        { name: "interactions", field: "interaction" },
        { name: "environments", field: "environment" },
        { name: "models", field: "modelId" },
      ],
    })) as any;
    expect(facets.total).toBe(5);
    expect(facets.statuses).toEqual(
      expect.arrayContaining([
        { _id: "completed", count: 4 },
        { _id: "failed", count: 1 },
      ]),
    );
    expect(facets.interactions).toEqual(
      expect.arrayContaining([
        { _id: draft.id, count: 2, name: "CallsDescribe" },
        { _id: v1.id, count: 1, name: "CallsDescribe" },
        { _id: other.id, count: 2, name: "CallsOther" },
      ]),
    );
    expect(facets.environments).toEqual([{ _id: target.environment, count: 5, name: "test" }]);
    expect(facets.models).toEqual(
      expect.arrayContaining([
        { _id: "test", count: 4 },
        { _id: "test-fail", count: 1 },
      ]),
    );
    const filtered = (await client.runs.computeFacets({
      facets: [{ name: "statuses", field: "status" }],
      query: { interaction: other.id },
    })) as any;
    expect(filtered).toEqual({
      statuses: expect.arrayContaining([
        { _id: "completed", count: 1 },
        { _id: "failed", count: 1 },
      ]),
      total: 2,
    });
  });

  it("lists the values a field takes (filterOptions), under GET /runs' filters", async () => {
    const options = await client.runs.filterOptions("interaction", { status: "completed" as any });
    expect(options).toEqual(
      expect.arrayContaining([
        { id: draft.id, name: "CallsDescribe", count: 2 },
        { id: other.id, name: "CallsOther", count: 1 },
      ]),
    );
    expect(options).toHaveLength(3);
    const models = await client.runs.filterOptions("model", { interaction: other.id });
    expect(models.map((m) => m.id).sort()).toEqual(["test", "test-fail"]);
  });

  it("resolves an interaction by id, by name and by selector", async () => {
    const byName = await client.interactions.resolve("CallsDescribe");
    expect(byName).toMatchObject({
      id: v1.id,
      name: "CallsDescribe",
      version: 1,
      status: "published",
      tags: ["stable"],
      resolved: {
        environment: { id: target.environment, name: "test", provider: "test" },
        model: "test",
        model_source: "environmentDefault",
      },
    });
    expect((await client.interactions.resolve("CallsDescribe@draft")).id).toBe(draft.id);
    expect((await client.interactions.resolve(draft.id)).status).toBe("draft");
    const asked = await client.interactions.resolve("CallsDescribe@1", { model: "test-x" });
    expect(asked.resolved).toMatchObject({ model: "test-x", model_source: "config" });
    await expect(client.interactions.resolve("Nobody")).rejects.toMatchObject({ status: 404 });
  });

  it("lists the versions of a named interaction, and the interactions' names", async () => {
    const versions = await client.interactions.listVersionsByName("CallsDescribe");
    expect(versions.map((v) => v.id)).toEqual([v1.id]);
    expect(versions[0]).toMatchObject({ version: 1, status: "published" });
    expect(await client.interactions.listVersionsByName("Nobody")).toEqual([]);
    const names = await client.interactions.listNames();
    expect(names).toEqual(
      expect.arrayContaining([
        { id: draft.id, name: "CallsDescribe" },
        { id: other.id, name: "CallsOther" },
      ]),
    );
    expect(names).toHaveLength(2);
  });

  it("lists interactions with SPEC.md's filters as the client sends them", async () => {
    const named = await client.interactions.list({ query: { name: "CallsDescribe" } } as any);
    expect(named.map((i) => i.id).sort()).toEqual([draft.id, v1.id].sort());
    const tagged = await client.interactions.list({ query: { tags: ["stable"] } } as any);
    expect(tagged.map((i) => i.id)).toEqual([v1.id]);
  });

  it("lists the tags in use, with their interactions and versions (listTags)", async () => {
    const tags = await client.interactions.listTags();
    expect(tags.map((t) => [t.tag, t.count])).toEqual([
      ["client", 2],
      ["stable", 1],
    ]);
    expect(tags[0]!.interactions.map((i) => i.id).sort()).toEqual([draft.id, other.id].sort());
    expect(tags[1]!.interactions[0]).toMatchObject({
      id: v1.id,
      name: "CallsDescribe",
      version: 1,
      tags: ["stable"],
    });
  });

  it("renders a prompt template with data, no provider call (prompts.render)", async () => {
    const rendered = await client.prompts.render(prompt.id, { thing: "a scone" });
    expect(rendered).toEqual({
      id: prompt.id,
      name: "calls-prompt",
      role: "user",
      content_type: "jst",
      rendered: "Describe a scone",
    });
    await expect(client.prompts.render(prompt.id, {})).rejects.toMatchObject({ status: 400 });
    await expect(client.prompts.render("nope", {})).rejects.toMatchObject({ status: 404 });
  });

  it("lists the interactions that use a template, and its versions (none)", async () => {
    const users = await client.prompts.listInteractions(prompt.id);
    expect(users.prompt).toBe(prompt.id);
    expect(users.interactions).toEqual(
      expect.arrayContaining([
        { id: draft.id, name: "CallsDescribe", versions: [{ version: 1 }] },
        { id: other.id, name: "CallsOther", versions: [] },
      ]),
    );
    expect(users.interactions).toHaveLength(2);
    expect(await client.prompts.listVersions(prompt.id)).toEqual([]);
  });

  it("answers another project's key 404 for this project's template", async () => {
    const created = await fetch(`${target.url}/api/v1/projects`, {
      method: "POST",
      headers: { authorization: `Bearer ${target.key}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "calls-other" }),
    });
    expect(created.status).toBe(201);
    const { api_key } = (await created.json()) as { api_key: { key: string } };
    const stranger = new VertesiaClient({
      serverUrl: target.url,
      storeUrl: target.url,
      tokenServerUrl: target.url,
      apikey: api_key.key,
    });
    await expect(stranger.prompts.render(prompt.id, { thing: "x" })).rejects.toMatchObject({
      status: 404,
    });
    await expect(stranger.prompts.listInteractions(prompt.id)).rejects.toMatchObject({
      status: 404,
    });
    expect(await stranger.interactions.listTags()).toEqual([]);
  });

  it("lists an environment's models", async () => {
    const models = (await client.environments.listModels(target.environment)) as any;
    expect(models.models).toContain("test");
  });

  // Last: the fork is a new interaction of the project, which the lists above do not expect.
  it("forks a version into a new draft and lists the forks (fork, listForks)", async () => {
    const fork = await client.interactions.fork(v1.id, { keepTags: true });
    expect(fork).toMatchObject({ name: "CallsDescribe (fork)", status: "draft", tags: ["stable"] });
    expect(fork.id).not.toBe(v1.id);
    const forks = await client.interactions.listForks(v1.id);
    expect(forks.map((f) => f.id)).toEqual([fork.id]);
    expect(await client.interactions.listForks(draft.id)).toEqual([]);
    const run = await client.interactions.execute(fork.id, { data: { thing: "a fork" } });
    expect(run.status).toBe("completed");
    await expect(client.interactions.fork("nope", {})).rejects.toMatchObject({ status: 404 });
  });
});
