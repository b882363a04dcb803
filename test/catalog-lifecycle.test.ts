import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  expectJson,
  gatewayApi,
  startFakeOpenAI,
  startTestStack,
  type ApiClient,
  type FakeOpenAI,
  type Stack,
} from "@pies/testkit";

// The interaction lifecycle (issue 8) through the gateway, as a client would: the four processes
// on the real PostgreSQL and NATS. Edit, delete, publish numbered versions (20 at once), execute
// them by name, and two projects that cannot see each other's anything.
let stack: Stack;
let api: ApiClient;
let environmentId: string;
let upstream: FakeOpenAI;

beforeAll(async () => {
  upstream = await startFakeOpenAI({ apiKey: "sk-upstream-models" });
  // The fake provider listens on loopback, which the deployed default refuses.
  stack = await startTestStack("lifecycle", { env: { PIES_ALLOWED_ENDPOINTS: "127.0.0.1" } });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
  environmentId = stack.bootstrap.environment;
}, 120_000);

afterAll(async () => {
  try {
    if (stack) expect(await stack.stop()).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
  } finally {
    await upstream?.close();
  }
});

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => stack.output());
const put = (client: ApiClient, path: string, body: unknown) =>
  client(path, { method: "PUT", body });
const del = (client: ApiClient, path: string) => client(path, { method: "DELETE" });

async function template(client: ApiClient, content: string) {
  return json(
    await client("/prompts", {
      body: { name: "t", role: "user", content_type: "text", content },
    }),
    201,
  );
}

async function interaction(client: ApiClient, name: string, env = environmentId) {
  const t = await template(client, `Say ${name}`);
  return json(
    await client("/interactions", {
      body: { name, environment: env, prompts: [{ type: "template", template: t.id }] },
    }),
    201,
  );
}

/** The prompt a run was executed with (the rendered user message). */
const said = (run: any) => (run.prompt as { content: string }[]).map((m) => m.content).join("|");

describe("the interaction lifecycle through the gateway", () => {
  it("edits with PUT (the fields given), takes back what GET answers, and deletes", async () => {
    const created = await interaction(api, "Editable");
    const edited = await json(
      await put(api, `/interactions/${created.id}`, {
        description: "now described",
        temperature: 0.3,
        unknown_field: "ignored",
      }),
    );
    expect(edited).toMatchObject({
      name: "Editable",
      description: "now described",
      temperature: 0.3,
    });
    // What GET answers (templates expanded) goes back as a PUT body unchanged; a template object
    // without id becomes a new template.
    const got = await json(await api(`/interactions/${created.id}`));
    expect(got.prompts[0].template.content).toBe("Say Editable");
    got.prompts.push({
      type: "template",
      template: { role: "system", content_type: "text", content: "Be brief" },
    });
    const back = await json(await put(api, `/interactions/${created.id}`, got));
    expect(back.prompts).toHaveLength(2);
    const again = await json(await api(`/interactions/${created.id}`));
    expect(again.prompts.map((p: any) => p.template.content)).toEqual(["Say Editable", "Be brief"]);
    expect(again.prompts[0].template.id).toBe(got.prompts[0].template.id);
    // The same body as a POST creates a copy.
    const copy = await json(await api("/interactions", { body: { ...again, name: "Copy" } }), 201);
    expect(copy.prompts.map((p: any) => p.template)).toEqual(
      again.prompts.map((p: any) => p.template.id),
    );

    // Wrong types and a bad JSON Schema: 400 naming the field.
    const wrong = await json(
      await put(api, `/interactions/${created.id}`, { temperature: "hot" }),
      400,
    );
    expect(wrong.message).toMatch(/^temperature:/);
    const bad = await json(
      await put(api, `/interactions/${created.id}`, {
        result_schema: { type: "object", properties: { a: { type: "nope" } } },
      }),
      400,
    );
    expect(bad.message).toMatch(/^resultSchema: not a valid JSON Schema/);
    const badCreate = await json(
      await api("/interactions", { body: { name: "x", resultSchema: { required: "a" } } }),
      400,
    );
    expect(badCreate.message).toMatch(/resultSchema/);

    expect((await del(api, `/interactions/${copy.id}`)).status).toBe(204);
    await json(await api(`/interactions/${copy.id}`), 404);
    await json(await del(api, `/interactions/${copy.id}`), 404);
  });

  it("updates and deletes templates and environments, refusing with 409 what is in use", async () => {
    const env = await json(
      await api("/environments", {
        body: { name: "second", provider: "test", default_model: "test" },
      }),
      201,
    );
    const i = await interaction(api, "Uses", env.id);
    const t = i.prompts[0].template as string;
    const renamed = await json(
      await put(api, `/environments/${env.id}`, {
        name: "renamed",
        enabled_models: ["test", "test-slow"],
      }),
    );
    expect(renamed).toMatchObject({ name: "renamed", enabled_models: ["test", "test-slow"] });
    expect(await json(await api(`/environments/${env.id}/models`))).toEqual({
      models: ["test", "test-slow"],
      source: "enabled_models",
    });
    const edited = await json(await put(api, `/prompts/${t}`, { content: "Say more" }));
    expect(edited.content).toBe("Say more");

    const envInUse = await json(await del(api, `/environments/${env.id}`), 409);
    expect(envInUse.message).toContain(`interaction Uses (${i.id})`);
    const promptInUse = await json(await del(api, `/prompts/${t}`), 409);
    expect(promptInUse.message).toContain(i.id);
    // A published version holds on to them even when the draft lets go.
    const version = await json(await api(`/interactions/${i.id}/publish`, { body: {} }), 201);
    await json(
      await put(api, `/interactions/${i.id}`, { environment: environmentId, prompts: [] }),
    );
    expect((await json(await del(api, `/prompts/${t}`), 409)).message).toContain(
      `version 1 of Uses (${version.id})`,
    );
    await json(await del(api, `/environments/${env.id}`), 409);
    expect((await del(api, `/interactions/${i.id}`)).status).toBe(204);
    expect((await del(api, `/prompts/${t}`)).status).toBe(204);
    expect((await del(api, `/environments/${env.id}`)).status).toBe(204);
    await json(await api(`/environments/${env.id}`), 404);
  });

  it("lists an environment's models from its provider, else its enabled models", async () => {
    const env = await json(
      await api("/environments", {
        body: {
          provider: "openai_compatible",
          endpoint_url: upstream.url,
          apiKey: "sk-upstream-models",
          enabled_models: ["x"],
        },
      }),
      201,
    );
    expect(await json(await api(`/environments/${env.id}/models`))).toEqual({
      models: ["gpt-4o-mini"],
      source: "provider",
    });
    // A provider that refuses (a wrong key): the enabled models.
    await json(await put(api, `/environments/${env.id}`, { apiKey: "sk-wrong" }));
    expect(await json(await api(`/environments/${env.id}/models`))).toEqual({
      models: ["x"],
      source: "enabled_models",
    });
  });

  it("publishes versions whose prompt a later edit of the template does not change", async () => {
    const i = await interaction(api, "Snapshot");
    const t = i.prompts[0].template as string;
    const v1 = await json(
      await api(`/interactions/${i.id}/publish`, {
        body: { visibility: "public", tags: ["first"] },
      }),
      201,
    );
    // SPEC.md's version object, prompts naming their templates by id.
    expect(v1).toMatchObject({
      name: "Snapshot",
      status: "published",
      parent: i.id,
      latest: true,
      visibility: "public",
      version: 1,
      tags: ["first"],
      environment: environmentId,
      project: stack.bootstrap.project,
    });
    expect(v1.prompts[0].template).toBe(t);
    for (const field of ["id", "created_at", "updated_at"]) expect(v1[field]).toBeTruthy();
    await json(await put(api, `/prompts/${t}`, { content: "Say changed" }));
    const v2 = await json(await api(`/interactions/${i.id}/publish`, { body: {} }), 201);
    expect(v2).toMatchObject({ version: 2, latest: true, visibility: "private" });

    const first = await json(await api(`/interactions/${v1.id}`));
    expect(first).toMatchObject({ version: 1, latest: false });
    expect(first.prompts[0].template.content).toBe("Say Snapshot");
    const runs = await Promise.all(
      ["Snapshot@1", "Snapshot@2", "Snapshot@draft"].map(async (name) =>
        json(await api("/execute", { body: { interaction: name, data: {} } })),
      ),
    );
    expect(runs.map(said)).toEqual(["Say Snapshot", "Say changed", "Say changed"]);

    const versions = await json(await api(`/interactions/${i.id}/versions`));
    expect(versions).toEqual([
      expect.objectContaining({
        id: v2.id,
        name: "Snapshot",
        status: "published",
        version: 2,
        latest: true,
      }),
      expect.objectContaining({ id: v1.id, version: 1, latest: false }),
    ]);
    for (const ref of versions)
      for (const f of ["created_at", "updated_at"]) expect(ref[f]).toBeTruthy();
    // List filters: name yields the versions too, version and tags narrow it.
    const named = await json(await api("/interactions?name=Snapshot"));
    expect(named.map((r: any) => r.id).sort()).toEqual([i.id, v1.id, v2.id].sort());
    expect(await json(await api("/interactions?name=Snapshot&version=1"))).toEqual([
      expect.objectContaining({ id: v1.id, version: 1, latest: false, status: "published" }),
    ]);
    expect(
      (await json(await api("/interactions?tags=first,other&version=1"))).map((r: any) => r.id),
    ).toEqual([v1.id]);
    expect(
      (await json(await api("/interactions?status=published&name=Snapshot&limit=1&offset=1")))
        .length,
    ).toBe(1);
    await json(await api("/interactions?version=x"), 400);
  });

  it("numbers 20 concurrent publishes 1..20, without gaps or duplicates", async () => {
    const i = await interaction(api, "Concurrent");
    const versions = await Promise.all(
      Array.from({ length: 20 }, async () =>
        json(await api(`/interactions/${i.id}/publish`, { body: {} }), 201),
      ),
    );
    expect(versions.map((v) => v.version).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 20 }, (_, n) => n + 1),
    );
    const listed = await json(await api(`/interactions/${i.id}/versions`));
    expect(listed.map((v: any) => v.version)).toEqual(Array.from({ length: 20 }, (_, n) => 20 - n));
    expect(listed.filter((v: any) => v.latest).map((v: any) => v.version)).toEqual([20]);
  });

  it("executes by name and by a version's id through /execute, /runs and /interactions/:id/execute, recording the version that ran", async () => {
    const i = await interaction(api, "Selector");
    const t = i.prompts[0].template as string;
    const run = async (path: string, body: Record<string, unknown>) =>
      json(await api(path, { body: { data: {}, ...body } }));
    // Nothing published: the bare name runs the draft.
    expect((await run("/execute", { interaction: "Selector" })).interaction.id).toBe(i.id);
    await json(await api("/execute", { body: { interaction: "Selector@latest" } }), 404);
    const v1 = await json(await api(`/interactions/${i.id}/publish`, { body: {} }), 201);
    // A publish is seen by the next execution by name.
    for (const name of ["Selector", "Selector@latest", "Selector@1"]) {
      const r = await run("/execute", { interaction: name });
      // SPEC.md's reference to the version that ran (its segments name their templates).
      expect(r.interaction, name).toEqual({
        id: v1.id,
        name: "Selector",
        status: "published",
        prompts: [{ id: expect.any(String), type: "template", template: t }],
        updated_at: v1.updated_at,
      });
      expect(said(r)).toBe("Say Selector");
    }
    await json(await put(api, `/prompts/${t}`, { content: "Say draft" }));
    const v2 = await json(await api(`/interactions/${i.id}/publish`, { body: {} }), 201);
    expect((await run("/execute", { interaction: "Selector" })).interaction.id).toBe(v2.id);
    expect((await run("/execute", { interaction: "Selector@latest" })).interaction.id).toBe(v2.id);
    expect((await run("/execute", { interaction: "Selector@draft" })).interaction.id).toBe(i.id);
    // A version's id anywhere an interaction's id goes.
    const byRuns = await run("/runs", { interaction: v1.id });
    expect(byRuns.interaction.id).toBe(v1.id);
    expect(said(byRuns)).toBe("Say Selector");
    const byPath = await run(`/interactions/${v1.id}/execute`, {});
    expect(said(byPath)).toBe("Say Selector");
    // Streamed too: the run created names the version.
    const streamed = await run("/execute", { interaction: "Selector@1", stream: true });
    expect(streamed).toMatchObject({ status: "created", interaction: { id: v1.id } });
    // Read back, the run says which version ran.
    const back = await json(await api(`/runs/${byRuns.id}`));
    expect(back.interaction.id).toBe(v1.id);
    await json(await api("/execute", { body: { interaction: "Selector@9" } }), 404);
    await json(await api("/execute", { body: { interaction: "Selector@x" } }), 400);
  });

  it("keeps two projects apart: interactions, versions, templates, environments and keys", async () => {
    const a = await interaction(api, "Mine");
    const va = await json(await api(`/interactions/${a.id}/publish`, { body: {} }), 201);
    const keyA = await json(await api("/apikeys", { body: { name: "a-member" } }), 201);
    const project = await json(await api("/projects", { body: { name: "other" } }), 201);
    const b = gatewayApi(stack.gatewayUrl, project.api_key.key);
    const envB = await json(
      await b("/environments", { body: { name: "b", provider: "test", default_model: "test" } }),
      201,
    );
    const ib = await interaction(b, "Mine", envB.id);

    const tA = a.prompts[0].template as string;
    for (const [method, path, body] of [
      ["GET", `/interactions/${a.id}`],
      ["GET", `/interactions/${va.id}`],
      ["PUT", `/interactions/${a.id}`, { description: "x" }],
      ["DELETE", `/interactions/${a.id}`],
      ["POST", `/interactions/${a.id}/publish`, {}],
      ["GET", `/interactions/${a.id}/versions`],
      ["POST", `/interactions/${a.id}/execute`, { data: {} }],
      ["POST", "/runs", { interaction: va.id, data: {} }],
      ["GET", `/prompts/${tA}`],
      ["PUT", `/prompts/${tA}`, { content: "x" }],
      ["DELETE", `/prompts/${tA}`],
      ["GET", `/environments/${environmentId}`],
      ["PUT", `/environments/${environmentId}`, { name: "x" }],
      ["DELETE", `/environments/${environmentId}`],
      ["GET", `/environments/${environmentId}/models`],
      ["DELETE", `/apikeys/${keyA.id}`],
    ] as const) {
      const response = await b(path, { method, body });
      expect(response.status, `${method} ${path}`).toBe(404);
    }
    // Referring to project A's template or environment from B is refused too.
    await json(await b("/interactions", { body: { name: "x", prompts: [tA] } }), 404);
    await json(await b("/interactions", { body: { name: "x", environment: environmentId } }), 404);
    // By name, B runs its own "Mine"; A's version numbers do not exist in B.
    expect(
      (await json(await b("/execute", { body: { interaction: "Mine", data: {} } }))).interaction.id,
    ).toBe(ib.id);
    await json(await b("/execute", { body: { interaction: "Mine@1" } }), 404);
    // List filters never show the other project's rows.
    expect((await json(await b("/interactions?name=Mine"))).map((r: any) => r.id)).toEqual([ib.id]);
    expect(await json(await b("/interactions?version=1"))).toEqual([]);
    expect((await json(await b("/prompts"))).map((p: any) => p.id)).toEqual([
      ib.prompts[0].template,
    ]);
    expect((await json(await b("/environments"))).map((e: any) => e.id)).toEqual([envB.id]);
    expect((await json(await b("/apikeys"))).map((k: any) => k.id)).toEqual([project.api_key.id]);
    expect(await json(await b(`/runs?interaction=${a.id}`))).toEqual([]);
    // A's key still works: nothing B tried changed anything.
    expect((await api("/interactions", { token: keyA.key })).status).toBe(200);
  });

  it("makes keys for the account's projects only, shows each once, and revokes", async () => {
    const project = await json(await api("/projects", { body: { name: "third" } }), 201);
    const projects = await json(await api("/projects"));
    expect(projects.map((p: any) => p.id)).toContain(project.id);
    // From the first project's admin key: a key for the third project.
    const made = await json(
      await api("/apikeys", { body: { name: "for-third", project: project.id } }),
      201,
    );
    expect(made).toMatchObject({ project: project.id, role: "member", name: "for-third" });
    expect(made.key).toMatch(/^sk-[0-9A-Za-z]{43}$/);
    const account = await json(await api("/account", { token: made.key }));
    expect(account.project.id).toBe(project.id);
    // Listed without its secret, in its project only.
    const third = gatewayApi(stack.gatewayUrl, project.api_key.key);
    const listed = await json(await third("/apikeys"));
    expect(listed.map((k: any) => k.id)).toContain(made.id);
    expect(JSON.stringify(listed)).not.toContain(made.key.slice(3));
    expect((await json(await api("/apikeys"))).map((k: any) => k.id)).not.toContain(made.id);
    // A project that is not the account's is unknown (another account's: the catalog's unit test).
    await json(
      await api("/apikeys", { body: { name: "x", project: "000000000000000000000000" } }),
      404,
    );
    // Revoked: refused at once (the gateway drops the project's keys on the event).
    expect((await del(third, `/apikeys/${made.id}`)).status).toBe(204);
    const deadline = Date.now() + 1000;
    let status = 200;
    while (Date.now() < deadline && status !== 401) {
      status = (await api("/account", { token: made.key })).status;
    }
    expect(status).toBe(401);
  });
});
