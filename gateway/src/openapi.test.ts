import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import type { RouteOptions } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import type { TestResponse } from "../test/requests.js";

// Every route, driven through the gateway to success and to errors, answers what the OpenAPI
// document it publishes declares for that route and status: each body is validated against the
// document's own schema (JSON Schema 2020-12, as OpenAPI 3.1 has it), and every route of the
// app must have been checked both ways.

let pies: TestPies;
let doc: any;
let ajv: Ajv2020;
/** The app's routes, as Fastify registered them (`GET /api/v1/runs/:id`). */
const routes: string[] = [];
/** Per route: the statuses checked against the document. */
const checked = new Map<string, Set<number>>();
const validators = new Map<object, ValidateFunction>();

beforeAll(async () => {
  pies = await startTestPies();
  pies.app.addHook("onRoute", (route: RouteOptions) => {
    for (const method of [route.method].flat()) {
      if (method !== "HEAD") routes.push(`${method} ${route.url}`);
    }
  });
  await pies.app.ready();
  // The hook saw the routes being added (an app readied earlier would leave the list empty, and
  // the checks over it would pass having checked nothing).
  expect(routes.length).toBeGreaterThan(20);
  const response = await pies.app.inject({ url: "/api/v1/openapi.json" });
  expect(response.statusCode).toBe(200);
  doc = response.json();
  // Strict: a keyword or format that is not JSON Schema 2020-12 fails the compilation.
  ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true });
  addFormats.default(ajv);
}, 60_000);

afterAll(async () => pies?.close());

/** A schema with the document's references (`#/components/schemas/…`) replaced by their target. */
function resolved(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(resolved);
  if (schema === null || typeof schema !== "object") return schema;
  const ref = (schema as { $ref?: string }).$ref;
  if (ref) {
    const name = /^#\/components\/schemas\/(.+)$/.exec(ref)?.[1];
    expect(name && doc.components.schemas[name], `${ref} is in the document`).toBeTruthy();
    return resolved(doc.components.schemas[name!]);
  }
  return Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, resolved(v)]));
}

function validate(schema: object, value: unknown, where: string) {
  let check = validators.get(schema);
  if (!check) {
    check = ajv.compile(resolved(schema) as object);
    validators.set(schema, check);
  }
  const valid = check(value);
  expect(
    valid,
    `${where}: ${ajv.errorsText(check.errors)}\n${JSON.stringify(value).slice(0, 500)}`,
  ).toBe(true);
}

/** The document's operation of a route (`GET /api/v1/runs/:id`). */
function operation(route: string) {
  const [method, url] = route.split(" ") as [string, string];
  const path = url.replace(/:(\w+)/g, "{$1}");
  const op = doc.paths[path]?.[method.toLowerCase()];
  expect(op, `${route} is in the document`).toBeDefined();
  return op;
}

/** Checks a response of a route against what the document declares for its status. */
function documented(route: string, response: TestResponse) {
  const op = operation(route);
  const status = String(response.status);
  const declared = op.responses[status] ?? op.responses[`${status[0]}XX`] ?? op.responses.default;
  const where = `${route} → ${status} ${response.text.slice(0, 200)}`;
  expect(declared, `${where}: status not in the document`).toBeDefined();
  if (response.status === 204) {
    expect(response.text).toBe("");
    expect(declared.content, where).toBeUndefined();
  } else if (declared.content) {
    const type = String(response.headers["content-type"]).split(";")[0]!.trim();
    const schema = declared.content[type]?.schema;
    expect(schema, `${where}: no schema for ${type}`).toBeDefined();
    if (type === "application/json") validate(schema, response.json, where);
    if (type === "text/event-stream") {
      validate(schema, response.text, where);
      // The events' data: `close` is a run, `error` an error (as the description says).
      const events = parseSse(response.text);
      expect(events.length, where).toBeGreaterThan(0);
      for (const e of events) {
        // A one-request stream's first event, `run`, is a run too.
        if (e.event === "close" || e.event === "run")
          validate(doc.components.schemas.Run, JSON.parse(e.data), where);
        if (e.event === "error") validate(doc.components.schemas.Error, JSON.parse(e.data), where);
        if (e.event === "message") expect(typeof JSON.parse(e.data)).toBe("string");
        // An experiment's `progress` and `end`: the experiment, as GET /experiments/:id has it.
        if (e.event === "progress" || e.event === "end") {
          const one = operation("GET /api/v1/experiments/:id").responses["200"];
          validate(one.content["application/json"].schema, JSON.parse(e.data), where);
        }
      }
    }
  } else {
    // Declared without a JSON body (the Prometheus text of /metrics).
    expect(response.headers["content-type"], where).not.toMatch(/json/);
  }
  const statuses = checked.get(route) ?? new Set<number>();
  statuses.add(response.status);
  checked.set(route, statuses);
  return response;
}

/** A request at a full path (the root routes too), with an optional key. */
async function send(
  route: string,
  path: string,
  { key, body, accept }: { key?: string | null; body?: unknown; accept?: string } = {},
): Promise<TestResponse> {
  const [method] = route.split(" ") as [string];
  const bearer = key === undefined ? pies.key : key;
  const response = await pies.app.inject({
    method: method as "GET",
    url: path,
    headers: {
      ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
      ...(accept ? { accept } : {}),
    },
    ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
  });
  let json: unknown;
  try {
    json = response.body ? JSON.parse(response.body) : undefined;
  } catch {
    json = undefined;
  }
  return documented(route, {
    status: response.statusCode,
    json,
    text: response.body,
    headers: response.headers,
  });
}

const api = (route: string) => {
  const [method, url] = route.split(" ") as [string, string];
  return `${method} /api/v1${url}`;
};

describe("the OpenAPI document", () => {
  it("is OpenAPI 3.1 with every route of the app, and compiles as JSON Schema 2020-12", () => {
    expect(doc.openapi).toBe("3.1.0");
    for (const route of routes.filter((r) => !r.includes(" /docs"))) operation(route);
    for (const [path, ops] of Object.entries<any>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(ops)) {
        for (const [status, response] of Object.entries<any>(op.responses)) {
          for (const [type, { schema }] of Object.entries<any>(response.content ?? {})) {
            expect(
              () => ajv.compile(resolved(schema) as object),
              `${method} ${path} ${status} ${type}`,
            ).not.toThrow();
          }
        }
        const body = op.requestBody?.content?.["application/json"]?.schema;
        if (body) ajv.compile(resolved(body) as object);
      }
    }
    // The error shape is one schema, referred to by every error response of the API.
    expect(doc.components.schemas.Error.required).toEqual(["error", "status", "code", "message"]);
    const getRun = doc.paths["/api/v1/runs/{id}"].get;
    expect(getRun.responses.default.content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/Error",
    });
    expect(getRun.security).toEqual([{ bearer: [] }]);
    // An execution's own failures are documented: a run too large to record is 413.
    for (const path of ["/api/v1/runs", "/api/v1/interactions/{id}/execute", "/api/v1/execute"]) {
      expect(Object.keys(doc.paths[path].post.responses), path).toEqual(
        expect.arrayContaining(["200", "413", "502", "504", "default"]),
      );
    }
  });

  it("needs no key, and neither does the docs page, which loads nothing from the internet", async () => {
    const raw = await pies.app.inject({ url: "/api/v1/openapi.json" });
    expect(raw.statusCode).toBe(200);
    const page = await pies.app.inject({ url: "/docs/" });
    expect(page.statusCode).toBe(200);
    expect(page.headers["content-type"]).toMatch(/text\/html/);
    const scripts = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(scripts.length).toBeGreaterThan(3);
    for (const url of scripts) {
      expect(url, "served from the gateway").not.toMatch(/^(https?:)?\/\//);
      const asset = await pies.app.inject({ url: new URL(url, "http://pies/docs/").pathname });
      expect(asset.statusCode, url).toBe(200);
    }
    const init = await pies.app.inject({ url: "/docs/static/swagger-initializer.js" });
    expect(init.body).toContain("resolveUrl('./json')");
    expect(init.body).toContain("validatorUrl: null");
    const json = await pies.app.inject({ url: "/docs/json" });
    expect(json.json()).toEqual(doc);
  });
});

describe("responses against the document", () => {
  const ids: Record<string, string> = {};

  it("the catalog routes, success and errors", async () => {
    const prompt = await send(api("POST /prompts"), "/api/v1/prompts", {
      body: {
        name: "p",
        role: "user",
        content_type: "jst",
        content: "return `About ${topic}`",
        input_schema: {
          type: "object",
          properties: { topic: { type: "string", minLength: 2 } },
          required: ["topic"],
        },
      },
    });
    expect(prompt.status).toBe(201);
    ids.prompt = prompt.json.id;
    await send(api("POST /prompts"), "/api/v1/prompts", { body: { name: 3 } });
    await send(api("GET /prompts"), "/api/v1/prompts?limit=5");
    await send(api("GET /prompts"), "/api/v1/prompts?limit=0");
    await send(api("GET /prompts/:id"), `/api/v1/prompts/${ids.prompt}`);
    await send(api("GET /prompts/:id"), "/api/v1/prompts/nope");
    await send(api("PUT /prompts/:id"), `/api/v1/prompts/${ids.prompt}`, {
      body: { name: "p2" },
    });
    await send(api("PUT /prompts/:id"), `/api/v1/prompts/${ids.prompt}`, {
      body: { test_data: [] },
    });

    const environment = await send(api("POST /environments"), "/api/v1/environments", {
      body: { name: "e2", provider: "test", default_model: "test", enabled_models: ["test"] },
    });
    expect(environment.status).toBe(201);
    await send(api("POST /environments"), "/api/v1/environments", { body: { provider: 1 } });
    await send(api("GET /environments"), "/api/v1/environments");
    await send(api("GET /environments/:id"), `/api/v1/environments/${environment.json.id}`);
    await send(api("GET /environments/:id"), "/api/v1/environments/nope");
    await send(
      api("GET /environments/:id/models"),
      `/api/v1/environments/${pies.environmentId}/models`,
    );
    await send(api("GET /environments/:id/models"), "/api/v1/environments/nope/models");
    await send(api("PUT /environments/:id"), `/api/v1/environments/${environment.json.id}`, {
      body: { name: "e3" },
    });
    await send(api("PUT /environments/:id"), `/api/v1/environments/${environment.json.id}`, {
      body: { enabled_models: "x" },
    });
    expect(
      (await send(api("DELETE /environments/:id"), `/api/v1/environments/${environment.json.id}`))
        .status,
    ).toBe(204);
    await send(api("DELETE /environments/:id"), `/api/v1/environments/${environment.json.id}`);

    const interaction = await send(api("POST /interactions"), "/api/v1/interactions", {
      body: {
        name: "Doc",
        environment: pies.environmentId,
        prompts: [ids.prompt],
        result_schema: { type: "object", properties: { answer: { type: "string" } } },
        cache_policy: { type: "no_cache" },
        temperature: 0.5,
      },
    });
    expect(interaction.status).toBe(201);
    ids.interaction = interaction.json.id;
    await send(api("POST /interactions"), "/api/v1/interactions", { body: { status: "nope" } });
    await send(api("GET /interactions"), "/api/v1/interactions?tags=a,b&limit=10");
    await send(api("GET /interactions"), "/api/v1/interactions?version=x");
    await send(api("GET /interactions/:id"), `/api/v1/interactions/${ids.interaction}`);
    await send(api("GET /interactions/:id"), "/api/v1/interactions/nope");
    await send(api("PUT /interactions/:id"), `/api/v1/interactions/${ids.interaction}`, {
      body: { description: "d", tags: ["t"] },
    });
    await send(api("PUT /interactions/:id"), `/api/v1/interactions/${ids.interaction}`, {
      body: { prompts: 1 },
    });
    const version = await send(
      api("POST /interactions/:id/publish"),
      `/api/v1/interactions/${ids.interaction}/publish`,
      { body: { tags: ["v"] } },
    );
    expect(version.status).toBe(201);
    await send(api("POST /interactions/:id/publish"), `/api/v1/interactions/nope/publish`);
    // A version is listed with its version fields.
    await send(api("GET /interactions"), "/api/v1/interactions?status=published");
    await send(
      api("GET /interactions/:id/versions"),
      `/api/v1/interactions/${ids.interaction}/versions`,
    );
    await send(api("GET /interactions/:id/versions"), "/api/v1/interactions/nope/versions");
    await send(api("GET /interactions/resolve/:ref"), "/api/v1/interactions/resolve/Doc@1");
    await send(api("GET /interactions/resolve/:ref"), "/api/v1/interactions/resolve/Doc@9");
    await send(api("GET /interactions/versions/:name"), "/api/v1/interactions/versions/Doc");
    await send(
      api("GET /interactions/versions/:name"),
      `/api/v1/interactions/versions/${"n".repeat(2000)}`,
    );
    await send(api("GET /interactions/names"), "/api/v1/interactions/names");
    const tags = await send(api("GET /interactions/tags"), "/api/v1/interactions/tags");
    expect(tags.json.map((t: { tag: string }) => t.tag)).toEqual(
      expect.arrayContaining(["t", "v"]),
    );
    const rendered = await send(
      api("POST /prompts/:id/render"),
      `/api/v1/prompts/${ids.prompt}/render`,
      { body: { topic: "cheese" } },
    );
    expect(rendered.json.rendered).toBe("About cheese");
    await send(api("POST /prompts/:id/render"), `/api/v1/prompts/${ids.prompt}/render`, {
      body: {},
    });
    await send(api("POST /prompts/:id/render"), "/api/v1/prompts/nope/render", { body: {} });
    await send(api("GET /prompts/:id/versions"), `/api/v1/prompts/${ids.prompt}/versions`);
    await send(api("GET /prompts/:id/versions"), "/api/v1/prompts/nope/versions");
    const users = await send(
      api("GET /prompts/:id/interactions"),
      `/api/v1/prompts/${ids.prompt}/interactions`,
    );
    expect(users.json.interactions).toEqual([
      { id: ids.interaction, name: "Doc", versions: [{ version: 1 }] },
    ]);
    await send(api("GET /prompts/:id/interactions"), "/api/v1/prompts/nope/interactions");
    const fork = await send(
      api("POST /interactions/:id/fork"),
      `/api/v1/interactions/${version.json.id}/fork`,
      { body: { keepTags: true, forkPrompts: true } },
    );
    expect(fork.status).toBe(201);
    await send(api("POST /interactions/:id/fork"), `/api/v1/interactions/nope/fork`, { body: {} });
    const forks = await send(
      api("GET /interactions/:id/forks"),
      `/api/v1/interactions/${version.json.id}/forks`,
    );
    expect(forks.json.map((f: { id: string }) => f.id)).toEqual([fork.json.id]);
    await send(api("GET /interactions/:id/forks"), "/api/v1/interactions/nope/forks");

    await send(api("GET /account"), "/api/v1/account");
    await send(api("GET /projects"), "/api/v1/projects");
    await send(api("POST /projects"), "/api/v1/projects", { body: { name: "second" } });
    await send(api("POST /projects"), "/api/v1/projects", { body: {} });
    const key = await send(api("POST /apikeys"), "/api/v1/apikeys", { body: { name: "member" } });
    expect(key.status).toBe(201);
    ids.memberKey = key.json.key;
    await send(api("POST /apikeys"), "/api/v1/apikeys", { body: { role: "owner" } });
    await send(api("GET /apikeys"), "/api/v1/apikeys");
    // A member key on an admin route: 403.
    for (const route of ["GET /projects", "GET /apikeys", "POST /environments"]) {
      const r = await send(api(route), `/api/v1${route.split(" ")[1]}`, {
        key: ids.memberKey,
        body: route.startsWith("POST") ? {} : undefined,
      });
      expect(r.status).toBe(403);
    }
    const spare = await send(api("POST /apikeys"), "/api/v1/apikeys", { body: {} });
    expect(
      (await send(api("DELETE /apikeys/:id"), `/api/v1/apikeys/${spare.json.id}`)).status,
    ).toBe(204);
    await send(api("DELETE /apikeys/:id"), `/api/v1/apikeys/${spare.json.id}`);
    const project = await send(api("PUT /projects/:id"), `/api/v1/projects/${pies.projectId}`, {
      body: { retention_days: 30 },
    });
    expect(project.json.retention_days).toBe(30);
    await send(api("PUT /projects/:id"), `/api/v1/projects/${pies.projectId}`, {
      body: { retention_days: -1 },
    });
    await send(api("PUT /projects/:id"), "/api/v1/projects/nope", { body: { name: "x" } });
  });

  it("the execution and run routes, success and errors", async () => {
    const executed = await send(
      api("POST /interactions/:id/execute"),
      `/api/v1/interactions/${ids.interaction}/execute`,
      { body: { data: { topic: "cheese" }, tags: "a,b" } },
    );
    expect(executed.status).toBe(200);
    ids.run = executed.json.id;
    await send(
      api("POST /interactions/:id/execute"),
      `/api/v1/interactions/${ids.interaction}/execute`,
      {
        body: { data: { topic: "x" } },
      },
    );
    // A provider failure: 502, the failed run in details.
    const failed = await send(api("POST /runs"), "/api/v1/runs", {
      body: {
        interaction: ids.interaction,
        data: { topic: "cheese" },
        config: { model: "test-fail" },
      },
    });
    expect(failed.status).toBe(502);
    await send(api("POST /runs"), "/api/v1/runs", { body: {} });
    const streamed = await send(api("POST /runs"), "/api/v1/runs", {
      body: { interaction: ids.interaction, stream: true, data: { topic: "cheese" } },
    });
    expect(streamed.json.status).toBe("created");
    // One request: the run's event stream as the answer, from its `run` to its `close`.
    for (const route of ["POST /runs", "POST /interactions/:id/execute"]) {
      const oneRequest = await send(
        api(route),
        `/api/v1${route.split(" ")[1]!.replace(":id", ids.interaction!)}`,
        {
          body: { interaction: ids.interaction, stream: true, data: { topic: "cheese" } },
          accept: "text/event-stream",
        },
      );
      const events = parseSse(oneRequest.text);
      expect(events.map((e) => e.event)[0], oneRequest.text).toBe("run");
      expect(events.at(-1)!.event).toBe("close");
      expect(oneRequest.headers["pies-run-id"]).toBe(JSON.parse(events[0]!.data).id);
    }
    await send(api("POST /execute"), "/api/v1/execute", {
      body: { interaction: "Doc@latest", data: { topic: "cheese" } },
    });
    await send(api("POST /execute"), "/api/v1/execute", { body: { interaction: "Nope" } });

    const stream = await send(
      api("GET /runs/:id/stream"),
      `/api/v1/runs/${streamed.json.id}/stream`,
    );
    expect(stream.status).toBe(200);
    expect(parseSse(stream.text).at(-1)!.event).toBe("close");
    // The token as a query parameter, on this route only.
    const byQuery = await send(
      api("GET /runs/:id/stream"),
      `/api/v1/runs/${streamed.json.id}/stream?access_token=${pies.key}`,
      { key: null },
    );
    expect(byQuery.status).toBe(200);
    expect(
      (
        await send(api("GET /runs/:id"), `/api/v1/runs/${ids.run}?access_token=${pies.key}`, {
          key: null,
        })
      ).status,
    ).toBe(401);
    await send(api("GET /runs/:id/stream"), `/api/v1/runs/${ids.run}/stream`); // 409
    await send(api("GET /runs/:id/stream"), "/api/v1/runs/nope/stream");

    await send(api("GET /runs"), "/api/v1/runs?limit=10&status=completed");
    await send(api("GET /runs"), "/api/v1/runs?anchorDate=yesterday");
    await send(api("GET /runs/:id"), `/api/v1/runs/${ids.run}`);
    await send(api("GET /runs/:id"), `/api/v1/runs/${failed.json.details.run_id}`);
    await send(api("GET /runs/:id"), "/api/v1/runs/nope");
    await send(api("POST /runs/search"), "/api/v1/runs/search", {
      body: {
        query: "cheese",
        facets: {
          models: { type: "string", path: "modelId" },
          size: { type: "number", path: "parameters.n", boundaries: [0, 10], default: "other" },
        },
        filters: { interaction: ids.interaction },
      },
    });
    await send(api("POST /runs/search"), "/api/v1/runs/search", {
      body: { onlyMeta: true, facets: { m: { type: "string", path: "modelId" } } },
    });
    await send(api("POST /runs/search"), "/api/v1/runs/search", { body: { query: "a AND" } });
    // @vertesia/client's object query and facets by field.
    await send(api("POST /runs/search"), "/api/v1/runs/search", {
      body: {
        query: { interaction: ids.interaction, status: "completed" },
        facets: [{ name: "interactions", field: "interaction" }],
      },
    });
    await send(api("POST /runs/search"), "/api/v1/runs/search", {
      body: { query: { finish_reason: "stop" } },
    });
    await send(api("POST /runs/facets"), "/api/v1/runs/facets", {
      body: {
        facets: [
          { name: "statuses", field: "status" },
          { name: "interactions", field: "interaction" },
        ],
        query: { interaction: ids.interaction },
      },
    });
    await send(api("POST /runs/facets"), "/api/v1/runs/facets", {
      body: { facets: [{ name: "x", field: "nope" }] },
    });
    await send(
      api("GET /runs/filter-options/:field"),
      "/api/v1/runs/filter-options/environment?status=completed",
    );
    await send(api("GET /runs/filter-options/:field"), "/api/v1/runs/filter-options/nope");
    const gone = `/api/v1/runs/${failed.json.details.run_id}`;
    expect((await send(api("DELETE /runs/:id"), gone)).status).toBe(204);
    expect((await send(api("DELETE /runs/:id"), gone)).status).toBe(404);
    await send(api("POST /runs/delete"), "/api/v1/runs/delete", {
      body: { query: "nothing:here" },
    });
    await send(api("POST /runs/delete"), "/api/v1/runs/delete", { body: { limit: 1 } });

    // Experiments over the runs above: created, streamed to their end, read, cancelled, listed.
    const experiment = await send(api("POST /experiments"), "/api/v1/experiments", {
      body: {
        name: "doc",
        source: { filters: { interaction: ids.interaction } },
        target: { interaction: ids.interaction },
        concurrency: 2,
      },
    });
    expect(experiment.status).toBe(201);
    const exp = `/api/v1/experiments/${experiment.json.id}`;
    await send(api("POST /experiments"), "/api/v1/experiments", { body: { name: "no source" } });
    await send(api("POST /experiments"), "/api/v1/experiments", {
      body: { name: "x", source: {}, target: { interaction: "Nope@draft" } },
    });
    const progress = await send(api("GET /experiments/:id/stream"), `${exp}/stream`);
    expect(progress.status).toBe(200);
    expect(parseSse(progress.text).at(-1)!.event).toBe("end");
    await send(api("GET /experiments/:id/stream"), "/api/v1/experiments/nope/stream");
    expect(
      (await send(api("GET /experiments/:id"), `${exp}?pairs_limit=5`)).json.pairs,
    ).toHaveLength(experiment.json.progress.total);
    await send(api("GET /experiments/:id"), "/api/v1/experiments/nope");
    await send(api("GET /experiments/:id"), `${exp}?pairs_limit=-1`);
    expect((await send(api("POST /experiments/:id/cancel"), `${exp}/cancel`)).status).toBe(200);
    await send(api("POST /experiments/:id/cancel"), "/api/v1/experiments/nope/cancel");
    await send(api("GET /experiments"), "/api/v1/experiments?limit=5");
    await send(api("GET /experiments"), "/api/v1/experiments?limit=0");

    const generated = await send(
      api("POST /interactions/:id/generate-test-data"),
      `/api/v1/interactions/${ids.interaction}/generate-test-data`,
      { body: { count: 2, config: { environment: pies.environmentId } } },
    );
    expect(generated.status).toBe(200);
    await send(
      api("POST /interactions/:id/generate-test-data"),
      `/api/v1/interactions/${ids.interaction}/generate-test-data`,
      { body: {} },
    );
    const deleted = await send(
      api("DELETE /interactions/:id"),
      `/api/v1/interactions/${ids.interaction}`,
    );
    expect(deleted.status).toBe(204);
    await send(api("DELETE /interactions/:id"), `/api/v1/interactions/${ids.interaction}`);
    expect((await send(api("DELETE /prompts/:id"), `/api/v1/prompts/${ids.prompt}`)).status).toBe(
      204,
    );
    await send(api("DELETE /prompts/:id"), `/api/v1/prompts/${ids.prompt}`);
  });

  it("the token exchange, the probes and the document itself", async () => {
    for (const route of ["POST /token/issue", "POST /api/v1/token/issue"]) {
      const path = route.split(" ")[1]!;
      expect((await send(route, path)).status).toBe(200);
      expect((await send(route, path, { key: "sk-bad" })).status).toBe(401);
      expect((await send(route, path, { key: null })).status).toBe(401);
    }
    await send("GET /healthz", "/healthz");
    await send("GET /readyz", "/readyz");
    await send("GET /metrics", "/metrics");
    await send("GET /api/v1/openapi.json", "/api/v1/openapi.json", { key: null });
  });

  it("every route of the API, without a key or with a bad one: 401 as documented", async () => {
    for (const route of routes.filter((r) => r.includes(" /api/v1/"))) {
      if (route.endsWith("/openapi.json")) continue;
      const path = route.split(" ")[1]!.replace(/:(\w+)/g, "x");
      for (const key of [null, "sk-bad", "not.a.jwt"]) {
        const r = await send(route, path, { key, body: route.startsWith("GET") ? undefined : {} });
        expect(r.status, `${route} with ${key}`).toBe(401);
      }
    }
  });

  it("has checked every route, to success and (but the probes and the document) to an error", () => {
    const documentedRoutes = routes.filter((r) => !r.includes(" /docs"));
    const unchecked = documentedRoutes.filter((r) => !checked.has(r));
    expect(unchecked).toEqual([]);
    const noError = ["GET /healthz", "GET /readyz", "GET /metrics", "GET /api/v1/openapi.json"];
    for (const route of documentedRoutes) {
      const statuses = [...checked.get(route)!];
      expect(
        statuses.some((s) => s < 300),
        `${route}: ${statuses}`,
      ).toBe(true);
      if (!noError.includes(route)) {
        expect(
          statuses.some((s) => s >= 400),
          `${route}: ${statuses}`,
        ).toBe(true);
      }
    }
  });
});
