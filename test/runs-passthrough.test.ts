import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { Kysely } from "kysely";
import { createDatabase } from "@pies/common/db";
import { serviceClient } from "@pies/common/server";
import { FacetType, RunsService, RunStatus } from "@pies/proto/runs";
import type { RunsDatabase } from "@pies/runs";
import {
  createTestDatabase,
  createTestStream,
  internalToken,
  startStack,
  type Stack,
  type TestDatabase,
} from "@pies/testkit";
import { everyFieldRuns, referenceRunJson, storeRuns } from "../gateway/test/run-json-reference.js";

// The four processes: GET /runs and POST /runs/search answer, byte for byte, what the gateway
// answered when it decoded the runs service's Connect JSON into messages and rendered them
// (referenceRunJson, the old runJson), for runs with every field; now the runs service renders the
// page and the gateway passes it through.
let database: TestDatabase;
let stream: ReturnType<typeof createTestStream>;
let stack: Stack;
let db: Kysely<RunsDatabase>;
let project: string;
let get: (
  path: string,
  init?: RequestInit,
) => Promise<{ status: number; text: string; type: string | null }>;
/** The runs service as the gateway called it before: Connect JSON, the page as messages. */
let runs: ReturnType<typeof serviceClient<typeof RunsService>>;
const auth = { headers: { authorization: `Bearer ${internalToken}` } };

beforeAll(async () => {
  database = await createTestDatabase("passthru");
  stream = createTestStream();
  stack = await startStack({ databaseUrl: database.url, natsEnv: stream.env });
  project = stack.bootstrap.project;
  db = createDatabase({ url: database.url, poolMax: 2 }) as Kysely<RunsDatabase>;
  await storeRuns(db, everyFieldRuns(project));
  await storeRuns(db, everyFieldRuns("other-project-000002"));
  get = async (path, init = {}) => {
    const res = await fetch(`${stack.gatewayUrl}/api/v1${path}`, {
      ...init,
      headers: {
        authorization: `Bearer ${stack.bootstrap.key}`,
        "content-type": "application/json",
      },
    });
    return { status: res.status, text: await res.text(), type: res.headers.get("content-type") };
  };
  runs = serviceClient(
    RunsService,
    createConnectTransport({ baseUrl: stack.runsUrl, httpVersion: "2", useBinaryFormat: false }),
  );
}, 120_000);

afterAll(async () => {
  await db?.destroy();
  await stack?.stop();
  await stream?.remove();
  await database?.drop();
});

describe("runs rendered by the runs service, through the four processes", () => {
  it("GET /runs answers every field and each filter as the gateway rendered them from messages", async () => {
    for (const [query, req] of [
      ["", {}],
      ["?status=failed", { filters: { status: RunStatus.FAILED } }],
      ["?limit=3&offset=2", { limit: 3, offset: 2 }],
      ["?parent=every_parent", { filters: { parentId: "every_parent" } }],
    ] as const) {
      const listed = await runs.listRuns({ projectId: project, ...req }, auth);
      const expected = JSON.stringify(listed.runs.map(referenceRunJson));
      const res = await get(`/runs${query}`);
      expect(res.status, query).toBe(200);
      expect(res.type).toBe("application/json; charset=utf-8");
      expect(res.text, query).toBe(expected);
    }
    expect(JSON.parse((await get("/runs")).text)).toHaveLength(11);
  });

  it("POST /runs/search answers results and meta as before", async () => {
    const found = await runs.searchRuns(
      {
        projectId: project,
        query: "x:[1 TO 3]",
        limit: 2,
        facets: { status: { type: FacetType.STRING, path: "status" } },
      },
      auth,
    );
    const res = await get("/runs/search", {
      method: "POST",
      body: JSON.stringify({
        query: "x:[1 TO 3]",
        limit: 2,
        facets: { status: { type: "string", path: "status" } },
      }),
    });
    expect(res.status).toBe(200);
    expect(res.text).toBe(
      JSON.stringify({
        results: found.runs.map(referenceRunJson),
        meta: {
          count: { total: 3 },
          facet: { status: { buckets: [{ _id: "completed", count: 3 }] } },
        },
      }),
    );
    const all = await runs.searchRuns({ projectId: project }, auth);
    const plain = await get("/runs/search", { method: "POST", body: "{}" });
    expect(plain.text).toBe(JSON.stringify({ results: all.runs.map(referenceRunJson) }));
  });

  it("still answers runs as messages to a caller that does not ask for JSON", async () => {
    const listed = await runs.listRuns({ projectId: project }, auth);
    expect(listed.runs).toHaveLength(11);
    expect(listed.runsJson).toHaveLength(0);
    const asJson = await runs.listRuns({ projectId: project, asJson: true }, auth);
    expect(asJson.runs).toHaveLength(0);
    expect(JSON.parse(new TextDecoder().decode(asJson.runsJson))).toEqual(
      listed.runs.map(referenceRunJson),
    );
  });
});
