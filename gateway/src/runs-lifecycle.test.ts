import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// The runs' lifecycle over HTTP (DESIGN.md §8): DELETE /runs/:id and POST /runs/delete with admin
// keys, a deleted run answering 404 and its child keeping its parent; a project's retention_days.
let pies: TestPies;
let app: FastifyInstance;
let member: string;
let interactionId: string;

const call = (method: string, url: string, key: string, body?: unknown) =>
  request(app, method, url, { key, body });

async function execute(customer: string, parent?: string): Promise<string> {
  const run = await call("POST", "/runs", pies.key, {
    interaction: interactionId,
    data: { customer },
    ...(parent ? { parent } : {}),
  });
  expect(run.status, JSON.stringify(run.json)).toBe(200);
  return run.json.id;
}

/** Waits until the project lists n runs (the record log is written to the store in batches). */
async function stored(n: number) {
  for (let i = 0; i < 400; i++) {
    if ((await call("GET", "/runs?limit=1000", pies.key)).json.length >= n) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`the store never held ${n} runs`);
}

beforeAll(async () => {
  pies = await startTestPies();
  app = pies.app;
  member = (await call("POST", "/apikeys", pies.key, { name: "app" })).json.key;
  const prompt = await call("POST", "/prompts", pies.key, {
    name: "p",
    role: "user",
    content_type: "text",
    content: "Hello",
  });
  const created = await call("POST", "/interactions", pies.key, {
    name: "Hi",
    environment: pies.environmentId,
    prompts: [{ type: "template", template: prompt.json.id }],
  });
  interactionId = created.json.id;
}, 60_000);

afterAll(async () => {
  await pies?.close();
});

describe("deleting runs", () => {
  it("by id: 204, then 404 for good; its child keeps a parent that answers 404", async () => {
    const parent = await execute("Acme");
    const child = await execute("Acme", parent);
    await stored(2);
    expect((await call("DELETE", `/runs/${parent}`, member)).status).toBe(403);
    const deleted = await call("DELETE", `/runs/${parent}`, pies.key);
    expect(deleted.status).toBe(204);
    const gone = await call("GET", `/runs/${parent}`, pies.key);
    expect(gone.status).toBe(404);
    expect(gone.json).toMatchObject({ status: 404, code: "not_found" });
    expect((await call("DELETE", `/runs/${parent}`, pies.key)).status).toBe(404);
    const kept = await call("GET", `/runs/${child}`, pies.key);
    expect(kept.json.parent).toBe(parent);
    const listed = await call("GET", "/runs?limit=1000", pies.key);
    expect(listed.json.map((r: { id: string }) => r.id)).not.toContain(parent);
  });

  it("by query: every stored match, answered with their number", async () => {
    const before = (await call("GET", "/runs?limit=1000", pies.key)).json.length;
    for (const customer of ["Globex", "Globex", "Initech"]) await execute(customer);
    await stored(before + 3);
    expect((await call("POST", "/runs/delete", member, { query: "customer:Globex" })).status).toBe(
      403,
    );
    const r = await call("POST", "/runs/delete", pies.key, { query: "customer:Globex" });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(r.json).toEqual({ deleted: 2 });
    const left = await call("POST", "/runs/search", pies.key, { query: "customer:Globex" });
    expect(left.json.results).toEqual([]);
    const initech = await call("POST", "/runs/search", pies.key, { query: "customer:Initech" });
    expect(initech.json.results).toHaveLength(1);
  });

  it("answers 400 to what a deletion does not take, naming it", async () => {
    for (const [body, field] of [
      [{ facets: { s: { type: "string", path: "status" } } }, "facets"],
      [{ limit: 10 }, "limit"],
      [{ query: "customer:(" }, "query"],
      [{ filters: { colour: "red" } }, "filters"],
    ] as const) {
      const r = await call("POST", "/runs/delete", pies.key, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.json.message).toContain(field);
    }
  });
});

describe("a project's retention_days", () => {
  it("is 0 (the deployment's) by default, set at creation and by PUT, checked", async () => {
    const projects = await call("GET", "/projects", pies.key);
    expect(projects.json[0].retention_days).toBe(0);
    const made = await call("POST", "/projects", pies.key, { name: "short", retention_days: 7 });
    expect(made.status).toBe(201);
    expect(made.json.retention_days).toBe(7);
    const updated = await call("PUT", `/projects/${made.json.id}`, pies.key, { retention_days: 3 });
    expect(updated.status, JSON.stringify(updated.json)).toBe(200);
    expect(updated.json).toMatchObject({ id: made.json.id, name: "short", retention_days: 3 });
    const renamed = await call("PUT", `/projects/${made.json.id}`, pies.key, { name: "brief" });
    expect(renamed.json).toMatchObject({ name: "brief", retention_days: 3 });
    const { projects: listed } = await pies.catalog.listProjectRetention({});
    expect(listed.map((p) => [p.projectId, p.retentionDays])).toEqual([[made.json.id, 3]]);
    for (const bad of [{ retention_days: -1 }, { retention_days: 1.5 }, { retention_days: "7" }]) {
      const r = await call("PUT", `/projects/${made.json.id}`, pies.key, bad);
      expect(r.status).toBe(400);
      expect(r.json.message).toContain("retention_days");
    }
    expect((await call("PUT", `/projects/${made.json.id}`, member, { name: "x" })).status).toBe(
      403,
    );
    // Another account's project is as unknown as none.
    const { project } = await pies.catalog.createAccount({ name: "other" });
    const other = await call("PUT", `/projects/${project!.id}`, pies.key, { retention_days: 1 });
    expect(other.status).toBe(404);
  });
});
