import { randomBytes } from "node:crypto";
import { create, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { PGlite } from "@electric-sql/pglite";
import { catalogMigrations, catalogRoutes, SecretBox } from "@pies/catalog";
import {
  createLogger,
  EndpointPolicy,
  type JsonObject,
  jsonOf,
  jsonBytes,
  newId,
} from "@pies/common";
import {
  decodeStoredRun,
  EventTooLarge,
  MemoryCatalogEvents,
  MemoryRunEventBus,
  MemoryRunInputs,
  MemoryRunRecords,
  RunLog,
  withFields,
  type RunEvent,
  type RunEventBus,
  type RunRecords,
} from "@pies/common/bus";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { expectCode } from "@pies/testkit";
import { CatalogService } from "@pies/proto/catalog";
import { ExecutorService, type ExecuteRequestSchema } from "@pies/proto/executor";
import {
  RunErrorSchema,
  RunSchema,
  RunsService,
  RunStatus,
  RunStore,
  type Run,
} from "@pies/proto/runs";
import { runsMigrations, runsRoutes, startRunsStore } from "@pies/runs";
import type { Kysely } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ExecutorDeps } from "./context.js";
import { createExecutorDeps } from "./deps.js";
import { SchemaValidator } from "./schemas.js";
import { executorRoutes } from "./service.js";
import { ActiveRuns } from "./active-runs.js";
import { RETRY_BASE_MS } from "./call.js";

const RUN_TTL = 300;
const resultSchema: JsonObject = {
  type: "object",
  required: ["greeting", "words"],
  properties: { greeting: { type: "string" }, words: { type: "integer", minimum: 1 } },
};
const inputSchema: JsonObject = {
  type: "object",
  required: ["name"],
  properties: { name: { type: "string", minLength: 1 } },
};

let db: Kysely<any>;
let bus: MemoryRunEventBus;
const catalogEvents = new MemoryCatalogEvents();
let inFlight: ActiveRuns;
let catalog: Client<typeof CatalogService>;
let runs: Client<typeof RunsService>;
let executor: Client<typeof ExecutorService>;
let deps: ExecutorDeps;
let records: MemoryRunRecords;
let store: ReturnType<typeof startRunsStore>;

interface Project {
  accountId: string;
  projectId: string;
  environmentId: string;
  /** Greeting: a jst template with an input schema, a result schema. */
  greetingId: string;
  /** Echo: a handlebars template, no schemas (text result). */
  echoId: string;
}

async function createProject(name: string): Promise<Project> {
  const { account, project } = await catalog.createAccount({ name, projectName: "default" });
  const projectId = project!.id;
  const { environment } = await catalog.createEnvironment({
    projectId,
    environment: { name: "local", provider: "test", defaultModel: "test" },
  });
  const { prompt: greet } = await catalog.createPrompt({
    projectId,
    prompt: {
      name: "greet",
      role: "user",
      contentType: "jst",
      content: "return `Write a greeting for ${name}`",
      inputSchemaJson: jsonBytes(inputSchema),
    },
  });
  const { prompt: system } = await catalog.createPrompt({
    projectId,
    prompt: { name: "system", role: "system", contentType: "text", content: "You are friendly." },
  });
  const { prompt: echo } = await catalog.createPrompt({
    projectId,
    prompt: { name: "echo", role: "user", contentType: "handlebars", content: "Echo {{text}}" },
  });
  const { interaction: greeting } = await catalog.createInteraction({
    projectId,
    interaction: {
      name: "Greeting",
      environmentId: environment!.id,
      resultSchemaJson: jsonBytes(resultSchema),
      prompts: [
        { type: "template", templateId: system!.id },
        { type: "template", templateId: greet!.id },
      ],
    },
  });
  const { interaction: echoInteraction } = await catalog.createInteraction({
    projectId,
    interaction: {
      name: "Echo",
      environmentId: environment!.id,
      prompts: [{ type: "template", templateId: echo!.id }],
    },
  });
  return {
    accountId: account!.id,
    projectId,
    environmentId: environment!.id,
    greetingId: greeting!.id,
    echoId: echoInteraction!.id,
  };
}

let main: Project;
let other: Project;

beforeAll(async () => {
  const pglite = await PGlite.create();
  db = createDatabase<any>({ pglite });
  await migrateToLatest(db, "catalog", catalogMigrations);
  await migrateToLatest(db, "runs", runsMigrations);
  const logger = createLogger("executor-test", "silent");
  const catalogTransport = createRouterTransport(
    catalogRoutes({
      db,
      secrets: new SecretBox(randomBytes(32).toString("base64")),
      logger,
      endpoints: new EndpointPolicy(),
      events: catalogEvents,
    }),
  );
  records = new MemoryRunRecords();
  store = startRunsStore(db, records, logger);
  const runsTransport = createRouterTransport(runsRoutes({ db, log: store.log }));
  bus = new MemoryRunEventBus();
  deps = await createExecutorDeps({
    catalog: catalogTransport,
    runs: runsTransport,
    bus,
    log: store.log,
    catalogEvents,
    logger,
    config: {
      PIES_RUN_TTL_SECONDS: RUN_TTL,
      PIES_PROVIDER_TIMEOUT_MS: 5000,
      PIES_PROVIDER_MAX_RETRIES: 0,
      PIES_TEMPLATE_WORKERS: 1,
      PIES_RUN_HEARTBEAT_SECONDS: 10,
      PIES_TEMPLATE_TIMEOUT_MS: 5000, // wide: no test here is of the limit
      PIES_TEMPLATE_MEMORY_BYTES: 16 * 1024 * 1024,
      PIES_ALLOWED_ENDPOINTS: "",
      PIES_MAX_PROMPT_BYTES: 64 * 1024,
      PIES_PROJECT_MAX_EXECUTIONS: 256,
      PIES_PROJECT_MAX_RENDERS: 64,
      PIES_CATALOG_CACHE_SECONDS: 60,
      PIES_RESULT_CACHE_MAX_BYTES: 16 * 1024 * 1024,
      PIES_RESULT_CACHE_MAX_AGE_SECONDS: 3600,
      PIES_STREAM_MAX_AGE_SECONDS: 3600,
      // Every blocking run's start is recorded (the outage tests count those puts).
      PIES_RECORD_START_AFTER_MS: 0,
    },
  });
  inFlight = new ActiveRuns();
  catalog = createClient(CatalogService, catalogTransport);
  runs = createClient(RunsService, runsTransport);
  executor = createClient(ExecutorService, createRouterTransport(executorRoutes(deps, inFlight)));
  main = await createProject("main");
  other = await createProject("other");
}, 60_000);

afterAll(async () => {
  await inFlight?.settle(5000);
  await bus?.close();
  await store?.stop();
  await db?.destroy();
});

/** An ExecuteRequest without its caller (the project's). */
type ExecuteInit = Exclude<MessageInitShape<typeof ExecuteRequestSchema>, { $typeName: string }>;
/** An execution's request, its data as JSON (sent as the request's bytes). */
type ExecuteInput = Omit<ExecuteInit, "caller" | "$typeName"> & {
  project?: Project;
  data?: JsonObject;
};

function execute({ project = main, data, ...req }: ExecuteInput) {
  return executor.execute({
    caller: {
      accountId: project.accountId,
      projectId: project.projectId,
      source: { type: "api", label: "test" },
    },
    interaction: { case: "interactionId", value: project.greetingId },
    ...(data ? { dataJson: jsonBytes(data) } : {}),
    ...req,
  });
}

async function runCount(project: Project) {
  return (await runs.listRuns({ projectId: project.projectId, limit: 1000 })).runs.length;
}

/** The run's events on the bus, up to and including the end. */
async function eventsUntilEnd(runId: string, timeoutMs = 5000): Promise<RunEvent[]> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const events: RunEvent[] = [];
  try {
    for await (const event of bus.subscribe(runId, { signal: controller.signal })) {
      events.push(event);
      if (event.kind === "end") return events;
    }
  } finally {
    clearTimeout(timer);
  }
  throw new Error(
    `no end event for run ${runId} within ${timeoutMs} ms (got ${events.length} events)`,
  );
}

/** An executor over the test's log whose puts are listed: each one's status and `accepted`. */
function watchingPuts() {
  const puts: { status: RunStatus; accepted: boolean }[] = [];
  const watching: RunRecords = {
    put(runId, data, options) {
      puts.push({ status: fromBinary(RunSchema, data).status, accepted: !!options.accepted });
      return records.put(runId, data, options);
    },
    last: (runId) => records.last(runId),
    consume: (write, options) => records.consume(write, options),
    ready: () => records.ready(),
  };
  const own = createClient(
    ExecutorService,
    createRouterTransport(executorRoutes({ ...deps, log: new RunLog(watching) }, inFlight)),
  );
  return { puts, own };
}

const decoder = new TextDecoder();
const chunkText = (events: RunEvent[]) =>
  events
    .filter((e) => e.kind === "chunk")
    .map((e) => decoder.decode(e.data))
    .join("");
const endRun = (events: RunEvent[]): Run => {
  const end = events.at(-1);
  expect(end?.kind).toBe("end");
  return fromBinary(RunSchema, end!.data);
};

describe("ExecutorService.Execute (blocking)", () => {
  it("records a completed run with the result, token use and prompt", async () => {
    const { run } = await execute({ data: { name: "Ada" }, tags: ["a", "b"] });
    expect(run).toBeDefined();
    expect(run!.status).toBe(RunStatus.COMPLETED);
    expect(run).toMatchObject({
      projectId: main.projectId,
      accountId: main.accountId,
      interactionId: main.greetingId,
      interactionName: "Greeting",
      environmentId: main.environmentId,
      environmentName: "local",
      provider: "test",
      modelId: "test",
      stream: false,
      tags: ["a", "b"],
      ttl: 0,
    });
    expect(jsonOf(run!.parametersJson)).toEqual({ name: "Ada" });
    expect(run!.source).toMatchObject({ type: "api", label: "test" });
    expect(run!.config).toMatchObject({
      environmentId: main.environmentId,
      model: "test",
      temperature: 0.7,
    });
    const result = jsonOf(run!.resultJson);
    expect(new SchemaValidator().errors(resultSchema, result)).toEqual([]);
    expect(jsonOf(run!.promptJson)).toEqual([
      { role: "system", content: "You are friendly." },
      { role: "user", content: "Write a greeting for Ada" },
    ]);
    const tokens = run!.tokenUse!;
    expect(tokens.prompt).toBeGreaterThan(0);
    expect(tokens.result).toBeGreaterThan(0);
    expect(tokens.total).toBe(tokens.prompt + tokens.result);
    expect(run!.executionTime).toBeGreaterThanOrEqual(0n);
    expect(run!.error).toBeUndefined();
    expect(jsonOf(run!.resultSchemaJson)).toEqual(resultSchema);

    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: run!.id });
    expect(stored!.status).toBe(RunStatus.COMPLETED);
    expect(jsonOf(stored!.resultJson)).toEqual(result);
    expect(jsonOf(stored!.promptJson)).toEqual(jsonOf(run!.promptJson));
    expect(stored!.tokenUse).toEqual(run!.tokenUse);
    expect(stored!.tags).toEqual(["a", "b"]);
    expect(jsonOf(stored!.parametersJson)).toEqual({ name: "Ada" });
  });

  it("answers the same input with the same result (test provider), and a different one otherwise", async () => {
    const a = await execute({ data: { name: "Grace" } });
    const b = await execute({ data: { name: "Grace" } });
    const c = await execute({ data: { name: "Linus" } });
    expect(a.run!.id).not.toBe(b.run!.id);
    expect(jsonOf(a.run!.resultJson)).toEqual(jsonOf(b.run!.resultJson));
    expect(jsonOf(a.run!.resultJson)).not.toEqual(jsonOf(c.run!.resultJson));
  });

  it("records a text result when the interaction has no result schema", async () => {
    const { run } = await execute({
      interaction: { case: "interactionId", value: main.echoId },
      data: { text: "<b>hi</b>" },
    });
    expect(run!.status).toBe(RunStatus.COMPLETED);
    expect(jsonOf(run!.promptJson)).toEqual([{ role: "user", content: "Echo <b>hi</b>" }]);
    expect(jsonOf(run!.resultJson)).toMatch(/^Test answer to "Echo <b>hi<\/b>": /);
  });

  it("applies the request's config over the interaction's and records it", async () => {
    const { run } = await execute({
      data: { name: "Ada" },
      config: { model: "test-latency-1", temperature: 0.1, maxTokens: 99 },
    });
    expect(run!.status).toBe(RunStatus.COMPLETED);
    expect(run!.modelId).toBe("test-latency-1");
    expect(run!.config).toMatchObject({ model: "test-latency-1", temperature: 0.1, maxTokens: 99 });
  });

  it("rejects input that violates the template's input schema, recording no run", async () => {
    const project = await createProject("invalid-input");
    for (const data of [{}, { name: "" }, { name: 42 }] as JsonObject[]) {
      const error = await expectCode(execute({ project, data }), Code.InvalidArgument);
      expect(error.rawMessage).toMatch(/^data does not match the input schema: /);
    }
    await expectCode(execute({ project }), Code.InvalidArgument);
    expect(await runCount(project)).toBe(0);
  });

  it("rejects a template that fails to render, recording no run", async () => {
    const project = await createProject("bad-template");
    const { prompt } = await catalog.createPrompt({
      projectId: project.projectId,
      prompt: { name: "broken", contentType: "jst", content: "return missing.value" },
    });
    const { interaction } = await catalog.createInteraction({
      projectId: project.projectId,
      interaction: {
        name: "Broken",
        environmentId: project.environmentId,
        prompts: [{ type: "template", templateId: prompt!.id }],
      },
    });
    const error = await expectCode(
      execute({
        project,
        interaction: { case: "interactionId", value: interaction!.id },
        data: {},
      }),
      Code.InvalidArgument,
    );
    expect(error.rawMessage).toMatch(/^template error: prompt template broken: ReferenceError/);
    expect(await runCount(project)).toBe(0);
  });

  it("rejects a temperature out of range and a caller without a project", async () => {
    await expectCode(
      execute({ data: { name: "Ada" }, config: { model: "", temperature: 3 } }),
      Code.InvalidArgument,
    );
    await expectCode(
      executor.execute({
        interaction: { case: "interactionId", value: main.greetingId },
        dataJson: jsonBytes({ name: "Ada" }),
      }),
      Code.InvalidArgument,
    );
  });

  it("rejects a model the environment does not enable", async () => {
    const project = await createProject("enabled-models");
    const { environment } = await catalog.createEnvironment({
      projectId: project.projectId,
      environment: {
        name: "strict",
        provider: "test",
        defaultModel: "test",
        enabledModels: ["test"],
      },
    });
    const error = await expectCode(
      execute({
        project,
        data: { name: "Ada" },
        config: { environmentId: environment!.id, model: "test-fail" },
      }),
      Code.InvalidArgument,
    );
    expect(error.rawMessage).toContain("test-fail");
    const ok = await execute({
      project,
      data: { name: "Ada" },
      config: { environmentId: environment!.id, model: "" },
    });
    expect(ok.run!.status).toBe(RunStatus.COMPLETED);
    expect(ok.run!.environmentId).toBe(environment!.id);
    expect(ok.run!.environmentName).toBe("strict");
  });

  it("answers NotFound for an unknown interaction", async () => {
    await expectCode(
      execute({
        interaction: { case: "interactionId", value: "00000000-0000-4000-8000-000000000000" },
        data: { name: "Ada" },
      }),
      Code.NotFound,
    );
    await expectCode(
      execute({ interaction: { case: "interactionName", value: "Nope" }, data: { name: "Ada" } }),
      Code.NotFound,
    );
  });

  it("answers NotFound for another project's interaction, by id and by name", async () => {
    const before = await runCount(other);
    await expectCode(
      execute({
        interaction: { case: "interactionId", value: other.greetingId },
        data: { name: "Ada" },
      }),
      Code.NotFound,
    );
    // `other` has its own "Greeting"; by name, the caller's project's one runs, never the other's.
    const { run } = await execute({
      interaction: { case: "interactionName", value: "Greeting" },
      data: { name: "Ada" },
    });
    expect(run!.interactionId).toBe(main.greetingId);
    expect(await runCount(other)).toBe(before);
  });

  it("executes an interaction by name and by name@draft", async () => {
    for (const value of ["Greeting", "Greeting@draft"]) {
      const { run } = await execute({
        interaction: { case: "interactionName", value },
        data: { name: "Ada" },
      });
      expect(run!.status).toBe(RunStatus.COMPLETED);
      expect(run!.interactionId).toBe(main.greetingId);
      expect(run!.interactionName).toBe("Greeting");
    }
  });

  it("records a failed run with provider_error when the provider fails (model test-fail)", async () => {
    const { run } = await execute({ data: { name: "Ada" }, config: { model: "test-fail" } });
    expect(run!.status).toBe(RunStatus.FAILED);
    expect(run!.error).toMatchObject({ code: "provider_error" });
    expect(run!.error!.message).toContain("test-fail");
    expect(jsonOf(run!.resultJson)).toBeUndefined();
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: run!.id });
    expect(stored!.status).toBe(RunStatus.FAILED);
    expect(stored!.error!.code).toBe("provider_error");
  });

  it("records a failed run with validation_error when the answer violates the result schema", async () => {
    const { run } = await execute({ data: { name: "Ada" }, config: { model: "test-invalid" } });
    expect(run!.status).toBe(RunStatus.FAILED);
    expect(run!.error!.code).toBe("validation_error");
    expect(run!.error!.message).toMatch(
      /^the answer still does not match the result schema after 2 repairs: /,
    );
    const data = jsonOf(run!.error!.dataJson) as {
      content: string;
      errors: { instancePath: string; keyword: string }[];
    };
    expect(JSON.parse(data.content)).toEqual({});
    // ajv's own errors.
    expect(data.errors).toContainEqual(expect.objectContaining({ keyword: "required" }));
    // The first attempt and two repairs, each rejected.
    expect(run!.attempts.map((a) => [a.number, a.error?.code])).toEqual([
      [1, "validation_error"],
      [2, "validation_error"],
      [3, "validation_error"],
    ]);
    // The provider was called: its usage is recorded even though the answer was rejected.
    expect(run!.tokenUse!.total).toBeGreaterThan(0);
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: run!.id });
    expect(stored!.status).toBe(RunStatus.FAILED);
    expect(stored!.error!.code).toBe("validation_error");
  });
});

describe("ExecutorService streamed runs", () => {
  it("fails a run opened after its ttl with stream_expired, and ends its stream", async () => {
    const { run: created } = await execute({ data: { name: "Late" }, stream: true, ttl: 1 });
    // Five seconds later, as the log has it.
    const recorded = (await store.log.last(created!.id))!;
    recorded.run.createdAt!.seconds -= 5n;
    await store.log.put(recorded.run, recorded.seq);
    const { run } = await executor.startRun({ projectId: main.projectId, runId: created!.id });
    expect(run).toMatchObject({ status: RunStatus.FAILED, error: { code: "stream_expired" } });
    const events = await eventsUntilEnd(created!.id);
    expect(events.map((e) => e.kind)).toEqual(["end"]);
    expect(endRun(events).error!.code).toBe("stream_expired");
  });

  it("tracks the runs it is executing (the list its heartbeats send)", async () => {
    const { run: created } = await execute({
      data: { name: "Slow" },
      stream: true,
      config: { model: "test-latency-300" },
    });
    await executor.startRun({ projectId: main.projectId, runId: created!.id });
    expect(inFlight.ids()).toContain(created!.id);
    await eventsUntilEnd(created!.id);
    await inFlight.settle(1000);
    expect(inFlight.ids()).not.toContain(created!.id);
  });

  it("creates the run, starts it once, and publishes chunks then an end carrying the completed run", async () => {
    const { run: created } = await execute({ data: { name: "Ada" }, stream: true });
    expect(created!.status).toBe(RunStatus.CREATED);
    expect(created!.stream).toBe(true);
    expect(created!.ttl).toBe(RUN_TTL);
    expect(jsonOf(created!.resultJson)).toBeUndefined();
    expect(jsonOf(created!.promptJson)).toEqual([
      { role: "system", content: "You are friendly." },
      { role: "user", content: "Write a greeting for Ada" },
    ]);
    expect(await bus.hasEnd(created!.id)).toBe(false);

    const first = await executor.startRun({ projectId: main.projectId, runId: created!.id });
    expect(first.started).toBe(true);
    expect(first.run!.status).toBe(RunStatus.PROCESSING);
    const second = await executor.startRun({ projectId: main.projectId, runId: created!.id });
    expect(second.started).toBe(false);
    expect(second.run!.id).toBe(created!.id);
    expect([RunStatus.PROCESSING, RunStatus.COMPLETED]).toContain(second.run!.status);

    const events = await eventsUntilEnd(created!.id);
    const chunks = events.filter((e) => e.kind === "chunk");
    expect(chunks.length).toBeGreaterThan(0);
    expect(events.filter((e) => e.kind === "end")).toHaveLength(1);
    const final = endRun(events);
    expect(final.id).toBe(created!.id);
    expect(final.status).toBe(RunStatus.COMPLETED);
    expect(JSON.parse(chunkText(events))).toEqual(jsonOf(final.resultJson));
    expect(new SchemaValidator().errors(resultSchema, jsonOf(final.resultJson))).toEqual([]);
    expect(final.tokenUse!.total).toBe(final.tokenUse!.prompt + final.tokenUse!.result);

    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: created!.id });
    expect(stored!.status).toBe(RunStatus.COMPLETED);
    expect(jsonOf(stored!.resultJson)).toEqual(jsonOf(final.resultJson));

    const third = await executor.startRun({ projectId: main.projectId, runId: created!.id });
    expect(third.started).toBe(false);
    expect(third.run!.status).toBe(RunStatus.COMPLETED);
  });

  it("streams the same answer as the blocking execution", async () => {
    const blocking = await execute({ data: { name: "Hopper" } });
    const { run: created } = await execute({ data: { name: "Hopper" }, stream: true });
    await executor.startRun({ projectId: main.projectId, runId: created!.id });
    const final = endRun(await eventsUntilEnd(created!.id));
    expect(jsonOf(final.resultJson)).toEqual(jsonOf(blocking.run!.resultJson));
  });

  it("streams a text result of an interaction without result schema", async () => {
    const { run: created } = await execute({
      interaction: { case: "interactionId", value: main.echoId },
      data: { text: "streamed words here" },
      stream: true,
    });
    await executor.startRun({ projectId: main.projectId, runId: created!.id });
    const events = await eventsUntilEnd(created!.id);
    const final = endRun(events);
    expect(final.status).toBe(RunStatus.COMPLETED);
    expect(jsonOf(final.resultJson)).toBe(chunkText(events));
    expect(chunkText(events)).toMatch(/^Test answer to "Echo streamed words here": /);
  });

  it("keeps the request's model and temperature for the streamed execution", async () => {
    const { run: created } = await execute({
      data: { name: "Ada" },
      stream: true,
      ttl: 60,
      config: { model: "test-slow", temperature: 0.3 },
    });
    expect(created!.ttl).toBe(60);
    await executor.startRun({ projectId: main.projectId, runId: created!.id });
    const events = await eventsUntilEnd(created!.id);
    const final = endRun(events);
    expect(final.status).toBe(RunStatus.COMPLETED);
    expect(final.modelId).toBe("test-slow");
    expect(final.config!.temperature).toBe(0.3);
    // 50 ms between chunks: they cannot all be joined into one message.
    expect(events.filter((e) => e.kind === "chunk").length).toBeGreaterThan(1);
  });

  it("publishes an end carrying the failed run when the provider fails", async () => {
    const { run: created } = await execute({
      data: { name: "Ada" },
      stream: true,
      config: { model: "test-fail" },
    });
    expect(created!.status).toBe(RunStatus.CREATED);
    const { started } = await executor.startRun({ projectId: main.projectId, runId: created!.id });
    expect(started).toBe(true);
    const events = await eventsUntilEnd(created!.id);
    expect(events.map((e) => e.kind)).toEqual(["end"]);
    const final = endRun(events);
    expect(final.status).toBe(RunStatus.FAILED);
    expect(final.error!.code).toBe("provider_error");
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: created!.id });
    expect(stored!.status).toBe(RunStatus.FAILED);
  });

  it("publishes an end carrying a validation_error run when the streamed answer violates the schema", async () => {
    const { run: created } = await execute({
      data: { name: "Ada" },
      stream: true,
      config: { model: "test-invalid" },
    });
    await executor.startRun({ projectId: main.projectId, runId: created!.id });
    const events = await eventsUntilEnd(created!.id);
    const final = endRun(events);
    expect(final.status).toBe(RunStatus.FAILED);
    expect(final.error!.code).toBe("validation_error");
    // Three answers, a repair event before each of the two repairs.
    expect(events.map((e) => e.kind)).toEqual([
      "chunk",
      "repair",
      "chunk",
      "repair",
      "chunk",
      "end",
    ]);
    expect(chunkText(events)).toBe("{}{}{}");
  });

  it("answers NotFound when starting an unknown run or another project's run", async () => {
    await expectCode(
      executor.startRun({
        projectId: main.projectId,
        runId: "00000000-0000-4000-8000-000000000000",
      }),
      Code.NotFound,
    );
    const { run: created } = await execute({ project: other, data: { name: "Ada" }, stream: true });
    await expectCode(
      executor.startRun({ projectId: main.projectId, runId: created!.id }),
      Code.NotFound,
    );
    const { run: stored } = await runs.getRun({ projectId: other.projectId, id: created!.id });
    expect(stored!.status).toBe(RunStatus.CREATED);
  });

  it("starts a run it created without reading the log back, and reads it when the run changed since", async () => {
    const reads: string[] = [];
    const reading: RunRecords = {
      put: (runId, data, options) => records.put(runId, data, options),
      last: (runId) => (reads.push(runId), records.last(runId)),
      consume: (write, options) => records.consume(write, options),
      ready: () => records.ready(),
    };
    const own = createClient(
      ExecutorService,
      createRouterTransport(executorRoutes({ ...deps, log: new RunLog(reading) }, inFlight)),
    );
    const caller = { accountId: main.accountId, projectId: main.projectId };
    const streamed = (name: string) =>
      own.execute({
        caller,
        interaction: { case: "interactionId", value: main.greetingId },
        dataJson: jsonBytes({ name }),
        stream: true,
      });
    const { run: fresh } = await streamed("Memory");
    const first = await own.startRun({ projectId: main.projectId, runId: fresh!.id });
    expect(first.started).toBe(true);
    expect(reads).not.toContain(fresh!.id);
    expect(endRun(await eventsUntilEnd(fresh!.id)).status).toBe(RunStatus.COMPLETED);

    // Another project cannot start it, nor use up what was kept of it.
    const { run: kept } = await streamed("Kept");
    await expectCode(own.startRun({ projectId: other.projectId, runId: kept!.id }), Code.NotFound);
    expect((await own.startRun({ projectId: main.projectId, runId: kept!.id })).started).toBe(true);
    await eventsUntilEnd(kept!.id);

    // Changed in the log since (the sweeper expired it): the log's record wins.
    const { run: changed } = await streamed("Changed");
    const recorded = (await store.log.last(changed!.id))!;
    await store.log.put(
      withFields(recorded.run, {
        status: RunStatus.FAILED,
        error: create(RunErrorSchema, { code: "stream_expired", message: "too late" }),
      }),
      recorded.seq,
    );
    const late = await own.startRun({ projectId: main.projectId, runId: changed!.id });
    expect(late.started).toBe(false);
    expect(late.run).toMatchObject({ status: RunStatus.FAILED, error: { code: "stream_expired" } });
    expect(reads).toContain(changed!.id);
  });

  it("starts a streamed run once the log has its start in order, recording only the creation and the end durably", async () => {
    const { puts, own } = watchingPuts();
    const { run } = await own.execute({
      caller: { accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.greetingId },
      dataJson: jsonBytes({ name: "Accepted" }),
      stream: true,
    });
    expect((await own.startRun({ projectId: main.projectId, runId: run!.id })).started).toBe(true);
    expect(endRun(await eventsUntilEnd(run!.id)).status).toBe(RunStatus.COMPLETED);
    expect(puts).toEqual([
      { status: RunStatus.CREATED, accepted: false },
      { status: RunStatus.PROCESSING, accepted: true },
      { status: RunStatus.COMPLETED, accepted: false },
    ]);
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: run!.id });
    expect(stored!.status).toBe(RunStatus.COMPLETED);
  });

  it("starts a run at once (ExecuteRequest.start) under the caller's id, recording no creation", async () => {
    const { puts, own } = watchingPuts();
    const runId = newId();
    // Listening before the run exists, as the gateway's one-request stream does.
    const events = eventsUntilEnd(runId);
    const request = {
      caller: { accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.greetingId },
      dataJson: jsonBytes({ name: "AtOnce" }),
      stream: true,
      start: true,
      runId,
    } as const;
    const { run } = await own.execute(request);
    expect(run).toMatchObject({ id: runId, status: RunStatus.PROCESSING, stream: true });
    const final = endRun(await events);
    expect(final).toMatchObject({ id: runId, status: RunStatus.COMPLETED });
    expect(puts).toEqual([
      { status: RunStatus.PROCESSING, accepted: true },
      { status: RunStatus.COMPLETED, accepted: false },
    ]);
    // Its slot given back once it ended.
    await expect.poll(() => deps.executions.count(main.projectId)).toBe(0);
    // An id that names a run already: refused, nothing started.
    await expectCode(own.execute(request), Code.AlreadyExists);
    expect(puts).toHaveLength(3);
    await expect.poll(() => deps.executions.count(main.projectId)).toBe(0);
    // An id pies does not make, or one for a run not started at once: refused before any put.
    await expectCode(own.execute({ ...request, runId: "../other" }), Code.InvalidArgument);
    await expectCode(
      own.execute({ ...request, start: false, runId: newId() }),
      Code.InvalidArgument,
    );
    expect(puts).toHaveLength(3);
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: runId });
    expect(stored!.status).toBe(RunStatus.COMPLETED);
  });

  it("starts a run exactly once when StartRun calls race", async () => {
    const { run: created } = await execute({ data: { name: "Race" }, stream: true });
    const answers = await Promise.all(
      Array.from({ length: 5 }, () =>
        executor.startRun({ projectId: main.projectId, runId: created!.id }),
      ),
    );
    expect(answers.filter((a) => a.started)).toHaveLength(1);
    const events = await eventsUntilEnd(created!.id);
    expect(events.filter((e) => e.kind === "end")).toHaveLength(1);
    expect(endRun(events).status).toBe(RunStatus.COMPLETED);
  });

  /**
   * An executor whose start puts (status processing) wait until the test lets them through, whose
   * publishes are counted, and whose provider calls are seen with their signal.
   */
  function heldStarts({
    open = false,
    failStart,
    resolveAfterMs = 0,
    maxEventBytes,
  }: {
    /** Start puts go through at once. */
    open?: boolean;
    /** Whether the start put's attempt `n` (from 0) fails, and whether the record was stored. */
    failStart?: (n: number) => { stored: boolean } | undefined;
    /** The catalog's environment comes this much later. */
    resolveAfterMs?: number;
    /** The bus refuses larger chunk and repair events, as JetStream's does over max_payload. */
    maxEventBytes?: number;
  } = {}) {
    let letThrough!: () => void;
    const gate = new Promise<void>((resolve) => (letThrough = resolve));
    if (open) letThrough();
    const startPuts: string[] = [];
    const holding: RunRecords = {
      async put(runId, data, options) {
        if (fromBinary(RunSchema, data).status === RunStatus.PROCESSING) {
          const failure = failStart?.(startPuts.length);
          startPuts.push(runId);
          await gate;
          if (failure) {
            if (failure.stored) await records.put(runId, data, options);
            throw new Error("the publish timed out");
          }
        }
        return records.put(runId, data, options);
      },
      last: (runId) => records.last(runId),
      consume: (write, options) => records.consume(write, options),
      ready: () => records.ready(),
    };
    const published: RunEvent[] = [];
    const counting: RunEventBus = {
      maxEventBytes,
      publish: async (runId, kind, data, seq) => {
        // Not the end, a run's record: the record log bounds it to the same size in a
        // deployment, and a test run's record is far larger than these answers.
        if (maxEventBytes !== undefined && kind !== "end" && data.length > maxEventBytes) {
          throw new EventTooLarge(runId, data.length, maxEventBytes);
        }
        published.push({ kind, data, seq });
        return bus.publish(runId, kind, data, seq);
      },
      subscribe: (runId, options) => bus.subscribe(runId, options),
      hasEnd: (runId) => bus.hasEnd(runId),
      stored: (runId, afterSeq) => bus.stored(runId, afterSeq),
      ready: () => bus.ready(),
      close: async () => {},
    };
    const calls: { signal?: AbortSignal; done: Promise<unknown> }[] = [];
    const providers = Object.create(deps.providers) as ExecutorDeps["providers"];
    providers.client = (environment, apiKey) => {
      const client = deps.providers.client(environment, apiKey);
      return {
        complete(request, options) {
          const done = client.complete(request, options);
          calls.push({ signal: options.signal, done: done.catch(() => {}) });
          return done;
        },
      };
    };
    const resolver = Object.create(deps.resolver) as ExecutorDeps["resolver"];
    resolver.resolve = async (request) => {
      if (resolveAfterMs > 0) await slowly(resolveAfterMs);
      return deps.resolver.resolve(request);
    };
    const client = createClient(
      ExecutorService,
      createRouterTransport(
        executorRoutes(
          { ...deps, log: new RunLog(holding), bus: counting, providers, resolver },
          inFlight,
        ),
      ),
    );
    return { client, letThrough, startPuts, published, calls };
  }

  const slowly = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it("calls the provider while the start is recorded, publishing nothing before it is", async () => {
    const held = heldStarts();
    const { run } = await held.client.execute({
      caller: { accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.echoId },
      dataJson: jsonBytes({ text: "held" }),
      stream: true,
    });
    const starting = held.client.startRun({ projectId: main.projectId, runId: run!.id });
    // The test provider answers at once: its whole answer is in while the put still waits.
    await expect.poll(() => held.calls.length).toBe(1);
    await held.calls[0]!.done;
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(held.startPuts).toEqual([run!.id]);
    expect(held.published).toEqual([]);
    expect((await runs.getRun({ projectId: main.projectId, id: run!.id })).run!.status).toBe(
      RunStatus.CREATED,
    );

    held.letThrough();
    expect((await starting).started).toBe(true);
    const events = await eventsUntilEnd(run!.id);
    expect(chunkText(events)).toBe(jsonOf(endRun(events).resultJson));
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(endRun(events).status).toBe(RunStatus.COMPLETED);
  });

  it("streams an answer that came whole while the start was recorded as events the bus takes", async () => {
    // The answer (over 200 bytes, with characters of 2 to 4 bytes) is all in while the start put
    // waits: it goes out in events of at most 32 bytes, not one the bus refuses (stream_error).
    const held = heldStarts({ maxEventBytes: 32 });
    const { run } = await held.client.execute({
      caller: { accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.echoId },
      dataJson: jsonBytes({ text: "held é✓😀 ".repeat(8) }),
      stream: true,
    });
    const starting = held.client.startRun({ projectId: main.projectId, runId: run!.id });
    await expect.poll(() => held.calls.length).toBe(1);
    await held.calls[0]!.done;
    held.letThrough();
    expect((await starting).started).toBe(true);
    const events = await eventsUntilEnd(run!.id);
    expect(endRun(events).status).toBe(RunStatus.COMPLETED);
    const result = jsonOf(endRun(events).resultJson) as string;
    expect(result).toContain("😀");
    expect(chunkText(events)).toBe(result);
    const chunks = events.filter((e) => e.kind === "chunk");
    expect(chunks.length).toBeGreaterThan(5);
    expect(chunks.every((e) => e.data.length <= 32)).toBe(true);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
  });

  it("cancels the provider call and publishes nothing when another request started the run meanwhile", async () => {
    const held = heldStarts();
    const { run } = await held.client.execute({
      caller: { accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.echoId },
      dataJson: jsonBytes({ text: "contended" }),
      config: { model: "test-latency-1000" },
      stream: true,
    });
    // This executor created the run (kept in memory): its start put waits, its provider call runs.
    const losing = held.client.startRun({ projectId: main.projectId, runId: run!.id });
    await expect.poll(() => held.calls.length).toBe(1);
    // Another executor (the log's record, no memory of it) starts the run and wins.
    const winning = await executor.startRun({ projectId: main.projectId, runId: run!.id });
    expect(winning.started).toBe(true);

    held.letThrough();
    const lost = await losing;
    expect(lost.started).toBe(false);
    expect(lost.run!.status).toBe(RunStatus.PROCESSING);
    expect(held.calls[0]!.signal?.aborted).toBe(true);

    const events = await eventsUntilEnd(run!.id);
    expect(endRun(events).status).toBe(RunStatus.COMPLETED);
    expect(events.filter((e) => e.kind === "end")).toHaveLength(1);
    expect(chunkText(events)).toBe(jsonOf(endRun(events).resultJson));
    // Nothing of the cancelled call went out, not even after the winner's end.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(held.published).toEqual([]);
  });

  it("calls the provider once when two StartRun race, one of them reading the run from the log", async () => {
    const held = heldStarts();
    const { run } = await held.client.execute({
      caller: { accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.echoId },
      dataJson: jsonBytes({ text: "twice opened" }),
      stream: true,
    });
    // The first takes the run from this executor's memory, the second reads it from the log;
    // both start puts in flight at once.
    const starting = Promise.all([
      held.client.startRun({ projectId: main.projectId, runId: run!.id }),
      held.client.startRun({ projectId: main.projectId, runId: run!.id }),
    ]);
    await expect.poll(() => held.startPuts.length).toBe(2);
    await new Promise((resolve) => setTimeout(resolve, 50));
    held.letThrough();
    const answers = await starting;
    expect(answers.filter((a) => a.started)).toHaveLength(1);
    const events = await eventsUntilEnd(run!.id);
    expect(endRun(events).status).toBe(RunStatus.COMPLETED);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(held.calls).toHaveLength(1);
  });

  it("answers a losing start at once, giving its slot back once its call has settled", async () => {
    const held = heldStarts({ resolveAfterMs: 1500 });
    const { run } = await held.client.execute({
      caller: { accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.echoId },
      dataJson: jsonBytes({ text: "slow catalog" }),
      stream: true,
    });
    const before = deps.executions.count(main.projectId);
    const losing = held.client.startRun({ projectId: main.projectId, runId: run!.id });
    await expect.poll(() => held.startPuts.length).toBe(1);
    expect(deps.executions.count(main.projectId)).toBe(before + 1);
    const winning = await executor.startRun({ projectId: main.projectId, runId: run!.id });
    expect(winning.started).toBe(true);
    await eventsUntilEnd(run!.id);

    const answeredAt = Date.now();
    held.letThrough();
    const lost = await losing;
    expect(lost.started).toBe(false);
    // Not after the catalog's answer, which the abandoned call still waits on.
    expect(Date.now() - answeredAt).toBeLessThan(500);
    expect(deps.executions.count(main.projectId)).toBe(before + 1);
    await expect.poll(() => deps.executions.count(main.projectId), { timeout: 3000 }).toBe(before);
    expect(held.calls).toHaveLength(0);
    expect(held.published).toEqual([]);
  });

  it("repeats a start put that failed (and was stored all the same), then streams the run", async () => {
    const held = heldStarts({
      open: true,
      failStart: (n) => (n === 0 ? { stored: true } : undefined),
    });
    const { run } = await held.client.execute({
      caller: { accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.echoId },
      dataJson: jsonBytes({ text: "put twice" }),
      stream: true,
    });
    const { started } = await held.client.startRun({ projectId: main.projectId, runId: run!.id });
    expect(started).toBe(true);
    expect(held.startPuts).toEqual([run!.id, run!.id]);
    const events = await eventsUntilEnd(run!.id);
    expect(endRun(events).status).toBe(RunStatus.COMPLETED);
    expect(chunkText(events)).toBe(jsonOf(endRun(events).resultJson));
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
  });

  it("answers UNAVAILABLE when the start cannot be recorded, publishing nothing and giving the slot back", async () => {
    const held = heldStarts({ open: true, failStart: () => ({ stored: false }) });
    const { run } = await held.client.execute({
      caller: { accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.echoId },
      dataJson: jsonBytes({ text: "never started" }),
      config: { model: "test-latency-300" },
      stream: true,
    });
    const before = deps.executions.count(main.projectId);
    await expectCode(
      held.client.startRun({ projectId: main.projectId, runId: run!.id }),
      Code.Unavailable,
    );
    // A few attempts under one id, then the answer.
    expect(held.startPuts).toEqual([run!.id, run!.id, run!.id]);
    expect(held.calls[0]!.signal?.aborted).toBe(true);
    await expect.poll(() => deps.executions.count(main.projectId)).toBe(before);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(held.published).toEqual([]);
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: run!.id });
    expect(stored!.status).toBe(RunStatus.CREATED);
  });
});

describe("ExecutorService recording a blocking run", () => {
  /** An executor whose log counts the statuses put, by run, with the start deferred 150 ms. */
  function countingExecutor() {
    const puts = new Map<string, RunStatus[]>();
    const counting: RunRecords = {
      put(runId, data, options) {
        puts.set(runId, [...(puts.get(runId) ?? []), fromBinary(RunSchema, data).status]);
        return records.put(runId, data, options);
      },
      last: (runId) => records.last(runId),
      consume: (write, options) => records.consume(write, options),
      ready: () => records.ready(),
    };
    const client = createClient(
      ExecutorService,
      createRouterTransport(
        executorRoutes({ ...deps, log: new RunLog(counting), recordStartAfterMs: 150 }, inFlight),
      ),
    );
    return { client, puts };
  }
  const request = (model: string) => ({
    caller: { accountId: main.accountId, projectId: main.projectId, source: { type: "api" } },
    interaction: { case: "interactionId" as const, value: main.greetingId },
    dataJson: jsonBytes({ name: model }),
    config: { model },
  });

  it("records a run that ends before recordStartAfterMs once, at its end", async () => {
    const { client, puts } = countingExecutor();
    const { run } = await client.execute(request("test"));
    expect(puts.get(run!.id)).toEqual([RunStatus.COMPLETED]);
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: run!.id });
    expect(stored).toMatchObject({ status: RunStatus.COMPLETED, createdAt: run!.createdAt });
  });

  it("records a slower run as processing meanwhile, then its end", async () => {
    const { client, puts } = countingExecutor();
    const execution = client.execute(request("test-latency-600"));
    await new Promise((resolve) => setTimeout(resolve, 400));
    const [id] = [...puts.keys()];
    expect(puts.get(id!)).toEqual([RunStatus.PROCESSING]);
    const { run: meanwhile } = await runs.getRun({ projectId: main.projectId, id: id! });
    expect(meanwhile!.status).toBe(RunStatus.PROCESSING);
    const { run } = await execution;
    expect(run!.id).toBe(id);
    expect(puts.get(id!)).toEqual([RunStatus.PROCESSING, RunStatus.COMPLETED]);
    expect(run!.createdAt!.seconds).toBe(meanwhile!.createdAt!.seconds);
  });
});

describe("ExecutorService while the record log (NATS) is down", () => {
  /** Puts still to fail, by what they record: a run's start (processing) or its end. */
  const failures = new Map<"start" | "end", number>();
  let endPublishFailures = 0;
  const fail = (kind: "start" | "end") => {
    const left = failures.get(kind) ?? 0;
    if (left > 0) failures.set(kind, left - 1);
    return left > 0;
  };
  const flakyRecords = (): RunRecords => ({
    put(runId, data, options) {
      const { status } = fromBinary(RunSchema, data);
      const kind = status === RunStatus.PROCESSING ? "start" : status > 2 ? "end" : undefined;
      if (kind && fail(kind)) return Promise.reject(new Error("NATS: disconnected"));
      return records.put(runId, data, options);
    },
    last: (runId) => records.last(runId),
    consume: (write, options) => records.consume(write, options),
    ready: () => records.ready(),
  });
  let active: ActiveRuns;
  let flaky: Client<typeof ExecutorService>;
  const RECORD_WAIT = 1500;

  beforeAll(() => {
    const flakyBus: RunEventBus = Object.assign(Object.create(bus) as RunEventBus, {
      publish: (...args: Parameters<RunEventBus["publish"]>) => {
        if (args[1] === "end" && endPublishFailures-- > 0) {
          return Promise.reject(new Error("NATS: disconnected"));
        }
        return bus.publish(...args);
      },
    });
    active = new ActiveRuns();
    flaky = createClient(
      ExecutorService,
      createRouterTransport(
        executorRoutes(
          { ...deps, log: new RunLog(flakyRecords()), bus: flakyBus },
          active,
          RECORD_WAIT,
        ),
      ),
    );
  });

  afterAll(async () => {
    failures.clear();
    await active?.settle(10_000);
  });

  const caller = {
    accountId: "",
    projectId: "",
    source: { type: "api", label: "test" },
  };
  const flakyExecute = ({ data, ...init }: Omit<ExecuteInput, "project">) =>
    flaky.execute({
      caller: { ...caller, accountId: main.accountId, projectId: main.projectId },
      interaction: { case: "interactionId", value: main.greetingId },
      ...(data ? { dataJson: jsonBytes(data) } : {}),
      ...init,
    });

  it("retries recording a blocking run's start and end until the record log answers", async () => {
    failures.set("start", 2).set("end", 3);
    const { run } = await flakyExecute({ data: { name: "Outage" } });
    expect(run!.status).toBe(RunStatus.COMPLETED);
    expect(failures.get("start")).toBe(0);
    expect(failures.get("end")).toBe(0);
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: run!.id });
    expect(stored!.status).toBe(RunStatus.COMPLETED);
  });

  it("answers UNAVAILABLE at once for a child run while the record log is down", async () => {
    const { run: parent } = await execute({ data: { name: "Parent" } });
    failures.set("start", 1_000_000);
    try {
      await expectCode(
        flakyExecute({ data: { name: "Child" }, parentRunId: parent!.id }),
        Code.Unavailable,
      );
      expect(active.ids()).toEqual([]);
    } finally {
      failures.set("start", 0);
    }
    const { runs: children } = await runs.listRuns({
      projectId: main.projectId,
      filters: { parentId: parent!.id },
    });
    expect(children).toEqual([]);
  });

  it("answers UNAVAILABLE past the wait, keeps the run active (heartbeats), and records it later", async () => {
    failures.set("end", 1_000_000);
    const err = await expectCode(flakyExecute({ data: { name: "Long outage" } }), Code.Unavailable);
    const runId = /run (\S+) ended/.exec(err.rawMessage)?.[1];
    expect(active.ids()).toEqual([runId]);
    const { run: meanwhile } = await runs.getRun({ projectId: main.projectId, id: runId! });
    expect(meanwhile!.status).toBe(RunStatus.PROCESSING);

    failures.set("end", 0);
    await active.settle(10_000);
    expect(active.ids()).toEqual([]);
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: runId! });
    expect(stored!.status).toBe(RunStatus.COMPLETED);
  });

  it("retries recording and publishing a streamed run's end, so its stream closes completed", async () => {
    const { run: created } = await execute({ data: { name: "Streamed outage" }, stream: true });
    failures.set("end", 3);
    endPublishFailures = 4; // more than the publisher's own attempts
    await flaky.startRun({ projectId: main.projectId, runId: created!.id });
    const final = endRun(await eventsUntilEnd(created!.id, 15_000));
    expect(final.status).toBe(RunStatus.COMPLETED);
    expect(failures.get("end")).toBe(0);
    expect(endPublishFailures).toBeLessThan(0);
  });

  it("publishes the run as stored when it ended meanwhile (a final answer: no retry)", async () => {
    const { run: created } = await execute({
      data: { name: "Swept" },
      stream: true,
      config: { model: "test-latency-300" },
    });
    await flaky.startRun({ projectId: main.projectId, runId: created!.id });
    // What a sweeper does to a run whose executor it believes lost.
    await runs.updateRun({
      projectId: main.projectId,
      id: created!.id,
      update: { status: RunStatus.FAILED, error: { code: "executor_lost", message: "lost" } },
      expectedStatus: RunStatus.PROCESSING,
    });
    const final = endRun(await eventsUntilEnd(created!.id));
    expect(final.status).toBe(RunStatus.FAILED);
    expect(final.error!.code).toBe("executor_lost");
  });
});

describe("repairs, retries, cancellation (test provider)", () => {
  it("repairs an answer that fails the schema once, recording both attempts and their usage", async () => {
    const { run } = await execute({
      data: { name: "Ada" },
      config: { model: "test-invalid-once" },
    });
    expect(run!.status).toBe(RunStatus.COMPLETED);
    expect(new SchemaValidator().errors(resultSchema, jsonOf(run!.resultJson))).toEqual([]);
    expect(run!.attempts).toHaveLength(2);
    const [first, second] = run!.attempts;
    expect(first!.number).toBe(1);
    expect(jsonOf(first!.promptAddedJson)).toEqual([]);
    expect(first!.error!.code).toBe("validation_error");
    expect(second!.number).toBe(2);
    expect(second!.error).toBeUndefined();
    const added = jsonOf(second!.promptAddedJson) as { role: string; content: string }[];
    expect(added.map((m) => m.role)).toEqual(["assistant", "user"]);
    expect(added[0]!.content).toBe("{}");
    expect(added[1]!.content).toMatch(/required property 'greeting'/);
    // Usage is every attempt's: the repair resends the prompt with the answer and the errors.
    const total = first!.tokenUse!.total + second!.tokenUse!.total;
    expect(second!.tokenUse!.prompt).toBeGreaterThan(first!.tokenUse!.prompt);
    expect(run!.tokenUse).toMatchObject({
      prompt: first!.tokenUse!.prompt + second!.tokenUse!.prompt,
      total,
    });
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: run!.id });
    expect(stored!.attempts).toHaveLength(2);
  });

  it("fails at once when the request allows no repair (config max_repairs 0)", async () => {
    const { run } = await execute({
      data: { name: "Ada" },
      config: { model: "test-invalid-once", maxRepairs: 0 },
    });
    expect(run!.status).toBe(RunStatus.FAILED);
    expect(run!.error!.code).toBe("validation_error");
    expect(run!.error!.message).toMatch(/^the answer does not match the result schema: /);
    expect(run!.attempts).toHaveLength(1);
    expect(run!.config!.maxRepairs).toBe(0);
  });

  it("refuses max_repairs out of range", async () => {
    await expectCode(
      execute({ data: { name: "Ada" }, config: { maxRepairs: 6 } }),
      Code.InvalidArgument,
    );
  });

  it("streams a repair as an event of its own between the two answers", async () => {
    const { run: created } = await execute({
      data: { name: "Bea" },
      stream: true,
      config: { model: "test-invalid-once" },
    });
    await executor.startRun({ projectId: main.projectId, runId: created!.id });
    const events = await eventsUntilEnd(created!.id);
    const kinds = events.map((e) => e.kind);
    expect(kinds[0]).toBe("chunk");
    expect(kinds.filter((k) => k === "repair")).toHaveLength(1);
    const repairAt = kinds.indexOf("repair");
    const repair = JSON.parse(decoder.decode(events[repairAt]!.data)) as {
      attempt: number;
      errors: string[];
    };
    expect(repair.attempt).toBe(2);
    expect(repair.errors.join()).toMatch(/greeting/);
    const before = events.slice(0, repairAt).filter((e) => e.kind === "chunk");
    const after = events.slice(repairAt + 1, -1).filter((e) => e.kind === "chunk");
    expect(before.map((e) => decoder.decode(e.data)).join("")).toBe("{}");
    const final = endRun(events);
    expect(final.status).toBe(RunStatus.COMPLETED);
    expect(JSON.parse(after.map((e) => decoder.decode(e.data)).join(""))).toEqual(
      jsonOf(final.resultJson),
    );
    expect(final.attempts).toHaveLength(2);
  });

  it("retries a provider's 429 with Retry-After: 0 before the first chunk (test-429-once)", async () => {
    const retrying = createClient(
      ExecutorService,
      createRouterTransport(executorRoutes({ ...deps, providerMaxRetries: 1 }, inFlight)),
    );
    const caller = { accountId: main.accountId, projectId: main.projectId };
    const started = Date.now();
    const blocking = await retrying.execute({
      caller,
      interaction: { case: "interactionId", value: main.greetingId },
      dataJson: jsonBytes({ name: "Retry" }),
      config: { model: "test-429-once" },
    });
    expect(blocking.run!.status).toBe(RunStatus.COMPLETED);
    // Retry-After: 0 still waits the first backoff (75–100 ms), not a tight loop.
    expect(Date.now() - started).toBeGreaterThanOrEqual(RETRY_BASE_MS * 0.75);
    const { run: created } = await retrying.execute({
      caller,
      interaction: { case: "interactionId", value: main.greetingId },
      dataJson: jsonBytes({ name: "Retry streamed" }),
      stream: true,
      config: { model: "test-429-once" },
    });
    await retrying.startRun({ projectId: main.projectId, runId: created!.id });
    const final = endRun(await eventsUntilEnd(created!.id));
    expect(final.status).toBe(RunStatus.COMPLETED);
    // With no retries allowed, the 429 fails the run.
    const refused = await execute({
      data: { name: "No retry" },
      config: { model: "test-429-once" },
    });
    expect(refused.run!.status).toBe(RunStatus.FAILED);
    expect(refused.run!.error!.message).toMatch(/^provider answered 429/);
  });

  it("fails a run whose answer breaks off after the first chunk, blocking and streamed", async () => {
    const { run } = await execute({
      data: { name: "Mid" },
      config: { model: "test-fail-midstream" },
    });
    expect(run!.status).toBe(RunStatus.FAILED);
    expect(run!.error!.code).toBe("stream_error");
    const { run: created } = await execute({
      data: { name: "Mid" },
      stream: true,
      config: { model: "test-fail-midstream" },
    });
    await executor.startRun({ projectId: main.projectId, runId: created!.id });
    const events = await eventsUntilEnd(created!.id);
    expect(events.map((e) => e.kind)).toEqual(["chunk", "end"]);
    const final = endRun(events);
    expect(final.status).toBe(RunStatus.FAILED);
    expect(final.error!.code).toBe("stream_error");
    expect(final.error!.message).toMatch(/broke off after its first chunk/);
    // What was generated before the break counts: the prompt and the chunk that arrived.
    expect(final.tokenUse!.prompt).toBeGreaterThan(0);
    expect(final.tokenUse!.result).toBeGreaterThan(0);
    expect(final.tokenUse!.total).toBe(final.tokenUse!.prompt + final.tokenUse!.result);
  });

  it("cancels the provider call when the blocking caller goes away, recording the run cancelled", async () => {
    const before = await runCount(main);
    const gone = new AbortController();
    const started = Date.now();
    const pending = execute({
      data: { name: "Gone" },
      config: { model: "test-latency-3000" },
    }).catch((err: unknown) => err);
    setTimeout(() => gone.abort(), 100);
    // The caller's signal (what the gateway passes for a client that disconnected).
    const call = executor
      .execute(
        {
          caller: { accountId: main.accountId, projectId: main.projectId },
          interaction: { case: "interactionId", value: main.greetingId },
          dataJson: jsonBytes({ name: "Gone too" }),
          config: { model: "test-latency-3000" },
        },
        { signal: gone.signal },
      )
      .catch((err: unknown) => err);
    expect(await call).toMatchObject({ code: Code.Canceled });
    // The cancelled run is recorded well before the provider would have answered.
    const deadline = Date.now() + 2000;
    let cancelled: Run | undefined;
    while (!cancelled && Date.now() < deadline) {
      const { runs: listed } = await runs.listRuns({ projectId: main.projectId, limit: 20 });
      cancelled = listed.find(
        (r) =>
          (jsonOf(r.parametersJson) as JsonObject)?.name === "Gone too" &&
          r.status === RunStatus.FAILED,
      );
      if (!cancelled) await new Promise((r) => setTimeout(r, 50));
    }
    expect(cancelled?.error?.code).toBe("cancelled");
    expect(Date.now() - started).toBeLessThan(2500);
    const other = (await pending) as { run?: Run };
    expect(other.run!.status).toBe(RunStatus.COMPLETED);
    expect(await runCount(main)).toBe(before + 2);
  });

  it("does not cancel a streamed run whose reader leaves (it runs to its end)", async () => {
    const { run: created } = await execute({
      data: { name: "Leaving reader" },
      stream: true,
      config: { model: "test-slow" },
    });
    await executor.startRun({ projectId: main.projectId, runId: created!.id });
    // A reader that reads one event and leaves.
    const leaving = new AbortController();
    for await (const event of bus.subscribe(created!.id, { signal: leaving.signal })) {
      expect(event.kind).toBe("chunk");
      leaving.abort();
      break;
    }
    const final = endRun(await eventsUntilEnd(created!.id, 10_000));
    expect(final.status).toBe(RunStatus.COMPLETED);
  });
});

describe("the result cache", () => {
  const cache = (policy: {
    type: string;
    ttl?: number;
    variesOn?: string[];
    refreshProbability?: number;
  }) => ({
    cachePolicy: { variesOn: [], ...policy },
  });

  it("answers a repeated execution from the cache, recorded as a hit with the run it came from", async () => {
    const first = await execute({
      data: { name: "Cached" },
      config: cache({ type: "cache", ttl: 60 }),
    });
    expect(first.run!.cached).toBe(false);
    expect(first.run!.cacheKey).not.toBe("");
    const hit = await execute({
      data: { name: "Cached" },
      config: cache({ type: "cache", ttl: 60 }),
    });
    expect(hit.run!.id).not.toBe(first.run!.id);
    expect(hit.run!.status).toBe(RunStatus.COMPLETED);
    expect(hit.run!.cached).toBe(true);
    expect(hit.run!.cachedFrom).toBe(first.run!.id);
    expect(jsonOf(hit.run!.resultJson)).toEqual(jsonOf(first.run!.resultJson));
    expect(hit.run!.tokenUse).toMatchObject({ prompt: 0, result: 0, total: 0 });
    const { run: stored } = await runs.getRun({ projectId: main.projectId, id: hit.run!.id });
    expect(stored).toMatchObject({ cached: true, cachedFrom: first.run!.id });
    // Other data, another project, or no_cache: no hit.
    const otherData = await execute({
      data: { name: "Cached 2" },
      config: cache({ type: "cache" }),
    });
    expect(otherData.run!.cached).toBe(false);
    const noCache = await execute({
      data: { name: "Cached" },
      config: cache({ type: "no_cache" }),
    });
    expect(noCache.run!.cached).toBe(false);
    expect(noCache.run!.cacheKey).toBe("");
    const elsewhere = await execute({
      project: other,
      data: { name: "Cached" },
      config: cache({ type: "cache", ttl: 60 }),
    });
    expect(elsewhere.run!.cached).toBe(false);
  });

  it("keys on the model and options, and on the varies_on values", async () => {
    const policy = cache({ type: "cache", ttl: 60 });
    await execute({ data: { name: "Keys" }, config: policy });
    const warmer = await execute({
      data: { name: "Keys" },
      config: { ...policy, temperature: 0.1 },
    });
    expect(warmer.run!.cached).toBe(false);
    // varies_on adds data to the key that the prompt does not show.
    const varies = cache({ type: "cache", ttl: 60, variesOn: ["user.id"] });
    const a = await execute({ data: { name: "Varies", user: { id: 1 } }, config: varies });
    const b = await execute({ data: { name: "Varies", user: { id: 2 } }, config: varies });
    const a2 = await execute({ data: { name: "Varies", user: { id: 1 } }, config: varies });
    expect([a.run!.cached, b.run!.cached, a2.run!.cached]).toEqual([false, false, true]);
    expect(a2.run!.cachedFrom).toBe(a.run!.id);
  });

  it("misses once an entry's ttl has passed", async () => {
    const policy = cache({ type: "cache", ttl: 1 });
    const first = await execute({ data: { name: "Expiring" }, config: policy });
    expect((await execute({ data: { name: "Expiring" }, config: policy })).run!.cached).toBe(true);
    await new Promise((r) => setTimeout(r, 1100));
    const late = await execute({ data: { name: "Expiring" }, config: policy });
    expect(late.run!.cached).toBe(false);
    expect(late.run!.id).not.toBe(first.run!.id);
  });

  it("cache_and_refresh with refresh_probability 1 always executes and replaces the entry", async () => {
    const refresh = cache({ type: "cache_and_refresh", ttl: 60, refreshProbability: 1 });
    const first = await execute({ data: { name: "Refresh" }, config: refresh });
    const again = await execute({ data: { name: "Refresh" }, config: refresh });
    expect([first.run!.cached, again.run!.cached]).toEqual([false, false]);
    const read = cache({ type: "cache_and_refresh", ttl: 60, refreshProbability: 0 });
    const hit = await execute({ data: { name: "Refresh" }, config: read });
    expect(hit.run!.cachedFrom).toBe(again.run!.id);
  });

  it("streams a hit like any run: the cached answer as a chunk, then the end", async () => {
    const policy = cache({ type: "cache", ttl: 60 });
    const first = await execute({ data: { name: "Streamed hit" }, config: policy });
    const { run: created } = await execute({
      data: { name: "Streamed hit" },
      stream: true,
      config: policy,
    });
    await executor.startRun({ projectId: main.projectId, runId: created!.id });
    const events = await eventsUntilEnd(created!.id);
    const final = endRun(events);
    expect(final).toMatchObject({ cached: true, cachedFrom: first.run!.id });
    expect(JSON.parse(chunkText(events))).toEqual(jsonOf(first.run!.resultJson));
    // A streamed miss is kept too.
    const { run: miss } = await execute({
      data: { name: "Streamed miss" },
      stream: true,
      config: policy,
    });
    await executor.startRun({ projectId: main.projectId, runId: miss!.id });
    endRun(await eventsUntilEnd(miss!.id));
    const hit = await execute({ data: { name: "Streamed miss" }, config: policy });
    expect(hit.run!.cachedFrom).toBe(miss!.id);
  });
});

describe("metadata-only interactions", () => {
  // A distinctive input: it must be in the caller's answer and in none of the run's records.
  const MARK = "Zephyrine Quillfeather";
  let mine: Project;
  let metadataId: string;

  beforeAll(async () => {
    mine = await createProject("metadata-only");
    const { interaction: fork } = await catalog.forkInteraction({
      projectId: mine.projectId,
      id: mine.greetingId,
    });
    // A caching policy too: a metadata-only interaction's results are kept nowhere, the cache
    // included.
    const { interaction } = await catalog.updateInteraction({
      projectId: mine.projectId,
      id: fork!.id,
      interaction: { store: RunStore.METADATA, cachePolicy: { type: "cache", ttl: 60 } },
    });
    metadataId = interaction!.id;
  });

  const run = (init: Omit<ExecuteInput, "project">) =>
    execute({
      project: mine,
      interaction: { case: "interactionId", value: metadataId },
      data: { name: MARK },
      ...init,
    });

  /** The run's last record in the log, as text (its bytes: every string in it is in there). */
  const recordText = async (id: string) => new TextDecoder().decode((await records.last(id))!.data);

  /** The run's row once the writer has stored its end, its payload columns as text. */
  async function storedRow(id: string) {
    let row: Record<string, unknown> | undefined;
    for (
      let i = 0;
      i < 100 && !(row && row.status !== "created" && row.status !== "processing");
      i++
    ) {
      row = await db.selectFrom("runs.runs").selectAll().where("id", "=", id).executeTakeFirst();
      if (!row) await new Promise((r) => setTimeout(r, 20));
    }
    return row!;
  }

  it("answers the caller with the payloads and records none of them; never caches", async () => {
    const { run: answered } = await run({});
    expect(answered).toMatchObject({ status: RunStatus.COMPLETED, store: RunStore.METADATA });
    expect(jsonOf(answered!.parametersJson)).toEqual({ name: MARK });
    expect(new TextDecoder().decode(answered!.promptJson)).toContain(MARK);
    const result = jsonOf(answered!.resultJson) as { greeting: string };
    expect(typeof result.greeting).toBe("string");

    const record = await recordText(answered!.id);
    expect(record).not.toContain(MARK);
    expect(record).not.toContain(result.greeting);
    const row = await storedRow(answered!.id);
    expect(row).toMatchObject({
      status: "completed",
      parameters: {},
      result: null,
      prompt: null,
      config: expect.objectContaining({ store: "metadata" }),
    });
    expect(row.total_tokens).toBe(answered!.tokenUse!.total);
    const { run: stored } = await runs.getRun({ projectId: mine.projectId, id: answered!.id });
    expect(stored).toMatchObject({ store: RunStore.METADATA, tokenUse: answered!.tokenUse });
    expect(stored!.resultJson).toHaveLength(0);

    // The interaction's cache policy is not applied: the same execution is executed again.
    const { run: again } = await run({});
    expect(again!.cached).toBe(false);
    expect(again!.cachePolicyJson).toHaveLength(0);
  });

  it("keeps a repair's rejected answer and a validation error's data out of the records", async () => {
    const { run: repaired } = await run({ config: { model: "test-invalid-once" } });
    expect(repaired!.attempts).toHaveLength(2);
    expect(jsonOf(repaired!.attempts[1]!.promptAddedJson)).toHaveLength(2);
    const stored = decodeStoredRun((await records.last(repaired!.id))!.data);
    expect(stored.attempts.map((a) => [a.promptAddedJson.length, a.error?.code])).toEqual([
      [0, "validation_error"],
      [0, undefined],
    ]);
    expect(stored.attempts[0]!.error!.dataJson).toHaveLength(0);

    const { run: failed } = await run({ config: { model: "test-invalid-once", maxRepairs: 0 } });
    expect(failed!.error!.code).toBe("validation_error");
    expect(jsonOf(failed!.error!.dataJson)).toMatchObject({ content: "{}" });
    const recorded = decodeStoredRun((await records.last(failed!.id))!.data);
    expect(recorded.error).toMatchObject({
      code: "validation_error",
      message: failed!.error!.message,
    });
    expect(recorded.error!.dataJson).toHaveLength(0);
  });

  it("streams the caller everything when another executor starts it, from its kept input", async () => {
    const { run: created } = await run({ stream: true });
    expect(jsonOf(created!.parametersJson)).toEqual({ name: MARK });
    expect(await recordText(created!.id)).not.toContain(MARK);
    expect(await deps.inputs.get(created!.id)).toBeDefined();

    // Not the executor that created it: the run is read from the log, its input from RunInputs.
    const second = createClient(ExecutorService, createRouterTransport(executorRoutes(deps)));
    const started = await second.startRun({ projectId: mine.projectId, runId: created!.id });
    expect(started.started).toBe(true);
    const events = await eventsUntilEnd(created!.id);
    const final = endRun(events);
    expect(final.status).toBe(RunStatus.COMPLETED);
    expect(jsonOf(final.parametersJson)).toEqual({ name: MARK });
    expect(new TextDecoder().decode(final.promptJson)).toContain(MARK);
    expect(jsonOf(final.resultJson)).toEqual(JSON.parse(chunkText(events)));

    const record = await recordText(created!.id);
    expect(record).not.toContain(MARK);
    expect(record).not.toContain((jsonOf(final.resultJson) as { greeting: string }).greeting);
    expect(decodeStoredRun((await records.last(created!.id))!.data).status).toBe(
      RunStatus.COMPLETED,
    );
    // Started, its input is dropped.
    await expect.poll(() => deps.inputs.get(created!.id)).toBeUndefined();
  });

  it("drops the input of a run its creator starts, too", async () => {
    const { run: created } = await run({ stream: true });
    await executor.startRun({ projectId: mine.projectId, runId: created!.id });
    expect(jsonOf(endRun(await eventsUntilEnd(created!.id)).parametersJson)).toEqual({
      name: MARK,
    });
    await expect.poll(() => deps.inputs.get(created!.id)).toBeUndefined();
  });

  it("fails a run whose input is gone with input_unavailable, and caps its ttl at the input's", async () => {
    const { run: created } = await run({ stream: true });
    await deps.inputs.drop(created!.id);
    const second = createClient(ExecutorService, createRouterTransport(executorRoutes(deps)));
    await second.startRun({ projectId: mine.projectId, runId: created!.id });
    const final = endRun(await eventsUntilEnd(created!.id));
    expect(final).toMatchObject({ status: RunStatus.FAILED, error: { code: "input_unavailable" } });

    const shortLived = createClient(
      ExecutorService,
      createRouterTransport(executorRoutes({ ...deps, inputs: new MemoryRunInputs(5) })),
    );
    const { run: capped } = await shortLived.execute({
      caller: { accountId: mine.accountId, projectId: mine.projectId },
      interaction: { case: "interactionId", value: metadataId },
      dataJson: jsonBytes({ name: MARK }),
      stream: true,
      ttl: 600,
    });
    expect(capped!.ttl).toBe(5);
  });
});
