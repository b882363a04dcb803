import { create } from "@bufbuild/protobuf";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "@pies/common";
import { MemoryCatalogEvents, MemoryRunEventBus } from "@pies/common/bus";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { directTransport, serviceClient } from "@pies/common/server";
import {
  FacetType,
  ListRunsResponseSchema,
  RunsService,
  RunStatus,
  SearchRunsResponseSchema,
  type ListRunsRequest,
  type ListRunsRequestSchema,
  type SearchRunsRequest,
  type SearchRunsRequestSchema,
} from "@pies/proto/runs";
import { runsRoutes } from "@pies/runs";
import { createGateway } from "./app.js";
import { gatewayOptions, loadGatewaySettings } from "./config.js";
import type { GatewayDeps } from "./deps.js";
import { startTestPies, testTokenKey, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";
import { everyFieldRuns, referenceRunJson, storeRuns } from "../test/run-json-reference.js";

// GET /runs and POST /runs/search answer the page the runs service rendered (runs_json), sent as
// it is: the same bytes the gateway wrote before from the runs as messages (referenceRunJson, the
// old runJson), for runs with every field; and the gateway neither parses nor re-serializes them.
let pies: TestPies;
/** The runs service on the same database, answering messages (the old path's input). */
let runsService: ReturnType<typeof serviceClient<typeof RunsService>>;

beforeAll(async () => {
  pies = await startTestPies();
  await storeRuns(pies.db, everyFieldRuns(pies.projectId));
  // Another project's runs, which no answer may show.
  await storeRuns(pies.db, everyFieldRuns("other-project-000001"));
  runsService = serviceClient(
    RunsService,
    directTransport(runsRoutes({ db: pies.db, log: undefined as never })),
  );
}, 60_000);

afterAll(async () => {
  await pies?.close();
});

const get = (url: string) => request(pies.app, "GET", url, { key: pies.key });
const post = (url: string, body: unknown) =>
  request(pies.app, "POST", url, { key: pies.key, body });

/** The list as the gateway answered it before: the runs as messages, rendered by the old runJson. */
async function referenceList(req: MessageInitShape<typeof ListRunsRequestSchema>) {
  const listed = await runsService.listRuns({ projectId: pies.projectId, ...req });
  return listed.runs.map(referenceRunJson);
}

async function referenceSearch(req: MessageInitShape<typeof SearchRunsRequestSchema>) {
  const found = await runsService.searchRuns({ projectId: pies.projectId, ...req });
  return { runs: found.runs.map(referenceRunJson), total: Number(found.meta?.total ?? -1) };
}

describe("GET /runs and POST /runs/search, rendered by the runs service", () => {
  it("answers every field byte for byte as the gateway rendered it from messages", async () => {
    const expected = await referenceList({});
    expect(expected).toHaveLength(11);
    // Each kind of field is there to compare (the fixture is what it claims).
    const keys = new Set(expected.flatMap((r) => Object.keys(r)));
    for (const key of [
      "result",
      "error",
      "tags",
      "source",
      "token_use",
      "config",
      "temperature",
      "max_tokens",
      "execution_time",
      "parent",
      "ttl",
      "cached",
      "cached_from",
      "cache_policy",
      "store",
    ])
      expect(keys).toContain(key);
    const res = await get("/runs");
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(res.text).toBe(JSON.stringify(expected));
  });

  it("answers each filter and page as before", async () => {
    const cases: [string, MessageInitShape<typeof ListRunsRequestSchema>][] = [
      ["?status=failed", { filters: { status: RunStatus.FAILED } }],
      ["?limit=3&offset=2", { limit: 3, offset: 2 }],
      ["?model=m%2F%C3%A9", { filters: { models: ["m/é"] } }],
      ["?parent=every_parent", { filters: { parentId: "every_parent" } }],
      ["?tag=%C3%BCn%C3%AF", { filters: { tags: ["ünï"] } }],
      ["?offset=50", { offset: 50 }],
    ];
    for (const [query, req] of cases) {
      const res = await get(`/runs${query}`);
      expect(res.status, query).toBe(200);
      expect(res.text, query).toBe(JSON.stringify(await referenceList(req)));
    }
  });

  it("answers search results, meta and onlyMeta as before", async () => {
    const all = await referenceSearch({});
    expect((await post("/runs/search", {})).text).toBe(JSON.stringify({ results: all.runs }));

    const facets = { status: { type: "string", path: "status" } } as const;
    const withMeta = await post("/runs/search", {
      query: "x:[1 TO 3]",
      limit: 2,
      facets,
    });
    expect(withMeta.status).toBe(200);
    const found = await referenceSearch({
      query: "x:[1 TO 3]",
      limit: 2,
      facets: { status: { type: FacetType.STRING, path: "status" } },
    });
    expect(found.runs).toHaveLength(2);
    expect(withMeta.text).toBe(
      JSON.stringify({
        results: found.runs,
        meta: {
          count: { total: 3 },
          facet: { status: { buckets: [{ _id: "completed", count: 3 }] } },
        },
      }),
    );

    const onlyMeta = await post("/runs/search", { onlyMeta: true, facets });
    expect(onlyMeta.json).toEqual({
      meta: {
        count: { total: 11 },
        facet: {
          status: {
            buckets: [
              { _id: "completed", count: 6 },
              { _id: "failed", count: 3 },
              { _id: "created", count: 1 },
              { _id: "processing", count: 1 },
            ],
          },
        },
      },
    });
    expect(onlyMeta.text).toBe(JSON.stringify(onlyMeta.json));
    // No results, no meta: an empty page.
    const none = await post("/runs/search", { query: "x:999" });
    expect(none.text).toBe('{"results":[]}');
  });
});

describe("the gateway's part", () => {
  let app: FastifyInstance;
  const asked: { list?: ListRunsRequest; search?: SearchRunsRequest } = {};
  // JSON that no JSON.stringify writes (spaces, an escape it would not use, a trailing newline):
  // it reaches the client unchanged only if the gateway passes the bytes through.
  const page = ' [ {"id" : "r\\u0041", "n": 1.50} ]\n';
  /** Answer as a runs service older than as_json: the runs as messages, no runs_json. */
  let legacy = false;

  beforeAll(async () => {
    const runs = {
      listRuns: async (req: ListRunsRequest) => {
        asked.list = req;
        if (legacy) return create(ListRunsResponseSchema, { runs: everyFieldRuns(pies.projectId) });
        return create(ListRunsResponseSchema, { runsJson: Buffer.from(page) });
      },
      searchRuns: async (req: SearchRunsRequest) => {
        asked.search = req;
        if (legacy)
          return create(SearchRunsResponseSchema, { runs: everyFieldRuns(pies.projectId) });
        return create(SearchRunsResponseSchema, {
          runsJson: new TextEncoder().encode(page),
          meta: req.onlyMeta || Object.keys(req.facets).length > 0 ? { total: 7n } : undefined,
        });
      },
    };
    app = createGateway({
      catalog: pies.catalog,
      runs: runs as unknown as GatewayDeps["runs"],
      executor: {} as GatewayDeps["executor"],
      experiments: {} as GatewayDeps["experiments"],
      bus: new MemoryRunEventBus(),
      catalogEvents: new MemoryCatalogEvents(),
      logger: createLogger("test", "silent"),
      options: { ...gatewayOptions(loadGatewaySettings({})), rateLimitPerMinute: 0 },
      tokenKey: testTokenKey,
      isReady: async () => true,
    });
    await app.ready();
  });

  afterAll(async () => {
    await app?.close();
  });

  it("sends the runs service's page as it is, never parsed nor serialized again", async () => {
    const res = await request(app, "GET", "/runs?limit=5", { key: pies.key });
    expect(res.status).toBe(200);
    expect(res.text).toBe(page);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(asked.list).toMatchObject({ projectId: pies.projectId, limit: 5, asJson: true });

    const search = await request(app, "POST", "/runs/search", {
      key: pies.key,
      body: { query: "a:b", facets: { s: { type: "string", path: "status" } } },
    });
    expect(search.status).toBe(200);
    expect(search.text).toBe(
      `{"results":${page},"meta":{"count":{"total":7},"facet":{"s":{"buckets":[]}}}}`,
    );
    expect(asked.search).toMatchObject({ projectId: pies.projectId, query: "a:b", asJson: true });

    const plain = await request(app, "POST", "/runs/search", { key: pies.key, body: {} });
    expect(plain.text).toBe(`{"results":${page}}`);
    const onlyMeta = await request(app, "POST", "/runs/search", {
      key: pies.key,
      body: { onlyMeta: true },
    });
    expect(onlyMeta.text).toBe('{"meta":{"count":{"total":7}}}');
  });

  it("renders the runs itself when the runs service answers them as messages (an older one)", async () => {
    legacy = true;
    try {
      const expected = JSON.stringify(everyFieldRuns(pies.projectId).map(referenceRunJson));
      const res = await request(app, "GET", "/runs", { key: pies.key });
      expect(res.status).toBe(200);
      expect(res.text).toBe(expected);
      const search = await request(app, "POST", "/runs/search", { key: pies.key, body: {} });
      expect(search.text).toBe(`{"results":${expected}}`);
    } finally {
      legacy = false;
    }
  });
});
