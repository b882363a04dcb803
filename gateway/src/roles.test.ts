import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// Key roles (DESIGN.md §9) through the real gateway over the real services, in memory.
let pies: TestPies;
let app: FastifyInstance;
let admin: string;
let member: string;
let memberId: string;

beforeAll(async () => {
  pies = await startTestPies();
  app = pies.app;
  admin = pies.key;
  const created = await call("POST", "/apikeys", admin, { name: "app" });
  expect(created.status, JSON.stringify(created.json)).toBe(201);
  member = created.json.key;
  memberId = created.json.id;
  // PGlite's start is slow on a busy machine.
}, 60_000);

afterAll(async () => {
  await pies?.close();
});

const call = (method: string, url: string, token: string, body?: unknown) =>
  request(app, method, url, { key: token, body });

describe("key roles", () => {
  it("makes member keys by default and admin keys when asked", async () => {
    expect((await call("GET", "/account", member)).json.key).toEqual({
      id: memberId,
      name: "app",
      role: "member",
    });
    expect((await call("GET", "/account", admin)).json.key.role).toBe("admin");
    const second = await call("POST", "/apikeys", admin, { name: "ops", role: "admin" });
    expect(second.json).toMatchObject({ name: "ops", role: "admin" });
    expect((await call("GET", "/account", second.json.key)).json.key.role).toBe("admin");
    const listed = await call("GET", "/apikeys", admin);
    expect(listed.json.map((k: { role: string }) => k.role)).toEqual(["admin", "member", "admin"]);
    const bad = await call("POST", "/apikeys", admin, { role: "owner" });
    expect(bad.status).toBe(400);
    expect(bad.json.message).toMatch(/^role: must be one of admin, member/);
  });

  it("answers 403 forbidden to a member key on every admin route, before doing anything", async () => {
    const env = pies.environmentId;
    for (const [method, url, body] of [
      ["POST", "/apikeys", { name: "x", role: "admin" }],
      ["GET", "/apikeys", undefined],
      ["DELETE", `/apikeys/${memberId}`, undefined],
      ["POST", "/projects", { name: "mine" }],
      ["GET", "/projects", undefined],
      ["POST", "/environments", { provider: "test" }],
      ["PUT", `/environments/${env}`, { name: "renamed" }],
      ["DELETE", `/environments/${env}`, undefined],
      ["PUT", `/projects/${pies.projectId}`, { retention_days: 1 }],
      ["DELETE", "/runs/000000000000000000000000", undefined],
      ["POST", "/runs/delete", {}],
      // A role check says nothing of existence: an unknown id is 403 too.
      ["DELETE", "/apikeys/000000000000000000000000", undefined],
    ] as const) {
      const r = await call(method, url, member, body);
      expect(r.status, `${method} ${url}`).toBe(403);
      expect(r.json).toMatchObject({ error: "Forbidden", status: 403, code: "forbidden" });
      expect(r.json.message).toMatch(/needs an admin key$/);
    }
    // Nothing happened: the member key still works and no key, project or environment was added.
    expect((await call("GET", "/account", member)).status).toBe(200);
    expect((await call("GET", "/projects", admin)).json).toHaveLength(1);
    expect((await call("GET", "/environments", admin)).json).toHaveLength(1);
  });

  it("lets a member key execute, read and edit interactions and prompts, and read runs", async () => {
    const prompt = await call("POST", "/prompts", member, {
      name: "p",
      role: "user",
      content_type: "text",
      content: "Hello",
    });
    expect(prompt.status).toBe(201);
    expect((await call("GET", `/prompts/${prompt.json.id}`, member)).status).toBe(200);
    const environments = await call("GET", "/environments", member);
    expect(environments.status).toBe(200);
    const interaction = await call("POST", "/interactions", member, {
      name: "Hi",
      environment: environments.json[0].id,
      prompts: [{ type: "template", template: prompt.json.id }],
    });
    expect(interaction.status).toBe(201);
    const edited = await call("PUT", `/interactions/${interaction.json.id}`, member, {
      description: "edited",
    });
    expect(edited.status).toBe(200);
    expect(edited.json.description).toBe("edited");
    const published = await call(
      "POST",
      `/interactions/${interaction.json.id}/publish`,
      member,
      {},
    );
    expect(published.status).toBe(201);
    expect(published.json).toMatchObject({ version: 1, latest: true, status: "published" });
    const run = await call("POST", `/interactions/${interaction.json.id}/execute`, member, {});
    expect(run.status).toBe(200);
    expect((await call("GET", `/runs/${run.json.id}`, member)).json.status).toBe("completed");
    expect((await call("GET", "/runs", member)).status).toBe(200);
  });

  it("lets an admin revoke keys and environments route to the catalog", async () => {
    const temp = await call("POST", "/apikeys", admin, { name: "temp" });
    expect((await call("DELETE", `/apikeys/${temp.json.id}`, admin)).status).toBe(204);
    expect((await call("GET", "/account", temp.json.key)).status).toBe(401);
    const put = await call("PUT", `/environments/${pies.environmentId}`, admin, { name: "x" });
    expect(put.status).toBe(200);
    expect(put.json.name).toBe("x");
    // A member may read an environment but not change it.
    const refused = await call("PUT", `/environments/${pies.environmentId}`, member, { name: "y" });
    expect(refused.status).toBe(403);
  });

  it("creates a project with its own admin key, the way into it", async () => {
    const created = await call("POST", "/projects", admin, { name: "second" });
    expect(created.status).toBe(201);
    expect(created.json).toMatchObject({
      name: "second",
      api_key: { name: "default", role: "admin", project: created.json.id },
    });
    const key = created.json.api_key.key as string;
    expect(key).toMatch(/^sk-[0-9A-Za-z]{43}$/);
    const account = await call("GET", "/account", key);
    expect(account.json.project).toEqual({ id: created.json.id, name: "second" });
    expect(account.json.key.role).toBe("admin");
    // The first project's resources stay hidden from it (404, not 403).
    expect((await call("GET", `/environments/${pies.environmentId}`, key)).status).toBe(404);
    expect((await call("GET", `/environments/${pies.environmentId}`, member)).status).toBe(200);
  });
});
