import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { requester, type TestResponse } from "../test/requests.js";

// SPEC.md's shapes wherever a resource appears: every route and event that answers a run, an
// interaction, a version or an environment, each checked for the fields SPEC.md lists for what it
// answers (and DESIGN.md §3 for the references inside a run: interaction {id, name, status,
// prompts, updated_at}, environment, project and account {id, name}). One table: a route added
// later that answers one of these belongs in it.

let pies: TestPies;
let call: ReturnType<typeof requester>;
const ctx: Record<string, any> = {};

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;

/** SPEC.md's interaction reference inside a run, of the interaction or version executed. */
const runInteraction = (id: () => string, status: string) => () => ({
  id: id(),
  name: "Shapes",
  status,
  prompts: [{ id: expect.any(String), type: "template", template: ctx.prompt }],
  updated_at: expect.stringMatching(ISO),
});

/** SPEC.md's execution run: the fields every run carries, then those of its kind. */
function runShape(
  interaction: () => Record<string, unknown>,
  kind: "ended" | "created" | "listed" | "failed",
) {
  return () => ({
    id: expect.any(String),
    status: { ended: "completed", created: "created", listed: "completed", failed: "failed" }[kind],
    interaction: interaction(),
    environment: { id: ctx.environment, name: "test" },
    account: { id: ctx.account, name: ctx.accountName },
    project: { id: ctx.project, name: ctx.projectName },
    modelId: kind === "failed" ? "test-fail" : "test",
    parameters: { text: expect.any(String) },
    tags: expect.any(Array),
    config: expect.objectContaining({ environment: ctx.environment, model: expect.any(String) }),
    source: {
      type: "api",
      label: expect.any(String),
      principal_type: "apikey",
      principal_id: expect.any(String),
      client_ip: expect.any(String),
    },
    created_at: expect.stringMatching(ISO),
    updated_at: expect.stringMatching(ISO),
    ...(kind === "created"
      ? { ttl: expect.any(Number), stream: true }
      : {
          execution_time: expect.any(Number),
          ...(kind === "failed"
            ? { error: { code: expect.any(String), message: expect.any(String) } }
            : {
                result: expect.anything(),
                token_use: {
                  prompt: expect.any(Number),
                  result: expect.any(Number),
                  total: expect.any(Number),
                },
              }),
          // A listed run is a reference: a subset, without the prompt.
          ...(kind === "listed" ? {} : { prompt: expect.any(Array) }),
        }),
  });
}

const ranDraft = runInteraction(() => ctx.interaction!, "draft");
const ranVersion = runInteraction(() => ctx.version!, "published");

/** An expanded template inside a segment (SPEC.md's prompt segment, fully expanded). */
const expandedTemplate = () => ({
  id: ctx.prompt,
  name: "shapes-prompt",
  role: "user",
  content_type: "jst",
  content: expect.any(String),
  status: expect.any(String),
  latest: expect.any(Boolean),
  version: expect.any(Number),
  inputSchema: expect.any(Object),
  project: ctx.project,
  created_at: expect.stringMatching(ISO),
  updated_at: expect.stringMatching(ISO),
});

/**
 * The interaction object: SPEC.md's fields, templates expanded (GET /interactions/:id) or as
 * their ids (what a write answers).
 */
const interactionShape = (expanded: boolean) => () => ({
  id: ctx.interaction,
  name: "Shapes",
  description: "checks shapes",
  status: "draft",
  test_data: { text: "sample" },
  resultSchema: expect.objectContaining({ type: "object" }),
  cache_policy: { type: "no_cache", varies_on: [] },
  model: "test",
  temperature: 0.2,
  max_tokens: 300,
  prompts: [
    {
      id: expect.any(String),
      type: "template",
      template: expanded ? expandedTemplate() : ctx.prompt,
    },
  ],
  environment: ctx.environment,
  project: ctx.project,
  version: expect.any(Number),
  latest: expect.any(Boolean),
  visibility: "private",
  tags: ["shape"],
  created_at: expect.stringMatching(ISO),
  updated_at: expect.stringMatching(ISO),
});

/** The version object publishing answers (SPEC.md "POST /interactions/:id/publish"). */
const versionShape = () => ({
  id: ctx.version,
  name: "Shapes",
  status: "published",
  parent: ctx.interaction,
  latest: true,
  visibility: "private",
  version: 1,
  tags: ["v1"],
  model: "test",
  temperature: 0.2,
  environment: ctx.environment,
  project: ctx.project,
  prompts: [{ id: expect.any(String), type: "template", template: ctx.prompt }],
  test_data: { text: "sample" },
  resultSchema: expect.objectContaining({ type: "object" }),
  formatter: "markdown",
  max_tokens: 300,
  created_at: expect.stringMatching(ISO),
  updated_at: expect.stringMatching(ISO),
});

/** An interaction reference (list result): name, status, prompts, updated_at, description, id. */
const interactionRef = (id: () => string, status: string) => () => ({
  id: id(),
  name: "Shapes",
  description: "checks shapes",
  status,
  prompts: [{ id: expect.any(String), type: "template", template: ctx.prompt }],
  updated_at: expect.stringMatching(ISO),
});

/** A version reference: name, status, latest, version, created_at, updated_at, id. */
const versionRef = () => ({
  id: ctx.version,
  name: "Shapes",
  status: "published",
  latest: true,
  version: 1,
  created_at: expect.stringMatching(ISO),
  updated_at: expect.stringMatching(ISO),
});

/** An environment: SPEC.md's reference {id, name}, and DESIGN.md §7's fields. */
const environmentShape = (name: string) => () => ({
  id: expect.any(String),
  name,
  provider: "test",
  endpoint_url: expect.any(String),
  default_model: "test",
  enabled_models: expect.any(Array),
  config: expect.any(Object),
  project: ctx.project,
});

type Pick = (body: any) => unknown;
const self: Pick = (b) => b;
const find =
  (id: () => string): Pick =>
  (list: { id: string }[]) =>
    list.find((x) => x.id === id());

const executeBody = () => ({ data: { text: "shape" }, tags: ["shape"] });

/**
 * Every route and event answering one of these: [what, request, status, which part, shape].
 * Requests run in order (the later ones read the runs the earlier made).
 */
const table: [string, () => Promise<TestResponse>, number, Pick, () => Record<string, unknown>][] =
  [
    ["POST /interactions", async () => ctx.created!, 201, self, interactionShape(false)],
    [
      "GET /interactions/:id",
      () => call("GET", `/interactions/${ctx.interaction}`),
      200,
      self,
      interactionShape(true),
    ],
    [
      "PUT /interactions/:id",
      () => call("PUT", `/interactions/${ctx.interaction}`, { description: "checks shapes" }),
      200,
      self,
      interactionShape(false),
    ],
    [
      "GET /interactions (draft reference)",
      () => call("GET", "/interactions"),
      200,
      find(() => ctx.interaction!),
      interactionRef(() => ctx.interaction!, "draft"),
    ],
    [
      "GET /interactions?name= (version reference)",
      () => call("GET", "/interactions?name=Shapes"),
      200,
      find(() => ctx.version!),
      interactionRef(() => ctx.version!, "published"),
    ],
    ["publish (version object)", async () => ctx.published!, 201, self, versionShape],
    [
      "GET /interactions/:id/versions",
      () => call("GET", `/interactions/${ctx.interaction}/versions`),
      200,
      find(() => ctx.version!),
      versionRef,
    ],
    [
      "POST /environments",
      async () => ctx.createdEnvironment!,
      201,
      self,
      environmentShape("shapes-env"),
    ],
    [
      "GET /environments/:id",
      () => call("GET", `/environments/${ctx.environment}`),
      200,
      self,
      environmentShape("test"),
    ],
    [
      "PUT /environments/:id",
      () => call("PUT", `/environments/${ctx.otherEnvironment}`, { name: "shapes-env" }),
      200,
      self,
      environmentShape("shapes-env"),
    ],
    [
      "GET /environments",
      () => call("GET", "/environments"),
      200,
      find(() => ctx.environment!),
      environmentShape("test"),
    ],
    [
      "POST /interactions/:id/execute (blocking)",
      () => call("POST", `/interactions/${ctx.interaction}/execute`, executeBody()),
      200,
      self,
      runShape(ranDraft, "ended"),
    ],
    [
      "POST /runs (blocking)",
      () => call("POST", "/runs", { ...executeBody(), interaction: ctx.interaction }),
      200,
      self,
      runShape(ranDraft, "ended"),
    ],
    [
      "POST /execute by name (a version)",
      () => call("POST", "/execute", { ...executeBody(), interaction: "Shapes@1" }),
      200,
      self,
      runShape(ranVersion, "ended"),
    ],
    [
      "POST /runs (stream: true)",
      async () => ctx.streamed!,
      200,
      self,
      runShape(ranDraft, "created"),
    ],
    [
      "GET /runs/:id/stream (close event)",
      async () => ctx.closed!,
      200,
      self,
      runShape(ranDraft, "ended"),
    ],
    [
      "POST /runs failing (502 details.run)",
      () =>
        call("POST", "/runs", {
          ...executeBody(),
          interaction: ctx.interaction,
          config: { model: "test-fail" },
        }),
      502,
      (b) => b.details.run,
      runShape(ranDraft, "failed"),
    ],
    [
      "GET /runs/:id",
      () => call("GET", `/runs/${ctx.streamedId}`),
      200,
      self,
      runShape(ranDraft, "ended"),
    ],
    [
      "GET /runs (reference)",
      () => call("GET", "/runs?status=completed"),
      200,
      find(() => ctx.streamedId!),
      runShape(ranDraft, "listed"),
    ],
    [
      "GET /runs (a version's run)",
      () => call("GET", `/runs?interaction=${ctx.version}`),
      200,
      (list) => list[0],
      runShape(ranVersion, "listed"),
    ],
    [
      "POST /runs/search (results)",
      () => call("POST", "/runs/search", { filters: { status: "completed" } }),
      200,
      (b) => b.results.find((r: { id: string }) => r.id === ctx.streamedId),
      runShape(ranDraft, "listed"),
    ],
  ];

beforeAll(async () => {
  pies = await startTestPies();
  call = requester(pies.app, pies.key);
  const account = await call("GET", "/account");
  ctx.account = account.json.id;
  ctx.accountName = account.json.name;
  ctx.project = account.json.project.id;
  ctx.projectName = account.json.project.name;
  ctx.environment = pies.environmentId;
  const prompt = await call("POST", "/prompts", {
    name: "shapes-prompt",
    role: "user",
    content_type: "jst",
    content: "return `Shape of ${text}`",
    inputSchema: { type: "object", properties: { text: { type: "string" } } },
  });
  ctx.prompt = prompt.json.id;
  const interaction = await call("POST", "/interactions", {
    name: "Shapes",
    description: "checks shapes",
    environment: pies.environmentId,
    prompts: [{ type: "template", template: ctx.prompt }],
    test_data: { text: "sample" },
    result_schema: {
      type: "object",
      properties: { shape: { type: "string" } },
      required: ["shape"],
    },
    cache_policy: { type: "no_cache" },
    model: "test",
    temperature: 0.2,
    max_tokens: 300,
    tags: ["shape"],
    formatter: "markdown",
  });
  expect(interaction.status, interaction.text).toBe(201);
  ctx.created = interaction;
  ctx.interaction = interaction.json.id;
  ctx.published = await call("POST", `/interactions/${ctx.interaction}/publish`, {
    tags: ["v1"],
  });
  ctx.version = ctx.published.json.id;
  ctx.createdEnvironment = await call("POST", "/environments", {
    name: "shapes-env",
    provider: "test",
    default_model: "test",
  });
  ctx.otherEnvironment = ctx.createdEnvironment.json.id;
  ctx.streamed = await call("POST", "/runs", {
    ...executeBody(),
    interaction: ctx.interaction,
    stream: true,
  });
  ctx.streamedId = ctx.streamed.json.id;
  const stream = await pies.app.inject({
    url: `/api/v1/runs/${ctx.streamedId}/stream`,
    headers: { authorization: `Bearer ${pies.key}` },
  });
  const close = parseSse(stream.body).at(-1)!;
  expect(close.event).toBe("close");
  ctx.closed = { status: stream.statusCode, json: JSON.parse(close.data), text: close.data };
}, 60_000);

afterAll(async () => pies?.close());

describe("SPEC.md's shapes wherever a resource appears", () => {
  it("has the names of the account and project to compare with", () => {
    expect(ctx.accountName).toMatch(/./);
    expect(ctx.projectName).toMatch(/./);
  });

  for (const [what, send, status, pick, shape] of table) {
    it(what, async () => {
      const res = await send();
      expect(res.status, res.text).toBe(status);
      const body = pick(res.json);
      expect(body, `${what}: ${res.text.slice(0, 300)}`).toBeDefined();
      expect(body).toMatchObject(shape());
    });
  }
});
