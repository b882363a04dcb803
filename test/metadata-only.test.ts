import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { peerTransport, serviceClient } from "@pies/common/server";
import { ExecutorService } from "@pies/proto/executor";
import {
  createTestDatabase,
  createTestStream,
  expectJson,
  freePort,
  gatewayApi,
  internalToken,
  readSse,
  startProcess,
  startStack,
  type ApiClient,
  type ManagedProcess,
  type Stack,
  type TestDatabase,
  type TestStream,
} from "@pies/testkit";

// Metadata-only runs (DESIGN.md §8, `store: "metadata"`) against the four processes, real
// PostgreSQL and NATS, and a second executor replica: the caller gets the input and the result,
// while no stream of pies' (the record log, the result cache, the inputs of streamed runs, the
// run events once delivered) nor the runs store keeps them. Distinctive markers in the input make
// every check a search of raw bytes.
let db: TestDatabase;
let stream: TestStream;
let stack: Stack;
let api: ApiClient;
let nc: NatsConnection;
let jsm: JetStreamManager;
let secondExecutor: ManagedProcess;
let secondUrl: string;

beforeAll(async () => {
  db = await createTestDatabase("metadata_only");
  stream = createTestStream();
  stack = await startStack({ databaseUrl: db.url, natsEnv: stream.env });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
  nc = await connect({ servers: stream.url });
  jsm = await jetstreamManager(nc);
  // A second executor replica on the same NATS and peers: a run it starts was created by the
  // other, so its input comes back from JetStream.
  const port = await freePort();
  secondUrl = `http://127.0.0.1:${port}`;
  secondExecutor = startProcess("executor2", "services/executor/dist/main.js", {
    HOST: "127.0.0.1",
    ...stream.env,
    PORT: String(port),
    CATALOG_URL: stack.catalogUrl,
    RUNS_URL: stack.runsUrl,
  });
}, 120_000);

afterAll(async () => {
  try {
    await secondExecutor?.stop();
    await nc?.close();
    if (stack) await stack.stop();
  } finally {
    await stream?.remove();
    await db?.drop();
  }
});

const json = <T = any>(response: Response, status = 200) =>
  expectJson<T>(response, status, () => `${stack.output()}\n${secondExecutor?.output() ?? ""}`);

/** An interaction over the stack's `test` environment whose template quotes its input. */
async function createInteraction(name: string, extra: Record<string, unknown> = {}) {
  const prompt = await json(
    await api("/prompts", {
      body: {
        name: `${name} prompt`,
        role: "user",
        content_type: "jst",
        content: "return `Describe ${subject}`",
        inputSchema: {
          type: "object",
          properties: { subject: { type: "string" } },
          required: ["subject"],
        },
      },
    }),
    201,
  );
  return json<{ id: string; store: string }>(
    await api("/interactions", {
      body: {
        name,
        environment: stack.bootstrap.environment,
        prompts: [{ type: "template", template: prompt.id }],
        // A caching policy: a metadata-only interaction's result is cached nowhere all the same.
        cache_policy: { type: "cache", ttl: 600 },
        ...extra,
      },
    }),
    201,
  );
}

const decoder = new TextDecoder();

/** Every message a stream holds now, as text (an empty list when the stream has none). */
async function streamTexts(name: string): Promise<string[]> {
  const { state } = await jsm.streams.info(name);
  const texts: string[] = [];
  for (let seq = state.first_seq; state.messages > 0 && seq <= state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(name, { seq });
    if (m) texts.push(`${m.subject} ${decoder.decode(m.data)}`);
  }
  return texts;
}

/** The run as GET /runs/:id answers it once the runs store has its end (not the log's record). */
async function storedRun(id: string) {
  await expect
    .poll(
      async () =>
        (await json<{ id: string }[]>(await api(`/runs?status=completed&limit=1000`))).some(
          (r) => r.id === id,
        ),
      { timeout: 20_000 },
    )
    .toBe(true);
  return json(await api(`/runs/${id}`));
}

/** A streamed run's events through the gateway, to its close. */
async function streamed(id: string) {
  const response = await fetch(`${stack.gatewayUrl}/api/v1/runs/${id}/stream`, {
    headers: { authorization: `Bearer ${stack.bootstrap.key}` },
  });
  const events = await readSse(response);
  const close = events.at(-1)!;
  expect(close.event).toBe("close");
  const text = events
    .filter((e) => e.event === "message")
    .map((e) => JSON.parse(e.data) as string)
    .join("");
  return { final: JSON.parse(close.data), text };
}

/** A run's row in the runs store, as text (every column). */
async function rowText(id: string): Promise<string> {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    const { rows } = await client.query("select r::text as row from runs.runs r where id = $1", [
      id,
    ]);
    return rows[0].row as string;
  } finally {
    await client.end();
  }
}

/** The record log's message for a run (its last record), as text. */
async function recordText(id: string): Promise<string> {
  const m = await jsm.streams.getMessage(`${stream.stream}_RECORDS`, {
    last_by_subj: `${stream.subjectPrefix}.record.${id}`,
  });
  return decoder.decode(m!.data);
}

describe("metadata-only runs against PostgreSQL and NATS", () => {
  it("answer blocking and streamed callers in full, and keep no payload in the store or on NATS", async () => {
    const mark = "Zephyrine7c1f";
    const full = await createInteraction("Full");
    const metadata = await createInteraction("Metadata", { store: "metadata" });
    expect(metadata.store).toBe("metadata");

    // A full run of the same input: kept, cached and found where the metadata-only ones are not.
    const control = await json(
      await api(`/interactions/${full.id}/execute`, { body: { data: { subject: mark } } }),
    );
    expect(control.parameters).toEqual({ subject: mark });

    const blocking = await json(
      await api(`/interactions/${metadata.id}/execute`, {
        body: { data: { subject: mark }, tags: ["private"] },
      }),
    );
    expect(blocking).toMatchObject({
      status: "completed",
      parameters: { subject: mark },
      prompt: [{ role: "user", content: `Describe ${mark}` }],
      store: "metadata",
    });
    expect(typeof blocking.result).toBe("string");
    expect(blocking.cached).toBeUndefined();

    // Streamed, created by the stack's executor and started by the second one.
    const created = await json(
      await api("/runs", {
        body: { interaction: metadata.id, stream: true, data: { subject: mark } },
      }),
    );
    expect(created).toMatchObject({ status: "created", parameters: { subject: mark } });
    expect(await recordText(created.id)).not.toContain(mark);
    expect((await streamTexts(`${stream.stream}_INPUTS`)).join("\n")).toContain(mark);
    const second = serviceClient(
      ExecutorService,
      peerTransport(secondUrl, "executor2", internalToken),
    );
    let started: Awaited<ReturnType<typeof second.startRun>> | undefined;
    // Until the second executor serves (it starts with the test).
    for (let i = 0; i < 100 && !started; i++) {
      started = await second
        .startRun({ projectId: stack.bootstrap.project, runId: created.id })
        .catch(async () => void (await new Promise((r) => setTimeout(r, 200))));
    }
    expect(started!.started).toBe(true);
    const { final, text } = await streamed(created.id);
    expect(final).toMatchObject({
      status: "completed",
      parameters: { subject: mark },
      prompt: [{ role: "user", content: `Describe ${mark}` }],
      store: "metadata",
    });
    expect(text).toBe(final.result);

    // The runs store and the record log: the metadata, none of the payloads.
    for (const [run, result] of [
      [blocking, blocking.result],
      [final, final.result],
    ]) {
      const stored = await storedRun(run.id);
      expect(stored).toMatchObject({
        id: run.id,
        status: "completed",
        modelId: "test",
        environment: { id: stack.bootstrap.environment },
        parameters: {},
        store: "metadata",
        token_use: run.token_use,
        execution_time: expect.any(Number),
      });
      expect(stored.result).toBeUndefined();
      expect(stored.prompt).toBeUndefined();
      for (const kept of [await rowText(run.id), await recordText(run.id)]) {
        expect(kept).toContain(run.id);
        expect(kept).not.toContain(mark);
        expect(kept).not.toContain(result);
      }
    }
    expect((await storedRun(blocking.id)).tags).toEqual(["private"]);
    const control_ = await storedRun(control.id);
    expect(control_).toMatchObject({ parameters: { subject: mark }, result: control.result });
    expect(control_.store).toBeUndefined();

    // NATS: of the record log's messages, only the full run's holds the input; the result cache
    // holds the full run's result only; the inputs are dropped once started; the streamed run's
    // events went once its close was delivered.
    const withMark = (await streamTexts(`${stream.stream}_RECORDS`)).filter((m) =>
      m.includes(mark),
    );
    expect(withMark).toHaveLength(1);
    expect(withMark[0]).toMatch(new RegExp(`^${stream.subjectPrefix}\\.record\\.${control.id} `));
    const cached = await streamTexts(`${stream.stream}_RESULTS`);
    expect(cached).toHaveLength(1);
    expect(cached[0]).toContain(control.id);
    await expect.poll(() => streamTexts(`${stream.stream}_INPUTS`)).toEqual([]);
    await expect
      .poll(async () => (await streamTexts(stream.stream)).filter((m) => m.includes(created.id)))
      .toEqual([]);

    // Lucene: the input's value finds the full run, never the metadata-only ones.
    const found = async (query: string) =>
      (await json(await api("/runs/search", { body: { query } }))).results.map(
        (r: { id: string }) => r.id,
      );
    await expect.poll(() => found(mark)).toEqual([control.id]);
    expect(await found(`subject:${mark}`)).toEqual([control.id]);
    expect(await found(`Zephyrine*`)).toEqual([control.id]);
    // The metadata-only runs are there, found by their metadata.
    const byInteraction = await json(
      await api("/runs/search", { body: { filters: { interaction: metadata.id } } }),
    );
    expect(byInteraction.results.map((r: { id: string }) => r.id).sort()).toEqual(
      [blocking.id, created.id].sort(),
    );
  });
});
