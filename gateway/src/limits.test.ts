import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, type JsonObject, jsonBytes } from "@pies/common";
import { ResolveExecutionResponseSchema } from "@pies/proto/catalog";
import { ExecuteRequestSchema } from "@pies/proto/executor";
import { READ_MAX_BYTES } from "@pies/common/server";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { requester, type TestResponse } from "../test/requests.js";
import { loadGatewaySettings, MAX_BODY_BYTES } from "./config.js";
import { checkJson } from "./json-body.js";

// Bad input of every kind that used to reach PostgreSQL or protobuf and come back as a 500: each
// is now a 400 (in pies' error shape) naming the field and the limit or range it broke.
let pies: TestPies;
let call: ReturnType<typeof requester>;
let interactionId: string;

beforeAll(async () => {
  // Not a test of template time limits: the first render in a fresh worker compiles QuickJS,
  // which can take longer than the default 100 ms on a busy machine.
  pies = await startTestPies({ executor: { PIES_TEMPLATE_TIMEOUT_MS: 5000 } });
  call = requester(pies.app, pies.key);
  interactionId = (await interaction("Summary", { content: "return `Summarise ${text}`" })).id;
}, 120_000);

afterAll(async () => {
  await pies.close();
});

async function interaction(name: string, prompt: Record<string, unknown>) {
  const p = await call("POST", "/prompts", {
    name: `${name}-prompt`,
    content_type: "jst",
    ...prompt,
  });
  expect(p.status, p.text).toBe(201);
  const i = await call("POST", "/interactions", {
    name,
    environment: pies.environmentId,
    prompts: [p.json.id],
  });
  expect(i.status, i.text).toBe(201);
  return i.json as { id: string };
}

/** A 400 in pies' shape whose message starts with `message` (a string) or matches it. */
function expect400(r: TestResponse, message: string | RegExp) {
  expect(r.status, r.text).toBe(400);
  expect(r.json).toMatchObject({ error: "Bad Request", status: 400, code: "invalid_request" });
  if (typeof message === "string")
    expect(r.json.message.startsWith(message), r.json.message).toBe(true);
  else expect(r.json.message).toMatch(message);
}

describe("NUL", () => {
  it("is refused in path and query parameters, naming the parameter", async () => {
    expect400(await call("GET", "/interactions/%00"), "id: path parameters must not contain NUL");
    expect400(await call("GET", "/runs/a%00b"), "id: path parameters must not contain NUL");
    expect400(await call("GET", "/runs?tag=%00"), "tag: query parameters must not contain NUL");
    expect400(await call("GET", "/runs?tag=a&tag=%00"), "tag: query parameters");
    expect400(await call("GET", "/prompts?x%00y=1"), "x\\u0000y: query parameters");
    expect400(await call("DELETE", "/apikeys/%00"), "id: path parameters must not contain NUL");
  });

  it("is refused in a body nested 5,000 deep without overflowing the stack (the depth limit first)", async () => {
    const deep = "[".repeat(5000) + '"\\u0000"' + "]".repeat(5000);
    const r = await call("POST", "/prompts", `{"test_data":{"a":${deep}}}`);
    expect400(r, /nested deeper than 32 levels \(PIES_MAX_JSON_DEPTH\)$/);
    expect(r.json.details).toEqual({ limit: "PIES_MAX_JSON_DEPTH", max: 32 });
  });

  it("names where it is in a body, key or value", async () => {
    expect400(
      await call("POST", "/prompts", '{"test_data":{"list":["ok","a\\u0000"]}}'),
      "test_data.list.1: strings in the request body must not contain NUL",
    );
    expect400(
      await call("POST", "/prompts", '{"test_data":{"k\\u0000":1}}'),
      "test_data.k\\u0000: strings in the request body must not contain NUL",
    );
  });

  it("is refused when a template renders it, naming the template, rather than cut off", async () => {
    const nul = await interaction("Nul", {
      content: "return 'before' + String.fromCharCode(0) + 'after'",
    });
    const r = await call("POST", `/interactions/${nul.id}/execute`, { data: {} });
    expect400(
      r,
      "template error: prompt template Nul-prompt: its output contains a NUL character (\\u0000)",
    );
    const runs = await call("GET", `/runs?interaction=${nul.id}`);
    expect(runs.json).toEqual([]);
  });
});

describe("int32 fields", () => {
  it("refuses query integers out of range, naming the field and the range", async () => {
    for (const path of ["/runs", "/prompts", "/interactions"]) {
      expect400(
        await call("GET", `${path}?offset=2147483648`),
        "offset: must be an integer from 0 to 2147483647",
      );
      expect400(
        await call("GET", `${path}?limit=2147483648`),
        "limit: must be an integer from 1 to 1000",
      );
      expect400(await call("GET", `${path}?offset=abc`), "offset: must be an integer from 0");
    }
    expect400(
      await call("GET", "/interactions?version=3000000000"),
      "version: must be an integer from 1 to 2147483647",
    );
    const edge = await call("GET", "/runs?offset=2147483647");
    expect(edge.status, edge.text).toBe(200);
    expect(edge.json).toEqual([]);
    expect((await call("GET", "/interactions?version=2147483647")).status).toBe(200);
  });

  it("refuses max_tokens and a cache ttl beyond int32 wherever they are given", async () => {
    const range = "must be an integer from 1 to 2147483647";
    expect400(
      await call("POST", "/interactions", { name: "M", max_tokens: 3e9 }),
      `max_tokens: ${range}`,
    );
    expect400(
      await call("POST", "/interactions", { name: "M", model_options: { max_tokens: 3e9 } }),
      `model_options.max_tokens: ${range}`,
    );
    expect400(
      await call("POST", "/interactions", { name: "M", cache_policy: { type: "cache", ttl: 3e9 } }),
      "cache_policy.ttl: must be an integer from 0 to 2147483647",
    );
    for (const path of ["/runs", "/execute", `/interactions/${interactionId}/execute`]) {
      expect400(
        await call("POST", path, {
          interaction: interactionId,
          config: { max_tokens: 3000000000 },
        }),
        `config.max_tokens: ${range}`,
      );
    }
  });

  it("refuses a version selector beyond int32 when executing by name", async () => {
    expect400(
      await call("POST", "/execute", { interaction: "Summary@999999999999", data: { text: "x" } }),
      "version selector 999999999999 must be latest, draft or a number from 1 to 2147483647",
    );
    expect400(
      await call("POST", "/execute", { interaction: "Summary@1e3" }),
      "version selector 1e3",
    );
    const missing = await call("POST", "/execute", { interaction: "Summary@2147483647" });
    expect(missing.status).toBe(404);
  });
});

describe("nesting depth", () => {
  const nested = (levels: number): unknown => {
    let v: unknown = "x";
    for (let i = 0; i < levels; i++) v = i % 2 ? [v] : { a: v };
    return v;
  };

  it("accepts a body nested to PIES_MAX_JSON_DEPTH and refuses one level more", async () => {
    const max = loadGatewaySettings({}).PIES_MAX_JSON_DEPTH;
    // The body is one level; its input_schema holds the rest.
    const ok = await call("POST", "/prompts", {
      name: "d",
      content: "x",
      input_schema: nested(max - 1),
    });
    expect(ok.status, ok.text).toBe(201);
    const r = await call("POST", "/prompts", {
      name: "d",
      content: "x",
      input_schema: nested(max),
    });
    expect400(r, /^input_schema(\.(a|0))+: the request body is nested deeper than 32 levels/);
    expect(r.json.message).toContain(`nested deeper than ${max} levels (PIES_MAX_JSON_DEPTH)`);
    const data = await call("POST", `/interactions/${interactionId}/execute`, {
      data: { text: "t", deep: nested(max) },
    });
    expect400(data, "data.deep.0.a.0");
  });

  it("executes with data and schemas nested to the limit (no protobuf recursion error)", async () => {
    const max = loadGatewaySettings({}).PIES_MAX_JSON_DEPTH;
    const p = await call("POST", "/prompts", {
      name: "deep",
      content: "ok",
      input_schema: { type: "object", x: nested(max - 2) },
    });
    expect(p.status, p.text).toBe(201);
    const i = await call("POST", "/interactions", {
      name: "Deep",
      environment: pies.environmentId,
      prompts: [p.json.id],
    });
    const r = await call("POST", `/interactions/${i.json.id}/execute`, {
      data: { deep: nested(max - 2) },
    });
    expect(r.status, r.text).toBe(200);
    const listed = await call("GET", `/runs?interaction=${i.json.id}`);
    expect(listed.json[0].parameters).toEqual({ deep: nested(max - 2) });
  });

  it("walks input of any depth without recursion, refusing NUL and non-finite numbers", () => {
    let deep: unknown = "\0";
    for (let i = 0; i < 200_000; i++) deep = [deep];
    expect(checkJson(deep, Infinity)?.message).toMatch(
      /^0\.0\.0.*: strings in the request body must not contain NUL/,
    );
    expect(checkJson(deep, 10)?.message).toBe(
      "0.0.0.0.0.0.0.0.0.0: the request body is nested deeper than 10 levels (PIES_MAX_JSON_DEPTH)",
    );
    expect(checkJson({ a: [1, { b: JSON.parse("1e400") }] }, 10)?.message).toBe(
      "a.1.b: the number is too large (beyond a double's range)",
    );
    expect(checkJson({ a: [1, { b: "fine" }], c: null }, 3)).toBeUndefined();
    expect(checkJson("\0", 3)?.message).toMatch(/^body: /);
  });

  it("refuses a number too large for a double in a body", async () => {
    expect400(
      await call(
        "POST",
        `/interactions/${interactionId}/execute`,
        '{"data":{"text":"t","n":1e400}}',
      ),
      "data.n: the number is too large",
    );
  });
});

describe("string lengths", () => {
  const long = "x".repeat(12 * 1024);
  const limit = "must be at most 256 characters long (PIES_MAX_NAME_LENGTH)";

  it("refuses over-long names, models, tags and ids in bodies, naming the field", async () => {
    const cases: [string, string, unknown, string][] = [
      ["POST", "/interactions", { name: long }, "name"],
      ["POST", "/interactions", { name: "n", model: long }, "model"],
      ["POST", "/interactions", { name: "n", tags: ["ok", long] }, "tags.1"],
      ["POST", "/interactions", { name: "n", tags: `a,${long}` }, "tags.1"],
      ["POST", "/interactions", { name: "n", environment: long }, "environment"],
      ["POST", "/interactions", { name: "n", prompts: [long] }, "prompts.0"],
      ["POST", "/interactions", { name: "n", prompts: [{ template: long }] }, "prompts.0.template"],
      ["POST", "/prompts", { name: long }, "name"],
      [
        "POST",
        "/environments",
        { name: "e", provider: "test", default_model: long },
        "default_model",
      ],
      ["POST", "/environments", { name: "e", enabled_models: [long] }, "enabled_models.0"],
      ["POST", "/projects", { name: long }, "name"],
      ["POST", "/apikeys", { name: long }, "name"],
      ["POST", "/runs", { interaction: interactionId, parent: long }, "parent"],
      ["POST", "/runs", { interaction: interactionId, tags: [long] }, "tags.0"],
      ["POST", "/runs", { interaction: interactionId, config: { model: long } }, "config.model"],
    ];
    for (const [method, path, body, field] of cases) {
      expect400(await call(method, path, body), `${field}: ${limit}`);
    }
    expect400(
      await call("POST", "/execute", { interaction: long }),
      "interaction: must be a name of at most 256 characters (PIES_MAX_NAME_LENGTH) and an @version",
    );
    const querySize = "x".repeat(300);
    expect400(await call("GET", `/runs?tag=${querySize}`), `tag.0: ${limit}`);
    expect400(await call("GET", `/runs?parent=${querySize}`), `parent: ${limit}`);
    expect400(await call("GET", `/interactions?name=${querySize}`), `name: ${limit}`);
  });

  it("accepts strings at the limit, in characters of any width", async () => {
    const atLimit = "€".repeat(256);
    const p = await call("POST", "/prompts", { name: atLimit, content: "hi" });
    expect(p.status, p.text).toBe(201);
    const i = await call("POST", "/interactions", {
      name: atLimit,
      model: atLimit,
      tags: [atLimit],
      environment: pies.environmentId,
      prompts: [p.json.id],
    });
    expect(i.status, i.text).toBe(201);
    const r = await call("POST", "/execute", {
      interaction: `${atLimit}@draft`,
      tags: [atLimit],
      config: { model: "test" },
    });
    expect(r.status, r.text).toBe(200);
    expect(r.json).toMatchObject({ tags: [atLimit], interaction: { name: atLimit } });
  });
});

describe("rendered prompt size", () => {
  it("refuses a prompt larger than PIES_MAX_PROMPT_BYTES, naming the limit and the template", async () => {
    const repeat = await interaction("Repeat", {
      content: "return text.repeat(times)",
      input_schema: {
        type: "object",
        properties: { text: { type: "string" }, times: { type: "integer" } },
      },
    });
    const text = "x".repeat(66);
    const tooLarge = await call("POST", `/interactions/${repeat.id}/execute`, {
      data: { text, times: 20_000 },
    });
    expect400(
      tooLarge,
      "the rendered prompt is larger than 1048576 bytes (PIES_MAX_PROMPT_BYTES), reached at prompt template Repeat-prompt",
    );
    expect((await call("GET", `/runs?interaction=${repeat.id}`)).json).toEqual([]);
    const fits = await call("POST", `/interactions/${repeat.id}/execute`, {
      data: { text, times: 15_000 },
    });
    expect(fits.status, fits.text.slice(0, 200)).toBe(200);
  });
});

describe("the bounds of the configurable limits", () => {
  const nested = (levels: number) => {
    let v: JsonObject = {};
    for (let i = 1; i < levels; i++) v = { a: v };
    return v;
  };
  // The deepest place a body's JSON reaches as a Struct while the payloads' old fields are written
  // for a rolling upgrade (PIES_WRITE_LEGACY_PAYLOADS, decision 0059): a template's input schema,
  // inside the interaction that the catalog resolves for an execution. The next release, which
  // drops those fields, can lift the bound.
  const roundTrip = (schemaDepth: number) => {
    const message = create(ResolveExecutionResponseSchema, {
      interaction: { prompts: [{ template: { inputSchema: nested(schemaDepth) } }] },
    });
    return fromBinary(
      ResolveExecutionResponseSchema,
      toBinary(ResolveExecutionResponseSchema, message),
    );
  };

  it("PIES_MAX_JSON_DEPTH is at most 48, what protobuf's recursion limit lets through", () => {
    // A body at the maximum depth holds a schema one level less deep.
    expect(() => roundTrip(47)).not.toThrow();
    expect(() => roundTrip(49)).toThrow(/maximum recursion depth/);
    expect(loadGatewaySettings({ PIES_MAX_JSON_DEPTH: "48" }).PIES_MAX_JSON_DEPTH).toBe(48);
    expect(() => loadGatewaySettings({ PIES_MAX_JSON_DEPTH: "49" })).toThrow(ConfigError);
  });

  it("PIES_MAX_BODY_BYTES is at most what the services read once the body is protobuf", () => {
    // The body that grows most as protobuf: one-digit numbers, at the largest size allowed.
    const count = Math.floor((MAX_BODY_BYTES - '{"a":[]}'.length + 1) / 2);
    const body = `{"a":[${Array(count).fill(0).join(",")}]}`;
    expect(body.length).toBeLessThanOrEqual(MAX_BODY_BYTES);
    const request = create(ExecuteRequestSchema, {
      interaction: { case: "interactionName", value: "n".repeat(800) },
      dataJson: jsonBytes(JSON.parse(body) as JsonObject),
      tags: ["t".repeat(800)],
    });
    expect(toBinary(ExecuteRequestSchema, request).length).toBeLessThan(READ_MAX_BYTES);
    expect(loadGatewaySettings({}).PIES_MAX_BODY_BYTES).toBeLessThanOrEqual(MAX_BODY_BYTES);
    expect(
      loadGatewaySettings({ PIES_MAX_BODY_BYTES: String(MAX_BODY_BYTES) }).PIES_MAX_BODY_BYTES,
    ).toBe(MAX_BODY_BYTES);
    expect(() => loadGatewaySettings({ PIES_MAX_BODY_BYTES: String(MAX_BODY_BYTES + 1) })).toThrow(
      ConfigError,
    );
  });

  it("PIES_MAX_NAME_LENGTH is at most 800, what PostgreSQL's index entries can hold", async () => {
    // Random three-byte characters, so that PostgreSQL cannot compress the index entry.
    const text = (length: number) =>
      String.fromCharCode(
        ...Array.from({ length }, () => 0x4e00 + Math.floor(Math.random() * 0x5000)),
      );
    const insertRun = (length: number) =>
      pies.db
        .insertInto("runs.runs")
        .values({
          id: text(24),
          project_id: pies.projectId,
          account_id: "a",
          interaction_id: text(length),
          model_id: text(length),
          environment_id: text(length),
          parent_id: text(length),
          tags: [text(length)],
          status: "completed",
        })
        .execute();
    await insertRun(800);
    await expect(insertRun(1000)).rejects.toThrow(/index row/);
    const named = await pies.catalog.createInteraction({
      projectId: pies.projectId,
      interaction: { name: text(800) },
    });
    expect(named.interaction?.name).toHaveLength(800);
    expect(() => loadGatewaySettings({ PIES_MAX_NAME_LENGTH: "801" })).toThrow(ConfigError);
  });
});
