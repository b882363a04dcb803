import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { Code, createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { PGlite } from "@electric-sql/pglite";
import type { Kysely } from "kysely";
import { createLogger, EndpointPolicy } from "@pies/common";
import { MemoryCatalogEvents, type CatalogChange } from "@pies/common/bus";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { expectCode } from "@pies/testkit";
import { ApiKeyRole, CatalogService } from "@pies/proto/catalog";
import { catalogWrites, changeOf, publishingChanges } from "./changes.js";
import { migrations } from "./migrations/index.js";
import { SecretBox } from "./secrets.js";
import { catalogRoutes, createCatalogService } from "./service.js";
import type { CatalogDatabase } from "./tables.js";

// The catalog in memory over PGlite, its change events in memory: what each write publishes.
let db: Kysely<CatalogDatabase>;
let catalog: Client<typeof CatalogService>;
const events = new MemoryCatalogEvents();
const seen: CatalogChange[] = [];
const logger = createLogger("catalog", "silent");
const deps = () => ({
  db,
  secrets: new SecretBox(randomBytes(32).toString("base64")),
  logger,
  endpoints: new EndpointPolicy(""),
  events,
});

beforeAll(async () => {
  db = createDatabase<CatalogDatabase>({ pglite: await PGlite.create() });
  await migrateToLatest(db, "catalog", migrations);
  catalog = createClient(CatalogService, createRouterTransport(catalogRoutes(deps())));
  events.listen({ change: (c) => seen.push(c), reset: () => {} });
});

afterAll(async () => {
  await db?.destroy();
});

/**
 * What the calls in `body` published, each revision checked (a time within the last minute on
 * every write but a delete) and then left out, so that tests compare the rest exactly.
 */
async function published(body: () => Promise<unknown>): Promise<CatalogChange[]> {
  const from = seen.length;
  await body();
  return seen.slice(from).map(({ revision, ...change }) => {
    if (change.op === "delete") expect(revision).toBeUndefined();
    else expect(Math.abs(Date.now() - revision!), JSON.stringify(change)).toBeLessThan(60_000);
    return change;
  });
}

describe("catalog change events", () => {
  it("treats every method not declared free of side effects as a write", () => {
    // A read that lost its NO_SIDE_EFFECTS option would publish on every call: this names them.
    expect(catalogWrites.map((m) => m.name).sort()).toEqual(
      [
        "CreateInteraction",
        "UpdateInteraction",
        "DeleteInteraction",
        "PublishInteraction",
        "ForkInteraction",
        "CreatePrompt",
        "UpdatePrompt",
        "DeletePrompt",
        "CreateEnvironment",
        "UpdateEnvironment",
        "DeleteEnvironment",
        "CreateAccount",
        "CreateProject",
        "UpdateProject",
        "CreateApiKey",
        "DeleteApiKey",
      ].sort(),
    );
  });

  it("publishes one event naming the project, kind and id after each write of every kind", async () => {
    let account = "";
    let projectId = "";
    expect(
      await published(async () => {
        const created = await catalog.createAccount({ name: "acme" });
        account = created.account!.id;
        projectId = created.project!.id;
      }),
    ).toEqual([{ projectId, kind: "account", op: "create", id: account }]);

    let second = "";
    let secondKey = "";
    expect(
      await published(async () => {
        const created = await catalog.createProject({ accountId: account, name: "two" });
        second = created.project!.id;
        secondKey = created.apiKey!.id;
      }),
    ).toEqual([{ projectId: second, kind: "project", op: "create", id: second }]);
    expect(secondKey).not.toBe("");

    let environmentId = "";
    expect(
      await published(async () => {
        const { environment } = await catalog.createEnvironment({
          projectId,
          environment: { name: "t", provider: "test", defaultModel: "test" },
        });
        environmentId = environment!.id;
      }),
    ).toEqual([{ projectId, kind: "environment", op: "create", id: environmentId }]);

    let promptId = "";
    expect(
      await published(async () => {
        const { prompt } = await catalog.createPrompt({
          projectId,
          prompt: { name: "p", role: "user", contentType: "text", content: "hi" },
        });
        promptId = prompt!.id;
      }),
    ).toEqual([{ projectId, kind: "prompt", op: "create", id: promptId }]);

    let interactionId = "";
    expect(
      await published(async () => {
        const { interaction } = await catalog.createInteraction({
          projectId,
          interaction: {
            name: "I",
            environmentId,
            prompts: [{ type: "template", templateId: promptId }],
          },
        });
        interactionId = interaction!.id;
      }),
    ).toEqual([{ projectId, kind: "interaction", op: "create", id: interactionId }]);

    let keyId = "";
    expect(
      await published(async () => {
        const { apiKey } = await catalog.createApiKey({ projectId, role: ApiKeyRole.MEMBER });
        keyId = apiKey!.id;
      }),
    ).toEqual([{ projectId, kind: "apikey", op: "create", id: keyId }]);
    expect(await published(() => catalog.deleteApiKey({ projectId, id: keyId }))).toEqual([
      { projectId, kind: "apikey", op: "delete", id: keyId },
    ]);

    // A key for the account's other project: the event names that project.
    let otherKeyId = "";
    expect(
      await published(async () => {
        const { apiKey } = await catalog.createApiKey({ projectId: second, accountId: account });
        otherKeyId = apiKey!.id;
      }),
    ).toEqual([{ projectId: second, kind: "apikey", op: "create", id: otherKeyId }]);

    // Updates, publishing (the event names the interaction published) and deletes.
    expect(
      await published(() =>
        catalog.updateInteraction({ projectId, id: interactionId, interaction: { model: "m" } }),
      ),
    ).toEqual([{ projectId, kind: "interaction", op: "update", id: interactionId }]);
    expect(
      await published(() => catalog.publishInteraction({ projectId, id: interactionId })),
    ).toEqual([{ projectId, kind: "interaction", op: "publish", id: interactionId }]);
    // A fork: the event names the interaction forked; the fork goes again before the deletes.
    let forkId = "";
    expect(
      await published(async () => {
        const { interaction } = await catalog.forkInteraction({ projectId, id: interactionId });
        forkId = interaction!.id;
      }),
    ).toEqual([{ projectId, kind: "interaction", op: "fork", id: interactionId }]);
    expect(await published(() => catalog.deleteInteraction({ projectId, id: forkId }))).toEqual([
      { projectId, kind: "interaction", op: "delete", id: forkId },
    ]);
    expect(
      await published(() =>
        catalog.updatePrompt({ projectId, id: promptId, prompt: { content: "v2" } }),
      ),
    ).toEqual([{ projectId, kind: "prompt", op: "update", id: promptId }]);
    expect(
      await published(() =>
        catalog.updateEnvironment({ projectId, id: environmentId, environment: { name: "t2" } }),
      ),
    ).toEqual([{ projectId, kind: "environment", op: "update", id: environmentId }]);
    expect(
      await published(() => catalog.deleteInteraction({ projectId, id: interactionId })),
    ).toEqual([{ projectId, kind: "interaction", op: "delete", id: interactionId }]);
    expect(await published(() => catalog.deletePrompt({ projectId, id: promptId }))).toEqual([
      { projectId, kind: "prompt", op: "delete", id: promptId },
    ]);
    expect(
      await published(() => catalog.deleteEnvironment({ projectId, id: environmentId })),
    ).toEqual([{ projectId, kind: "environment", op: "delete", id: environmentId }]);
  });

  it("tells two writes of one resource apart by their revision, the later one higher", async () => {
    const { project } = await catalog.createAccount({ name: "revisions" });
    const projectId = project!.id;
    const { prompt } = await catalog.createPrompt({ projectId, prompt: { content: "a" } });
    const from = seen.length;
    await catalog.updatePrompt({ projectId, id: prompt!.id, prompt: { content: "b" } });
    await new Promise((resolve) => setTimeout(resolve, 5));
    await catalog.updatePrompt({ projectId, id: prompt!.id, prompt: { content: "c" } });
    const [first, second] = seen.slice(from);
    expect(second!.revision!).toBeGreaterThan(first!.revision!);
  });

  it("publishes nothing for reads or failed writes", async () => {
    const { project } = await catalog.createAccount({ name: "quiet" });
    const projectId = project!.id;
    const none = await published(async () => {
      await catalog.listEnvironments({ projectId });
      await catalog.listApiKeys({ projectId });
      await expectCode(catalog.getInteraction({ projectId, id: "nope" }), Code.NotFound);
      await expectCode(
        catalog.resolveExecution({ projectId, interaction: { case: "interactionId", value: "x" } }),
        Code.NotFound,
      );
      await expectCode(
        catalog.verifyApiKey({ secret: `sk-${"x".repeat(43)}` }),
        Code.Unauthenticated,
      );
      await expectCode(
        catalog.createEnvironment({ projectId, environment: { provider: "nope" } }),
        Code.InvalidArgument,
      );
      await expectCode(catalog.deleteApiKey({ projectId, id: "nope" }), Code.NotFound);
      await expectCode(catalog.updateEnvironment({ projectId, id: "e" }), Code.NotFound);
      await expectCode(catalog.deleteInteraction({ projectId, id: "i" }), Code.NotFound);
      await expectCode(catalog.publishInteraction({ projectId, id: "i" }), Code.NotFound);
      await expectCode(catalog.listInteractionVersions({ projectId, id: "i" }), Code.NotFound);
      await expectCode(catalog.listEnvironmentModels({ projectId, id: "e" }), Code.NotFound);
    });
    expect(none).toEqual([]);
  });

  it("covers a write built later: any handler of a write method publishes once it exists", async () => {
    // As the issue that builds updates will add them: a handler next to the catalog's own.
    const handlers = {
      ...createCatalogService({ ...deps(), events: undefined }),
      async updateEnvironment(req: { projectId: string; id: string }) {
        return { environment: { id: req.id, projectId: req.projectId, updatedAt: timestampNow() } };
      },
    };
    const later = createClient(
      CatalogService,
      createRouterTransport((router) =>
        router.service(CatalogService, publishingChanges(handlers, events, logger)),
      ),
    );
    expect(await published(() => later.updateEnvironment({ projectId: "p1", id: "e1" }))).toEqual([
      { projectId: "p1", kind: "environment", op: "update", id: "e1" },
    ]);
  });

  it("answers the write when publishing fails", async () => {
    const failing = {
      publish: () => {
        throw new Error("bus gone");
      },
      listen: () => () => {},
      close: async () => {},
    };
    const client = createClient(
      CatalogService,
      createRouterTransport(catalogRoutes({ ...deps(), events: failing })),
    );
    const { account } = await client.createAccount({ name: "still" });
    expect(account?.id).toBeTruthy();
  });

  it("names the kind and verb from the method, the id from the request or the answer", () => {
    expect(
      changeOf("PublishInteraction", { projectId: "p", id: "i" }, { version: { id: "v" } }),
    ).toEqual({ projectId: "p", kind: "interaction", op: "publish", id: "i" });
    expect(changeOf("DeletePrompt", { projectId: "p", id: "t" }, {})).toEqual({
      projectId: "p",
      kind: "prompt",
      op: "delete",
      id: "t",
    });
    // A write that names no project: listeners drop everything.
    expect(changeOf("Reindex", {}, {})).toEqual({ kind: "catalog", op: "reindex" });
  });
});
