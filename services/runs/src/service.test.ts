import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { PGlite } from "@electric-sql/pglite";
import { sql, type Kysely } from "kysely";
import { createLogger, newId, toTimestamp, jsonOf, jsonBytes } from "@pies/common";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { expectCode } from "@pies/testkit";
import {
  AnchorDirection,
  FacetType,
  RunsService,
  RunStatus,
  type Run,
  type RunFilters,
  type RunFiltersSchema,
  type RunSchema,
} from "@pies/proto/runs";
import { MemoryRunRecords } from "@pies/common/bus";
import { migrations } from "./migrations/index.js";
import { startRunsStore } from "./record-writer.js";
import { runsRoutes } from "./service.js";
import type { RunsDatabase } from "./tables.js";

// The runs store in memory: its handlers behind a router transport, over PGlite. One database per
// file; each test writes to its own project, so tests never see each other's runs.
let pglite: PGlite;
let db: Kysely<RunsDatabase>;
let runs: Client<typeof RunsService>;
let store: ReturnType<typeof startRunsStore>;

beforeAll(async () => {
  pglite = await PGlite.create();
  db = createDatabase<RunsDatabase>({ pglite });
  await migrateToLatest(db, "runs", migrations);
  store = startRunsStore(db, new MemoryRunRecords(), createLogger("runs-test", "silent"));
  runs = createClient(RunsService, createRouterTransport(runsRoutes({ db, log: store.log })));
});

afterAll(async () => {
  await store?.stop();
  await db?.destroy();
});

/** A run as plain fields (not a message). */
type RunInit = Exclude<MessageInitShape<typeof RunSchema>, Run>;
type FiltersInit = Exclude<MessageInitShape<typeof RunFiltersSchema>, RunFilters>;

const newProjectId = () => `project-${newId()}`;

/** A run with every field set. */
function fullRun(projectId: string, overrides: Partial<RunInit> = {}): RunInit {
  return {
    id: newId(),
    projectId,
    accountId: "account-1",
    interactionId: "interaction-1",
    interactionName: "Greeting",
    environmentId: "env-1",
    environmentName: "local",
    provider: "openai_compatible",
    modelId: "gpt-test",
    status: RunStatus.COMPLETED,
    stream: true,
    parametersJson: jsonBytes({ name: "Ada", nested: { list: [1, "two", null, true], n: 1.5 } }),
    resultJson: jsonBytes({ greeting: "Hello Ada", words: 2, extra: [null, false, { deep: "x" }] }),
    promptJson: jsonBytes([
      { role: "system", content: "be kind" },
      { role: "user", content: "Write a greeting for Ada" },
    ]),
    tags: ["alpha", "beta"],
    config: {
      environmentId: "env-config",
      model: "gpt-config",
      formatter: "json",
      temperature: 0.25,
      maxTokens: 128,
    },
    source: {
      type: "api",
      label: "cli",
      principalType: "apikey",
      principalId: "key-1",
      clientIp: "10.0.0.7",
    },
    tokenUse: { prompt: 11, result: 7, total: 18 },
    executionTime: 1234n,
    error: {
      code: "validation_error",
      message: "bad output",
      dataJson: jsonBytes({ path: "/words", n: 3 }),
    },
    ttl: 300,
    cachePolicyJson: jsonBytes({ type: "cache", ttl: 60, varies_on: ["name"] }),
    resultSchemaJson: jsonBytes({ type: "object", required: ["greeting"] }),
    cached: true,
    ...overrides,
  };
}

/** A minimal run: only what CreateRun requires. */
function minimalRun(projectId: string, overrides: Partial<RunInit> = {}): RunInit {
  return {
    id: newId(),
    projectId,
    interactionId: "interaction-1",
    status: RunStatus.CREATED,
    ...overrides,
  };
}

async function createRun(init: RunInit) {
  const { run } = await runs.createRun({ run: init });
  return run!;
}

/** Sets a run's updated_at, to control the list order. */
async function setUpdatedAt(id: string, date: Date) {
  await db.updateTable("runs.runs").set({ updated_at: date }).where("id", "=", id).execute();
}

const ids = (list: { id: string }[]) => list.map((r) => r.id);

describe("CreateRun and GetRun", () => {
  it("round-trips every field", async () => {
    const projectId = newProjectId();
    const parent = await createRun(minimalRun(projectId));
    const init = fullRun(projectId, { parentId: parent.id });
    const created = await createRun(init);
    const { run } = await runs.getRun({ projectId, id: init.id! });
    // The payloads compared as JSON: jsonb keeps an object's keys in an order of its own.
    expect(payloadsAsJson(run!)).toEqual(payloadsAsJson(created));
    expect(run).toMatchObject({
      id: init.id,
      projectId,
      accountId: "account-1",
      interactionId: "interaction-1",
      interactionName: "Greeting",
      environmentId: "env-1",
      environmentName: "local",
      provider: "openai_compatible",
      modelId: "gpt-test",
      status: RunStatus.COMPLETED,
      stream: true,
      tags: ["alpha", "beta"],
      config: {
        environmentId: "env-config",
        model: "gpt-config",
        formatter: "json",
        temperature: 0.25,
        maxTokens: 128,
      },
      source: {
        type: "api",
        label: "cli",
        principalType: "apikey",
        principalId: "key-1",
        clientIp: "10.0.0.7",
      },
      tokenUse: { prompt: 11, result: 7, total: 18 },
      executionTime: 1234n,
      ttl: 300,
      parentId: parent.id,
      cached: true,
    });
    expect(jsonOf(run!.parametersJson)).toEqual({
      name: "Ada",
      nested: { list: [1, "two", null, true], n: 1.5 },
    });
    expect(jsonOf(run!.cachePolicyJson)).toEqual({ type: "cache", ttl: 60, varies_on: ["name"] });
    expect(jsonOf(run!.resultSchemaJson)).toEqual({ type: "object", required: ["greeting"] });
    expect(jsonOf(run!.resultJson)).toEqual({
      greeting: "Hello Ada",
      words: 2,
      extra: [null, false, { deep: "x" }],
    });
    expect(jsonOf(run!.promptJson)).toEqual([
      { role: "system", content: "be kind" },
      { role: "user", content: "Write a greeting for Ada" },
    ]);
    expect(run!.error!.code).toBe("validation_error");
    expect(run!.error!.message).toBe("bad output");
    expect(jsonOf(run!.error!.dataJson)).toEqual({ path: "/words", n: 3 });
    expect(run!.createdAt).toBeDefined();
    expect(run!.updatedAt).toBeDefined();
  });

  it("needs a parent to be a run of the same project: NOT_FOUND naming it otherwise", async () => {
    const projectId = newProjectId();
    const otherProject = await createRun(minimalRun(newProjectId()));
    for (const parentId of ["000000000000000000000000", otherProject.id]) {
      const child = minimalRun(projectId, { parentId });
      await expectCode(
        createRun(child),
        Code.NotFound,
        new RegExp(`^parent run ${parentId} not found$`),
      );
      await expectCode(runs.getRun({ projectId, id: child.id! }), Code.NotFound);
    }
    const parent = await createRun(minimalRun(projectId));
    const child = await createRun(minimalRun(projectId, { parentId: parent.id }));
    expect(child.parentId).toBe(parent.id);
  });

  it("round-trips scalar results and leaves unset fields unset", async () => {
    const projectId = newProjectId();
    for (const result of ["plain text", 42, true]) {
      const created = await createRun(minimalRun(projectId, { resultJson: jsonBytes(result) }));
      const { run } = await runs.getRun({ projectId, id: created.id });
      expect(jsonOf(run!.resultJson)).toEqual(result);
    }
    const init = minimalRun(projectId, { environmentId: "env-9", modelId: "m-9" });
    await createRun(init);
    const { run } = await runs.getRun({ projectId, id: init.id! });
    expect(run).toMatchObject({
      status: RunStatus.CREATED,
      stream: false,
      tags: [],
      parentId: "",
      ttl: 0,
      cached: false,
      // Without a config, the run's own environment and model are its configuration.
      config: { environmentId: "env-9", model: "m-9", formatter: "" },
    });
    expect(jsonOf(run!.parametersJson)).toEqual({});
    expect(jsonOf(run!.resultJson)).toBeUndefined();
    expect(jsonOf(run!.promptJson)).toBeUndefined();
    expect(run!.tokenUse).toBeUndefined();
    expect(run!.executionTime).toBeUndefined();
    expect(run!.error).toBeUndefined();
    expect(jsonOf(run!.cachePolicyJson)).toBeUndefined();
    expect(jsonOf(run!.resultSchemaJson)).toBeUndefined();
    expect(run!.config!.temperature).toBeUndefined();
    expect(run!.config!.maxTokens).toBeUndefined();
  });

  it("validates the run", async () => {
    const projectId = newProjectId();
    await expectCode(runs.createRun({}), Code.InvalidArgument);
    await expectCode(
      runs.createRun({ run: minimalRun(projectId, { id: "" }) }),
      Code.InvalidArgument,
    );
    await expectCode(runs.createRun({ run: minimalRun("") }), Code.InvalidArgument);
    await expectCode(
      runs.createRun({ run: minimalRun(projectId, { interactionId: "" }) }),
      Code.InvalidArgument,
    );
    await expectCode(
      runs.createRun({ run: minimalRun(projectId, { status: RunStatus.UNSPECIFIED }) }),
      Code.InvalidArgument,
    );
  });

  it("answers NOT_FOUND for an unknown run and for another project's run", async () => {
    const projectId = newProjectId();
    const run = await createRun(minimalRun(projectId));
    await expectCode(runs.getRun({ projectId, id: "missing" }), Code.NotFound, /missing/);
    await expectCode(runs.getRun({ projectId: newProjectId(), id: run.id }), Code.NotFound);
    await expectCode(runs.getRun({ projectId: "", id: run.id }), Code.InvalidArgument);
  });
});

describe("UpdateRun", () => {
  it("applies a conditional update once: the second identical one is FAILED_PRECONDITION", async () => {
    const projectId = newProjectId();
    const run = await createRun(minimalRun(projectId));
    const request = {
      projectId,
      id: run.id,
      expectedStatus: RunStatus.CREATED,
      update: { status: RunStatus.PROCESSING },
    };
    const { run: updated } = await runs.updateRun(request);
    expect(updated!.status).toBe(RunStatus.PROCESSING);
    await expectCode(runs.updateRun(request), Code.FailedPrecondition, /processing/);
    const { run: current } = await runs.getRun({ projectId, id: run.id });
    expect(current!.status).toBe(RunStatus.PROCESSING);
  });

  it("answers NOT_FOUND for an unknown id and for another project's run", async () => {
    const projectId = newProjectId();
    const run = await createRun(minimalRun(projectId));
    const update = { status: RunStatus.PROCESSING };
    await expectCode(
      runs.updateRun({ projectId, id: "missing", expectedStatus: RunStatus.CREATED, update }),
      Code.NotFound,
    );
    await expectCode(runs.updateRun({ projectId, id: "missing", update }), Code.NotFound);
    await expectCode(
      runs.updateRun({
        projectId: newProjectId(),
        id: run.id,
        expectedStatus: RunStatus.CREATED,
        update,
      }),
      Code.NotFound,
    );
    await expectCode(
      runs.updateRun({ projectId: newProjectId(), id: run.id, update }),
      Code.NotFound,
    );
    await expectCode(runs.updateRun({ projectId, id: run.id }), Code.InvalidArgument);
    const { run: unchanged } = await runs.getRun({ projectId, id: run.id });
    expect(unchanged!.status).toBe(RunStatus.CREATED);
  });

  it("sets only the fields it carries and advances updated_at", async () => {
    const projectId = newProjectId();
    const run = await createRun(
      minimalRun(projectId, {
        promptJson: jsonBytes([{ role: "user", content: "hi" }]),
        tags: ["t"],
      }),
    );
    await setUpdatedAt(run.id, new Date(Date.now() - 60_000));
    const { run: updated } = await runs.updateRun({
      projectId,
      id: run.id,
      update: {
        status: RunStatus.FAILED,
        resultJson: jsonBytes({ partial: true }),
        tokenUse: { prompt: 3, result: 4, total: 7 },
        executionTime: 987n,
        error: {
          code: "timeout",
          message: "took too long",
          dataJson: jsonBytes({ after_ms: 987 }),
        },
      },
    });
    expect(updated).toMatchObject({
      status: RunStatus.FAILED,
      tokenUse: { prompt: 3, result: 4, total: 7 },
      executionTime: 987n,
      tags: ["t"],
    });
    expect(jsonOf(updated!.resultJson)).toEqual({ partial: true });
    expect(jsonOf(updated!.promptJson)).toEqual([{ role: "user", content: "hi" }]);
    expect(updated!.error).toMatchObject({ code: "timeout", message: "took too long" });
    expect(jsonOf(updated!.error!.dataJson)).toEqual({ after_ms: 987 });
    expect(Number(updated!.updatedAt!.seconds)).toBeGreaterThan(Date.now() / 1000 - 30);

    // An update without a status keeps it.
    const { run: again } = await runs.updateRun({
      projectId,
      id: run.id,
      update: { promptJson: jsonBytes("rendered") },
    });
    expect(again!.status).toBe(RunStatus.FAILED);
    expect(jsonOf(again!.promptJson)).toBe("rendered");
    expect(jsonOf(again!.resultJson)).toEqual({ partial: true });
    const { run: read } = await runs.getRun({ projectId, id: run.id });
    expect(read).toEqual(again);
  });
});

describe("ListRuns", () => {
  it("orders by updated_at descending, then id descending, and pages", async () => {
    const projectId = newProjectId();
    const base = Date.parse("2026-01-01T00:00:00Z");
    const created: string[] = [];
    for (let i = 0; i < 6; i++) created.push((await createRun(minimalRun(projectId))).id);
    // Runs 0 and 1 share an updated_at, as do 3 and 4: their order is by id, descending.
    const minutes = [5, 5, 1, 3, 3, 2];
    for (let i = 0; i < created.length; i++) {
      await setUpdatedAt(created[i]!, new Date(base + minutes[i]! * 60_000));
    }
    const byId = (a: string, b: string) => (a < b ? 1 : -1);
    const expected = [
      ...[created[0]!, created[1]!].sort(byId),
      ...[created[3]!, created[4]!].sort(byId),
      created[5]!,
      created[2]!,
    ];
    const all = await runs.listRuns({ projectId });
    expect(ids(all.runs)).toEqual(expected);
    expect(ids((await runs.listRuns({ projectId, limit: 2 })).runs)).toEqual(expected.slice(0, 2));
    expect(ids((await runs.listRuns({ projectId, limit: 3, offset: 2 })).runs)).toEqual(
      expected.slice(2, 5),
    );
    expect(ids((await runs.listRuns({ projectId, offset: 5 })).runs)).toEqual(expected.slice(5));
    expect((await runs.listRuns({ projectId, offset: 6 })).runs).toEqual([]);
    expect(ids((await runs.listRuns({ projectId, offset: -3 })).runs)).toEqual(expected);

    // An update moves a run to the top.
    await runs.updateRun({ projectId, id: created[2]!, update: { status: RunStatus.PROCESSING } });
    expect(ids((await runs.listRuns({ projectId, limit: 1 })).runs)).toEqual([created[2]]);
  });

  it("lists references: everything but the prompt and the output schema", async () => {
    const projectId = newProjectId();
    const init = fullRun(projectId);
    const full = await createRun(init);
    const { runs: listed } = await runs.listRuns({ projectId });
    expect(listed).toHaveLength(1);
    expect(jsonOf(listed[0]!.promptJson)).toBeUndefined();
    expect(jsonOf(listed[0]!.resultSchemaJson)).toBeUndefined();
    expect(
      payloadsAsJson({
        ...listed[0]!,
        promptJson: full.promptJson,
        resultSchemaJson: full.resultSchemaJson,
      }),
    ).toEqual(payloadsAsJson(full));
  });

  it("defaults to 100 runs and returns at most 1000", async () => {
    const projectId = newProjectId();
    await sql`
      insert into runs.runs (id, project_id, account_id, interaction_id, status, updated_at)
      select lpad(to_hex(g), 24, '0'), ${projectId}, 'a', 'i', 'completed',
             timestamptz '2026-01-01' + g * interval '1 second'
      from generate_series(1, 1005) g
    `.execute(db);
    const byDefault = await runs.listRuns({ projectId });
    expect(byDefault.runs).toHaveLength(100);
    expect(byDefault.runs[0]!.id).toBe((1005).toString(16).padStart(24, "0"));
    expect((await runs.listRuns({ projectId, limit: -1 })).runs).toHaveLength(100);
    expect((await runs.listRuns({ projectId, limit: 1000 })).runs).toHaveLength(1000);
    expect((await runs.listRuns({ projectId, limit: 5000 })).runs).toHaveLength(1000);
    const tail = await runs.listRuns({ projectId, limit: 1000, offset: 1000 });
    expect(ids(tail.runs)).toEqual([5, 4, 3, 2, 1].map((g) => g.toString(16).padStart(24, "0")));
  });

  it("never lists another project's runs and needs a project", async () => {
    const projectId = newProjectId();
    const mine = await createRun(minimalRun(projectId));
    await createRun(minimalRun(newProjectId()));
    expect(ids((await runs.listRuns({ projectId })).runs)).toEqual([mine.id]);
    expect((await runs.listRuns({ projectId: newProjectId() })).runs).toEqual([]);
    await expectCode(runs.listRuns({ projectId: "" }), Code.InvalidArgument);
  });

  describe("filters", () => {
    let projectId: string;
    // Named runs, oldest first (each run's updated_at is one minute after the previous one's).
    const r: Record<string, string> = {};
    const base = Date.parse("2026-03-01T12:00:00Z");
    const at = (minute: number) => toTimestamp(new Date(base + minute * 60_000));

    beforeAll(async () => {
      projectId = newProjectId();
      const specs: [string, Partial<RunInit>][] = [
        [
          "a",
          {
            interactionId: "i-1",
            modelId: "m-1",
            environmentId: "e-1",
            status: RunStatus.COMPLETED,
            tags: ["x"],
          },
        ],
        [
          "b",
          {
            interactionId: "i-2",
            modelId: "m-1",
            environmentId: "e-2",
            status: RunStatus.FAILED,
            tags: ["y"],
          },
        ],
        [
          "c",
          {
            interactionId: "i-1",
            modelId: "m-2",
            environmentId: "e-1",
            status: RunStatus.CREATED,
            tags: ["x", "y"],
          },
        ],
        [
          "d",
          {
            interactionId: "i-3",
            modelId: "m-3",
            environmentId: "e-3",
            status: RunStatus.COMPLETED,
            tags: [],
          },
        ],
        [
          "child1",
          {
            interactionId: "i-1",
            modelId: "m-1",
            environmentId: "e-1",
            status: RunStatus.COMPLETED,
            parentId: "",
          },
        ],
        [
          "child2",
          {
            interactionId: "i-2",
            modelId: "m-1",
            environmentId: "e-1",
            status: RunStatus.PROCESSING,
            parentId: "",
          },
        ],
      ];
      let minute = 0;
      for (const [name, overrides] of specs) {
        const parentId = name.startsWith("child") ? r.a! : "";
        // Made at the time it was last updated, as a run's id is (the store is partitioned by it).
        const time = base + minute++ * 60_000;
        const run = await createRun(
          minimalRun(projectId, { ...overrides, parentId, id: newId(time) }),
        );
        r[name] = run.id;
        await setUpdatedAt(run.id, new Date(time));
      }
      // A run of another project that matches every filter.
      const foreign = await createRun(
        minimalRun(newProjectId(), {
          interactionId: "i-1",
          modelId: "m-1",
          environmentId: "e-1",
          tags: ["x"],
        }),
      );
      await setUpdatedAt(foreign.id, new Date(base));
    });

    const list = async (filters: FiltersInit) =>
      ids((await runs.listRuns({ projectId, filters })).runs);
    const names = (...n: string[]) => n.map((name) => r[name]!);

    it("without filters lists every run, newest first", async () => {
      expect(await list({})).toEqual(names("child2", "child1", "d", "c", "b", "a"));
    });

    it("by interaction_ids", async () => {
      expect(await list({ interactionIds: ["i-1"] })).toEqual(names("child1", "c", "a"));
      expect(await list({ interactionIds: ["i-2", "i-3"] })).toEqual(names("child2", "d", "b"));
      expect(await list({ interactionIds: ["i-9"] })).toEqual([]);
    });

    it("by models", async () => {
      expect(await list({ models: ["m-1"] })).toEqual(names("child2", "child1", "b", "a"));
      expect(await list({ models: ["m-2", "m-3"] })).toEqual(names("d", "c"));
    });

    it("by environment_ids", async () => {
      expect(await list({ environmentIds: ["e-1"] })).toEqual(names("child2", "child1", "c", "a"));
      expect(await list({ environmentIds: ["e-2", "e-3"] })).toEqual(names("d", "b"));
    });

    it("by status", async () => {
      expect(await list({ status: RunStatus.COMPLETED })).toEqual(names("child1", "d", "a"));
      expect(await list({ status: RunStatus.FAILED })).toEqual(names("b"));
      expect(await list({ status: RunStatus.CREATED })).toEqual(names("c"));
      expect(await list({ status: RunStatus.PROCESSING })).toEqual(names("child2"));
    });

    it("by tags: runs with any of the tags", async () => {
      expect(await list({ tags: ["x"] })).toEqual(names("c", "a"));
      expect(await list({ tags: ["y", "z"] })).toEqual(names("c", "b"));
    });

    it("top level only, and by parent", async () => {
      expect(await list({ topLevelOnly: true })).toEqual(names("d", "c", "b", "a"));
      expect(await list({ parentId: r.a! })).toEqual(names("child2", "child1"));
      expect(await list({ parentId: r.b! })).toEqual([]);
    });

    it("by anchor date, after (the default) or before, exclusive", async () => {
      expect(await list({ anchorDate: at(2) })).toEqual(names("child2", "child1", "d"));
      expect(await list({ anchorDate: at(2), anchorDirection: AnchorDirection.AFTER })).toEqual(
        names("child2", "child1", "d"),
      );
      expect(await list({ anchorDate: at(2), anchorDirection: AnchorDirection.BEFORE })).toEqual(
        names("b", "a"),
      );
      expect(await list({ anchorDate: at(2.5), anchorDirection: AnchorDirection.BEFORE })).toEqual(
        names("c", "b", "a"),
      );
    });

    it("by updated_at bounds, inclusive or exclusive", async () => {
      expect(await list({ updatedAfter: at(3), updatedAfterInclusive: true })).toEqual(
        names("child2", "child1", "d"),
      );
      expect(await list({ updatedAfter: at(3) })).toEqual(names("child2", "child1"));
      expect(await list({ updatedBefore: at(1), updatedBeforeInclusive: true })).toEqual(
        names("b", "a"),
      );
      expect(await list({ updatedBefore: at(1) })).toEqual(names("a"));
      expect(await list({ updatedAfter: at(1), updatedBefore: at(4) })).toEqual(names("d", "c"));
    });

    it("combines filters", async () => {
      expect(await list({ interactionIds: ["i-1"], status: RunStatus.COMPLETED })).toEqual(
        names("child1", "a"),
      );
      expect(await list({ models: ["m-1"], environmentIds: ["e-1"], topLevelOnly: true })).toEqual(
        names("a"),
      );
      expect(await list({ interactionIds: ["i-1"], anchorDate: at(0) })).toEqual(
        names("child1", "c"),
      );
    });
  });
});

describe("SearchRuns on PGlite (the embedded mode)", () => {
  it("answers a Lucene query, filters and facets as on PostgreSQL", async () => {
    const projectId = newProjectId();
    const made = [];
    for (const [i, name] of ["Ada", "Grace", "Ada Lovelace"].entries()) {
      made.push(
        await createRun(
          fullRun(projectId, {
            parametersJson: jsonBytes({ name, n: i }),
            executionTime: BigInt(100 * (i + 1)),
            tags: i === 1 ? ["b"] : ["a"],
          }),
        ),
      );
    }
    for (const [i, run] of made.entries())
      await setUpdatedAt(run.id, new Date(Date.UTC(2026, 0, 1 + i)));
    const res = await runs.searchRuns({
      projectId,
      query: "name:Ada* AND NOT n:[2 TO *]",
      filters: { tags: ["a"] },
      facets: {
        tags: { type: FacetType.STRING, path: "tags" },
        time: { type: FacetType.NUMBER, path: "execution_time", numberBoundaries: [100, 200] },
        day: {
          type: FacetType.DATE,
          path: "updated_at",
          dateBoundaries: [
            toTimestamp(new Date(Date.UTC(2026, 0, 1)))!,
            toTimestamp(new Date(Date.UTC(2026, 0, 2)))!,
          ],
          defaultBucket: "later",
        },
      },
    });
    expect(ids(res.runs)).toEqual([made[0]!.id]);
    expect(Number(res.meta!.total)).toBe(1);
    expect(res.meta!.facets.time!.buckets.map((b) => [b.id, Number(b.count)])).toEqual([
      ["100", 1],
    ]);
    expect(res.meta!.facets.day!.buckets.map((b) => [b.id, Number(b.count)])).toEqual([
      ["2026-01-01T00:00:00.000Z", 1],
      ["later", 0],
    ]);
    await expectCode(
      runs.searchRuns({ projectId, query: "name:(Ada" }),
      Code.InvalidArgument,
      /query: syntax error: unexpected end of query at position 9/,
    );
  });
});

describe("the facet rollup on PGlite", () => {
  it("stays equal to a recount through creates, updates and moves, and answers as the count over the runs", async () => {
    const projectId = newProjectId();
    const counted = createClient(
      RunsService,
      createRouterTransport(runsRoutes({ db, log: store.log, facetRollups: false })),
    );
    const made = [];
    // Each made at the hour it is moved to below, as ids are (the store is partitioned by them).
    const hourOf = (i: number) => Date.UTC(2026, 0, 1, i, 30 * (i % 2));
    for (let i = 0; i < 6; i++) {
      made.push(
        await createRun(
          minimalRun(projectId, {
            id: newId(hourOf(i)),
            modelId: i % 2 ? "m-1" : "m-2",
            status: RunStatus.PROCESSING,
          }),
        ),
      );
    }
    for (const run of made.slice(0, 4)) {
      await runs.updateRun({ projectId, id: run.id, update: { status: RunStatus.COMPLETED } });
    }
    // The record writer is asynchronous: wait until the store holds what the log does.
    for (let i = 0; i < 200; i++) {
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from runs.runs
        where project_id = ${projectId} and status = 'completed'`.execute(db);
      if (rows[0]!.n === 4) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    for (const [i, run] of made.entries()) await setUpdatedAt(run.id, new Date(hourOf(i)));
    const stored = await sql`select bucket, status, model_id, top_level, n::int as n
      from runs.run_rollups where project_id = ${projectId} and hours = 1 and n <> 0
      order by 1, 2, 3, 4`.execute(db);
    const recount =
      await sql`select date_trunc('hour', updated_at at time zone 'UTC') at time zone 'UTC' as bucket,
        status, model_id, parent_id is null as top_level, count(*)::int as n
      from runs.runs where project_id = ${projectId} group by 1, 2, 3, 4 order by 1, 2, 3, 4`.execute(
        db,
      );
    expect(stored.rows).toEqual(recount.rows);
    expect(stored.rows.length).toBe(6);
    const req = {
      projectId,
      onlyMeta: true,
      filters: { updatedAfter: toTimestamp(new Date(Date.UTC(2026, 0, 1, 0, 10))) },
      facets: {
        status: { type: FacetType.STRING, path: "status" },
        model: { type: FacetType.STRING, path: "modelId" },
        hours: {
          type: FacetType.DATE,
          path: "updated_at",
          dateBoundaries: [
            toTimestamp(new Date(Date.UTC(2026, 0, 1, 1)))!,
            toTimestamp(new Date(Date.UTC(2026, 0, 1, 3, 15)))!,
          ],
          defaultBucket: "other",
        },
      },
    };
    const [a, b] = [await runs.searchRuns(req), await counted.searchRuns(req)];
    expect(a.meta).toEqual(b.meta);
    expect(Number(a.meta!.total)).toBe(5);
    expect(a.meta!.facets.hours!.buckets.map((x) => [x.id, Number(x.count)])).toEqual([
      ["2026-01-01T01:00:00.000Z", 2],
      ["other", 3],
    ]);
  });
});

describe("values at the edges", () => {
  it("answers a JSON payload that is not JSON with INVALID_ARGUMENT", async () => {
    const run = fullRun(newProjectId(), { resultJson: Buffer.from("{not json") });
    await expectCode(runs.createRun({ run }), Code.InvalidArgument, /not JSON/);
  });

  it("records a NUL in a model's answer as U+FFFD instead of failing the write", async () => {
    const projectId = newProjectId();
    const run = fullRun(projectId, {
      resultJson: jsonBytes({ text: "a\u0000b", "k\u0000": ["\\u0000"] }),
    });
    await runs.createRun({ run });
    const { run: back } = await runs.getRun({ projectId, id: run.id! });
    expect(jsonOf(back!.resultJson)).toEqual({ text: "a\ufffdb", "k\ufffd": ["\\u0000"] });
  });

  it("keeps an error without data and an execution time beyond 2^31 ms", async () => {
    const projectId = newProjectId();
    const run = fullRun(projectId, {
      status: RunStatus.FAILED,
      error: { code: "timeout", message: "late" },
      executionTime: 3_000_000_000n,
    });
    await runs.createRun({ run });
    const { run: back } = await runs.getRun({ projectId, id: run.id! });
    expect(back!.error).toMatchObject({ code: "timeout", message: "late" });
    expect(jsonOf(back!.error!.dataJson)).toBeUndefined();
    expect(back!.executionTime).toBe(3_000_000_000n);
  });
});

/** A run with its JSON payloads as the values they hold (their bytes' key order set aside). */
function payloadsAsJson(run: Run) {
  return {
    ...run,
    parametersJson: jsonOf(run.parametersJson),
    resultJson: jsonOf(run.resultJson),
    promptJson: jsonOf(run.promptJson),
    cachePolicyJson: jsonOf(run.cachePolicyJson),
    resultSchemaJson: jsonOf(run.resultSchemaJson),
    error: run.error && { ...run.error, dataJson: jsonOf(run.error.dataJson) },
  };
}
