import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// POST /runs/search over HTTP (issue 9): DESIGN.md §3's response shape, the filter keys as SPEC.md
// spells them, 400s that say what is wrong, and another project's runs never seen.
let pies: TestPies;
let app: FastifyInstance;
let otherKey: string;
const mine: string[] = [];

const call = (url: string, key: string, body?: unknown) =>
  request(app, body === undefined ? "GET" : "POST", url, { key, body });

async function interaction(key: string, environment: string): Promise<string> {
  const prompt = await call("/prompts", key, {
    name: "p",
    role: "user",
    content_type: "text",
    content: "Hello",
  });
  const created = await call("/interactions", key, {
    name: "Hi",
    environment,
    prompts: [{ type: "template", template: prompt.json.id }],
  });
  expect(created.status).toBe(201);
  return created.json.id;
}

/** Waits until the project lists n runs (the record log is written to the store in batches). */
async function stored(key: string, n: number) {
  for (let i = 0; i < 200; i++) {
    if ((await call("/runs?limit=1000", key)).json.length >= n) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`the store never held ${n} runs`);
}

beforeAll(async () => {
  pies = await startTestPies();
  app = pies.app;
  const id = await interaction(pies.key, pies.environmentId);
  for (const [i, customer] of ["Acme", "Globex", "Acme"].entries()) {
    const run = await call("/runs", pies.key, {
      interaction: id,
      data: { customer: { name: customer }, n: i },
      tags: i === 0 ? ["red"] : ["blue"],
    });
    expect(run.status).toBe(200);
    mine.push(run.json.id);
  }
  await stored(pies.key, 3);
  // Another project with a run that would match every query below.
  const { project } = await pies.catalog.createAccount({ name: "other" });
  otherKey = (await pies.catalog.createApiKey({ projectId: project!.id })).secret;
  const { environment } = await pies.catalog.createEnvironment({
    projectId: project!.id,
    environment: { provider: "test", defaultModel: "test" },
  });
  const other = await interaction(otherKey, environment!.id);
  const run = await call("/runs", otherKey, {
    interaction: other,
    data: { customer: { name: "Acme" }, n: 0 },
    tags: ["red"],
  });
  expect(run.status).toBe(200);
  await stored(otherKey, 1);
}, 60_000);

afterAll(async () => {
  await pies?.close();
});

describe("POST /runs/search", () => {
  it("answers results, and meta with the total and facet buckets when facets are asked for", async () => {
    const r = await call("/runs/search", pies.key, {
      query: "customer.name:Acme",
      facets: {
        tags: { type: "string", path: "tags", numBuckets: 1 },
        time: { type: "number", path: "execution_time", boundaries: [0, 1e9] },
        when: {
          type: "date",
          path: "updated_at",
          boundaries: ["2000-01-01", "2001-01-01"],
          default: "other",
        },
      },
    });
    expect(r.status).toBe(200);
    expect(r.json.results.map((run: { id: string }) => run.id)).toEqual([mine[2], mine[0]]);
    expect(r.json.meta).toEqual({
      count: { total: 2 },
      facet: {
        // blue 1 and red 1: the tie goes to the smaller value.
        tags: { buckets: [{ _id: "blue", count: 1 }] },
        time: { buckets: [{ _id: 0, count: 2 }] },
        when: {
          buckets: [
            { _id: "2000-01-01T00:00:00.000Z", count: 0 },
            { _id: "other", count: 2 },
          ],
        },
      },
    });
    // Without facets: results only.
    const plain = await call("/runs/search", pies.key, {});
    expect(Object.keys(plain.json)).toEqual(["results"]);
    expect(plain.json.results).toHaveLength(3);
  });

  it("leaves out the results with onlyMeta", async () => {
    const r = await call("/runs/search", pies.key, {
      onlyMeta: true,
      facets: { s: { type: "string", path: "status" } },
    });
    expect(r.json).toEqual({
      meta: { count: { total: 3 }, facet: { s: { buckets: [{ _id: "completed", count: 3 }] } } },
    });
  });

  it("takes SPEC.md's filter keys, `environemnt` and `environment` alike", async () => {
    const body = (filters: object) => ({ onlyMeta: true, filters });
    const total = async (filters: object) =>
      (await call("/runs/search", pies.key, body(filters))).json.meta.count.total;
    expect(await total({ environemnt: pies.environmentId })).toBe(3);
    expect(await total({ environment: pies.environmentId })).toBe(3);
    expect(await total({ environment: "nope" })).toBe(0);
    expect(
      await total({ tags: ["red"], status: "completed", parent: false, modelId: "test" }),
    ).toBe(1);
    expect(await total({ updated_at: { gte: "2000-01-01T00:00:00Z", lt: "2999-01-01" } })).toBe(3);
    expect(await total({ updated_at: { lt: "2000-01-01" } })).toBe(0);
  });

  it.each([
    [{ query: "customer.name:(Acme" }, /query: syntax error.*at position 19/],
    [
      { facets: { f: { type: "number", path: "execution_time", boundaries: [3, 1] } } },
      /facets\.f\.boundaries: must be in strictly ascending order/,
    ],
    [
      { facets: { f: { type: "number", path: "execution_time", boundaries: [3] } } },
      /facets\.f\.boundaries: at least two/,
    ],
    [
      { facets: { f: { type: "string", path: "parameters.x" } } },
      /facets\.f\.path: "parameters\.x" is not a facet path/,
    ],
    [
      { facets: { f: { type: "number", path: "modelId", boundaries: [1, 2] } } },
      /modelId is a string facet, not number/,
    ],
    [
      { facets: { f: { type: "histogram", path: "status" } } },
      /type must be string, number or date/,
    ],
    [
      { facets: { f: { type: "date", path: "updated_at", boundaries: ["2024-01-01", "soon"] } } },
      /facets\.f\.boundaries\.1: must be an ISO 8601 date/,
    ],
    [
      { filters: { updated_at: { gt: "yesterday" } } },
      /filters\.updated_at\.gt: must be an ISO 8601 date/,
    ],
    [{ filters: { updated_at: { gt: "2024-01-01", gte: "2024-01-01" } } }, /gt or gte, not both/],
    [
      { filters: { updated_at: { gte: "2024-01-01T00:00:00.0000001Z" } } },
      /filters\.updated_at\.gte: .*to the millisecond at most/,
    ],
    [{ offset: 10_001 }, /offset: at most 10000/],
    [{ filters: { colour: "red" } }, /Unrecognized key.*colour/],
    [{ limit: 0 }, /limit: must be an integer from 1 to 1000/],
    [{ limit: 1001 }, /limit: must be an integer from 1 to 1000/],
    [{ offset: -1 }, /offset/],
  ])("answers 400 saying what is wrong: %j", async (body, message) => {
    const r = await call("/runs/search", pies.key, body);
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ status: 400, code: "invalid_request" });
    expect(r.json.message).toMatch(message);
    expect(r.text).not.toMatch(/syntax error at or near|SELECT|jsonpath/i);
  });

  it("never shows another project's runs, in results or counts", async () => {
    const r = await call("/runs/search", otherKey, {
      query: "customer.name:Acme",
      facets: { s: { type: "string", path: "status" } },
    });
    expect(r.json.results).toHaveLength(1);
    expect(mine).not.toContain(r.json.results[0].id);
    expect(r.json.meta.count.total).toBe(1);
    const list = await call("/runs?limit=1000", otherKey);
    expect(list.json.map((run: { id: string }) => run.id)).toEqual([r.json.results[0].id]);
  });
});
