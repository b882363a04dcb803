import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { PGlite } from "@electric-sql/pglite";
import type { Kysely } from "kysely";
import { catalogMigrations, catalogRoutes, SecretBox, seedAccount } from "@pies/catalog";
import { createLogger, EndpointPolicy } from "@pies/common";
import { MemoryCatalogEvents } from "@pies/common/bus";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { CatalogService } from "@pies/proto/catalog";
import { CatalogResolver } from "./resolver.js";

// The resolver over the real catalog handlers (in memory, PGlite), their change events in memory;
// every ResolveExecution that reaches the catalog is counted.
let db: Kysely<any>;
let catalog: Client<typeof CatalogService>;
let resolver: CatalogResolver;
const events = new MemoryCatalogEvents();
let resolveCalls = 0;

beforeAll(async () => {
  db = createDatabase<any>({ pglite: await PGlite.create() });
  await migrateToLatest(db, "catalog", catalogMigrations);
  const transport = createRouterTransport(
    catalogRoutes({
      db,
      secrets: new SecretBox(randomBytes(32).toString("base64")),
      logger: createLogger("catalog", "silent"),
      endpoints: new EndpointPolicy(""),
      events,
    }),
    {
      transport: {
        interceptors: [
          (next) => async (req) => {
            if (req.method.name === "ResolveExecution") resolveCalls++;
            return next(req);
          },
        ],
      },
    },
  );
  catalog = createClient(CatalogService, transport);
  resolver = new CatalogResolver(catalog, { maxAgeSeconds: 60 });
  resolver.follow(events);
}, 60_000);

afterAll(async () => {
  await db?.destroy();
});

async function project(name: string) {
  const seeded = await seedAccount(catalog, { account: name, key: "k" });
  const { prompt } = await catalog.createPrompt({
    projectId: seeded.projectId,
    prompt: { name: "p", role: "user", contentType: "text", content: "hello" },
  });
  const { interaction } = await catalog.createInteraction({
    projectId: seeded.projectId,
    interaction: {
      name: "Greeting",
      environmentId: seeded.environmentId,
      prompts: [{ type: "template", templateId: prompt!.id }],
    },
  });
  return { ...seeded, interactionId: interaction!.id, promptId: prompt!.id };
}

/** ResolveExecution calls that `body` cost. */
async function calls(body: () => Promise<unknown>): Promise<number> {
  const before = resolveCalls;
  await body();
  return resolveCalls - before;
}

describe("CatalogResolver", () => {
  it("costs one call per miss, shared by concurrent executions, and none on a hit", async () => {
    const p = await project("hits");
    const byId = {
      projectId: p.projectId,
      interaction: { case: "interactionId" as const, value: p.interactionId },
      environmentId: "",
    };
    let answers: Awaited<ReturnType<CatalogResolver["resolve"]>>[] = [];
    const concurrent = async () => {
      answers = await Promise.all(Array.from({ length: 20 }, () => resolver.resolve(byId)));
    };
    expect(await calls(concurrent)).toBe(1);
    expect(new Set(answers).size).toBe(1);
    expect(answers[0]!.interaction!.prompts[0]!.template!.content).toBe("hello");
    expect(await calls(() => resolver.resolve(byId))).toBe(0);
    // Each different question is its own entry: a name, an environment override, the environment.
    const byName = {
      ...byId,
      interaction: { case: "interactionName" as const, value: "Greeting@draft" },
    };
    const override = { ...byId, environmentId: p.environmentId };
    const environmentOnly = {
      projectId: p.projectId,
      environmentId: p.environmentId,
      environmentOnly: true,
    };
    for (const req of [byName, override, environmentOnly]) {
      expect(await calls(() => resolver.resolve(req))).toBe(1);
      expect(await calls(() => resolver.resolve(req))).toBe(0);
    }
    expect((await resolver.resolve(environmentOnly)).interaction).toBeUndefined();
  });

  it("asks again after any write to the project, and only that project", async () => {
    const p = await project("writes");
    const other = await project("others");
    const req = (q: typeof p) => ({
      projectId: q.projectId,
      interaction: { case: "interactionId" as const, value: q.interactionId },
      environmentId: "",
    });
    await resolver.resolve(req(p));
    await resolver.resolve(req(other));
    expect(await calls(() => resolver.resolve(req(p)))).toBe(0);
    const writes: [string, () => Promise<unknown>][] = [
      [
        "prompt create",
        () =>
          catalog.createPrompt({
            projectId: p.projectId,
            prompt: { name: "q", role: "user", contentType: "text", content: "x" },
          }),
      ],
      [
        "environment create",
        () =>
          catalog.createEnvironment({
            projectId: p.projectId,
            environment: { name: "t2", provider: "test", defaultModel: "test" },
          }),
      ],
      ["key create", () => catalog.createApiKey({ projectId: p.projectId, name: "n" })],
    ];
    for (const [, write] of writes) {
      await write();
      expect(await calls(() => resolver.resolve(req(p)))).toBe(1);
      expect(await calls(() => resolver.resolve(req(p)))).toBe(0);
    }
    // The other project's answer was kept throughout.
    expect(await calls(() => resolver.resolve(req(other)))).toBe(0);
  });

  it("resolves a name to the newer interaction once one is created with that name", async () => {
    const p = await project("names");
    const byName = {
      projectId: p.projectId,
      interaction: { case: "interactionName" as const, value: "Greeting" },
      environmentId: "",
    };
    expect((await resolver.resolve(byName)).interaction!.id).toBe(p.interactionId);
    const { interaction } = await catalog.createInteraction({
      projectId: p.projectId,
      interaction: {
        name: "Greeting",
        environmentId: p.environmentId,
        prompts: [{ type: "template", templateId: p.promptId }],
      },
    });
    expect((await resolver.resolve(byName)).interaction!.id).toBe(interaction!.id);
  });
});
