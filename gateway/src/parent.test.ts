import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// `parent` on an execution (issue 5, item 9): a run of the caller's project, else 404.
let pies: TestPies;
let app: FastifyInstance;
let interactionId: string;
let otherRunId: string;

beforeAll(async () => {
  pies = await startTestPies();
  app = pies.app;
  interactionId = await newInteraction(pies.key, pies.environmentId);
  // A run of another project, executed with that project's own key.
  const { project } = await pies.catalog.createAccount({ name: "other" });
  const { secret } = await pies.catalog.createApiKey({ projectId: project!.id });
  const { environment } = await pies.catalog.createEnvironment({
    projectId: project!.id,
    environment: { provider: "test", defaultModel: "test" },
  });
  const otherInteraction = await newInteraction(secret, environment!.id);
  const run = await call("/runs", secret, { interaction: otherInteraction });
  expect(run.status).toBe(200);
  otherRunId = run.json.id;
  // PGlite's start is slow on a busy machine.
}, 60_000);

afterAll(async () => {
  await pies?.close();
});

const call = (url: string, token: string, body?: unknown) =>
  request(app, body === undefined ? "GET" : "POST", url, { key: token, body });

async function newInteraction(token: string, environment: string): Promise<string> {
  const prompt = await call("/prompts", token, {
    name: "p",
    role: "user",
    content_type: "text",
    content: "Hello",
  });
  const interaction = await call("/interactions", token, {
    name: "Hi",
    environment,
    prompts: [{ type: "template", template: prompt.json.id }],
  });
  expect(interaction.status).toBe(201);
  return interaction.json.id;
}

describe("parent", () => {
  it.each([false, true])(
    "is refused with 404 naming it when unknown or another project's (stream: %s)",
    async (stream) => {
      const before = (await call("/runs?limit=1000", pies.key)).json.length;
      for (const parent of ["000000000000000000000000", otherRunId]) {
        const r = await call("/runs", pies.key, { interaction: interactionId, stream, parent });
        expect(r.status).toBe(404);
        expect(r.json).toMatchObject({
          status: 404,
          code: "not_found",
          message: `parent run ${parent} not found`,
        });
      }
      // No run was recorded for the refused executions.
      expect((await call("/runs?limit=1000", pies.key)).json).toHaveLength(before);
    },
  );

  it("is stored when it is a run of the same project, and lists the children", async () => {
    const parent = await call("/runs", pies.key, { interaction: interactionId });
    expect(parent.status).toBe(200);
    for (const stream of [false, true]) {
      const child = await call("/runs", pies.key, {
        interaction: interactionId,
        stream,
        parent: parent.json.id,
      });
      expect(child.status).toBe(200);
      expect(child.json.parent).toBe(parent.json.id);
    }
    const children = await call(`/runs?parent=${parent.json.id}`, pies.key);
    expect(children.json).toHaveLength(2);
  });
});
