import { afterAll, beforeAll, describe, expect, it } from "vitest";
import fc from "fast-check";
import {
  Code,
  ConnectError,
  createClient,
  createRouterTransport,
  type Client,
} from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { sql, type Kysely } from "kysely";
import pg from "pg";
import { newId, toTimestamp, type JsonObject, type JsonValue, jsonOf } from "@pies/common";
import { MemoryRunRecords, RunLog } from "@pies/common/bus";
import { buildIndexes, createDatabase, migrateToLatest } from "@pies/common/db";
import { createTestDatabase, expectCode, seedRuns, type TestDatabase } from "@pies/testkit";
import {
  FacetType,
  RunsService,
  RunStatus,
  type FacetSchema,
  type RunFiltersSchema,
  type SearchRunsRequestSchema,
} from "@pies/proto/runs";
import { indexBuilds } from "../src/migrations/index-builds.js";
import { migrations } from "../src/migrations/index.js";
import { TOTAL_EXACT_UP_TO } from "../src/search.js";
import { runsRoutes } from "../src/service.js";
import type { RunsDatabase } from "../src/tables.js";

// POST /runs/search's service on the real PostgreSQL server: every filter alone and combined,
// range and bucket edges, facets over filtered sets, the Lucene queries, validation, tenant
// isolation, and a property test comparing the SQL with an in-memory evaluation.
let testDb: TestDatabase;
let db: Kysely<RunsDatabase>;
let runs: Client<typeof RunsService>;
/** The same service, looking for a page among the newest 4 runs before the trigram patterns. */
let windowed: Client<typeof RunsService>;

type SearchInit = Omit<MessageInitShape<typeof SearchRunsRequestSchema>, "$typeName">;
type FiltersInit = Omit<MessageInitShape<typeof RunFiltersSchema>, "$typeName">;
type FacetInit = Omit<MessageInitShape<typeof FacetSchema>, "$typeName">;

beforeAll(async () => {
  testDb = await createTestDatabase("search");
  db = createDatabase<RunsDatabase>({ url: testDb.url, poolMax: 10 });
  await migrateToLatest(db, "runs", migrations);
  await buildIndexes(db, "runs", indexBuilds);
  const log = new RunLog(new MemoryRunRecords());
  runs = createClient(RunsService, createRouterTransport(runsRoutes({ db, log })));
  windowed = createClient(
    RunsService,
    createRouterTransport(runsRoutes({ db, log, pageWindow: 4 })),
  );
});

afterAll(async () => {
  await db?.destroy();
  await testDb?.drop();
});

const T0 = Date.parse("2026-03-01T00:00:00.000Z");
/** T0 plus `m` minutes. */
const at = (m: number) => new Date(T0 + m * 60_000);

interface Row {
  id: string;
  project_id: string;
  interaction_id?: string;
  environment_id?: string;
  model_id?: string;
  status?: string;
  tags?: string[];
  parent_id?: string | null;
  execution_time?: number | null;
  parameters?: JsonObject;
  updated_at: Date;
}

async function insert(rows: Row[]) {
  if (rows.length === 0) return;
  await db
    .insertInto("runs.runs")
    .values(
      rows.map((r) => ({
        id: r.id,
        project_id: r.project_id,
        account_id: "acc",
        stream: false,
        ttl: 0,
        provider: "",
        cached: false,
        interaction_name: "",
        environment_name: "",
        config: "{}",
        source: "{}",
        interaction_id: r.interaction_id ?? "i-1",
        environment_id: r.environment_id ?? "e-1",
        model_id: r.model_id ?? "m-1",
        status: r.status ?? "completed",
        tags: r.tags ?? [],
        parent_id: r.parent_id ?? null,
        execution_time: r.execution_time === undefined ? 100 : r.execution_time,
        parameters: JSON.stringify(r.parameters ?? {}),
        updated_at: r.updated_at,
      })),
    )
    .execute();
}

const search = async (projectId: string, req: Omit<SearchInit, "projectId"> = {}) =>
  runs.searchRuns({ projectId, limit: 1000, ...req });
const idsOf = async (projectId: string, req: Omit<SearchInit, "projectId"> = {}) =>
  (await search(projectId, req)).runs.map((r) => r.id);
const buckets = (res: Awaited<ReturnType<typeof search>>, name: string) =>
  res.meta!.facets[name]!.buckets.map((b) => ({
    id: b.id,
    count: Number(b.count),
    ...(b.isDefault ? { isDefault: true } : {}),
  }));

// The fixture project: runs a…h, one minute apart (a oldest), each field varied.
const P = `search-${newId()}`;
const OTHER = `search-other-${newId()}`;
const fixture: Row[] = (
  [
    {
      id: "a",
      interaction_id: "i-1",
      environment_id: "e-1",
      model_id: "gpt",
      status: "completed",
      tags: ["x"],
      execution_time: 100,
      parameters: {
        customer: { name: "Acme", tier: "pro" },
        amount: 10,
        text: "refund please",
        items: [{ sku: "s-1" }, { sku: "s-2" }],
      },
    },
    {
      id: "b",
      interaction_id: "i-2",
      environment_id: "e-1",
      model_id: "gpt",
      status: "failed",
      tags: ["y"],
      execution_time: 200,
      parameters: { customer: { name: "Globex", tier: "free" }, amount: 20, text: "late delivery" },
    },
    {
      id: "c",
      interaction_id: "i-1",
      environment_id: "e-2",
      model_id: "claude",
      status: "completed",
      tags: ["x", "y"],
      execution_time: 250,
      parameters: { customer: { name: "Acme Corp", tier: "pro" }, amount: 30, text: "Refund" },
    },
    {
      id: "d",
      interaction_id: "i-2",
      environment_id: "e-2",
      model_id: "claude",
      status: "processing",
      tags: [],
      execution_time: 300,
      parameters: { customer: { name: "acme" }, amount: 40.5, flags: ["vip", "beta"] },
    },
    {
      id: "e",
      interaction_id: "i-1",
      environment_id: "e-1",
      model_id: "llama",
      status: "created",
      tags: ["z"],
      execution_time: null,
      parent_id: "a",
      parameters: { customer: { name: "Initech" }, amount: "50", note: "true" },
    },
    {
      id: "f",
      interaction_id: "i-3",
      environment_id: "e-3",
      model_id: "llama",
      status: "completed",
      tags: ["x"],
      execution_time: 99,
      parent_id: "a",
      parameters: { customer: { name: "Hooli" }, amount: 60, ok: true },
    },
    {
      id: "g",
      interaction_id: "i-3",
      environment_id: "e-3",
      model_id: "gpt",
      status: "failed",
      tags: ["y", "z"],
      execution_time: 1000,
      parent_id: "c",
      parameters: { text: "hello world", customer: { name: "Acme" } },
    },
    {
      id: "h",
      interaction_id: "i-1",
      environment_id: "e-1",
      model_id: "mistral",
      status: "completed",
      tags: ["x"],
      execution_time: 150,
      parameters: { text: "hello", deep: { er: { still: "found" } } },
    },
  ] as Omit<Row, "project_id" | "updated_at">[]
).map((r, i) => ({ ...r, project_id: P, updated_at: at(i) }));
/** Ids newest first (the default order). */
const newest = (...ids: string[]) =>
  [...ids].sort(
    (x, y) => fixture.findIndex((r) => r.id === y) - fixture.findIndex((r) => r.id === x),
  );

describe("search over the fixture", () => {
  beforeAll(async () => {
    await insert(fixture);
    // Another project with look-alike runs: never seen from P.
    await insert(
      fixture.map((r) => ({
        ...r,
        id: `other-${r.id}`,
        project_id: OTHER,
        parent_id: r.parent_id ? `other-${r.parent_id}` : null,
      })),
    );
  });

  it("orders by updated_at then id, both descending, and pages with limit and offset", async () => {
    expect(await idsOf(P)).toEqual(["h", "g", "f", "e", "d", "c", "b", "a"]);
    expect(await idsOf(P, { limit: 3, offset: 2 })).toEqual(["f", "e", "d"]);
    // No meta unless asked for (no facets, no onlyMeta).
    expect((await search(P)).meta).toBeUndefined();
  });

  it.each<[string, FiltersInit, string[]]>([
    ["interaction", { interactionIds: ["i-1"] }, ["a", "c", "e", "h"]],
    ["environment", { environmentIds: ["e-2"] }, ["c", "d"]],
    ["parent: top level only", { topLevelOnly: true }, ["a", "b", "c", "d", "h"]],
    ["parent: a run's children", { parentId: "a" }, ["e", "f"]],
    ["status", { status: RunStatus.FAILED }, ["b", "g"]],
    ["tags (any in common)", { tags: ["z"] }, ["e", "g"]],
    ["tags, several", { tags: ["y", "z"] }, ["b", "c", "e", "g"]],
    ["modelId", { models: ["claude"] }, ["c", "d"]],
    [
      "combined",
      { interactionIds: ["i-1"], status: RunStatus.COMPLETED, tags: ["x"] },
      ["a", "c", "h"],
    ],
    ["combined with parent", { models: ["gpt"], topLevelOnly: true }, ["a", "b"]],
  ])("filters by %s", async (_name, filters, expected) => {
    expect(await idsOf(P, { filters })).toEqual(newest(...expected));
  });

  it("updated_at ranges: gt excludes and gte includes the exact timestamp, as lt and lte", async () => {
    const t = toTimestamp(at(3)); // run d
    expect(await idsOf(P, { filters: { updatedAfter: t } })).toEqual(newest("e", "f", "g", "h"));
    expect(await idsOf(P, { filters: { updatedAfter: t, updatedAfterInclusive: true } })).toEqual(
      newest("d", "e", "f", "g", "h"),
    );
    expect(await idsOf(P, { filters: { updatedBefore: t } })).toEqual(newest("a", "b", "c"));
    expect(await idsOf(P, { filters: { updatedBefore: t, updatedBeforeInclusive: true } })).toEqual(
      newest("a", "b", "c", "d"),
    );
    expect(
      await idsOf(P, {
        filters: {
          updatedAfter: toTimestamp(at(1)),
          updatedAfterInclusive: true,
          updatedBefore: toTimestamp(at(3)),
        },
      }),
    ).toEqual(newest("b", "c"));
    // A millisecond off the exact time changes what gt and gte agree on.
    const justAfter = toTimestamp(new Date(at(3).getTime() + 1));
    expect(
      await idsOf(P, { filters: { updatedAfter: justAfter, updatedAfterInclusive: true } }),
    ).toEqual(newest("e", "f", "g", "h"));
  });

  describe("Lucene queries", () => {
    it.each<[string, string, string[], string?]>([
      ["a field term at a nested path", "customer.name:Acme", ["a", "g"]],
      ["exact and case-sensitive", "customer.name:acme", ["d"]],
      ["a phrase", 'customer.name:"Acme Corp"', ["c"]],
      ["a phrase never matches a part", 'text:"hello"', ["h"]],
      ["a trailing wildcard", "customer.name:Acme*", ["a", "c", "g"]],
      ["a leading wildcard", "text:*please", ["a"]],
      ["a ? wildcard", "customer.name:Acm?", ["a", "g"]],
      ["an escaped wildcard is literal", "customer.name:Acme\\*", []],
      ["exists", "flags:*", ["d"]],
      ["a number term matches the number and the string", "amount:50", ["e"]],
      ["a number term", "amount:40.5", ["d"]],
      ["a boolean term matches true and the string", "ok:true", ["f"]],
      ["an array element", "flags:vip", ["d"]],
      ["a path through an array", "items.sku:s-2", ["a"]],
      ["inclusive range", "amount:[20 TO 40.5]", ["b", "c", "d"]],
      ["exclusive range", "amount:{20 TO 40.5}", ["c"]],
      ["mixed range", "amount:[20 TO 40.5}", ["b", "c"]],
      ["open range", "amount:[30 TO *]", ["c", "d", "f"]],
      ["string range", "customer.tier:[free TO pro}", ["b"]],
      ["NOT", "NOT customer.name:Acme", ["b", "c", "d", "e", "f", "h"]],
      ["- prohibits", "text:* -text:hello", ["a", "b", "c", "g"]],
      ["AND binds tighter than OR", "customer.tier:pro AND amount:30 OR text:hello", ["c", "h"]],
      ["grouping", "customer.tier:pro AND (amount:30 OR amount:10)", ["a", "c"]],
      ["field group", "customer.name:(Hooli OR Initech)", ["e", "f"]],
      ["terms side by side are ANDed", "customer.tier:pro amount:10", ["a"]],
      ["a deep path", "deep.er.still:found", ["h"]],
      ["a bare term matches any value anywhere", "found", ["h"]],
      ["a bare term matches any value anywhere (array)", "beta", ["d"]],
      ["a bare term with defaultQueryPath", "hello", ["h"], "text"],
      ["a bare phrase with defaultQueryPath", '"hello world"', ["g"], "text"],
      ["a bare term with a nested defaultQueryPath", "Acme", ["a", "g"], "customer.name"],
      ["bare * matches every run", "*", ["a", "b", "c", "d", "e", "f", "g", "h"]],
    ])("%s: %s", async (_name, query, expected, defaultQueryPath) => {
      expect(await idsOf(P, { query, defaultQueryPath })).toEqual(newest(...expected));
    });

    it("combines a query with filters", async () => {
      expect(
        await idsOf(P, { query: "customer.name:Acme*", filters: { status: RunStatus.COMPLETED } }),
      ).toEqual(newest("a", "c"));
    });

    it.each([
      ["a AND (", /query: syntax error.* at position 7/],
      ["customer.name:", /query: syntax error.* at position 14/],
      ["a:[1 TO", /query: syntax error.* at position 7/],
      ["a:/re/", /query: regular expressions are not supported at position 2/],
      ["a:foo~", /fuzzy/],
      ['a:"x y"~2', /proximity/],
      ["a..b:x", /empty path segment at position 0/],
      ["a AND", /query: syntax error: AND with nothing after it at position 5/],
      ["a:x OR ", /query: syntax error: OR with nothing after it at position 6/],
    ])("answers %s with INVALID_ARGUMENT naming the position", async (query, message) => {
      await expectCode(search(P, { query }), Code.InvalidArgument, message);
    });

    it("is safe against injection: values and paths are bound, never SQL", async () => {
      for (const query of [
        `customer.name:"x'); drop table runs.runs; --"`,
        `text:"\\" || true || \\""`,
        `customer\\".name:Acme`,
        `amount:[1 TO 2) or 1=1]`,
      ]) {
        const answer = await search(P, { query }).catch((e: unknown) => e as ConnectError);
        if (answer instanceof ConnectError) expect(answer.code).toBe(Code.InvalidArgument);
        else expect(answer.runs).toEqual([]);
      }
      expect(await idsOf(P)).toHaveLength(8);
    });
  });

  describe("facets", () => {
    const string = (path: string, numBuckets = 0): FacetInit => ({
      type: FacetType.STRING,
      path,
      numBuckets,
    });

    it("string facets: counts by value, ties by value, cut at numBuckets", async () => {
      const res = await search(P, {
        facets: { status: string("status"), models: string("modelId", 3), tags: string("tags", 2) },
      });
      expect(buckets(res, "status")).toEqual([
        { id: "completed", count: 4 },
        { id: "failed", count: 2 },
        { id: "created", count: 1 },
        { id: "processing", count: 1 },
      ]);
      // gpt 3, claude 2, llama 2, mistral 1: the cut keeps claude and llama in value order.
      expect(buckets(res, "models")).toEqual([
        { id: "gpt", count: 3 },
        { id: "claude", count: 2 },
        { id: "llama", count: 2 },
      ]);
      // x 4, y 3, z 2.
      expect(buckets(res, "tags")).toEqual([
        { id: "x", count: 4 },
        { id: "y", count: 3 },
      ]);
      expect(Number(res.meta!.total)).toBe(8);
      expect(res.runs).toHaveLength(8);
    });

    it("number facets: a value equal to a boundary lands in the upper bucket; default bucket", async () => {
      const facet = (defaultBucket = ""): FacetInit => ({
        type: FacetType.NUMBER,
        path: "execution_time",
        numberBoundaries: [100, 200, 300],
        defaultBucket,
      });
      // 99 (f), 100 (a), 150 (h), 200 (b), 250 (c), 300 (d), 1000 (g), none (e).
      const res = await search(P, { facets: { t: facet(), d: facet("other") } });
      expect(buckets(res, "t")).toEqual([
        { id: "100", count: 2 },
        { id: "200", count: 2 },
      ]);
      expect(buckets(res, "d")).toEqual([
        { id: "100", count: 2 },
        { id: "200", count: 2 },
        { id: "other", count: 4, isDefault: true },
      ]);
    });

    it("date facets: lower bound inclusive, upper exclusive, empty buckets listed", async () => {
      const res = await search(P, {
        facets: {
          d: {
            type: FacetType.DATE,
            path: "updated_at",
            dateBoundaries: [at(1), at(3), at(7), at(100), at(200)].map((d) => toTimestamp(d)!),
            defaultBucket: "outside",
          },
        },
      });
      expect(buckets(res, "d")).toEqual([
        { id: at(1).toISOString(), count: 2 }, // b, c
        { id: at(3).toISOString(), count: 4 }, // d…g (h is at 7: the next bucket)
        { id: at(7).toISOString(), count: 1 },
        { id: at(100).toISOString(), count: 0 },
        { id: "outside", count: 1, isDefault: true }, // a
      ]);
    });

    it("count every match of the query and filters, not the page; onlyMeta leaves out the runs", async () => {
      const req = {
        query: "customer.name:Acme*",
        filters: { tags: ["x", "y"] },
        facets: { status: string("status") },
      };
      const page = await search(P, { ...req, limit: 1 });
      expect(page.runs.map((r) => r.id)).toEqual(["g"]);
      expect(Number(page.meta!.total)).toBe(3); // a, c, g
      expect(buckets(page, "status")).toEqual([
        { id: "completed", count: 2 },
        { id: "failed", count: 1 },
      ]);
      const meta = await search(P, { ...req, onlyMeta: true });
      expect(meta.runs).toEqual([]);
      expect(meta.meta).toEqual(page.meta);
      // onlyMeta without facets: the total alone.
      const total = await search(P, { onlyMeta: true, filters: { models: ["gpt"] } });
      expect(Number(total.meta!.total)).toBe(3);
      expect(total.meta!.facets).toEqual({});
    });

    it.each<[string, SearchInit, RegExp]>([
      [
        "an unknown path",
        { facets: { x: string("nope") } },
        /facets\.x\.path: "nope" is not a facet path/,
      ],
      [
        "a path of another type",
        { facets: { x: { type: FacetType.NUMBER, path: "status", numberBoundaries: [1, 2] } } },
        /status is a string facet, not number/,
      ],
      ["no type", { facets: { x: { path: "status" } } }, /not unspecified/],
      [
        "one boundary",
        {
          facets: { x: { type: FacetType.NUMBER, path: "execution_time", numberBoundaries: [1] } },
        },
        /at least two/,
      ],
      [
        "unsorted boundaries",
        {
          facets: {
            x: { type: FacetType.NUMBER, path: "execution_time", numberBoundaries: [1, 3, 2] },
          },
        },
        /ascending order \(entry 2\)/,
      ],
      [
        "equal boundaries",
        {
          facets: {
            x: {
              type: FacetType.DATE,
              path: "updated_at",
              dateBoundaries: [toTimestamp(at(1))!, toTimestamp(at(1))!],
            },
          },
        },
        /ascending/,
      ],
      [
        "numBuckets too large",
        { facets: { x: string("status", 5000) } },
        /numBuckets: must be 1 to 1000/,
      ],
      ["a negative limit", { limit: -1 }, /limit/],
      ["a negative offset", { offset: -1 }, /offset/],
    ])("rejects %s with INVALID_ARGUMENT saying what is wrong", async (_name, req, message) => {
      await expectCode(runs.searchRuns({ projectId: P, ...req }), Code.InvalidArgument, message);
    });
  });

  it("keeps tenants apart: list, search and facets see only the caller's project", async () => {
    const listed = await runs.listRuns({ projectId: P, limit: 1000 });
    expect(listed.runs.every((r) => r.projectId === P)).toBe(true);
    expect(listed.runs).toHaveLength(8);
    const res = await search(P, {
      query: "*",
      facets: { s: { type: FacetType.STRING, path: "status" } },
    });
    expect(res.runs.every((r) => r.projectId === P)).toBe(true);
    expect(Number(res.meta!.total)).toBe(8);
    // The other project's children of "a" are "other-e" and "other-f": not P's run "a".
    expect(await idsOf(OTHER, { filters: { parentId: "a" } })).toEqual([]);
    expect(await idsOf(`search-nobody-${newId()}`, { query: "customer.name:Acme" })).toEqual([]);
    const nobody = await search(`search-nobody-${newId()}`, {
      onlyMeta: true,
      facets: { s: { type: FacetType.STRING, path: "status" } },
    });
    expect(Number(nobody.meta!.total)).toBe(0);
    expect(nobody.meta!.facets.s!.buckets).toEqual([]);
  });
});

describe("the seeder", () => {
  it("writes realistic runs that the search finds", async () => {
    const client = new pg.Client({ connectionString: testDb.url });
    await client.connect();
    try {
      const projects = [`seed-a-${newId()}`, `seed-b-${newId()}`];
      await seedRuns(client, { count: 20_000, projects, batchSize: 7_000 });
      const res = await runs.searchRuns({
        projectId: projects[0]!,
        onlyMeta: true,
        facets: {
          s: { type: FacetType.STRING, path: "status" },
          m: { type: FacetType.STRING, path: "modelId" },
        },
      });
      expect(Number(res.meta!.total)).toBe(10_000);
      expect(res.meta!.facets.s!.buckets.map((b) => b.id)).toContain("completed");
      expect(res.meta!.facets.m!.buckets.length).toBeGreaterThan(3);
      const acme = await runs.searchRuns({
        projectId: projects[1]!,
        query: "customer.name:Acme",
        limit: 1000,
      });
      expect(acme.runs.length).toBeGreaterThan(0);
      expect(
        acme.runs.every(
          (r) => ((jsonOf(r.parametersJson) as JsonObject).customer as JsonObject).name === "Acme",
        ),
      ).toBe(true);
      // A Lucene field term is served by the GIN index on the project's input data.
      await sql`analyze runs.runs`.execute(db);
      const { rows } = await sql<{ "QUERY PLAN": string }>`
        explain select id from runs.runs where project_id = ${projects[0]}
        and parameters @? ${'$."customer"."id" ? (@ == 4242)'}::jsonpath`.execute(db);
      expect(rows.map((r) => r["QUERY PLAN"]).join("\n")).toContain("runs_project_parameters_idx");
    } finally {
      await client.end();
    }
  });
});

describe("review mends", () => {
  it("counts an unfinished run in the date bucket of its last update, and a number facet's default", async () => {
    // SPEC.md: `default` is for values that match no boundary. Every run has updated_at from its
    // creation on, so an unfinished run is in a date bucket like any other; it has no execution
    // time yet, which matches no boundary (DESIGN.md §3: outside every bucket).
    const p = `unfinished-${newId()}`;
    await insert([
      {
        id: `${p}-1`,
        project_id: p,
        status: "processing",
        execution_time: null,
        updated_at: at(5),
      },
      { id: `${p}-2`, project_id: p, status: "created", execution_time: null, updated_at: at(15) },
      { id: `${p}-3`, project_id: p, status: "completed", execution_time: 50, updated_at: at(5) },
    ]);
    const res = await search(p, {
      facets: {
        d: {
          type: FacetType.DATE,
          path: "updated_at",
          dateBoundaries: [at(0), at(10), at(20)].map((d) => toTimestamp(d)!),
          defaultBucket: "other",
        },
        n: {
          type: FacetType.NUMBER,
          path: "execution_time",
          numberBoundaries: [0, 100],
          defaultBucket: "none",
        },
      },
    });
    expect(buckets(res, "d")).toEqual([
      { id: at(0).toISOString(), count: 2 },
      { id: at(10).toISOString(), count: 1 },
      { id: "other", count: 0, isDefault: true },
    ]);
    expect(buckets(res, "n")).toEqual([
      { id: "0", count: 1 },
      { id: "none", count: 2, isDefault: true },
    ]);
  });

  it("reads operators as Lucene does: NOT NOT, doubled operators, *:*, field:-1, phrases' escapes", async () => {
    const p = `ops-${newId()}`;
    await insert([
      { id: `${p}-a`, project_id: p, parameters: { x: "a", n: -1 }, updated_at: at(2) },
      { id: `${p}-b`, project_id: p, parameters: { x: "b", q: 'say "hi"' }, updated_at: at(1) },
    ]);
    const ids = async (query: string) => (await search(p, { query })).runs.map((r) => r.id);
    expect(await ids("*:*")).toEqual([`${p}-a`, `${p}-b`]);
    expect(await ids("-*:*")).toEqual([]);
    expect(await ids("*:a")).toEqual([`${p}-a`]);
    expect(await ids("n:-1")).toEqual([`${p}-a`]);
    expect(await ids("-n:1")).toEqual([`${p}-a`, `${p}-b`]);
    expect(await ids("NOT (NOT x:a)")).toEqual([`${p}-a`]);
    expect(await ids("x:b && NOT x:a")).toEqual([`${p}-b`]);
    expect(await ids("x:a || NOT x:a")).toEqual([`${p}-a`, `${p}-b`]);
    expect(await ids('q:"say \\"hi\\""')).toEqual([`${p}-b`]);
    for (const [query, message] of [
      ["NOT NOT x:a", "NOT right after NOT at position 4"],
      ["x:a OR NOT NOT x:b", "NOT right after NOT at position 11"],
      ["x:a AND AND x:b", "AND right after AND at position 8"],
      ["AND x:a", "AND with nothing before it at position 0"],
      ["x:a (OR x:b)", "OR with nothing before it at position 5"],
      ["x:-a", '"-" after "x:"'],
    ] as const) {
      const literal = new RegExp(message.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
      await expectCode(search(p, { query }), Code.InvalidArgument, literal);
    }
  });

  it("negates a signed group and a !field term as it negates a -field term", async () => {
    const project = `signs-${newId()}`;
    await insert(
      ["a", "b", "c"].map((v, i) => ({
        id: `${project}-${v}`,
        project_id: project,
        parameters: { k: v, n: i },
        updated_at: at(i),
      })),
    );
    const ids = async (query: string) =>
      (await runs.searchRuns({ projectId: project, query, limit: 10 })).runs
        .map((r) => r.id)
        .sort();
    const id = (v: string) => `${project}-${v}`;
    expect(await ids("n:[0 TO 9] -k:(a OR b)")).toEqual([id("c")]);
    expect(await ids("n:[0 TO 9] +k:(a OR b)")).toEqual([id("a"), id("b")]);
    expect(await ids("n:[0 TO 9] !k:a")).toEqual([id("b"), id("c")]);
    expect(await ids("n:[0 TO 9] -k:a")).toEqual([id("b"), id("c")]);
  });

  it("matches a range with one value between its bounds, not an array whose elements pass one bound each", async () => {
    const project = `ranges-${newId()}`;
    const rows = {
      split: { a: [0, 10], l: [["x", "y"]] },
      nested: { a: [[0, 10]], s: [["x", "y"]] },
      inside: { a: [0, 3], l: [["x", "xyy"]] },
    };
    await insert(
      Object.entries(rows).map(([name, parameters], i) => ({
        id: `${project}-${name}`,
        project_id: project,
        parameters,
        updated_at: at(i),
      })),
    );
    const ids = async (query: string) =>
      (await runs.searchRuns({ projectId: project, query, limit: 10 })).runs
        .map((r) => r.id.slice(project.length + 1))
        .sort();
    // 0 < 1 and 10 > 5: each bound holds for an element, but no element is between them.
    expect(await ids("[1 TO 5]")).toEqual(["inside"]);
    expect(await ids("a:[1 TO 5]")).toEqual(["inside"]);
    expect(await ids("{xy TO xyz}")).toEqual(["inside"]);
    expect(await ids("l:{xy TO xyz}")).toEqual([]);
  });

  it("refuses offsets past 10,000 and cuts a statement at the search timeout (504)", async () => {
    await expectCode(
      runs.searchRuns({ projectId: "p", offset: 10_001 }),
      Code.InvalidArgument,
      /offset: at most 10000/,
    );
    const client = new pg.Client({ connectionString: testDb.url });
    await client.connect();
    const project = `slow-${newId()}`;
    try {
      // After the seeder test's rows (the seeder numbers its runs from `from`).
      await seedRuns(client, {
        count: 20_000,
        from: 1_000_000,
        projects: [project],
        batchSize: 10_000,
      });
    } finally {
      await client.end();
    }
    const log = new RunLog(new MemoryRunRecords());
    const hasty = createClient(
      RunsService,
      createRouterTransport(runsRoutes({ db, log, searchTimeoutMs: 1 })),
    );
    // A wildcard over every value of 20,000 runs: no index narrows it, 1 ms cannot hold it.
    await expectCode(
      hasty.searchRuns({
        projectId: project,
        query: "*a*",
        facets: { s: { type: FacetType.STRING, path: "status" } },
      }),
      Code.DeadlineExceeded,
      /ran longer than 1 ms/,
    );
    // The same search within the default timeout answers.
    const res = await runs.searchRuns({ projectId: project, query: "*a*", onlyMeta: true });
    expect(Number(res.meta!.total)).toBeGreaterThan(0);
  });

  it("counts two range facets of 1,000 boundaries each without their combinations", async () => {
    const project = `wide-${newId()}`;
    await insert(
      Array.from({ length: 300 }, (_, i) => ({
        id: `${project}-${i}`,
        project_id: project,
        execution_time: i,
        updated_at: at(i),
      })),
    );
    const boundaries = Array.from({ length: 1000 }, (_, i) => i);
    const dates = Array.from({ length: 1000 }, (_, i) => toTimestamp(at(i)));
    const res = await runs.searchRuns({
      projectId: project,
      onlyMeta: true,
      facets: {
        t: { type: FacetType.NUMBER, path: "execution_time", numberBoundaries: boundaries },
        d: { type: FacetType.DATE, path: "updated_at", dateBoundaries: dates },
      } as Record<string, FacetInit>,
    });
    expect(Number(res.meta!.total)).toBe(300);
    const t = res.meta!.facets.t!.buckets;
    expect(t).toHaveLength(999);
    expect(t.slice(0, 300).every((b) => Number(b.count) === 1)).toBe(true);
    expect(t.slice(300).every((b) => Number(b.count) === 0)).toBe(true);
    expect(res.meta!.facets.d!.buckets.filter((b) => Number(b.count) === 1)).toHaveLength(300);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: the SQL agrees with an in-memory evaluation of the same query, filters and facets.

type Leaf =
  | { t: "eq"; path: string | null; value: string | number | boolean }
  | { t: "phrase"; path: string | null; value: string }
  | { t: "wild"; path: string | null; pattern: string }
  | { t: "range"; path: string; lo: number | null; hi: number | null; li: boolean; hi_: boolean }
  | { t: "srange"; path: string | null; lo: string; hi: string; li: boolean; hi_: boolean };
/** With the spelling of its operator when the query is written with the fewest parentheses. */
type Q =
  | Leaf
  | { t: "and"; items: Q[]; op: "AND" | "&&" | " "; tight: boolean }
  | { t: "or"; items: Q[]; op: "OR" | "||"; tight: boolean }
  | { t: "not"; item: Q; op: "NOT" | "-" | "!"; tight: boolean };

const PATHS = ["a", "b", "n.a", "n.b"];
// Words of three letters or more get a trigram pattern beside their jsonpath test (textPatterns);
// the odd strings check its escapes (JSON's and LIKE's).
const WORDS = ["x", "y", "xy", "yx", "true", "xyz", "zyx", "xyzzy"];
const ODD = ['ab"c\\d', "abc%_d", "abcX_d", "abc\nd", "xyz\u0001"];
const scalar = fc.oneof(
  fc.constantFrom(...WORDS, "x y", "Y", ...ODD),
  fc.integer({ min: -2, max: 3 }),
  fc.boolean(),
);
const value = fc.oneof(scalar, fc.array(scalar, { maxLength: 3 }));
const params = fc.record(
  {
    a: value,
    b: value,
    n: fc.oneof(
      fc.record({ a: value, b: value }, { requiredKeys: [] }),
      fc.array(fc.record({ a: scalar }), { maxLength: 2 }),
    ),
  },
  { requiredKeys: [] },
) as fc.Arbitrary<JsonObject>;

const path = fc.option(fc.constantFrom(...PATHS), { nil: null, freq: 4 });
const leaf: fc.Arbitrary<Leaf> = fc.oneof(
  fc.record({
    t: fc.constant("eq" as const),
    path,
    value: fc.oneof(fc.constantFrom(...WORDS), fc.integer({ min: -2, max: 3 }), fc.boolean()),
  }),
  fc.record({
    t: fc.constant("phrase" as const),
    path,
    value: fc.constantFrom("x y", "x", "1", "xyz", ...ODD),
  }),
  fc.record({
    t: fc.constant("wild" as const),
    path,
    pattern: fc.constantFrom(
      ...["x*", "*y", "?", "x?", "*", "*x*"],
      ...["xyz*", "*zyx", "*yzz*", "x?z", "xy*zy", "abc%*", "*c_d", "ab?c*", "xyz?y", "*yzz?"],
    ),
  }),
  fc.record({
    t: fc.constant("srange" as const),
    path,
    lo: fc.constantFrom("xy", "xyz", "xyza", "abc"),
    hi: fc.constantFrom("xyz", "xyzz", "xz", "abcZ"),
    li: fc.boolean(),
    hi_: fc.boolean(),
  }),
  fc.record({
    t: fc.constant("range" as const),
    path: fc.constantFrom(...PATHS),
    lo: fc.option(fc.integer({ min: -2, max: 3 }), { nil: null }),
    hi: fc.option(fc.integer({ min: -2, max: 3 }), { nil: null }),
    li: fc.boolean(),
    hi_: fc.boolean(),
  }),
);
const query: fc.Arbitrary<Q> = fc.letrec<{ q: Q }>((tie) => ({
  q: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    leaf,
    fc.record({
      t: fc.constant("and" as const),
      items: fc.array(tie("q"), { minLength: 2, maxLength: 3 }),
      op: fc.constantFrom("AND" as const, "&&" as const, " " as const),
      tight: fc.boolean(),
    }),
    fc.record({
      t: fc.constant("or" as const),
      items: fc.array(tie("q"), { minLength: 2, maxLength: 3 }),
      op: fc.constantFrom("OR" as const, "||" as const),
      tight: fc.boolean(),
    }),
    fc.record({
      t: fc.constant("not" as const),
      item: tie("q"),
      op: fc.constantFrom("NOT" as const, "-" as const, "!" as const),
      tight: fc.boolean(),
    }),
  ),
})).q;

/** A leaf's query text. */
function renderLeaf(q: Leaf): string {
  const field = (p: string | null) => (p ? `${p}:` : "");
  const quote = (v: string) => `"${v.replace(/[\\"]/g, "\\$&")}"`;
  switch (q.t) {
    case "eq":
      // A bare -1 would be NOT 1: the sign escaped.
      return `${field(q.path)}${q.path === null && typeof q.value === "number" && q.value < 0 ? `\\${q.value}` : String(q.value)}`;
    case "phrase":
      return `${field(q.path)}${quote(q.value)}`;
    case "wild":
      return `${field(q.path)}${q.pattern}`;
    case "range":
      return `${q.path}:${q.li ? "[" : "{"}${q.lo ?? "*"} TO ${q.hi ?? "*"}${q.hi_ ? "]" : "}"}`;
    case "srange":
      return `${field(q.path)}${q.li ? "[" : "{"}${q.lo} TO ${q.hi}${q.hi_ ? "]" : "}"}`;
  }
}

/** Fully parenthesised. */
function render(q: Q): string {
  switch (q.t) {
    case "not":
      return `(NOT ${render(q.item)})`;
    case "and":
    case "or":
      return `(${q.items.map(render).join(q.t === "and" ? " AND " : " OR ")})`;
    default:
      return renderLeaf(q);
  }
}

/** Operands joined by an operator, which touches a parenthesis beside it when `tight`
 * (`(a)AND(b)`, as Lucene reads it too). */
function joinOperands(parts: string[], op: string, tight: boolean): string {
  return parts.reduce((text, part) =>
    op === " "
      ? `${text} ${part}`
      : `${text}${tight && text.endsWith(")") ? "" : " "}${op}${tight && part.startsWith("(") ? "" : " "}${part}`,
  );
}

/**
 * With the fewest parentheses the documented precedence allows (NOT, then AND, and terms side by
 * side, then OR), each operator spelled as the tree says, sometimes touching a parenthesis: the
 * compiled query must read it as the in-memory evaluation does.
 */
function renderFlat(q: Q, parent: "top" | "or" | "and" | "not" = "top"): string {
  switch (q.t) {
    case "or": {
      const text = joinOperands(
        q.items.map((i) => renderFlat(i, "or")),
        q.op,
        q.tight,
      );
      return parent === "top" || parent === "or" ? text : `(${text})`;
    }
    case "and": {
      const text = joinOperands(
        q.items.map((i) => renderFlat(i, "and")),
        q.op,
        q.tight,
      );
      return parent === "not" ? `(${text})` : text;
    }
    case "not": {
      const inner = renderFlat(q.item, "not");
      // A sign goes on a term only (the grammar has none for a range without a field); NOT NOT
      // is refused (it is written NOT (NOT a)).
      const bareRange = q.item.t === "srange" && q.item.path === null;
      if (
        q.op !== "NOT" &&
        !bareRange &&
        q.item.t !== "and" &&
        q.item.t !== "or" &&
        q.item.t !== "not"
      ) {
        return `${q.op}${inner}`;
      }
      const space = q.tight ? "" : " ";
      if (q.item.t === "not") return `NOT${space}(${inner})`;
      return inner.startsWith("(") ? `NOT${space}${inner}` : `NOT ${inner}`;
    }
    default:
      return renderLeaf(q);
  }
}

const isObject = (v: unknown): v is JsonObject =>
  typeof v === "object" && v !== null && !Array.isArray(v);
/** Values at a dotted path, as jsonpath's lax mode reaches them (arrays on the way unwrapped). */
function valuesAt(data: JsonObject, p: string | null): JsonValue[] {
  if (p === null) {
    const all: JsonValue[] = [];
    const walk = (v: JsonValue) => {
      all.push(v);
      if (Array.isArray(v)) v.forEach(walk);
      else if (isObject(v)) Object.values(v).forEach(walk);
    };
    walk(data);
    return all;
  }
  let current: JsonValue[] = [data];
  for (const seg of p.split(".")) {
    current = current.flatMap((v) =>
      Array.isArray(v)
        ? v.flatMap((e) => (isObject(e) && seg in e ? [e[seg]!] : []))
        : isObject(v) && seg in v
          ? [v[seg]!]
          : [],
    );
  }
  return current;
}

function holds(q: Q, data: JsonObject, implicit: string | null): boolean {
  switch (q.t) {
    case "and":
      return q.items.every((i) => holds(i, data, implicit));
    case "or":
      return q.items.some((i) => holds(i, data, implicit));
    case "not":
      return !holds(q.item, data, implicit);
  }
  const p = q.path ?? (q.t === "range" ? q.path : implicit);
  const found = valuesAt(data, p);
  if (q.t === "wild" && q.pattern === "*") return found.length > 0;
  if (q.t === "range" && q.lo === null && q.hi === null) return found.length > 0;
  const items = found.flatMap((v) => (Array.isArray(v) ? v : [v]));
  return items.some((v) => {
    switch (q.t) {
      case "eq":
        return (
          v === String(q.value) ||
          (typeof q.value === "number" && v === q.value) ||
          (typeof q.value === "boolean" && v === q.value) ||
          (q.value === "true" && v === true)
        );
      case "phrase":
        return v === q.value;
      case "wild": {
        const re = new RegExp(`^${q.pattern.replace(/\*/g, ".*").replace(/\?/g, ".")}$`, "s");
        return typeof v === "string" && re.test(v);
      }
      case "range":
        return (
          typeof v === "number" &&
          (q.lo === null || (q.li ? v >= q.lo : v > q.lo)) &&
          (q.hi === null || (q.hi_ ? v <= q.hi : v < q.hi))
        );
      case "srange":
        // jsonpath orders strings by code point: the same as JavaScript's for these.
        return (
          typeof v === "string" && (q.li ? v >= q.lo : v > q.lo) && (q.hi_ ? v <= q.hi : v < q.hi)
        );
    }
  });
}

/** Generated runs as rows of one project, with ids in insertion order and their minute's time. */
const projectRows = <T extends { minute: number }>(projectId: string, data: T[]) =>
  data.map((r, i) => ({
    ...r,
    id: `${projectId}-r${String(i).padStart(2, "0")}`,
    project_id: projectId,
    updated_at: at(r.minute),
  }));

const STATUSES = ["created", "processing", "completed", "failed"] as const;
const STATUS_ENUM = {
  created: RunStatus.CREATED,
  processing: RunStatus.PROCESSING,
  completed: RunStatus.COMPLETED,
  failed: RunStatus.FAILED,
};
const runArb = fc.record({
  parameters: params,
  status: fc.constantFrom(...STATUSES),
  tags: fc.subarray(["t1", "t2", "t3"]),
  minute: fc.integer({ min: 0, max: 5 }),
  execution_time: fc.option(fc.integer({ min: 0, max: 40 }), { nil: null }),
});
const filtersArb = fc.record(
  {
    status: fc.constantFrom(...STATUSES),
    tags: fc.subarray(["t1", "t2", "t3"], { minLength: 1 }),
    after: fc.record({ minute: fc.integer({ min: 0, max: 5 }), inclusive: fc.boolean() }),
    before: fc.record({ minute: fc.integer({ min: 0, max: 5 }), inclusive: fc.boolean() }),
  },
  { requiredKeys: [] },
);

describe("property: SQL equals an in-memory evaluation", () => {
  it("of random queries, filters and facets over random small data sets", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(runArb, { maxLength: 12 }),
        fc.option(query, { nil: undefined }),
        fc.option(fc.constantFrom(...PATHS), { nil: undefined }),
        filtersArb,
        fc.integer({ min: 1, max: 4 }),
        fc.boolean(),
        async (data, q, defaultQueryPath, f, numBuckets, flat) => {
          const projectId = `prop-${newId()}`;
          const rows = projectRows(projectId, data);
          await insert(rows);
          const matches = rows.filter(
            (r) =>
              (q === undefined || holds(q, r.parameters, defaultQueryPath ?? null)) &&
              (!f.status || r.status === f.status) &&
              (!f.tags || r.tags.some((t) => f.tags!.includes(t))) &&
              (!f.after ||
                (f.after.inclusive ? r.minute >= f.after.minute : r.minute > f.after.minute)) &&
              (!f.before ||
                (f.before.inclusive ? r.minute <= f.before.minute : r.minute < f.before.minute)),
          );
          const expected = matches
            .sort((x, y) => y.minute - x.minute || (x.id < y.id ? 1 : -1))
            .map((r) => r.id);
          const res = await runs.searchRuns({
            projectId,
            limit: 1000,
            query: q === undefined ? "" : flat ? renderFlat(q) : render(q),
            defaultQueryPath,
            filters: {
              status: f.status ? STATUS_ENUM[f.status] : RunStatus.UNSPECIFIED,
              tags: f.tags ?? [],
              updatedAfter: f.after && toTimestamp(at(f.after.minute)),
              updatedAfterInclusive: f.after?.inclusive ?? false,
              updatedBefore: f.before && toTimestamp(at(f.before.minute)),
              updatedBeforeInclusive: f.before?.inclusive ?? false,
            },
            facets: {
              s: { type: FacetType.STRING, path: "status", numBuckets },
              t: { type: FacetType.STRING, path: "tags", numBuckets },
              e: {
                type: FacetType.NUMBER,
                path: "execution_time",
                numberBoundaries: [0, 10, 20, 30],
                defaultBucket: "d",
              },
            },
          });
          expect(res.runs.map((r) => r.id)).toEqual(expected);
          expect(Number(res.meta!.total)).toBe(matches.length);
          const top = (values: string[]) => {
            const counts = new Map<string, number>();
            for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
            return [...counts]
              .sort(([a, x], [b, y]) => y - x || (a < b ? -1 : 1))
              .slice(0, numBuckets)
              .map(([id, count]) => ({ id, count }));
          };
          expect(buckets(res, "s")).toEqual(top(matches.map((r) => r.status)));
          expect(buckets(res, "t")).toEqual(top(matches.flatMap((r) => r.tags)));
          const inBucket = (lo: number) =>
            matches.filter(
              (r) =>
                r.execution_time !== null && r.execution_time >= lo && r.execution_time < lo + 10,
            ).length;
          expect(buckets(res, "e")).toEqual([
            ...[0, 10, 20].map((lo) => ({ id: String(lo), count: inBucket(lo) })),
            {
              id: "d",
              count: matches.filter((r) => r.execution_time === null || r.execution_time >= 30)
                .length,
              isDefault: true,
            },
          ]);
        },
      ),
      // fast-check picks the seed; a failure prints it (and the path) to replay the case.
      { numRuns: 150 },
    );
  });
});

describe("property: the trigram pattern beside a term never drops a match", () => {
  // The patterns look in the input data's strings only (SEARCH_TEXT): strings at any
  // depth, in arrays of objects and arrays of arrays, beside numbers and booleans, and keys that
  // are searched words themselves (in the data's text, not in the strings).
  it("of terms, phrases, wildcards and string ranges over strings with escapes", async () => {
    const text = fc.constantFrom(...WORDS, ...ODD, "abc", "xyzzyx", 'q"xyz', "xyz\\");
    const scalar = fc.oneof(text, fc.boolean(), fc.integer({ min: -2, max: 3 }));
    const data = fc.record(
      {
        a: fc.oneof(scalar, fc.array(scalar, { maxLength: 2 })),
        n: fc.record({ a: text, xyz: scalar }, { requiredKeys: [] }),
        l: fc.array(fc.oneof(fc.record({ a: scalar }), fc.array(scalar, { maxLength: 2 })), {
          maxLength: 2,
        }),
      },
      { requiredKeys: ["a"] },
    );
    await fc.assert(
      fc.asyncProperty(fc.array(data, { minLength: 1, maxLength: 6 }), leaf, async (rows, q) => {
        const projectId = `pattern-${newId()}`;
        const stored = rows.map((parameters, i) => ({
          id: `${projectId}-r${i}`,
          project_id: projectId,
          parameters: parameters as JsonObject,
          updated_at: at(i),
        }));
        await insert(stored);
        const expected = stored
          .filter((r) => holds(q, r.parameters, null))
          .map((r) => r.id)
          .reverse();
        const res = await runs.searchRuns({ projectId, limit: 100, query: renderLeaf(q) });
        expect(res.runs.map((r) => r.id)).toEqual(expected);
      }),
      { numRuns: 300 },
    );
  });
});

describe("property: a page looked for in a window of the newest runs first is the same page", () => {
  it("of random queries, pages and filters over random small data sets", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(runArb, { minLength: 1, maxLength: 12 }),
        query,
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 0, max: 3 }),
        fc.option(fc.constantFrom(...STATUSES), { nil: undefined }),
        async (data, q, limit, offset, status) => {
          const projectId = `window-${newId()}`;
          const rows = projectRows(projectId, data);
          await insert(rows);
          const expected = rows
            .filter((r) => holds(q, r.parameters, null) && (!status || r.status === status))
            .sort((x, y) => y.minute - x.minute || (x.id < y.id ? 1 : -1))
            .slice(offset, offset + limit)
            .map((r) => r.id);
          const res = await windowed.searchRuns({
            projectId,
            limit,
            offset,
            query: renderFlat(q),
            filters: { status: status ? STATUS_ENUM[status] : RunStatus.UNSPECIFIED },
          });
          expect(res.runs.map((r) => r.id)).toEqual(expected);
        },
      ),
      { numRuns: 150, seed: 20261125 },
    );
  });
});

describe("the total of a search counted over the runs", () => {
  it("is exact up to TOTAL_EXACT_UP_TO matches, a lower bound past it unless exactTotal", async () => {
    const projectId = `total-${newId()}`;
    const n = TOTAL_EXACT_UP_TO + 50;
    await sql`insert into runs.runs (id, project_id, account_id, interaction_id, status, parameters, tags)
      select lpad(to_hex(${Date.now()}::bigint), 12, '0') || lpad(to_hex(i), 12, '0'), ${projectId},
        'acc', 'i', 'completed', jsonb_build_object('customer', case when i <= 20 then 'Rare' else 'Acme' end),
        case when i % 2 = 0 then array['even'] else array['odd'] end
      from generate_series(1, ${n}) as i`.execute(db);
    const meta = async (req: Omit<SearchInit, "projectId">) =>
      (await search(projectId, { onlyMeta: true, ...req })).meta!;
    expect(await meta({ query: "customer:Rare" })).toMatchObject({ total: 20n, lowerBound: false });
    expect(await meta({ query: "customer:Acme" })).toMatchObject({
      total: BigInt(TOTAL_EXACT_UP_TO),
      lowerBound: true,
    });
    expect(await meta({ query: "customer:Acme", exactTotal: true })).toMatchObject({
      total: BigInt(n - 20),
      lowerBound: false,
    });
    // A facet that counts every match counts the total with it: exact.
    const faceted = await meta({
      query: "customer:Acme",
      facets: { s: { type: FacetType.STRING, path: "status" } },
    });
    expect(faceted).toMatchObject({ total: BigInt(n - 20), lowerBound: false });
    // The tags facet counts its buckets exactly, whatever the total.
    const tagged = await meta({
      query: "customer:Acme",
      facets: { t: { type: FacetType.STRING, path: "tags" } },
    });
    expect(tagged.lowerBound).toBe(true);
    expect(tagged.facets.t!.buckets.map((b) => [b.id, b.count])).toEqual([
      ["even", BigInt((n - 20) / 2)],
      ["odd", BigInt((n - 20) / 2)],
    ]);
  });
});
