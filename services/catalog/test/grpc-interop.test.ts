import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { newId } from "@pies/common";
import { createTestDatabase, createTestStream, type TestDatabase } from "@pies/testkit";
import { startRuns, type RunsProcess } from "@pies/runs";
import { startCatalog, type CatalogProcess } from "../src/start.js";

// The catalog and the runs store as processes serve them, called by a plain gRPC client
// (@grpc/grpc-js with the .proto files loaded at run time, no generated code): the wire contract.
const PROTO_ROOT = fileURLToPath(new URL("../../../proto", import.meta.url));

// keepCase: fields keep their .proto names (snake_case); enums as names, int64 as strings.
const definition = protoLoader.loadSync(
  [
    "pies/catalog/v1/catalog_service.proto",
    "pies/runs/v1/runs_service.proto",
    "grpc/health/v1/health.proto",
  ],
  {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  },
);
const packages = grpc.loadPackageDefinition(definition) as any;

type Json = any;

let testDb: TestDatabase;
let catalogProcess: CatalogProcess;
let runsProcess: RunsProcess;
let catalog: grpc.Client;
let runs: grpc.Client;
let catalogHealth: grpc.Client;
let runsHealth: grpc.Client;

const stream = createTestStream();
// The secret pies' processes share: a plain gRPC client must present it as call metadata.
const internalToken = randomBytes(32).toString("base64url");

/** A grpc-js client option that sends `authorization: Bearer <token>` with every call. */
function bearer(token: string): grpc.ClientOptions {
  const interceptor: grpc.Interceptor = (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        metadata.set("authorization", `Bearer ${token}`);
        next(metadata, listener);
      },
    });
  return { interceptors: [interceptor] };
}

beforeAll(async () => {
  testDb = await createTestDatabase("grpc");
  const common = {
    HOST: "127.0.0.1",
    PORT: 0,
    DATABASE_URL: testDb.url,
    DATABASE_POOL_MAX: 5,
    DATABASE_PREPARED_STATEMENTS: true,
    LOG_LEVEL: "silent" as const,
    PIES_INTERNAL_TOKEN: internalToken,
  };
  catalogProcess = await startCatalog({
    ...common,
    PIES_SECRET_KEY: randomBytes(32).toString("base64"),
    // The environment below points at loopback: allowed explicitly, as an operator would.
    PIES_ALLOWED_ENDPOINTS: "127.0.0.1",
    // Its change events go to NATS (nothing listens here), on subjects of this test's own.
    NATS_URL: stream.url,
    PIES_NATS_SUBJECT_PREFIX: stream.subjectPrefix,
    PIES_NATS_STREAM: stream.stream,
    PIES_STREAM_MAX_AGE_SECONDS: 60,
    PIES_RECORD_MAX_AGE_SECONDS: 600,
    PIES_RECORD_MAX_BYTES: 0,
    PIES_NATS_REPLICAS: 1,
  });
  runsProcess = await startRuns({
    ...common,
    NATS_URL: stream.url,
    PIES_NATS_STREAM: stream.stream,
    PIES_NATS_SUBJECT_PREFIX: stream.subjectPrefix,
    PIES_STREAM_MAX_AGE_SECONDS: 600,
    PIES_RECORD_MAX_AGE_SECONDS: 600,
    PIES_RECORD_MAX_BYTES: 0,
    PIES_NATS_REPLICAS: 1,
    PIES_RUN_LEASE_SECONDS: 60,
    PIES_SWEEP_INTERVAL_SECONDS: 10,
    PIES_RECORD_BATCH_INTERVAL_MS: 10,
    PIES_DEAD_RECORDS_MAX: 10_000,
    PIES_DEAD_RECORDS_MAX_AGE_DAYS: 30,
    PIES_METRICS_PORT: 0,
    PIES_RUN_RETENTION_DAYS: 90,
    PIES_RUN_PARTITION_DAYS: 7,
    PIES_RUN_MAINTENANCE_SECONDS: 600,
    CATALOG_URL: `http://127.0.0.1:${catalogProcess.server.port}`,
    // No executor here: no experiment is replayed.
    EXECUTOR_URL: "http://127.0.0.1:1",
    PIES_EXPERIMENT_STOP_GRACE_SECONDS: 0,
    PIES_EXPERIMENT_LEASE_SECONDS: 15,
  });
  const credentials = grpc.credentials.createInsecure();
  const catalogAddress = `127.0.0.1:${catalogProcess.server.port}`;
  const runsAddress = `127.0.0.1:${runsProcess.server.port}`;
  catalog = new packages.pies.catalog.v1.CatalogService(
    catalogAddress,
    credentials,
    bearer(internalToken),
  );
  runs = new packages.pies.runs.v1.RunsService(runsAddress, credentials, bearer(internalToken));
  // Health checks carry no credential, as Kubernetes' gRPC probes do not.
  catalogHealth = new packages.grpc.health.v1.Health(catalogAddress, credentials);
  runsHealth = new packages.grpc.health.v1.Health(runsAddress, credentials);
});

afterAll(async () => {
  for (const client of [catalog, runs, catalogHealth, runsHealth]) client?.close();
  await catalogProcess?.stop();
  await runsProcess?.stop();
  await stream.remove();
  await testDb?.drop();
});

/** A unary call as a promise. */
function call(client: grpc.Client, method: string, request: Json): Promise<Json> {
  return new Promise((resolve, reject) => {
    type Unary = (
      req: Json,
      options: grpc.CallOptions,
      cb: (err: grpc.ServiceError | null, res: Json) => void,
    ) => void;
    const fn = (client as Json)[method] as Unary | undefined;
    if (!fn) return reject(new Error(`no method ${method}`));
    fn.call(
      client,
      request,
      { deadline: Date.now() + 10_000 },
      (err: grpc.ServiceError | null, res: Json) => (err ? reject(err) : resolve(res)),
    );
  });
}

async function callError(
  client: grpc.Client,
  method: string,
  request: Json,
): Promise<grpc.ServiceError> {
  const err = await call(client, method, request).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, `${method} should have failed`).toBeInstanceOf(Error);
  return err as grpc.ServiceError;
}

// google.protobuf.Struct and Value as proto-loader represents them: protobufjs bundles the well-known
// types with camelCase field names, whatever keepCase says; oneofs adds `kind`.
function toValue(json: unknown): Json {
  if (json === null) return { nullValue: "NULL_VALUE" };
  if (typeof json === "number") return { numberValue: json };
  if (typeof json === "string") return { stringValue: json };
  if (typeof json === "boolean") return { boolValue: json };
  if (Array.isArray(json)) return { listValue: { values: json.map(toValue) } };
  return { structValue: toStruct(json as Record<string, unknown>) };
}
function toStruct(json: Record<string, unknown>): Json {
  return { fields: Object.fromEntries(Object.entries(json).map(([k, v]) => [k, toValue(v)])) };
}
/** A JSON payload's bytes (a Buffer, as grpc-js decodes bytes) as JSON; undefined when empty. */
function jsonOfBytes(bytes: Buffer): unknown {
  return bytes.length > 0 ? JSON.parse(bytes.toString("utf8")) : undefined;
}

describe("CatalogService over gRPC", () => {
  it("creates an account, an API key, verifies it, and creates and reads an environment", async () => {
    const { account, project } = await call(catalog, "CreateAccount", { name: "Interop" });
    expect(account.id).toMatch(/^[0-9a-f]{24}$/);
    expect(account.name).toBe("Interop");
    expect(Number(account.created_at.seconds)).toBeGreaterThan(Date.now() / 1000 - 120);
    expect(project.name).toBe("default");
    expect(project.account_id).toBe(account.id);

    const created = await call(catalog, "CreateApiKey", {
      project_id: project.id,
      name: "grpc",
      role: "API_KEY_ROLE_ADMIN",
    });
    expect(created.secret).toMatch(/^sk-[0-9A-Za-z]{43}$/);
    expect(created.api_key.key_hint).toBe(created.secret.slice(0, 7));
    expect(created.api_key.role).toBe("API_KEY_ROLE_ADMIN");
    const member = await call(catalog, "CreateApiKey", { project_id: project.id, name: "m" });
    expect(member.api_key.role).toBe("API_KEY_ROLE_MEMBER");
    const { principal } = await call(catalog, "VerifyApiKey", { secret: created.secret });
    expect(principal).toMatchObject({
      account_id: account.id,
      project_id: project.id,
      api_key_id: created.api_key.id,
      api_key_name: "grpc",
      account_name: "Interop",
      project_name: "default",
      role: "API_KEY_ROLE_ADMIN",
    });
    const wrong = await callError(catalog, "VerifyApiKey", { secret: `sk-${"x".repeat(43)}` });
    expect(wrong.code).toBe(grpc.status.UNAUTHENTICATED);

    const config = { region: "eu", retries: 2, nested: { on: true, list: [1, "a", null] } };
    const { environment } = await call(catalog, "CreateEnvironment", {
      project_id: project.id,
      environment: {
        name: "compat",
        provider: "openai_compatible",
        endpoint_url: "http://127.0.0.1:9/v1",
        api_key: "sk-provider-interop-key-ABCD",
        default_model: "m-1",
        enabled_models: ["m-1", "m-2"],
        // Written in the old Struct field, as a client of the release before decision 0059 does:
        // answered in its bytes (legacy-payloads.ts).
        config: toStruct(config),
      },
    });
    expect(environment).toMatchObject({
      project_id: project.id,
      name: "compat",
      provider: "openai_compatible",
      endpoint_url: "http://127.0.0.1:9/v1",
      api_key_hint: "…ABCD",
      default_model: "m-1",
      enabled_models: ["m-1", "m-2"],
    });
    expect(environment.config).toBeNull();
    expect(jsonOfBytes(environment.config_json)).toEqual(config);
    expect(JSON.stringify(environment)).not.toContain("interop-key");

    const got = await call(catalog, "GetEnvironment", {
      project_id: project.id,
      id: environment.id,
    });
    expect(got.environment).toEqual(environment);
    const updated = await call(catalog, "UpdateEnvironment", {
      project_id: project.id,
      id: environment.id,
      environment: { config_json: Buffer.from(JSON.stringify({ max_repairs: 1 })) },
    });
    expect(jsonOfBytes(updated.environment.config_json)).toEqual({ max_repairs: 1 });

    const invalid = await callError(catalog, "CreateEnvironment", {
      project_id: project.id,
      environment: { provider: "nope" },
    });
    expect(invalid.code).toBe(grpc.status.INVALID_ARGUMENT);
    const metadata = await callError(catalog, "CreateEnvironment", {
      project_id: project.id,
      environment: { provider: "openai_compatible", endpoint_url: "http://169.254.169.254/v1" },
    });
    expect(metadata.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(metadata.details).toContain("169.254.169.254 is a metadata address");
    const other = await call(catalog, "CreateAccount", { name: "Other" });
    const hidden = await callError(catalog, "GetEnvironment", {
      project_id: other.project.id,
      id: environment.id,
    });
    expect(hidden.code).toBe(grpc.status.NOT_FOUND);
  });

  it("publishes versions, lists them and lists interactions by name and version", async () => {
    const { project } = await call(catalog, "CreateAccount", { name: "Versions" });
    const { prompt } = await call(catalog, "CreatePrompt", {
      project_id: project.id,
      prompt: { name: "p", role: "user", content_type: "text", content: "Say hi" },
    });
    const { interaction } = await call(catalog, "CreateInteraction", {
      project_id: project.id,
      interaction: {
        name: "Wire",
        prompts: [{ type: "template", template_id: prompt.id }],
        result_schema: toStruct({ type: "object" }),
        tags: ["a"],
      },
    });
    const first = await call(catalog, "PublishInteraction", {
      project_id: project.id,
      id: interaction.id,
      visibility: "VISIBILITY_PUBLIC",
      tags: ["v1"],
    });
    expect(first.version).toMatchObject({
      name: "Wire",
      status: "INTERACTION_STATUS_PUBLISHED",
      version: 1,
      latest: true,
      visibility: "VISIBILITY_PUBLIC",
      tags: ["v1"],
      parent_id: interaction.id,
    });
    expect(first.version.prompts[0].template).toMatchObject({ id: prompt.id, content: "Say hi" });
    // Written in the old Struct field, answered in its bytes.
    expect(jsonOfBytes(first.version.result_schema_json)).toEqual({ type: "object" });
    const second = await call(catalog, "PublishInteraction", {
      project_id: project.id,
      id: interaction.id,
    });
    expect(second.version).toMatchObject({ version: 2, visibility: "VISIBILITY_PRIVATE" });

    const { versions } = await call(catalog, "ListInteractionVersions", {
      project_id: project.id,
      id: interaction.id,
    });
    expect(versions.map((v: Json) => [v.version, v.latest])).toEqual([
      [2, true],
      [1, false],
    ]);
    const named = await call(catalog, "ListInteractions", { project_id: project.id, name: "Wire" });
    expect(named.interactions.map((i: Json) => i.id).sort()).toEqual(
      [interaction.id, first.version.id, second.version.id].sort(),
    );
    const one = await call(catalog, "ListInteractions", { project_id: project.id, version: 1 });
    expect(one.interactions.map((i: Json) => i.id)).toEqual([first.version.id]);
    const immutable = await callError(catalog, "UpdateInteraction", {
      project_id: project.id,
      id: first.version.id,
      interaction: { model: "x" },
    });
    expect(immutable.code).toBe(grpc.status.FAILED_PRECONDITION);
    const other = await call(catalog, "CreateAccount", { name: "Elsewhere" });
    const hidden = await callError(catalog, "PublishInteraction", {
      project_id: other.project.id,
      id: interaction.id,
    });
    expect(hidden.code).toBe(grpc.status.NOT_FOUND);
  });
});

describe("RunsService over gRPC", () => {
  const projectId = `project-${newId()}`;
  const parameters = { name: "Ada", n: 3, flags: [true, false], nested: { x: null } };
  const result = { greeting: "Hello Ada", words: 2, list: [1, "two", null] };
  const prompt = [
    { role: "system", content: "be brief" },
    { role: "user", content: "Greet Ada" },
  ];

  function run(id: string) {
    return {
      id,
      project_id: projectId,
      account_id: "account-1",
      interaction_id: "interaction-1",
      interaction_name: "Greeting",
      environment_id: "env-1",
      environment_name: "local",
      provider: "test",
      model_id: "model-1",
      status: "RUN_STATUS_COMPLETED",
      stream: true,
      parameters: toStruct(parameters),
      result: toValue(result),
      prompt: toValue(prompt),
      tags: ["t1", "t2"],
      config: {
        environment_id: "env-1",
        model: "model-1",
        formatter: "json",
        temperature: 0.5,
        max_tokens: 77,
      },
      source: {
        type: "api",
        label: "grpc",
        principal_type: "apikey",
        principal_id: "k-1",
        client_ip: "127.0.0.1",
      },
      token_use: { prompt: 5, result: 6, total: 11 },
      execution_time: "4321",
      error: { code: "validation_error", message: "bad", data: toValue({ at: "/words" }) },
      ttl: 30,
      parent_id: "",
      cache_policy: toStruct({ type: "no_cache" }),
      result_schema: toStruct({ type: "object" }),
      cached: false,
    };
  }

  function expectRun(got: Json, id: string) {
    expect(got).toMatchObject({
      id,
      project_id: projectId,
      account_id: "account-1",
      interaction_id: "interaction-1",
      interaction_name: "Greeting",
      environment_id: "env-1",
      environment_name: "local",
      provider: "test",
      model_id: "model-1",
      status: "RUN_STATUS_COMPLETED",
      stream: true,
      tags: ["t1", "t2"],
      config: {
        environment_id: "env-1",
        model: "model-1",
        formatter: "json",
        temperature: 0.5,
        max_tokens: 77,
      },
      source: {
        type: "api",
        label: "grpc",
        principal_type: "apikey",
        principal_id: "k-1",
        client_ip: "127.0.0.1",
      },
      token_use: { prompt: 5, result: 6, total: 11 },
      execution_time: "4321",
      ttl: 30,
      parent_id: "",
      cached: false,
    });
    // Written in the old Struct/Value fields (as a client of the release before decision 0059
    // writes them), answered in their bytes (legacy-payloads.ts).
    expect(jsonOfBytes(got.parameters_json)).toEqual(parameters);
    expect(jsonOfBytes(got.result_json)).toEqual(result);
    expect(got.error).toMatchObject({ code: "validation_error", message: "bad" });
    expect(jsonOfBytes(got.error.data_json)).toEqual({ at: "/words" });
    expect(jsonOfBytes(got.cache_policy_json)).toEqual({ type: "no_cache" });
    expect(Number(got.created_at.seconds)).toBeGreaterThan(Date.now() / 1000 - 120);
    expect(Number(got.updated_at.seconds)).toBeGreaterThan(Date.now() / 1000 - 120);
  }

  it("creates a run and reads it back with GetRun and ListRuns", async () => {
    const id = newId();
    const created = await call(runs, "CreateRun", { run: run(id) });
    expectRun(created.run, id);

    const { run: got } = await call(runs, "GetRun", { project_id: projectId, id });
    expectRun(got, id);
    expect(jsonOfBytes(got.prompt_json)).toEqual(prompt);
    expect(jsonOfBytes(got.result_schema_json)).toEqual({ type: "object" });
    expect(got.created_at).toEqual(created.run.created_at);
    expect(got.updated_at).toEqual(created.run.updated_at);

    // Lists read the store, which the record writer fills a batch behind the log GetRun reads.
    let listed = await call(runs, "ListRuns", { project_id: projectId });
    for (const deadline = Date.now() + 30_000; !listed.runs.length && Date.now() < deadline; ) {
      await new Promise((r) => setTimeout(r, 50));
      listed = await call(runs, "ListRuns", { project_id: projectId });
    }
    expect(listed.runs).toHaveLength(1);
    expectRun(listed.runs[0], id);
    expect(listed.runs[0].created_at).toEqual(created.run.created_at);

    // A timestamp in the request: the anchor date.
    const past = { seconds: String(Math.floor(Date.now() / 1000) - 3600), nanos: 0 };
    const future = { seconds: String(Math.floor(Date.now() / 1000) + 3600), nanos: 0 };
    const after = await call(runs, "ListRuns", {
      project_id: projectId,
      filters: { anchor_date: past, anchor_direction: "ANCHOR_DIRECTION_AFTER" },
    });
    expect(after.runs.map((r: Json) => r.id)).toEqual([id]);
    const before = await call(runs, "ListRuns", {
      project_id: projectId,
      filters: { anchor_date: past, anchor_direction: "ANCHOR_DIRECTION_BEFORE" },
    });
    expect(before.runs).toEqual([]);
    const beforeFuture = await call(runs, "ListRuns", {
      project_id: projectId,
      filters: {
        anchor_date: future,
        anchor_direction: "ANCHOR_DIRECTION_BEFORE",
        status: "RUN_STATUS_COMPLETED",
      },
    });
    expect(beforeFuture.runs.map((r: Json) => r.id)).toEqual([id]);
  });

  it("applies the conditional update and reports FAILED_PRECONDITION as status 9", async () => {
    const id = newId();
    await call(runs, "CreateRun", { run: { ...run(id), status: "RUN_STATUS_CREATED" } });
    const request = {
      project_id: projectId,
      id,
      expected_status: "RUN_STATUS_CREATED",
      update: { status: "RUN_STATUS_PROCESSING" },
    };
    const { run: updated } = await call(runs, "UpdateRun", request);
    expect(updated.status).toBe("RUN_STATUS_PROCESSING");
    const err = await callError(runs, "UpdateRun", request);
    expect(err.code).toBe(grpc.status.FAILED_PRECONDITION);
  });

  it("answers NOT_FOUND (grpc status 5) for an unknown run", async () => {
    const err = await callError(runs, "GetRun", { project_id: projectId, id: "does-not-exist" });
    expect(err.code).toBe(5);
    expect(err.code).toBe(grpc.status.NOT_FOUND);
    expect(err.details).toContain("does-not-exist");
  });
});

describe("the internal credential", () => {
  it.each([
    ["no credential", undefined],
    ["a wrong credential", randomBytes(32).toString("base64url")],
    ["the credential with a character more", `${internalToken}x`],
  ])("refuses calls with %s as UNAUTHENTICATED, on catalog and runs", async (_what, token) => {
    const credentials = grpc.credentials.createInsecure();
    const options = token ? bearer(token) : {};
    const strangers = [
      new packages.pies.catalog.v1.CatalogService(
        `127.0.0.1:${catalogProcess.server.port}`,
        credentials,
        options,
      ),
      new packages.pies.runs.v1.RunsService(
        `127.0.0.1:${runsProcess.server.port}`,
        credentials,
        options,
      ),
    ] as grpc.Client[];
    try {
      const [catalogStranger, runsStranger] = strangers;
      for (const [client, method, request] of [
        [catalogStranger, "ListEnvironments", { project_id: "p" }],
        [catalogStranger, "ResolveExecution", { project_id: "p", interaction_name: "x" }],
        [catalogStranger, "CreateAccount", { name: "intruder" }],
        [runsStranger, "ListRuns", { project_id: "p" }],
        [runsStranger, "GetRun", { project_id: "p", id: "r" }],
      ] as const) {
        const err = await callError(client!, method, request);
        expect(err.code, method).toBe(grpc.status.UNAUTHENTICATED);
        expect(err.details).toMatch(/internal credential/);
      }
    } finally {
      for (const client of strangers) client.close();
    }
  });

  it("serves the same calls with it", async () => {
    const listed = await call(catalog, "ListEnvironments", { project_id: "p" });
    expect(listed.environments).toEqual([]);
    const runsListed = await call(runs, "ListRuns", { project_id: "p" });
    expect(runsListed.runs).toEqual([]);
  });
});

describe("grpc.health.v1.Health", () => {
  it.each([
    ["catalog", () => catalogHealth, "pies.catalog.v1.CatalogService", "pies.runs.v1.RunsService"],
    ["runs", () => runsHealth, "pies.runs.v1.RunsService", "pies.catalog.v1.CatalogService"],
  ] as const)(
    "%s answers liveness, readiness and unknown services",
    async (_name, client, own, foreign) => {
      expect(await call(client(), "Check", { service: "" })).toEqual({ status: "SERVING" });
      expect(await call(client(), "Check", { service: "readiness" })).toEqual({
        status: "SERVING",
      });
      expect(await call(client(), "Check", { service: own })).toEqual({ status: "SERVING" });
      expect(await call(client(), "Check", { service: foreign })).toEqual({
        status: "SERVICE_UNKNOWN",
      });
      expect(await call(client(), "Check", { service: "no.such.Service" })).toEqual({
        status: "SERVICE_UNKNOWN",
      });
    },
  );
});
