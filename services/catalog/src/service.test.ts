import { createHash, randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { PGlite } from "@electric-sql/pglite";
import type { Kysely } from "kysely";
import { createLogger, EndpointPolicy, jsonBytes, jsonOf, NO_JSON } from "@pies/common";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { expectCode } from "@pies/testkit";
import { ApiKeyRole, CatalogService, InteractionStatus, Visibility } from "@pies/proto/catalog";
import { RunStore } from "@pies/proto/runs";
import { migrations } from "./migrations/index.js";
import { SecretBox } from "./secrets.js";
import { catalogRoutes } from "./service.js";
import type { CatalogDatabase } from "./tables.js";

// The catalog in memory: its handlers behind a router transport, over PGlite (a real PostgreSQL
// engine in-process). One database per file; every test makes its own account, so tests never
// depend on each other's rows.
let pglite: PGlite;
let db: Kysely<CatalogDatabase>;
let secrets: SecretBox;
let catalog: Client<typeof CatalogService>;
const dnsTable: Record<string, string> = {
  "internal.example.com": "10.1.2.3",
  "metadata.example.com": "169.254.169.254",
};

beforeAll(async () => {
  pglite = await PGlite.create();
  db = createDatabase<CatalogDatabase>({ pglite });
  await migrateToLatest(db, "catalog", migrations);
  secrets = new SecretBox(randomBytes(32).toString("base64"));
  // The deployed default policy; names resolve as this table says, not through DNS.
  const endpoints = new EndpointPolicy("", {
    resolve: async (host) => [{ address: dnsTable[host] ?? "93.184.216.34", family: 4 }],
  });
  const transport = createRouterTransport(
    catalogRoutes({ db, secrets, logger: createLogger("catalog", "silent"), endpoints }),
  );
  catalog = createClient(CatalogService, transport);
});

afterAll(async () => {
  await db?.destroy();
});

let accounts = 0;
async function newProject() {
  const { account, project } = await catalog.createAccount({ name: `acme-${++accounts}` });
  return { accountId: account!.id, projectId: project!.id };
}

/** JSON of a message (timestamps hold bigints). */
const text = (value: unknown) =>
  JSON.stringify(value, (_, v: unknown) => (typeof v === "bigint" ? v.toString() : v));

/** Every row of a catalog table as text (what a dump of the column values would show). */
async function tableText(table: string): Promise<string> {
  const result = await pglite.query<{ row: string }>(
    `select t::text as row from catalog.${table} t`,
  );
  return result.rows.map((r) => r.row).join("\n");
}

async function newPrompt(projectId: string, content = "return `Hello ${name}`") {
  const { prompt } = await catalog.createPrompt({
    projectId,
    prompt: { name: "greet", role: "user", contentType: "jst", content },
  });
  return prompt!;
}

async function newEnvironment(projectId: string, apiKey?: string) {
  const { environment } = await catalog.createEnvironment({
    projectId,
    environment: { name: "local", provider: "test", defaultModel: "test-model", apiKey },
  });
  return environment!;
}

describe("accounts and projects", () => {
  it("creates an account with a default project", async () => {
    const { account, project } = await catalog.createAccount({ name: "Acme" });
    expect(account!.id).toMatch(/^[0-9a-f]{24}$/);
    expect(account!.name).toBe("Acme");
    expect(account!.createdAt).toBeDefined();
    expect(project!.name).toBe("default");
    expect(project!.accountId).toBe(account!.id);

    const got = await catalog.getAccount({ accountId: account!.id });
    expect(got.account!.name).toBe("Acme");
    const { projects } = await catalog.listProjects({ accountId: account!.id });
    expect(projects.map((p) => p.id)).toEqual([project!.id]);
  });

  it("names the first project when asked and creates more projects", async () => {
    const { account, project } = await catalog.createAccount({
      name: "Named",
      projectName: "prod",
    });
    expect(project!.name).toBe("prod");
    const { project: second } = await catalog.createProject({
      accountId: account!.id,
      name: "staging",
    });
    expect(second!.accountId).toBe(account!.id);
    const { projects } = await catalog.listProjects({ accountId: account!.id });
    expect(projects.map((p) => p.name).sort()).toEqual(["prod", "staging"]);
  });

  it("rejects missing names and unknown accounts", async () => {
    await expectCode(catalog.createAccount({ name: "" }), Code.InvalidArgument);
    await expectCode(catalog.getAccount({ accountId: "000000000000000000000000" }), Code.NotFound);
    await expectCode(
      catalog.createProject({ accountId: "000000000000000000000000", name: "x" }),
      Code.NotFound,
    );
    const { accountId } = await newProject();
    await expectCode(catalog.createProject({ accountId, name: "" }), Code.InvalidArgument);
  });
});

describe("API keys", () => {
  it("creates an sk- key whose secret is shown once and stored only as its hash", async () => {
    const { accountId, projectId } = await newProject();
    const { apiKey, secret } = await catalog.createApiKey({ projectId, name: "ci" });
    expect(secret).toMatch(/^sk-[0-9A-Za-z]{43}$/);
    expect(apiKey!.projectId).toBe(projectId);
    expect(apiKey!.accountId).toBe(accountId);
    expect(apiKey!.name).toBe("ci");
    expect(apiKey!.keyHint).toBe(secret.slice(0, 7));

    const rows = await pglite.query<{ key_hash: string }>(
      "select key_hash from catalog.api_keys where id = $1",
      [apiKey!.id],
    );
    expect(rows.rows).toHaveLength(1);
    expect(rows.rows[0]!.key_hash).toBe(createHash("sha256").update(secret).digest("hex"));
    const stored = await tableText("api_keys");
    expect(stored).toContain(apiKey!.id);
    expect(stored).not.toContain(secret);
    expect(stored).not.toContain(secret.slice(3));

    const { apiKeys } = await catalog.listApiKeys({ projectId });
    expect(apiKeys.map((k) => k.id)).toEqual([apiKey!.id]);
    expect(text(apiKeys)).not.toContain(secret.slice(3));
  });

  it("makes member keys unless an admin key is asked for, and verifies to the role", async () => {
    const { projectId } = await newProject();
    const member = await catalog.createApiKey({ projectId, name: "app" });
    expect(member.apiKey!.role).toBe(ApiKeyRole.MEMBER);
    const admin = await catalog.createApiKey({ projectId, name: "ops", role: ApiKeyRole.ADMIN });
    expect(admin.apiKey!.role).toBe(ApiKeyRole.ADMIN);
    expect((await catalog.verifyApiKey({ secret: member.secret })).principal!.role).toBe(
      ApiKeyRole.MEMBER,
    );
    expect((await catalog.verifyApiKey({ secret: admin.secret })).principal!.role).toBe(
      ApiKeyRole.ADMIN,
    );
    const { apiKeys } = await catalog.listApiKeys({ projectId });
    expect(apiKeys.map((k) => k.role)).toEqual([ApiKeyRole.MEMBER, ApiKeyRole.ADMIN]);
    await expectCode(
      catalog.createApiKey({ projectId, name: "x", role: 7 as ApiKeyRole }),
      Code.InvalidArgument,
      /role/,
    );
  });

  it("gives a new project an admin key, in the same transaction", async () => {
    const { accountId } = await newProject();
    const { project, apiKey, secret } = await catalog.createProject({ accountId, name: "second" });
    expect(apiKey).toMatchObject({
      projectId: project!.id,
      role: ApiKeyRole.ADMIN,
      name: "default",
    });
    const { principal } = await catalog.verifyApiKey({ secret });
    expect(principal).toMatchObject({ projectId: project!.id, role: ApiKeyRole.ADMIN });
  });

  it("gives each key a distinct secret", async () => {
    const { projectId } = await newProject();
    const a = await catalog.createApiKey({ projectId, name: "a" });
    const b = await catalog.createApiKey({ projectId, name: "" });
    expect(a.secret).not.toBe(b.secret);
    expect(b.apiKey!.name).toBe("default");
  });

  it("verifies a key and answers UNAUTHENTICATED for a wrong one", async () => {
    const { accountId, projectId } = await newProject();
    const { apiKey, secret } = await catalog.createApiKey({ projectId, name: "ci" });
    const { principal } = await catalog.verifyApiKey({ secret });
    expect(principal).toMatchObject({
      accountId,
      projectId,
      apiKeyId: apiKey!.id,
      apiKeyName: "ci",
      projectName: "default",
    });
    expect(principal!.accountName).toMatch(/^acme-/);

    const lastChar = secret.at(-1) === "a" ? "b" : "a";
    await expectCode(
      catalog.verifyApiKey({ secret: secret.slice(0, -1) + lastChar }),
      Code.Unauthenticated,
    );
    await expectCode(catalog.verifyApiKey({ secret: secret.slice(3) }), Code.Unauthenticated);
    await expectCode(catalog.verifyApiKey({ secret: "" }), Code.Unauthenticated);
    await expectCode(
      catalog.verifyApiKey({ secret: `sk-${"A".repeat(43)}` }),
      Code.Unauthenticated,
    );
  });

  it("revokes a key: DeleteApiKey, then UNAUTHENTICATED and no longer listed", async () => {
    const { projectId } = await newProject();
    const kept = await catalog.createApiKey({ projectId, name: "kept" });
    const { apiKey, secret } = await catalog.createApiKey({ projectId, name: "revoked" });
    await catalog.verifyApiKey({ secret });
    await catalog.deleteApiKey({ projectId, id: apiKey!.id });
    await expectCode(catalog.verifyApiKey({ secret }), Code.Unauthenticated);
    await catalog.verifyApiKey({ secret: kept.secret });
    const { apiKeys } = await catalog.listApiKeys({ projectId });
    expect(apiKeys.map((k) => k.id)).toEqual([kept.apiKey!.id]);
    // Revoking twice, or an unknown key, is NOT_FOUND.
    await expectCode(catalog.deleteApiKey({ projectId, id: apiKey!.id }), Code.NotFound);
    await expectCode(catalog.deleteApiKey({ projectId, id: "nope" }), Code.NotFound);
  });

  it("needs an existing project", async () => {
    await expectCode(catalog.createApiKey({ projectId: "", name: "x" }), Code.InvalidArgument);
    await expectCode(
      catalog.createApiKey({ projectId: "000000000000000000000000" }),
      Code.NotFound,
    );
  });
});

describe("environments", () => {
  it("stores the API key encrypted and returns only a hint", async () => {
    const { projectId } = await newProject();
    const apiKey = "sk-provider-0123456789abcdefWXYZ";
    const { environment } = await catalog.createEnvironment({
      projectId,
      environment: {
        name: "openai",
        provider: "openai",
        apiKey,
        defaultModel: "gpt-4o-mini",
        enabledModels: ["gpt-4o-mini", "gpt-4o"],
        configJson: jsonBytes({ region: "eu", retries: 2 }),
      },
    });
    expect(jsonOf(environment!.configJson)).toEqual({ region: "eu", retries: 2 });
    expect(environment).toMatchObject({
      projectId,
      name: "openai",
      provider: "openai",
      endpointUrl: "",
      apiKeyHint: "…WXYZ",
      defaultModel: "gpt-4o-mini",
      enabledModels: ["gpt-4o-mini", "gpt-4o"],
    });
    expect(text(environment)).not.toContain("0123456789abcdef");

    const stored = await tableText("environments");
    expect(stored).toContain(environment!.id);
    expect(stored).not.toContain(apiKey);
    expect(stored).not.toContain("0123456789abcdef");
    const row = await db
      .selectFrom("catalog.environments")
      .select(["api_key_enc", "api_key_hint"])
      .where("id", "=", environment!.id)
      .executeTakeFirstOrThrow();
    expect(row.api_key_enc).toBeTruthy();
    expect(row.api_key_enc).not.toContain(apiKey);
    expect(secrets.open(row.api_key_enc!)).toBe(apiKey);

    const got = await catalog.getEnvironment({ projectId, id: environment!.id });
    expect(got.environment).toEqual(environment);
    const { environments } = await catalog.listEnvironments({ projectId });
    expect(environments.map((e) => e.id)).toEqual([environment!.id]);
    expect(text(environments)).not.toContain("0123456789abcdef");
  });

  it("encrypts the same key differently each time and hints short keys without characters", async () => {
    const { projectId } = await newProject();
    const a = await newEnvironment(projectId, "sk-same-key-123456");
    const b = await newEnvironment(projectId, "sk-same-key-123456");
    const rows = await db
      .selectFrom("catalog.environments")
      .select("api_key_enc")
      .where("id", "in", [a.id, b.id])
      .execute();
    expect(rows[0]!.api_key_enc).not.toBe(rows[1]!.api_key_enc);
    const short = await newEnvironment(projectId, "short");
    expect(short.apiKeyHint).toBe("…");
    const none = await newEnvironment(projectId);
    expect(none.apiKeyHint).toBe("");
    const row = await db
      .selectFrom("catalog.environments")
      .select("api_key_enc")
      .where("id", "=", none.id)
      .executeTakeFirstOrThrow();
    expect(row.api_key_enc).toBeNull();
  });

  it("checks a virtual environment's entries and resolves the environments they name", async () => {
    const { projectId } = await newProject();
    const env = async (environment: object) =>
      (await catalog.createEnvironment({ projectId, environment }))!.environment!;
    const a = await env({
      provider: "test",
      defaultModel: "test",
      enabledModels: ["test", "test-500"],
    });
    const b = await env({ provider: "openai", apiKey: "sk-b-key", defaultModel: "gpt-4o-mini" });
    const config = (entries: object[], failover = true) => jsonBytes({ entries, failover });
    const refused = (entries: object[], message: RegExp) =>
      expectCode(
        catalog.createEnvironment({
          projectId,
          environment: { provider: "virtual_lb", configJson: config(entries) },
        }),
        Code.InvalidArgument,
        message,
      );
    await refused([], /at least one entry/);
    await refused([{ model: "no-separator" }], /config\.entries\.0\.model must be/);
    await refused([{ model: `${a.id}::test`, weight: 0 }], /weight must be a positive number/);
    await refused([{ model: "nope::m" }], /environment nope is not one of this project's/);
    await refused([{ model: `${a.id}::gpt-9` }], /model gpt-9 is not enabled/);
    const { projectId: other } = await newProject();
    const elsewhere = (await catalog.createEnvironment({
      projectId: other,
      environment: { provider: "test", defaultModel: "test" },
    }))!.environment!;
    await refused([{ model: `${elsewhere.id}::` }], /is not one of this project's/);
    await expectCode(
      catalog.createEnvironment({
        projectId,
        environment: {
          provider: "virtual_lb",
          apiKey: "sk-x",
          configJson: config([{ model: `${a.id}::` }]),
        },
      }),
      Code.InvalidArgument,
      /no endpoint_url or API key of its own/,
    );
    await expectCode(
      catalog.createEnvironment({
        projectId,
        environment: {
          provider: "virtual_lb",
          defaultModel: "test",
          configJson: config([{ model: `${a.id}::` }]),
        },
      }),
      Code.InvalidArgument,
      /no default_model or enabled_models of its own/,
    );

    const v = await env({
      provider: "virtual_lb",
      configJson: config([{ model: `${a.id}::test-500`, weight: 2 }, { model: `${b.id}::` }]),
    });
    await refused([{ model: `${v.id}::` }], /is virtual itself/);
    // Resolved with the environments it routes to, each with its key.
    const resolved = await catalog.resolveExecution({
      projectId,
      environmentId: v.id,
      environmentOnly: true,
    });
    expect(resolved.apiKey).toBe("");
    expect(resolved.routes.map((r) => [r.environment!.id, r.apiKey]).sort()).toEqual(
      [
        [a.id, ""],
        [b.id, "sk-b-key"],
      ].sort(),
    );
    // What it routes to cannot go, nor turn virtual itself.
    await expectCode(
      catalog.deleteEnvironment({ projectId, id: b.id }),
      Code.FailedPrecondition,
      new RegExp(`routed to by virtual environment .*\\(${v.id}\\)`),
    );
    await expectCode(
      catalog.updateEnvironment({
        projectId,
        id: a.id,
        environment: {
          provider: "virtual_lb",
          defaultModel: "",
          setEnabledModels: true,
          enabledModels: [],
          configJson: config([{ model: `${b.id}::` }]),
        },
      }),
      Code.InvalidArgument,
      /cannot be virtual itself/,
    );
    // Its entries are checked again when they change.
    await expectCode(
      catalog.updateEnvironment({
        projectId,
        id: v.id,
        environment: { configJson: config([{ model: `${a.id}::gpt-9` }]) },
      }),
      Code.InvalidArgument,
      /model gpt-9 is not enabled/,
    );
    await catalog.updateEnvironment({
      projectId,
      id: v.id,
      environment: { configJson: config([{ model: `${a.id}::` }]) },
    });
    await catalog.deleteEnvironment({ projectId, id: b.id });
  });

  it("validates the provider and the endpoint", async () => {
    const { projectId } = await newProject();
    await expectCode(
      catalog.createEnvironment({ projectId, environment: { name: "x", provider: "cohere" } }),
      Code.InvalidArgument,
      /provider must be one of openai, openai_compatible, azure_openai, anthropic, google, virtual_lb, test/,
    );
    // The native providers: Anthropic's and Gemini's default endpoints, Azure's the resource's.
    const { projectId: native } = await newProject();
    for (const provider of ["anthropic", "google"]) {
      const { environment } = await catalog.createEnvironment({
        projectId: native,
        environment: { provider, apiKey: "k-native", enabledModels: ["m-1"] },
      });
      expect(environment).toMatchObject({ provider, endpointUrl: "" });
      // No model list is asked of them (it is OpenAI's API): the enabled models are the list.
      const listed = await catalog.listEnvironmentModels({
        projectId: native,
        id: environment!.id,
      });
      expect(listed).toMatchObject({ models: ["m-1"], source: "enabled_models" });
    }
    await expectCode(
      catalog.createEnvironment({ projectId, environment: { provider: "azure_openai" } }),
      Code.InvalidArgument,
      /endpoint_url is required for provider azure_openai/,
    );
    await expectCode(
      catalog.createEnvironment({ projectId, environment: { name: "x" } }),
      Code.InvalidArgument,
    );
    await expectCode(
      catalog.createEnvironment({
        projectId,
        environment: { name: "x", provider: "openai_compatible" },
      }),
      Code.InvalidArgument,
      /endpoint_url/,
    );
    await expectCode(
      catalog.createEnvironment({
        projectId,
        environment: { name: "x", provider: "openai_compatible", endpointUrl: "not a url" },
      }),
      Code.InvalidArgument,
      /endpoint_url/,
    );
    await expectCode(
      catalog.createEnvironment({ projectId: "", environment: { provider: "test" } }),
      Code.InvalidArgument,
    );
    const { environment } = await catalog.createEnvironment({
      projectId,
      environment: { provider: "openai_compatible", endpointUrl: "https://models.example.com/v1" },
    });
    expect(environment!.endpointUrl).toBe("https://models.example.com/v1");
    expect(environment!.name).toBe("openai_compatible");
    const { environments } = await catalog.listEnvironments({ projectId });
    expect(environments).toHaveLength(1);
  });
});

describe("the endpoint policy", () => {
  it.each([
    ["http://127.0.0.1:11434/v1", /127\.0\.0\.1 is a loopback address/],
    ["http://localhost:11434/v1", /localhost is a loopback address/],
    ["http://[::ffff:127.0.0.1]/v1", /loopback/],
    ["http://2130706433/v1", /loopback/],
    ["http://10.0.0.8/v1", /private/],
    ["http://169.254.169.254/latest", /metadata/],
    ["http://metadata.google.internal/", /metadata/],
    ["http://internal.example.com/v1", /internal\.example\.com resolves to a private address/],
    ["http://metadata.example.com/v1", /resolves to a metadata address/],
    ["file:///etc/passwd", /http or https/],
  ])("refuses %s by default, naming the reason", async (endpointUrl, reason) => {
    const { projectId } = await newProject();
    const err = await expectCode(
      catalog.createEnvironment({
        projectId,
        environment: { provider: "openai_compatible", endpointUrl },
      }),
      Code.InvalidArgument,
      reason,
    );
    expect(err.rawMessage).toMatch(/^endpoint_url: /);
    // A name's resolved address is never told.
    expect(err.rawMessage).not.toContain("10.1.2.3");
    const { environments } = await catalog.listEnvironments({ projectId });
    expect(environments).toHaveLength(0);
  });

  it("stores loopback endpoints where configuration allows them", async () => {
    const local = createClient(
      CatalogService,
      createRouterTransport(
        catalogRoutes({
          db,
          secrets,
          logger: createLogger("catalog", "silent"),
          endpoints: new EndpointPolicy("loopback"),
        }),
      ),
    );
    const { projectId } = await newProject();
    const { environment } = await local.createEnvironment({
      projectId,
      environment: { provider: "openai_compatible", endpointUrl: "http://localhost:11434/v1" },
    });
    expect(environment!.endpointUrl).toBe("http://localhost:11434/v1");
    await expectCode(
      local.createEnvironment({
        projectId,
        environment: { provider: "openai_compatible", endpointUrl: "http://10.0.0.8/v1" },
      }),
      Code.InvalidArgument,
      /private/,
    );
  });
});

describe("prompts", () => {
  it("creates a prompt with defaults and reads it back", async () => {
    const { projectId } = await newProject();
    const { prompt } = await catalog.createPrompt({
      projectId,
      prompt: {
        name: "sys",
        role: "system",
        contentType: "handlebars",
        content: "You are {{persona}}",
        testDataJson: jsonBytes({ persona: "a pirate" }),
        inputSchemaJson: jsonBytes({ type: "object", properties: { persona: { type: "string" } } }),
      },
    });
    expect(prompt).toMatchObject({
      projectId,
      name: "sys",
      role: "system",
      contentType: "handlebars",
      content: "You are {{persona}}",
      status: InteractionStatus.DRAFT,
    });
    expect(jsonOf(prompt!.testDataJson)).toEqual({ persona: "a pirate" });
    expect(jsonOf(prompt!.inputSchemaJson)).toEqual({
      type: "object",
      properties: { persona: { type: "string" } },
    });
    const got = await catalog.getPrompt({ projectId, id: prompt!.id });
    expect(got.prompt).toEqual(prompt);

    const { prompt: plain } = await catalog.createPrompt({ projectId, prompt: { content: "hi" } });
    expect(plain).toMatchObject({
      name: "untitled",
      role: "user",
      contentType: "jst",
      content: "hi",
    });
    expect(plain!.testDataJson).toEqual(NO_JSON);

    const { prompts } = await catalog.listPrompts({ projectId });
    expect(prompts.map((p) => p.id).sort()).toEqual([prompt!.id, plain!.id].sort());
    const page = await catalog.listPrompts({ projectId, limit: 1 });
    expect(page.prompts).toHaveLength(1);
    const next = await catalog.listPrompts({ projectId, limit: 1, offset: 1 });
    expect(next.prompts).toHaveLength(1);
    expect(next.prompts[0]!.id).not.toBe(page.prompts[0]!.id);
  });

  it("validates content, content_type and role", async () => {
    const { projectId } = await newProject();
    await expectCode(
      catalog.createPrompt({ projectId, prompt: { content: "x", contentType: "markdown" } }),
      Code.InvalidArgument,
      /content_type/,
    );
    await expectCode(
      catalog.createPrompt({ projectId, prompt: { content: "x", role: "tool" } }),
      Code.InvalidArgument,
      /role/,
    );
    await expectCode(
      catalog.createPrompt({ projectId, prompt: { name: "empty" } }),
      Code.InvalidArgument,
    );
    await expectCode(catalog.createPrompt({ projectId }), Code.InvalidArgument);
    for (const contentType of ["jst", "handlebars", "text"]) {
      for (const role of ["system", "user", "assistant"]) {
        const { prompt } = await catalog.createPrompt({
          projectId,
          prompt: { content: "x", contentType, role },
        });
        expect(prompt).toMatchObject({ contentType, role });
      }
    }
    await expectCode(catalog.getPrompt({ projectId, id: "nope" }), Code.NotFound);
  });
});

describe("interactions", () => {
  it("creates an interaction with a template segment and expands it on read", async () => {
    const { projectId } = await newProject();
    const prompt = await newPrompt(projectId);
    const environment = await newEnvironment(projectId);
    const { interaction } = await catalog.createInteraction({
      projectId,
      interaction: {
        name: "Greeting",
        description: "says hello",
        model: "test-model",
        temperature: 0.5,
        maxTokens: 64,
        environmentId: environment.id,
        prompts: [{ type: "template", templateId: prompt.id }],
        tags: ["a", "b"],
        testDataJson: jsonBytes({ name: "Ada" }),
        resultSchemaJson: jsonBytes({ type: "object" }),
        cachePolicy: { type: "cache", ttl: 60, variesOn: ["name"] },
        formatter: "json",
      },
    });
    expect(jsonOf(interaction!.testDataJson)).toEqual({ name: "Ada" });
    expect(jsonOf(interaction!.resultSchemaJson)).toEqual({ type: "object" });
    expect(interaction).toMatchObject({
      projectId,
      name: "Greeting",
      description: "says hello",
      status: InteractionStatus.DRAFT,
      model: "test-model",
      temperature: 0.5,
      maxTokens: 64,
      environmentId: environment.id,
      tags: ["a", "b"],
      cachePolicy: { type: "cache", ttl: 60, variesOn: ["name"] },
      formatter: "json",
      parentId: "",
      version: 0,
    });
    expect(interaction!.prompts).toHaveLength(1);
    const segment = interaction!.prompts[0]!;
    expect(segment.id).toBeTruthy();
    expect(segment.type).toBe("template");
    expect(segment.templateId).toBe(prompt.id);
    expect(segment.template).toBeUndefined();

    const plain = await catalog.getInteraction({ projectId, id: interaction!.id });
    expect(plain.interaction!.prompts[0]!.template).toBeUndefined();
    const expanded = await catalog.getInteraction({
      projectId,
      id: interaction!.id,
      expandTemplates: true,
    });
    expect(expanded.interaction!.prompts[0]!.template).toEqual(prompt);
  });

  it("accepts chat segments and checks segments", async () => {
    const { projectId } = await newProject();
    const { interaction } = await catalog.createInteraction({
      projectId,
      interaction: { name: "Chat", prompts: [{ type: "chat", chatPath: "messages" }] },
    });
    expect(interaction!.prompts[0]).toMatchObject({
      type: "chat",
      chatPath: "messages",
      templateId: "",
    });
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: { name: "x", prompts: [{ type: "chat" }] },
      }),
      Code.InvalidArgument,
    );
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: { name: "x", prompts: [{ type: "template" }] },
      }),
      Code.InvalidArgument,
    );
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: { name: "x", prompts: [{ type: "image", templateId: "t" }] },
      }),
      Code.InvalidArgument,
    );
    await expectCode(
      catalog.createInteraction({ projectId, interaction: {} }),
      Code.InvalidArgument,
    );
    await expectCode(
      catalog.createInteraction({ projectId, interaction: { name: "x", temperature: 3 } }),
      Code.InvalidArgument,
    );
    await expectCode(
      catalog.createInteraction({ projectId, interaction: { name: "x", maxTokens: 0 } }),
      Code.InvalidArgument,
    );
  });

  it("answers an unknown template or environment with NOT_FOUND, writing nothing", async () => {
    const { projectId } = await newProject();
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: { name: "x", prompts: [{ type: "template", templateId: "missing-template" }] },
      }),
      Code.NotFound,
      /missing-template/,
    );
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: { name: "x", environmentId: "missing-env" },
      }),
      Code.NotFound,
      /missing-env/,
    );
    const { interactions } = await catalog.listInteractions({ projectId });
    expect(interactions).toEqual([]);
  });

  it("lists by status and by name", async () => {
    const { projectId } = await newProject();
    const create = async (name: string, status?: InteractionStatus, tags: string[] = []) =>
      (await catalog.createInteraction({ projectId, interaction: { name, status, tags } }))
        .interaction!;
    const draft = await create("Alpha", undefined, ["x"]);
    const beta = await create("Beta", undefined, ["y"]);
    // Only publishing makes a published version.
    const published = (await catalog.publishInteraction({ projectId, id: beta.id })).version!;
    const archived = await create("Alpha", InteractionStatus.ARCHIVED, ["x", "y"]);
    const ids = (r: { interactions: { id: string }[] }) => r.interactions.map((i) => i.id).sort();

    // Without a filter: the drafts (archived ones included), not the versions.
    const all = await catalog.listInteractions({ projectId });
    expect(ids(all)).toEqual([archived.id, beta.id, draft.id].sort());
    expect(all.interactions[0]!.id).toBe(archived.id);
    const drafts = await catalog.listInteractions({ projectId, status: InteractionStatus.DRAFT });
    expect(ids(drafts)).toEqual([beta.id, draft.id].sort());
    const pub = await catalog.listInteractions({ projectId, status: InteractionStatus.PUBLISHED });
    expect(ids(pub)).toEqual([published.id]);
    expect(pub.interactions[0]!.status).toBe(InteractionStatus.PUBLISHED);
    const arch = await catalog.listInteractions({ projectId, status: InteractionStatus.ARCHIVED });
    expect(ids(arch)).toEqual([archived.id]);
    const alpha = await catalog.listInteractions({ projectId, name: "Alpha" });
    expect(alpha.interactions.map((i) => i.id)).toEqual([archived.id, draft.id]);
    const alphaDraft = await catalog.listInteractions({
      projectId,
      name: "Alpha",
      status: InteractionStatus.DRAFT,
    });
    expect(alphaDraft.interactions.map((i) => i.id)).toEqual([draft.id]);
    expect((await catalog.listInteractions({ projectId, name: "Gamma" })).interactions).toEqual([]);
    const page = await catalog.listInteractions({ projectId, limit: 2, offset: 1 });
    expect(page.interactions).toHaveLength(2);
    expect(ids(page)).not.toContain(archived.id);
  });

  it("lists drafts by tags (any tag in common) when asked for drafts; tags alone select versions", async () => {
    const { projectId } = await newProject();
    const create = async (name: string, tags: string[]) =>
      (await catalog.createInteraction({ projectId, interaction: { name, tags } })).interaction!;
    const x = await create("X", ["x"]);
    const y = await create("Y", ["y"]);
    const xy = await create("XY", ["x", "y"]);
    await create("None", []);
    const drafts = { projectId, status: InteractionStatus.DRAFT };
    const one = await catalog.listInteractions({ ...drafts, tags: ["y"] });
    expect(one.interactions.map((i) => i.id)).toEqual([xy.id, y.id]);
    const two = await catalog.listInteractions({ ...drafts, tags: ["x", "z"] });
    expect(two.interactions.map((i) => i.id)).toEqual([xy.id, x.id]);
    // Without a status, tags select versions: these drafts' tags match none.
    expect((await catalog.listInteractions({ projectId, tags: ["y"] })).interactions).toEqual([]);
    const { version } = await catalog.publishInteraction({ projectId, id: y.id, tags: ["y"] });
    const versions = await catalog.listInteractions({ projectId, tags: ["y"] });
    expect(versions.interactions.map((i) => i.id)).toEqual([version!.id]);
  });

  it("keeps a store setting: full by default, changed by an update, snapshotted by publish", async () => {
    const { projectId } = await newProject();
    const environment = await newEnvironment(projectId);
    const prompt = await newPrompt(projectId);
    const { interaction: created } = await catalog.createInteraction({
      projectId,
      interaction: {
        name: "Private",
        environmentId: environment.id,
        prompts: [{ type: "template", templateId: prompt.id }],
      },
    });
    expect(created!.store).toBe(RunStore.FULL);
    const { interaction: metadata } = await catalog.updateInteraction({
      projectId,
      id: created!.id,
      interaction: { store: RunStore.METADATA },
    });
    expect(metadata!.store).toBe(RunStore.METADATA);
    // An update that does not name it keeps it.
    const { interaction: renamed } = await catalog.updateInteraction({
      projectId,
      id: created!.id,
      interaction: { description: "no payloads kept" },
    });
    expect(renamed!.store).toBe(RunStore.METADATA);
    const { version: v1 } = await catalog.publishInteraction({ projectId, id: created!.id });
    expect(v1!.store).toBe(RunStore.METADATA);
    // The draft goes back to full; the version keeps what it was published with.
    await catalog.updateInteraction({
      projectId,
      id: created!.id,
      interaction: { store: RunStore.UNSPECIFIED },
    });
    const { version: v2 } = await catalog.publishInteraction({ projectId, id: created!.id });
    expect(v2!.store).toBe(RunStore.FULL);
    const versions = await catalog.listInteractionVersions({ projectId, id: created!.id });
    expect(versions.versions.map((v) => [v.version, v.store])).toEqual([
      [2, RunStore.FULL],
      [1, RunStore.METADATA],
    ]);
    // What the executor gets for an execution carries it, by id and by name.
    const byId = await catalog.resolveExecution({
      projectId,
      interaction: { case: "interactionId", value: v1!.id },
    });
    expect(byId.interaction!.store).toBe(RunStore.METADATA);
    const byName = await catalog.resolveExecution({
      projectId,
      interaction: { case: "interactionName", value: "Private@1" },
    });
    expect(byName.interaction!.store).toBe(RunStore.METADATA);
    // A fork stores its runs as its source does.
    const { interaction: fork } = await catalog.forkInteraction({ projectId, id: v1!.id });
    expect(fork!.store).toBe(RunStore.METADATA);
    // Any other value is refused, naming the field and the values it takes; nothing is written.
    const err = await expectCode(
      catalog.updateInteraction({
        projectId,
        id: created!.id,
        interaction: { store: 7 as RunStore },
      }),
      Code.InvalidArgument,
    );
    expect(err.rawMessage).toBe("store must be one of full, metadata");
    await expectCode(
      catalog.createInteraction({ projectId, interaction: { name: "X", store: -1 as RunStore } }),
      Code.InvalidArgument,
    );
    const { interaction: read } = await catalog.getInteraction({ projectId, id: created!.id });
    expect(read!.store).toBe(RunStore.FULL);
  });
});

describe("tenant isolation", () => {
  it("answers NOT_FOUND for another project's resources and never lists them", async () => {
    const a = await newProject();
    const b = await newProject();
    const prompt = await newPrompt(a.projectId);
    const environment = await newEnvironment(a.projectId, "sk-tenant-a-secret-key");
    const { interaction } = await catalog.createInteraction({
      projectId: a.projectId,
      interaction: {
        name: "Private",
        environmentId: environment.id,
        prompts: [{ type: "template", templateId: prompt.id }],
      },
    });
    const { apiKey } = await catalog.createApiKey({ projectId: a.projectId, name: "a" });

    // The owner sees them.
    await catalog.getPrompt({ projectId: a.projectId, id: prompt.id });
    await catalog.getEnvironment({ projectId: a.projectId, id: environment.id });
    await catalog.getInteraction({ projectId: a.projectId, id: interaction!.id });

    // Another project gets NOT_FOUND (never PERMISSION_DENIED).
    const other = b.projectId;
    await expectCode(catalog.getPrompt({ projectId: other, id: prompt.id }), Code.NotFound);
    await expectCode(
      catalog.getEnvironment({ projectId: other, id: environment.id }),
      Code.NotFound,
    );
    await expectCode(
      catalog.getInteraction({ projectId: other, id: interaction!.id }),
      Code.NotFound,
    );
    await expectCode(
      catalog.getInteraction({ projectId: other, id: interaction!.id, expandTemplates: true }),
      Code.NotFound,
    );
    await expectCode(
      catalog.resolveExecution({
        projectId: other,
        interaction: { case: "interactionId", value: interaction!.id },
      }),
      Code.NotFound,
    );
    await expectCode(
      catalog.resolveExecution({
        projectId: other,
        interaction: { case: "interactionName", value: "Private" },
      }),
      Code.NotFound,
    );
    await expectCode(catalog.deleteApiKey({ projectId: other, id: apiKey!.id }), Code.NotFound);

    // Lists of the other project show none of them.
    expect((await catalog.listPrompts({ projectId: other })).prompts).toEqual([]);
    expect((await catalog.listEnvironments({ projectId: other })).environments).toEqual([]);
    expect((await catalog.listInteractions({ projectId: other })).interactions).toEqual([]);
    expect(
      (await catalog.listInteractions({ projectId: other, name: "Private" })).interactions,
    ).toEqual([]);
    expect((await catalog.listApiKeys({ projectId: other })).apiKeys).toEqual([]);
    expect(
      (await catalog.listProjects({ accountId: b.accountId })).projects.map((p) => p.id),
    ).toEqual([b.projectId]);

    // Nor can the other project refer to them.
    await expectCode(
      catalog.createInteraction({
        projectId: other,
        interaction: { name: "Steal", prompts: [{ type: "template", templateId: prompt.id }] },
      }),
      Code.NotFound,
    );
    await expectCode(
      catalog.createInteraction({
        projectId: other,
        interaction: { name: "Steal", environmentId: environment.id },
      }),
      Code.NotFound,
    );
    const own = await catalog.createInteraction({ projectId: other, interaction: { name: "Own" } });
    await expectCode(
      catalog.resolveExecution({
        projectId: other,
        interaction: { case: "interactionId", value: own.interaction!.id },
        environmentId: environment.id,
      }),
      Code.NotFound,
    );

    // The revoke attempt changed nothing: the key still lists in its project.
    expect(
      (await catalog.listApiKeys({ projectId: a.projectId })).apiKeys.map((k) => k.id),
    ).toEqual([apiKey!.id]);
  });
});

describe("ResolveExecution", () => {
  async function setup() {
    const { projectId } = await newProject();
    const prompt = await newPrompt(projectId);
    const environment = await newEnvironment(projectId, "sk-upstream-provider-key-42");
    const { interaction } = await catalog.createInteraction({
      projectId,
      interaction: {
        name: "Summarize",
        model: "test-model",
        environmentId: environment.id,
        prompts: [{ type: "template", templateId: prompt.id }],
      },
    });
    return { projectId, prompt, environment, interaction: interaction! };
  }

  it("resolves by id with the templates expanded and the decrypted API key", async () => {
    const { projectId, prompt, environment, interaction } = await setup();
    const resolved = await catalog.resolveExecution({
      projectId,
      interaction: { case: "interactionId", value: interaction.id },
    });
    expect(resolved.interaction!.id).toBe(interaction.id);
    expect(resolved.interaction!.prompts[0]!.template).toEqual(prompt);
    expect(resolved.environment).toEqual(environment);
    expect(resolved.apiKey).toBe("sk-upstream-provider-key-42");
  });

  it("resolves by name, bare and with @draft", async () => {
    const { projectId, environment, interaction } = await setup();
    for (const value of ["Summarize", "Summarize@draft"]) {
      const resolved = await catalog.resolveExecution({
        projectId,
        interaction: { case: "interactionName", value },
      });
      expect(resolved.interaction!.id, value).toBe(interaction.id);
      expect(resolved.environment!.id).toBe(environment.id);
      expect(resolved.apiKey).toBe("sk-upstream-provider-key-42");
    }
    await expectCode(
      catalog.resolveExecution({
        projectId,
        interaction: { case: "interactionName", value: "Summarize@latest" },
      }),
      Code.NotFound,
    );
    await expectCode(
      catalog.resolveExecution({
        projectId,
        interaction: { case: "interactionName", value: "Summarize@2" },
      }),
      Code.NotFound,
    );
    await expectCode(
      catalog.resolveExecution({
        projectId,
        interaction: { case: "interactionName", value: "Summarize@x" },
      }),
      Code.InvalidArgument,
    );
    await expectCode(
      catalog.resolveExecution({
        projectId,
        interaction: { case: "interactionName", value: "Other" },
      }),
      Code.NotFound,
    );
    await expectCode(catalog.resolveExecution({ projectId }), Code.InvalidArgument);
  });

  it("uses the environment of the request over the interaction's, with an empty key when none", async () => {
    const { projectId, interaction } = await setup();
    const keyless = await newEnvironment(projectId);
    const resolved = await catalog.resolveExecution({
      projectId,
      interaction: { case: "interactionId", value: interaction.id },
      environmentId: keyless.id,
    });
    expect(resolved.environment!.id).toBe(keyless.id);
    expect(resolved.apiKey).toBe("");
    await expectCode(
      catalog.resolveExecution({
        projectId,
        interaction: { case: "interactionId", value: interaction.id },
        environmentId: "missing-env",
      }),
      Code.NotFound,
    );
  });

  it("resolves only the environment and its key when asked (no interaction loaded)", async () => {
    const { projectId, environment } = await setup();
    const resolved = await catalog.resolveExecution({
      projectId,
      environmentId: environment.id,
      environmentOnly: true,
    });
    expect(resolved.interaction).toBeUndefined();
    expect(resolved.environment).toEqual(environment);
    expect(resolved.apiKey).toBe("sk-upstream-provider-key-42");
    await expectCode(
      catalog.resolveExecution({ projectId, environmentOnly: true }),
      Code.InvalidArgument,
    );
    const { projectId: other } = await newProject();
    await expectCode(
      catalog.resolveExecution({
        projectId: other,
        environmentId: environment.id,
        environmentOnly: true,
      }),
      Code.NotFound,
    );
  });

  it("answers INVALID_ARGUMENT for an interaction without environment", async () => {
    const { projectId } = await newProject();
    const { interaction } = await catalog.createInteraction({
      projectId,
      interaction: { name: "NoEnv", prompts: [{ type: "chat", chatPath: "messages" }] },
    });
    await expectCode(
      catalog.resolveExecution({
        projectId,
        interaction: { case: "interactionId", value: interaction!.id },
      }),
      Code.InvalidArgument,
      /no environment/,
    );
    await expectCode(
      catalog.resolveExecution({
        projectId,
        interaction: { case: "interactionName", value: "NoEnv" },
      }),
      Code.InvalidArgument,
    );
  });
});

describe("the interaction lifecycle", () => {
  async function setup() {
    const { projectId } = await newProject();
    const prompt = await newPrompt(projectId, "return `Hello ${name}`");
    const environment = await newEnvironment(projectId);
    const { interaction } = await catalog.createInteraction({
      projectId,
      interaction: {
        name: "Life",
        environmentId: environment.id,
        prompts: [{ type: "template", templateId: prompt.id }],
        tags: ["t"],
      },
    });
    return { projectId, prompt, environment, interaction: interaction! };
  }

  it("updates the fields given and keeps the others", async () => {
    const { projectId, interaction } = await setup();
    const { interaction: updated } = await catalog.updateInteraction({
      projectId,
      id: interaction.id,
      interaction: {
        description: "new",
        temperature: 0.2,
        resultSchemaJson: jsonBytes({ type: "object" }),
      },
    });
    expect(updated).toMatchObject({
      name: "Life",
      description: "new",
      temperature: 0.2,
      tags: ["t"],
    });
    expect(jsonOf(updated!.resultSchemaJson)).toEqual({ type: "object" });
    expect(updated!.prompts).toEqual(interaction.prompts);
    // An empty object clears (a REST null), as does JSON null.
    const { interaction: cleared } = await catalog.updateInteraction({
      projectId,
      id: interaction.id,
      interaction: { resultSchemaJson: jsonBytes({}), setTags: true, tags: [] },
    });
    expect(cleared!.resultSchemaJson).toEqual(NO_JSON);
    const { interaction: withData } = await catalog.updateInteraction({
      projectId,
      id: interaction.id,
      interaction: { testDataJson: jsonBytes({ name: "Bo" }) },
    });
    expect(jsonOf(withData!.testDataJson)).toEqual({ name: "Bo" });
    const { interaction: nulled } = await catalog.updateInteraction({
      projectId,
      id: interaction.id,
      interaction: { testDataJson: jsonBytes(null) },
    });
    expect(nulled!.testDataJson).toEqual(NO_JSON);
    expect(cleared!.tags).toEqual([]);
    await expectCode(
      catalog.updateInteraction({ projectId, id: "nope", interaction: {} }),
      Code.NotFound,
    );
    await expectCode(
      catalog.updateInteraction({ projectId, id: interaction.id, interaction: { name: "" } }),
      Code.InvalidArgument,
    );
  });

  it("refuses a result schema that does not compile, naming the field", async () => {
    const { projectId, interaction } = await setup();
    const bad = { type: "object", properties: { a: { type: "nonsense" } } };
    await expectCode(
      catalog.updateInteraction({
        projectId,
        id: interaction.id,
        interaction: { resultSchemaJson: jsonBytes(bad) },
      }),
      Code.InvalidArgument,
      /^resultSchema: not a valid JSON Schema/,
    );
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: { name: "x", resultSchemaJson: jsonBytes(bad) },
      }),
      Code.InvalidArgument,
      /resultSchema/,
    );
    await expectCode(
      catalog.createPrompt({
        projectId,
        prompt: { content: "x", inputSchemaJson: jsonBytes({ required: 3 }) },
      }),
      Code.InvalidArgument,
      /inputSchema/,
    );
    // Payloads that are not JSON objects, named by their field.
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: { name: "x", testDataJson: new TextEncoder().encode("{nope") },
      }),
      Code.InvalidArgument,
      /^test_data: not JSON/,
    );
    await expectCode(
      catalog.createEnvironment({
        projectId,
        environment: { provider: "test", configJson: jsonBytes([1, 2]) },
      }),
      Code.InvalidArgument,
      /^config: must be a JSON object/,
    );
  });

  it("stores an inline template without id as a new template, in the same transaction", async () => {
    const { projectId, prompt } = await setup();
    const { interaction } = await catalog.createInteraction({
      projectId,
      interaction: {
        name: "Inline",
        prompts: [
          {
            type: "template",
            template: { content: "be brief", role: "system", contentType: "text" },
          },
          { type: "template", template: { id: prompt.id, content: "ignored" } },
        ],
      },
    });
    const [made, referred] = interaction!.prompts;
    expect(referred!.templateId).toBe(prompt.id);
    const { prompt: created } = await catalog.getPrompt({ projectId, id: made!.templateId });
    expect(created).toMatchObject({ content: "be brief", role: "system", contentType: "text" });
    expect((await catalog.getPrompt({ projectId, id: prompt.id })).prompt!.content).toBe(
      prompt.content,
    );
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: {
          name: "NoContent",
          prompts: [{ type: "template", template: { role: "user" } }],
        },
      }),
      Code.InvalidArgument,
      /^prompts\.0\.template: content is required/,
    );
    // A failed write leaves no template behind.
    const before = (await catalog.listPrompts({ projectId })).prompts.length;
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: {
          name: "Half",
          prompts: [
            { type: "template", template: { content: "orphan?" } },
            { type: "template", templateId: "missing" },
          ],
        },
      }),
      Code.NotFound,
    );
    expect((await catalog.listPrompts({ projectId })).prompts.length).toBe(before);
  });

  it("publishes numbered, immutable versions and resolves every selector", async () => {
    const { projectId, prompt, interaction } = await setup();
    const { version: v1 } = await catalog.publishInteraction({ projectId, id: interaction.id });
    expect(v1).toMatchObject({
      name: "Life",
      status: InteractionStatus.PUBLISHED,
      version: 1,
      latest: true,
      parentId: interaction.id,
      visibility: Visibility.PRIVATE,
      tags: ["t"],
    });
    expect(v1!.prompts[0]!.template!.content).toBe(prompt.content);
    // Edits of the draft and of its template reach the next version, never the first.
    await catalog.updatePrompt({ projectId, id: prompt.id, prompt: { content: "return `v2`" } });
    await catalog.updateInteraction({
      projectId,
      id: interaction.id,
      interaction: { model: "m2" },
    });
    const { version: v2 } = await catalog.publishInteraction({
      projectId,
      id: interaction.id,
      visibility: Visibility.PUBLIC,
      tags: ["release"],
    });
    expect(v2).toMatchObject({ version: 2, latest: true, model: "m2", tags: ["release"] });
    expect(v2!.visibility).toBe(Visibility.PUBLIC);
    const got = await catalog.getInteraction({ projectId, id: v1!.id, expandTemplates: true });
    expect(got.interaction).toMatchObject({ version: 1, latest: false, model: "" });
    expect(got.interaction!.prompts[0]!.template!.content).toBe(prompt.content);

    const { versions } = await catalog.listInteractionVersions({ projectId, id: interaction.id });
    expect(versions.map((v) => [v.version, v.latest])).toEqual([
      [2, true],
      [1, false],
    ]);
    expect(
      (await catalog.listInteractionVersions({ projectId, id: v1!.id })).versions.map((v) => v.id),
    ).toEqual([v2!.id, v1!.id]);

    const resolve = async (value: string) =>
      (
        await catalog.resolveExecution({
          projectId,
          interaction: { case: "interactionName", value },
        })
      ).interaction!;
    expect((await resolve("Life")).id).toBe(v2!.id);
    expect((await resolve("Life@latest")).id).toBe(v2!.id);
    expect((await resolve("Life@1")).id).toBe(v1!.id);
    expect((await resolve("Life@1")).prompts[0]!.template!.content).toBe(prompt.content);
    expect((await resolve("Life@draft")).id).toBe(interaction.id);
    const byId = await catalog.resolveExecution({
      projectId,
      interaction: { case: "interactionId", value: v1!.id },
    });
    expect(byId.interaction!.version).toBe(1);
    await expectCode(
      catalog.resolveExecution({
        projectId,
        interaction: { case: "interactionName", value: "Life@3" },
      }),
      Code.NotFound,
    );

    // Lists: drafts by default; by name the versions too; by version number.
    const drafts = await catalog.listInteractions({ projectId });
    expect(drafts.interactions.map((i) => i.id)).toEqual([interaction.id]);
    const named = await catalog.listInteractions({ projectId, name: "Life" });
    expect(named.interactions.map((i) => i.id).sort()).toEqual(
      [interaction.id, v1!.id, v2!.id].sort(),
    );
    const second = await catalog.listInteractions({ projectId, version: 2 });
    expect(second.interactions.map((i) => i.id)).toEqual([v2!.id]);
    const released = await catalog.listInteractions({ projectId, tags: ["release"], version: 2 });
    expect(released.interactions.map((i) => i.id)).toEqual([v2!.id]);
    const published = await catalog.listInteractions({
      projectId,
      status: InteractionStatus.PUBLISHED,
    });
    expect(published.interactions.map((i) => i.id).sort()).toEqual([v1!.id, v2!.id].sort());

    // Versions are immutable.
    for (const call of [
      catalog.updateInteraction({ projectId, id: v1!.id, interaction: { model: "x" } }),
      catalog.publishInteraction({ projectId, id: v1!.id }),
      catalog.deleteInteraction({ projectId, id: v1!.id }),
    ]) {
      await expectCode(call, Code.FailedPrecondition, /immutable/);
    }
  });

  it("finds versions by their interaction's current name, each keeping the name it was published under", async () => {
    const { projectId, interaction } = await setup();
    const { version } = await catalog.publishInteraction({ projectId, id: interaction.id });
    await catalog.updateInteraction({
      projectId,
      id: interaction.id,
      interaction: { name: "Renamed" },
    });
    const resolve = (value: string) =>
      catalog.resolveExecution({ projectId, interaction: { case: "interactionName", value } });
    for (const ref of ["Renamed", "Renamed@latest", "Renamed@1"]) {
      const { interaction: got } = await resolve(ref);
      expect(got!.id, ref).toBe(version!.id);
      expect(got!.name).toBe("Life");
    }
    expect((await resolve("Renamed@draft")).interaction!.id).toBe(interaction.id);
    await expectCode(resolve("Life"), Code.NotFound);
    await expectCode(resolve("Life@1"), Code.NotFound);
    const listed = await catalog.listInteractions({ projectId, name: "Renamed" });
    expect(listed.interactions.map((i) => i.id).sort()).toEqual(
      [interaction.id, version!.id].sort(),
    );
    expect((await catalog.listInteractions({ projectId, name: "Life" })).interactions).toEqual([]);
  });

  it("refuses to delete a template or environment in use (409 naming the user), then deletes", async () => {
    const { projectId, prompt, environment, interaction } = await setup();
    const { version } = await catalog.publishInteraction({ projectId, id: interaction.id });
    await expectCode(
      catalog.deletePrompt({ projectId, id: prompt.id }),
      Code.FailedPrecondition,
      new RegExp(`interaction Life \\(${interaction.id}\\).*version 1 of Life`),
    );
    await expectCode(
      catalog.deleteEnvironment({ projectId, id: environment.id }),
      Code.FailedPrecondition,
      new RegExp(interaction.id),
    );
    // The draft and its versions go together; then the template and environment are free.
    await catalog.deleteInteraction({ projectId, id: interaction.id });
    await expectCode(catalog.getInteraction({ projectId, id: interaction.id }), Code.NotFound);
    await expectCode(catalog.getInteraction({ projectId, id: version!.id }), Code.NotFound);
    await expectCode(catalog.deleteInteraction({ projectId, id: interaction.id }), Code.NotFound);
    await catalog.deletePrompt({ projectId, id: prompt.id });
    await expectCode(catalog.getPrompt({ projectId, id: prompt.id }), Code.NotFound);
    await catalog.deleteEnvironment({ projectId, id: environment.id });
    await expectCode(catalog.getEnvironment({ projectId, id: environment.id }), Code.NotFound);
    await expectCode(catalog.deletePrompt({ projectId, id: prompt.id }), Code.NotFound);
    await expectCode(catalog.deleteEnvironment({ projectId, id: environment.id }), Code.NotFound);
  });

  it("updates an environment: key re-sealed or removed, endpoint checked", async () => {
    const { projectId } = await newProject();
    const environment = await newEnvironment(projectId, "sk-first-key-000000001111");
    const { environment: updated } = await catalog.updateEnvironment({
      projectId,
      id: environment.id,
      environment: {
        apiKey: "sk-second-key-00000002222",
        defaultModel: "m",
        enabledModels: ["m"],
        setEnabledModels: true,
      },
    });
    expect(updated).toMatchObject({
      apiKeyHint: "…2222",
      defaultModel: "m",
      enabledModels: ["m"],
      name: "local",
    });
    const resolved = await catalog.resolveExecution({
      projectId,
      environmentId: environment.id,
      environmentOnly: true,
    });
    expect(resolved.apiKey).toBe("sk-second-key-00000002222");
    const { environment: keyless } = await catalog.updateEnvironment({
      projectId,
      id: environment.id,
      environment: { apiKey: "" },
    });
    expect(keyless!.apiKeyHint).toBe("");
    await expectCode(
      catalog.updateEnvironment({
        projectId,
        id: environment.id,
        environment: { provider: "openai_compatible", endpointUrl: "http://10.0.0.8/v1" },
      }),
      Code.InvalidArgument,
      /private/,
    );
    await expectCode(
      catalog.updateEnvironment({
        projectId,
        id: environment.id,
        environment: { provider: "openai_compatible" },
      }),
      Code.InvalidArgument,
      /endpoint_url/,
    );
    await expectCode(
      catalog.updateEnvironment({ projectId, id: "nope", environment: {} }),
      Code.NotFound,
    );
    const { models, source } = await catalog.listEnvironmentModels({
      projectId,
      id: environment.id,
    });
    expect({ models, source }).toEqual({ models: ["m"], source: "enabled_models" });
  });

  it("updates a template's fields given", async () => {
    const { projectId, prompt } = await setup();
    const { prompt: updated } = await catalog.updatePrompt({
      projectId,
      id: prompt.id,
      prompt: { role: "system", inputSchemaJson: jsonBytes({ type: "object" }) },
    });
    expect(updated).toMatchObject({ role: "system", content: prompt.content });
    expect(jsonOf(updated!.inputSchemaJson)).toEqual({ type: "object" });
    await expectCode(
      catalog.updatePrompt({ projectId, id: prompt.id, prompt: { role: "tool" } }),
      Code.InvalidArgument,
    );
    await expectCode(catalog.updatePrompt({ projectId, id: "nope", prompt: {} }), Code.NotFound);
  });

  it("makes a key for another project of the caller's account only", async () => {
    const { accountId, projectId } = await newProject();
    const { project: second } = await catalog.createProject({ accountId, name: "two" });
    const { apiKey } = await catalog.createApiKey({ projectId: second!.id, accountId, name: "x" });
    expect(apiKey!.projectId).toBe(second!.id);
    const stranger = await newProject();
    await expectCode(
      catalog.createApiKey({ projectId, accountId: stranger.accountId, name: "x" }),
      Code.NotFound,
    );
  });

  it("hides another project's interactions, versions, templates and environments from every write", async () => {
    const { projectId, prompt, environment, interaction } = await setup();
    const { version } = await catalog.publishInteraction({ projectId, id: interaction.id });
    const other = (await newProject()).projectId;
    for (const call of [
      catalog.updateInteraction({ projectId: other, id: interaction.id, interaction: {} }),
      catalog.deleteInteraction({ projectId: other, id: interaction.id }),
      catalog.publishInteraction({ projectId: other, id: interaction.id }),
      catalog.listInteractionVersions({ projectId: other, id: interaction.id }),
      catalog.getInteraction({ projectId: other, id: version!.id }),
      catalog.updatePrompt({ projectId: other, id: prompt.id, prompt: {} }),
      catalog.deletePrompt({ projectId: other, id: prompt.id }),
      catalog.updateEnvironment({ projectId: other, id: environment.id, environment: {} }),
      catalog.deleteEnvironment({ projectId: other, id: environment.id }),
      catalog.listEnvironmentModels({ projectId: other, id: environment.id }),
      catalog.resolveExecution({
        projectId: other,
        interaction: { case: "interactionName", value: "Life@1" },
      }),
    ]) {
      await expectCode(call, Code.NotFound);
    }
    expect((await catalog.listInteractions({ projectId: other, version: 1 })).interactions).toEqual(
      [],
    );
    expect(
      (await catalog.listInteractions({ projectId: other, name: "Life" })).interactions,
    ).toEqual([]);
  });
});

describe("review mends of the lifecycle", () => {
  const resolve = (projectId: string, value: string) =>
    catalog.resolveExecution({ projectId, interaction: { case: "interactionName", value } });

  it("speaks of one interaction with every selector of a name several drafts share", async () => {
    const { projectId } = await newProject();
    const env = await newEnvironment(projectId);
    const make = async () =>
      (
        await catalog.createInteraction({
          projectId,
          interaction: { name: "Twin", environmentId: env.id },
        })
      ).interaction!;
    const a = await make();
    const { version: a1 } = await catalog.publishInteraction({ projectId, id: a.id });
    const { version: a2 } = await catalog.publishInteraction({ projectId, id: a.id });
    // B, same name, updated last: it is the one the name speaks of now.
    await new Promise((r) => setTimeout(r, 5));
    const b = await make();
    expect((await resolve(projectId, "Twin")).interaction!.id).toBe(b.id);
    expect((await resolve(projectId, "Twin@draft")).interaction!.id).toBe(b.id);
    // B has no versions: A's are not B's.
    await expectCode(resolve(projectId, "Twin@latest"), Code.NotFound);
    await expectCode(resolve(projectId, "Twin@2"), Code.NotFound);
    const { version: b1 } = await catalog.publishInteraction({ projectId, id: b.id });
    expect((await resolve(projectId, "Twin")).interaction!.id).toBe(b1!.id);
    expect((await resolve(projectId, "Twin@latest")).interaction!.id).toBe(b1!.id);
    expect((await resolve(projectId, "Twin@1")).interaction!.id).toBe(b1!.id);
    // A, edited, is the draft named so again, with its own versions.
    await catalog.updateInteraction({ projectId, id: a.id, interaction: { description: "x" } });
    expect((await resolve(projectId, "Twin")).interaction!.id).toBe(a2!.id);
    expect((await resolve(projectId, "Twin@1")).interaction!.id).toBe(a1!.id);
  });

  it("refuses @ in a name and a draft made published, on create and update", async () => {
    const { projectId } = await newProject();
    await expectCode(
      catalog.createInteraction({ projectId, interaction: { name: "Foo@2" } }),
      Code.InvalidArgument,
      /must not contain @/,
    );
    await expectCode(
      catalog.createInteraction({
        projectId,
        interaction: { name: "Pub", status: InteractionStatus.PUBLISHED },
      }),
      Code.InvalidArgument,
      /publish it/,
    );
    const { interaction } = await catalog.createInteraction({
      projectId,
      interaction: { name: "Plain" },
    });
    for (const change of [{ name: "Plain@latest" }, { status: InteractionStatus.PUBLISHED }]) {
      await expectCode(
        catalog.updateInteraction({ projectId, id: interaction!.id, interaction: change }),
        Code.InvalidArgument,
      );
    }
  });

  it("sends a stored provider key nowhere new: a new endpoint or provider needs the key again", async () => {
    const { projectId } = await newProject();
    const env = await newEnvironment(projectId, "sk-stored-secret-1234");
    await expectCode(
      catalog.updateEnvironment({
        projectId,
        id: env.id,
        environment: { endpointUrl: "https://evil.example/v1" },
      }),
      Code.InvalidArgument,
      /needs the API key again/,
    );
    await expectCode(
      catalog.updateEnvironment({ projectId, id: env.id, environment: { provider: "openai" } }),
      Code.InvalidArgument,
    );
    // With the key (or to drop it), the move is allowed; a rename alone never needed it.
    await catalog.updateEnvironment({ projectId, id: env.id, environment: { name: "renamed" } });
    const moved = await catalog.updateEnvironment({
      projectId,
      id: env.id,
      environment: { endpointUrl: "https://api.example.com/v1", apiKey: "sk-new-key-5678" },
    });
    expect(moved.environment!.endpointUrl).toBe("https://api.example.com/v1");
  });
});
