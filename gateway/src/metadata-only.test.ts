import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// Metadata-only interactions (`store: "metadata"`, DESIGN.md §8) through the REST surface, in
// memory (the embedded mode's wiring): the setting on interactions and versions, and its runs.
let pies: TestPies;
let app: FastifyInstance;
let key: string;
let environmentId: string;

beforeAll(async () => {
  pies = await startTestPies();
  ({ app, key, environmentId } = pies);
});

afterAll(async () => {
  await pies.close();
});

const call = (method: string, url: string, body?: unknown) =>
  request(app, method, url, { key, body });

async function interaction(extra: Record<string, unknown> = {}) {
  const prompt = await call("POST", "/prompts", {
    name: "p",
    role: "user",
    content_type: "jst",
    content: "return `Tell me about ${topic}`",
    input_schema: {
      type: "object",
      properties: { topic: { type: "string" } },
      required: ["topic"],
    },
  });
  expect(prompt.status, prompt.text).toBe(201);
  const created = await call("POST", "/interactions", {
    name: "Private",
    environment: environmentId,
    prompts: [{ type: "template", template: prompt.json.id }],
    ...extra,
  });
  expect(created.status, created.text).toBe(201);
  return created.json as { id: string; store: string };
}

describe("the store setting of an interaction", () => {
  it("is full unless set, and shows on every read, list and version", async () => {
    const full = await interaction();
    expect(full.store).toBe("full");
    const metadata = await interaction({ store: "metadata" });
    expect(metadata.store).toBe("metadata");
    expect((await call("GET", `/interactions/${metadata.id}`)).json.store).toBe("metadata");
    const listed = (await call("GET", "/interactions?name=Private")).json as {
      id: string;
      store: string;
    }[];
    expect(Object.fromEntries(listed.map((i) => [i.id, i.store]))).toEqual({
      [full.id]: "full",
      [metadata.id]: "metadata",
    });

    const published = await call("POST", `/interactions/${metadata.id}/publish`, {});
    expect(published.status, published.text).toBe(201);
    expect(published.json.store).toBe("metadata");
    // A later change of the draft leaves the version as it was published.
    const changed = await call("PUT", `/interactions/${metadata.id}`, { store: "full" });
    expect(changed.status, changed.text).toBe(200);
    expect(changed.json.store).toBe("full");
    const versions = await call("GET", `/interactions/${metadata.id}/versions`);
    expect(versions.json.map((v: { store: string }) => v.store)).toEqual(["metadata"]);
    expect((await call("GET", `/interactions/${published.json.id}`)).json.store).toBe("metadata");
    // An update that does not name it keeps it.
    const renamed = await call("PUT", `/interactions/${full.id}`, { description: "d" });
    expect(renamed.json.store).toBe("full");
  });

  it("refuses any other value with a 400 naming the field and the values it takes", async () => {
    for (const [method, url, body] of [
      ["POST", "/interactions", { name: "Bad", store: "none" }],
      ["POST", "/interactions", { name: "Bad", store: true }],
      ["PUT", `/interactions/${(await interaction()).id}`, { store: "Metadata" }],
    ] as const) {
      const bad = await call(method, url, body);
      expect(bad.status, `${method} ${url} ${JSON.stringify(body)}`).toBe(400);
      expect(bad.json).toMatchObject({
        error: "Bad Request",
        status: 400,
        code: "invalid_request",
        // As for every enum field (zod's words): the field, the values it takes, what came.
        message: expect.stringMatching(/^store: .*Expected 'full' \| 'metadata', received /),
      });
    }
  });
});
