import fc from "fast-check";
import type { RouteOptions } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { requester } from "../test/requests.js";

// A property-based fuzz test of every route: whatever the path parameters, query string, body and
// key, the gateway never answers 5xx (501 from the routes listed below excepted), every error has
// pies' JSON shape, and no request hangs. Seeded, so that a failure can be replayed: fast-check
// prints the seed and path of a counterexample, and `SEED` below fixes the runs.
const SEED = 20261122;
/** Runs per route: over the API's 27 routes, about a thousand requests, in seconds. */
const RUNS_PER_ROUTE = 40;
/** A request that takes longer than this is a hang (no route waits on anything slow here). */
const REQUEST_TIMEOUT_MS = 10_000;

/** Routes whose operation is not built yet: they answer 501 once the input is valid. */
const NOT_BUILT = new Set<string>();

let pies: TestPies;
let call: ReturnType<typeof requester>;
const routes: { method: string; url: string }[] = [];
/** Ids of real resources, so that requests also reach past the lookups. */
const ids: string[] = [];
/** Credentials besides the admin key: a member key, a JWT of token exchange, a revoked key. */
const keys: Record<string, string> = {};
/**
 * Per route (`POST /api/v1/runs`), the field names its declaration gives to the OpenAPI document:
 * its body's properties (nested ones too) and its query parameters, so that a field added to a
 * route is fuzzed without editing this test.
 */
const declared = new Map<string, { body: string[]; query: string[] }>();

beforeAll(async () => {
  pies = await startTestPies({ executor: { PIES_TEMPLATE_TIMEOUT_MS: 2000 } });
  // The API's routes are registered in a plugin, when the app first becomes ready: a hook added
  // now sees every one of them, so that a route added later is fuzzed without editing this test.
  pies.app.addHook("onRoute", (route: RouteOptions) => {
    for (const method of [route.method].flat()) {
      if (method !== "HEAD") routes.push({ method, url: route.url });
    }
  });
  await pies.app.ready();
  call = requester(pies.app, pies.key);

  const prompt = await call("POST", "/prompts", {
    name: "p",
    content_type: "jst",
    content: "return `Tell me about ${topic}`",
    input_schema: { type: "object", properties: { topic: { type: "string" } } },
  });
  const interaction = await call("POST", "/interactions", {
    name: "Fuzz",
    environment: pies.environmentId,
    prompts: [prompt.json.id],
    result_schema: { type: "object", properties: { answer: { type: "string" } } },
  });
  const blocking = await call("POST", "/runs", {
    interaction: interaction.json.id,
    data: { topic: "y" },
  });
  const streamed = await call("POST", "/runs", {
    interaction: interaction.json.id,
    stream: true,
    data: { topic: "x" },
  });
  const spareKey = await call("POST", "/apikeys", { name: "spare" });
  const member = await call("POST", "/apikeys", { name: "member" });
  const revoked = await call("POST", "/apikeys", { name: "revoked" });
  const token = await call("POST", "/token/issue");
  for (const r of [prompt, interaction, blocking, streamed, spareKey]) {
    expect(r.status, r.text).toBeLessThan(300);
    ids.push(r.json.id);
  }
  ids.push(pies.environmentId, pies.projectId);
  expect((await call("DELETE", `/apikeys/${revoked.json.id}`)).status).toBe(204);
  Object.assign(keys, {
    member: member.json.key,
    jwt: token.json.token,
    revoked: revoked.json.key,
  });

  const doc = (await call("GET", "/openapi.json")).json;
  for (const [path, operations] of Object.entries<any>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(operations)) {
      const body = op.requestBody?.content?.["application/json"]?.schema;
      declared.set(`${method.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`, {
        body: body ? propertyNames(body) : [],
        query: (op.parameters ?? [])
          .filter((p: { in: string }) => p.in === "query")
          .map((p: { name: string }) => p.name),
      });
    }
  }
}, 120_000);

/** Every property name in a JSON Schema, at any depth. */
function propertyNames(schema: unknown, into = new Set<string>()): string[] {
  if (Array.isArray(schema)) schema.forEach((s) => propertyNames(s, into));
  else if (schema && typeof schema === "object") {
    for (const [key, value] of Object.entries(schema)) {
      if (key === "properties" && value && typeof value === "object") {
        for (const name of Object.keys(value)) into.add(name);
      }
      propertyNames(value, into);
    }
  }
  return [...into];
}

afterAll(async () => {
  await pies?.close();
});

// Values chosen to break things: NUL, over-long and odd strings, int32 and double edges, deep
// nesting, real ids, and whatever fast-check makes up.
const strings = fc.oneof(
  fc.string(),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.constantFrom(
    "",
    "\0",
    "a\0b",
    " ",
    ",",
    ",,a,",
    "%",
    "%zz",
    "../..",
    "null",
    "true",
    "-1",
    "0",
  ),
  fc.constantFrom("2147483647", "2147483648", "3000000000", "1e400", "-2147483649", "NaN", "0x10"),
  fc.constantFrom("Fuzz", "Fuzz@1", "Fuzz@999999999999", "Fuzz@latest", "Fuzz@draft", "Fuzz@"),
  fc.constantFrom("2024-01-01T00:00:00Z", "2024-13-45T99:99:99Z", "9999-12-31T23:59:59.999Z"),
  fc.constantFrom(
    "test",
    "test-fail",
    "test-invalid",
    "openai",
    "openai_compatible",
    "jst",
    "handlebars",
    "text",
    "chat",
  ),
  fc.integer({ min: 255, max: 12_000 }).map((n) => "x".repeat(n)),
  fc.constantFrom(...["€", "😀", "\u{10FFFF}", "\uD800"]).map((c) => c.repeat(300)),
  // Read when drawn: the ids exist only once beforeAll has run.
  fc.nat(20).map((i) => ids[i % ids.length]!),
);
const numbers = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(
    0,
    -1,
    1,
    2,
    2147483647,
    2147483648,
    3e9,
    -3e9,
    1e308,
    Number.MAX_SAFE_INTEGER,
    0.5,
  ),
);
const nested = fc
  .tuple(fc.integer({ min: 1, max: 60 }), fc.boolean(), fc.oneof(strings, numbers))
  .map(([depth, arrays, leaf]) => {
    let v: unknown = leaf;
    for (let i = 0; i < depth; i++) v = arrays && i % 2 ? [v] : { a: v };
    return v;
  });
const values: fc.Arbitrary<unknown> = fc.oneof(
  { depthSize: "small" },
  strings,
  numbers,
  fc.boolean(),
  fc.constant(null),
  nested,
  fc.jsonValue({ maxDepth: 4 }),
  fc.array(strings, { maxLength: 4 }),
  fc.dictionary(strings, strings, { maxKeys: 3 }),
);

/** Every field name the routes read, so that fuzzed bodies reach their validation. */
const bodyFields = [
  "name",
  "description",
  "status",
  "test_data",
  "result_schema",
  "resultSchema",
  "schema",
  "cache_policy",
  "model",
  "temperature",
  "max_tokens",
  "model_options",
  "environment",
  "prompts",
  "tags",
  "formatter",
  "store",
  "role",
  "content_type",
  "content",
  "inputSchema",
  "input_schema",
  "provider",
  "endpoint_url",
  "apiKey",
  "api_key",
  "default_model",
  "enabled_models",
  "config",
  "interaction",
  "interactionId",
  "stream",
  "data",
  "parent",
  "visibility",
  // Search, generation, keys and projects.
  "query",
  "defaultQueryPath",
  "facets",
  "filters",
  "onlyMeta",
  "limit",
  "offset",
  "count",
  "message",
  "project",
  "max_repairs",
];
const queryFields = [
  "limit",
  "offset",
  "interaction",
  "model",
  "environment",
  "status",
  "tag",
  "tags",
  "anchorDate",
  "anchorDateDirection",
  "parent",
  "name",
  "version",
  "access_token",
  "lastEventId",
];
const configValues = fc.record(
  {
    environment: values,
    model: values,
    temperature: values,
    max_tokens: values,
    formatter: values,
  },
  { requiredKeys: [] },
);

/** Bodies shaped as a search's, so that fuzzing reaches its facets and filters. */
const facetValues = fc.record(
  {
    type: fc.oneof(fc.constantFrom("string", "number", "date"), values),
    path: fc.oneof(fc.constantFrom("modelId", "parameters.topic", "status", "updated_at"), values),
    numBuckets: values,
    boundaries: fc.oneof(
      fc.array(numbers, { maxLength: 4 }),
      fc.array(strings, { maxLength: 4 }),
      values,
    ),
    default: values,
  },
  { requiredKeys: [] },
);
const searchBody = fc
  .record(
    {
      query: fc.oneof(
        strings,
        fc.constantFrom("a AND", "topic:x*", "[1 TO", "(a OR b) NOT c", '"x', "-", "+a -b"),
      ),
      defaultQueryPath: values,
      onlyMeta: values,
      limit: values,
      offset: values,
      facets: fc.oneof(fc.dictionary(strings, facetValues, { maxKeys: 3 }), values),
      filters: fc.oneof(
        fc.dictionary(
          fc.constantFrom(
            "interaction",
            "environment",
            "environemnt",
            "parent",
            "status",
            "tags",
            "modelId",
            "updated_at",
            "other",
          ),
          fc.oneof(values, fc.dictionary(fc.constantFrom("gt", "gte", "lt", "lte", "x"), strings)),
          { maxKeys: 4 },
        ),
        values,
      ),
    },
    { requiredKeys: [] },
  )
  .map((b) => JSON.stringify(b));

/** A route's bodies: any of the fields it declares or others read, with any values. */
const bodyFor = (fields: string[]) =>
  fc.oneof(
    fc.constant(undefined),
    fc
      .dictionary(fc.constantFrom(...new Set([...fields, ...bodyFields])), values, { maxKeys: 6 })
      .map((b) => JSON.stringify(b)),
    body,
    searchBody,
  );

const body = fc.oneof(
  fc.constant(undefined),
  fc
    .dictionary(fc.constantFrom(...bodyFields), values, { maxKeys: 6 })
    .map((b) => JSON.stringify(b)),
  fc
    .tuple(fc.dictionary(fc.constantFrom(...bodyFields), values, { maxKeys: 4 }), configValues)
    .map(([b, config]) =>
      JSON.stringify({ ...b, config, interaction: ids[1], data: b.data ?? {} }),
    ),
  values.map((v) => JSON.stringify(v) ?? "null"),
  // Text that JSON.stringify never writes: numbers beyond a double, NUL escapes, broken JSON.
  fc.constantFrom(
    '{"data":{"n":1e400}}',
    '{"name":"a\\u0000b"}',
    `{"data":${"[".repeat(5000)}"\\u0000"${"]".repeat(5000)}}`,
    '{"name":',
    "[]",
    '"x"',
    "",
  ),
);

/** Percent-encoding of any string's UTF-8 (encodeURIComponent throws on a lone surrogate). */
const percent = (s: string) =>
  [...Buffer.from(s, "utf8")]
    .map((b) =>
      /[A-Za-z0-9_.~-]/.test(String.fromCharCode(b))
        ? String.fromCharCode(b)
        : `%${b.toString(16).padStart(2, "0")}`,
    )
    .join("");

const queryFor = (fields: string[]) =>
  fc
    .array(
      fc.tuple(
        fc.oneof(
          fc.constantFrom(...new Set([...fields, ...queryFields])),
          fc.string({ maxLength: 5 }),
        ),
        strings,
      ),
      {
        maxLength: 4,
      },
    )
    .map((pairs) =>
      pairs.length === 0
        ? ""
        : "?" + pairs.map(([k, v]) => `${percent(k)}=${percent(v)}`).join("&"),
    );

// A path parameter is usually percent-encoded; sometimes it is sent as the raw text it is.
const pathParam = fc.oneof(
  strings.map((s) => percent(s)),
  fc.constantFrom("%", "%zz", "%E0%A4%A", "%00", "%2F", ".", ".."),
);

const request = (method: string, url: string) => {
  const fields = declared.get(`${method} ${url}`) ?? { body: [], query: [] };
  return fc.record({
    path: fc
      .constant(url)
      .chain((u) =>
        u.includes(":") ? pathParam.map((p) => u.replace(/:[A-Za-z]+/g, p)) : fc.constant(u),
      ),
    query: queryFor(fields.query),
    body: bodyFor(fields.body),
    contentType: fc.constantFrom(
      "application/json",
      "application/json",
      "text/plain",
      "application/json; charset=utf-8",
    ),
    key: fc.constantFrom(
      "valid",
      "valid",
      "valid",
      "jwt",
      "member",
      "none",
      "bad",
      "revoked",
      "forged",
      "malformed",
    ),
  });
};

/** A JWT of the right shape signed with a key that is not the gateway's. */
const FORGED =
  "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJrIiwiZXhwIjo0MTAyNDQ0ODAwfQ.c2lnbmVkLXdpdGgtYW5vdGhlci1rZXktMDEyMzQ1Njc4OQ";

/** The Authorization header of a fuzzed request's credential (none: no header). */
function authorization(key: string): Record<string, string> {
  const token =
    key === "valid"
      ? pies.key
      : key === "none"
        ? undefined
        : key === "bad"
          ? "sk-bad"
          : key === "forged"
            ? FORGED
            : key === "malformed"
              ? undefined
              : keys[key];
  if (key === "malformed") return { authorization: "Basic dXNlcjpwYXNz" };
  return token ? { authorization: `Bearer ${token}` } : {};
}

/** A request at its full path (the routes outside /api/v1 too). */
async function send(
  method: string,
  url: string,
  body: string | undefined,
  headers: Record<string, string>,
) {
  const response = await pies.app.inject({
    method: method as "GET",
    url,
    headers,
    ...(body === undefined ? {} : { payload: body }),
  });
  let json: any;
  try {
    json = response.body ? JSON.parse(response.body) : undefined;
  } catch {
    json = undefined;
  }
  return { status: response.statusCode, json, text: response.body };
}

describe("fuzzing every route", () => {
  it("finds the API's routes", () => {
    expect(routes.length).toBeGreaterThan(20);
    expect(routes).toContainEqual({ method: "GET", url: "/api/v1/runs/:id/stream" });
    expect(routes).toContainEqual({ method: "POST", url: "/token/issue" });
    // Each API route's declared fields are fuzzed: the document lists every one of them.
    for (const route of routes.filter((r) => r.url.startsWith("/api/v1/"))) {
      expect(declared.has(`${route.method} ${route.url}`), `${route.method} ${route.url}`).toBe(
        true,
      );
    }
    expect(declared.get("POST /api/v1/runs/search")!.body).toEqual(
      expect.arrayContaining(["facets", "filters", "numBuckets", "boundaries", "updated_at"]),
    );
    for (const route of NOT_BUILT) {
      const [method, url] = route.split(" ");
      expect(routes).toContainEqual({ method, url });
    }
  });

  it("never answers 5xx (but 501 where not built) and always answers errors as pies' JSON", async () => {
    let seed = SEED;
    // Answers by class, to show that the fuzzing reaches past validation too.
    const answered = { success: 0, clientError: 0 };
    for (const route of routes) {
      const name = `${route.method} ${route.url}`;
      await fc.assert(
        fc.asyncProperty(request(route.method, route.url), async (req) => {
          const url = req.path + req.query;
          const headers: Record<string, string> = {
            ...(req.body === undefined ? {} : { "content-type": req.contentType }),
            ...authorization(req.key),
          };
          const response = await Promise.race([
            send(route.method, url, req.body, headers),
            new Promise<never>((_, reject) =>
              setTimeout(
                () => reject(new Error(`${name}: no answer within ${REQUEST_TIMEOUT_MS} ms`)),
                REQUEST_TIMEOUT_MS,
              ).unref(),
            ),
          ]);
          const where = `${route.method} ${url} ${String(req.body).slice(0, 300)} → ${response.status} ${response.text.slice(0, 300)}`;
          if (response.status >= 500) {
            expect(response.status === 501 && NOT_BUILT.has(name), where).toBe(true);
          }
          answered[response.status < 400 ? "success" : "clientError"]++;
          if (response.status >= 400) {
            expect(response.json, where).toMatchObject({
              error: expect.any(String),
              status: response.status,
              code: expect.any(String),
              message: expect.any(String),
            });
          }
        }),
        {
          seed: seed++,
          numRuns: RUNS_PER_ROUTE,
          endOnFailure: true,
          // The failure's own message (request and answer, cut short) and how to replay it,
          // rather than fast-check's dump of a counterexample that may hold a 10 KB body.
          asyncReporter: async (details) => {
            if (!details.failed) return;
            throw new Error(
              `${name} failed (replay: seed ${details.seed}, path "${details.counterexamplePath}"): ` +
                String(details.errorInstance).slice(0, 2000),
            );
          },
        },
      );
    }
    expect(answered.success).toBeGreaterThan(routes.length);
    expect(answered.clientError).toBeGreaterThan(routes.length);
  }, 240_000);
});
