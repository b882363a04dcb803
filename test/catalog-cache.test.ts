import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectNats } from "@pies/common/bus";
import {
  createTestDatabase,
  createTestStream,
  expectJson,
  freePort,
  gatewayApi,
  startProcess,
  startStack,
  type ApiClient,
  type ManagedProcess,
  type Stack,
  type TestDatabase,
  type TestStream,
} from "@pies/testkit";

// What the executors and gateways keep from the catalog, and how the catalog's change events drop
// it: one catalog and runs service, and TWO executors and TWO gateways (gateway A → executor A,
// gateway B → executor B), all separate processes on the real PostgreSQL and NATS. A write through
// either gateway must be seen by both executors and both gateways.
//
// A change made directly in the database publishes no event: that is how these tests show that an
// answer comes from a cache (it stays stale) and what a lost event costs (the bounded age).

/** PIES_CATALOG_CACHE_SECONDS: the bounded age of what an executor keeps. */
const CATALOG_AGE_S = 5;
/** Events must drop a cached answer within this (DESIGN.md §4: a revoked key within 1 s). */
const EVENT_DEADLINE_MS = 1000;

let db: TestDatabase;
let stream: TestStream;
let stack: Stack;
let sql: pg.Client;
/** The test's own subscriber to the catalog's events, and when it saw the last one. */
let watcher: NatsConnection;
let lastEventAt = 0;
/** When the last catalog write was sent. */
let lastWriteAt = 0;

/** A gateway client that notes when it sends a catalog write (anything but reads and executions). */
function tracked(url: string, key: string): ApiClient {
  const api = gatewayApi(url, key);
  return (path, request = {}) => {
    const write = (request.method ?? (request.body === undefined ? "GET" : "POST")) !== "GET";
    if (write && !path.endsWith("/execute")) lastWriteAt = performance.now();
    return api(path, request);
  };
}
const extra: ManagedProcess[] = [];
/** Gateway A and gateway B, with the bootstrap's admin key. */
let gateways: { name: string; url: string; api: ApiClient }[];
let environmentId: string;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function untilReady(url: string, process: ManagedProcess) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (process.child.exitCode !== null) throw new Error(`exited:\n${process.output()}`);
    if (
      await fetch(url).then(
        (r) => r.ok,
        () => false,
      )
    )
      return;
    await sleep(100);
  }
  throw new Error(`${url} not ready:\n${process.output()}`);
}

beforeAll(async () => {
  db = await createTestDatabase("cache");
  stream = createTestStream();
  const env = {
    PIES_CATALOG_CACHE_SECONDS: String(CATALOG_AGE_S),
    // Long: the events, not the age, must be what refuses a revoked key.
    PIES_AUTH_CACHE_SECONDS: "300",
    PIES_AUTH_NEGATIVE_CACHE_SECONDS: "60",
  };
  stack = await startStack({ databaseUrl: db.url, natsEnv: stream.env, env });
  const [executorPort, gatewayPort] = [await freePort(), await freePort()];
  const common = { HOST: "127.0.0.1", ...stream.env, ...env };
  const executorB = startProcess("executor-b", "services/executor/dist/main.js", {
    ...common,
    PORT: String(executorPort),
    CATALOG_URL: stack.catalogUrl,
    RUNS_URL: stack.runsUrl,
  });
  extra.push(executorB);
  const gatewayB = startProcess("gateway-b", "gateway/dist/main.js", {
    ...common,
    PORT: String(gatewayPort),
    CATALOG_URL: stack.catalogUrl,
    RUNS_URL: stack.runsUrl,
    EXECUTOR_URL: `http://127.0.0.1:${executorPort}`,
  });
  extra.push(gatewayB);
  const gatewayBUrl = `http://127.0.0.1:${gatewayPort}`;
  await untilReady(`${gatewayBUrl}/readyz`, gatewayB);
  gateways = [
    { name: "A", url: stack.gatewayUrl, api: tracked(stack.gatewayUrl, stack.bootstrap.key) },
    { name: "B", url: gatewayBUrl, api: tracked(gatewayBUrl, stack.bootstrap.key) },
  ];
  environmentId = stack.bootstrap.environment;
  sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  watcher = await connectNats(stream.url, "catalog-cache-test");
  watcher.subscribe(`${stream.subjectPrefix}.catalog.>`, {
    callback: () => void (lastEventAt = performance.now()),
  });
  await watcher.flush();
}, 120_000);

afterAll(async () => {
  await sql?.end();
  await watcher?.close();
  for (const p of extra.reverse()) await p.stop();
  if (stack) {
    const codes = await stack.stop();
    expect(codes).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
  }
  await stream?.remove();
  await db?.drop();
});

const output = () => [stack.output(), ...extra.map((p) => p.output())].join("\n");
const json = <T = any>(response: Response, status = 200) => expectJson<T>(response, status, output);
const admin = () => gateways[0]!.api;

async function createInteraction(name: string) {
  const prompt = await json(
    await admin()("/prompts", {
      body: { name: "p", role: "user", content_type: "text", content: `Say hello (${name})` },
    }),
    201,
  );
  const interaction = await json(
    await admin()("/interactions", {
      body: {
        name,
        environment: environmentId,
        prompts: [{ type: "template", template: prompt.id }],
      },
    }),
    201,
  );
  return interaction.id as string;
}

/** What each executor (through its gateway) runs `interaction` with: the run's interaction id and model. */
async function executeOnBoth(interaction: string, byName = false) {
  return Promise.all(
    gateways.map(async ({ api }) => {
      const run = await json(
        await api(byName ? "/execute" : `/interactions/${interaction}/execute`, {
          body: byName ? { interaction, data: {} } : { data: {} },
        }),
      );
      return { interaction: run.interaction?.id ?? run.interaction, model: run.modelId as string };
    }),
  );
}

/** Changes the environment's default model below the catalog: no event is published. */
async function setModelInDatabase(model: string) {
  await sql.query("update catalog.environments set default_model = $1 where id = $2", [
    model,
    environmentId,
  ]);
}

/**
 * Waits until the events of the writes made so far have arrived (an event after the last write,
 * then none for `quietMs`): the event of a write reaches the other processes a moment after the
 * write answered, and a late one must not be taken for the effect of the next step.
 */
async function settled(quietMs = 200) {
  const deadline = performance.now() + 5000;
  while (lastEventAt < lastWriteAt || performance.now() - lastEventAt < quietMs) {
    if (performance.now() > deadline) throw new Error("the last write's event never came");
    await sleep(20);
  }
}

/** Polls until `check` passes on every gateway; resolves with the time it took. */
async function within(deadlineMs: number, check: () => Promise<boolean>): Promise<number> {
  const start = performance.now();
  for (;;) {
    if (await check()) return performance.now() - start;
    if (performance.now() - start > deadlineMs) {
      throw new Error(`not within ${deadlineMs} ms`);
    }
    await sleep(20);
  }
}

const models = async (interaction: string) =>
  (await executeOnBoth(interaction)).map((r) => r.model);

/** The status each gateway answers a request with `secret`. */
const statuses = (secret: string) =>
  Promise.all(
    gateways.map(async ({ url }) => (await gatewayApi(url, secret)("/interactions")).status),
  );

describe("the gateways' key cache, across two gateway processes", () => {
  const newKey = async (name: string) =>
    json<{ id: string; key: string }>(await admin()("/apikeys", { body: { name } }), 201);

  it("lets a key just created in at once on both gateways", async () => {
    const { key } = await newKey("fresh");
    expect(await statuses(key)).toEqual([200, 200]);
  });

  it("refuses a key revoked through either gateway within 1 s on both", async () => {
    for (const via of gateways) {
      const { id, key } = await newKey(`revoked-via-${via.name}`);
      // Verified by both, and kept (PIES_AUTH_CACHE_SECONDS is 300).
      expect(await statuses(key)).toEqual([200, 200]);
      const revoked = performance.now();
      const response = await via.api(`/apikeys/${id}`, { method: "DELETE" });
      expect(response.status).toBe(204);
      const took = await within(EVENT_DEADLINE_MS, async () =>
        (await statuses(key)).every((s) => s === 401),
      );
      console.info(
        `revoked via gateway ${via.name}: refused by both gateways ${Math.round(performance.now() - revoked)} ms after the DELETE was sent (${Math.round(took)} ms after it answered)`,
      );
      expect(performance.now() - revoked).toBeLessThan(EVENT_DEADLINE_MS);
    }
  });

  it("keeps a verified key while no event says otherwise, and drops it on its project's key events", async () => {
    const { id, key } = await newKey("held");
    // Its own creation's event has come and gone; then both gateways verify it, and keep it.
    await settled();
    expect(await statuses(key)).toEqual([200, 200]);
    // Revoked below the catalog: no event. Both gateways still let it in from their caches.
    await sql.query("update catalog.api_keys set revoked_at = now() where id = $1", [id]);
    for (let i = 0; i < 5; i++) {
      expect(await statuses(key)).toEqual([200, 200]);
      await sleep(100);
    }
    // Any key event of its project drops the project's keys: both ask the catalog, which refuses.
    await newKey("another");
    await within(EVENT_DEADLINE_MS, async () => (await statuses(key)).every((s) => s === 401));
  });
});

describe("the executors' catalog cache, across two executor processes", () => {
  let interaction: string;
  let model = "test";
  let version = 0;

  beforeAll(async () => {
    interaction = await createInteraction("Cached");
  });

  /**
   * Both executors hold a fresh answer for `interaction` (model M); the database then says M'
   * behind the catalog's back, and both still run M (served from their caches); `write` goes
   * through the catalog, and both run M' within the deadline, well before the bounded age.
   */
  async function droppedBy(write: () => Promise<unknown>) {
    // Entries loaded now: the previous step's write dropped them.
    await settled();
    await within(EVENT_DEADLINE_MS, async () =>
      (await models(interaction)).every((m) => m === model),
    );
    const loaded = performance.now();
    const next = `test-latency-${++version}`;
    await setModelInDatabase(next);
    expect(await models(interaction)).toEqual([model, model]);
    await write();
    const took = await within(EVENT_DEADLINE_MS, async () =>
      (await models(interaction)).every((m) => m === next),
    );
    // Before either executor's entry could have aged out: the event dropped it.
    expect(performance.now() - loaded).toBeLessThan(CATALOG_AGE_S * 1000);
    model = next;
    return took;
  }

  it("is dropped by a prompt create", async () => {
    await droppedBy(() =>
      admin()("/prompts", {
        body: { name: "other", role: "user", content_type: "text", content: "x" },
      }).then((r) => json(r, 201)),
    );
  });

  it("is dropped by an environment create", async () => {
    await droppedBy(() =>
      admin()("/environments", {
        body: { name: "second", provider: "test", default_model: "test" },
      }).then((r) => json(r, 201)),
    );
  });

  it("is dropped by an interaction create", async () => {
    await droppedBy(() => createInteraction("Unrelated"));
  });

  it("is dropped by an API key create and delete", async () => {
    let keyId = "";
    await droppedBy(async () => {
      keyId = (await json(await admin()("/apikeys", { body: { name: "k" } }), 201)).id;
    });
    await droppedBy(() =>
      admin()(`/apikeys/${keyId}`, { method: "DELETE" }).then((r) => expect(r.status).toBe(204)),
    );
  });

  it("is dropped by a write through the OTHER gateway too", async () => {
    const viaB = gateways[1]!.api;
    await droppedBy(() =>
      viaB("/prompts", {
        body: { name: "via-b", role: "user", content_type: "text", content: "x" },
      }).then((r) => json(r, 201)),
    );
  });

  it("runs a name on the interaction created with that name since, on both executors", async () => {
    const first = await createInteraction("Named");
    expect((await executeOnBoth("Named", true)).map((r) => r.interaction)).toEqual([first, first]);
    const second = await createInteraction("Named");
    await within(EVENT_DEADLINE_MS, async () =>
      (await executeOnBoth("Named", true)).every((r) => r.interaction === second),
    );
  });

  it("runs `Name` and `Name@latest` on a new publish within 1 s on both executors (and reports how often at once)", async () => {
    const draft = await createInteraction("Versioned");
    // Both executors hold `Versioned` (the draft: nothing is published yet).
    expect((await executeOnBoth("Versioned", true)).map((r) => r.interaction)).toEqual([
      draft,
      draft,
    ]);
    let immediate = 0;
    for (let n = 1; n <= 3; n++) {
      const published = await admin()(`/interactions/${draft}/publish`, { body: {} });
      const version = (await json(published, 201)).id as string;
      // The next executions by name, sent as soon as the publish answered.
      const first = await Promise.all([
        executeOnBoth("Versioned", true),
        executeOnBoth("Versioned@latest", true),
      ]);
      if (first.flat().every((r) => r.interaction === version)) immediate++;
      await within(EVENT_DEADLINE_MS, async () =>
        (
          await Promise.all([
            executeOnBoth("Versioned", true),
            executeOnBoth("Versioned@latest", true),
          ])
        )
          .flat()
          .every((r) => r.interaction === version),
      );
    }
    console.info(`a publish was run by name at once by both executors ${immediate} times of 3`);
  });

  it("keeps a project's answers when another project changes", async () => {
    await settled();
    await within(EVENT_DEADLINE_MS, async () =>
      (await models(interaction)).every((m) => m === model),
    );
    await setModelInDatabase("test-latency-500");
    // A new project (with its admin key) and a write in it: events that name another project.
    const created = await json(await admin()("/projects", { body: { name: "elsewhere" } }), 201);
    const other = tracked(stack.gatewayUrl, created.api_key.key);
    await json(
      await other("/prompts", {
        body: { name: "x", role: "user", content_type: "text", content: "x" },
      }),
      201,
    );
    await sleep(300);
    expect(await models(interaction)).toEqual([model, model]);
    await setModelInDatabase(model);
  });

  /** A write, then both executors' answers loaded again: entries a moment old. */
  const freshEntries = async () => {
    await json(
      await admin()("/prompts", {
        body: { name: "n", role: "user", content_type: "text", content: "x" },
      }),
      201,
    );
    await settled();
    await within(EVENT_DEADLINE_MS, async () =>
      (await models(interaction)).every((m) => m === model),
    );
  };

  it("drops a lost event's stale answer within the bounded age (PIES_CATALOG_CACHE_SECONDS)", async () => {
    // Fresh entries, then a change that publishes no event (as if it were lost).
    await freshEntries();
    const next = `test-latency-${++version}`;
    await setModelInDatabase(next);
    const changed = performance.now();
    expect(await models(interaction)).toEqual([model, model]);
    await within((CATALOG_AGE_S + 2) * 1000, async () =>
      (await models(interaction)).every((m) => m === next),
    );
    const took = performance.now() - changed;
    console.info(`a change with no event was seen by both executors after ${Math.round(took)} ms`);
    expect(took).toBeLessThan((CATALOG_AGE_S + 2) * 1000);
    model = next;
  });

  it("serves cached interactions while the catalog is down (the catalog is stopped last)", async () => {
    // Nothing else may run after this: it stops the catalog process for good.
    await freshEntries();
    const catalog = stack.processes.find((p) => p.name === "catalog");
    expect(await catalog!.stop()).toBe(0);
    // Keys and the interaction are cached: both executions run without the catalog.
    expect(await models(interaction)).toEqual([model, model]);
    // What was never resolved needs the catalog: 503 naming it.
    for (const { api } of gateways) {
      const response = await api("/execute", { body: { interaction: "Never@draft", data: {} } });
      expect(response.status).toBe(503);
    }
  });
});
