import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryRunEventBus, MemoryRunRecords } from "@pies/common/bus";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// Metadata-only interactions (`store: "metadata"`, DESIGN.md §8) through the REST surface, in
// memory (the embedded mode's wiring): the setting on interactions and versions, and its runs.
let pies: TestPies;
let app: FastifyInstance;
let key: string;
let environmentId: string;
const bus = new MemoryRunEventBus();
const records = new MemoryRunRecords();

beforeAll(async () => {
  pies = await startTestPies({ bus, records });
  ({ app, key, environmentId } = pies);
});

afterAll(async () => {
  await pies.close();
});

const call = (method: string, url: string, body?: unknown) =>
  request(app, method, url, { key, body });

let interactions = 0;

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
    name: `Private ${++interactions}`,
    environment: environmentId,
    prompts: [{ type: "template", template: prompt.json.id }],
    ...extra,
  });
  expect(created.status, created.text).toBe(201);
  return created.json as { id: string; store: string };
}

describe("the store setting of an interaction", () => {
  it("is full unless set, and shows on every read, list and version", async () => {
    const full = await interaction({ name: "Listed" });
    expect(full.store).toBe("full");
    const metadata = await interaction({ name: "Listed", store: "metadata" });
    expect(metadata.store).toBe("metadata");
    expect((await call("GET", `/interactions/${metadata.id}`)).json.store).toBe("metadata");
    const listed = (await call("GET", "/interactions?name=Listed")).json as {
      id: string;
      store: string;
    }[];
    // A reference says so only for a metadata-only interaction (SPEC.md's subset otherwise).
    expect(Object.fromEntries(listed.map((i) => [i.id, i.store]))).toEqual({
      [full.id]: undefined,
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

describe("the runs of a metadata-only interaction", () => {
  // Distinctive input: in the caller's answers, in none of what pies keeps of the run.
  const MARK = "Quillfeather";

  /** What the record log and the runs store keep of a run, as text, once its end is stored. */
  async function kept(id: string) {
    let row: Record<string, unknown> | undefined;
    await expect
      .poll(async () => {
        row = await pies.db
          .selectFrom("runs.runs")
          .selectAll()
          .where("id", "=", id)
          .executeTakeFirst();
        return row?.status;
      })
      .toMatch(/^(completed|failed)$/);
    const record = new TextDecoder().decode((await records.last(id))!.data);
    return { record, row: JSON.stringify(row) };
  }

  it("answers a blocking execution in full; the stored run is its metadata only", async () => {
    const { id } = await interaction({ store: "metadata" });
    const answered = await call("POST", `/interactions/${id}/execute`, {
      data: { topic: MARK },
      tags: ["private"],
    });
    expect(answered.status, answered.text).toBe(200);
    expect(answered.json).toMatchObject({
      status: "completed",
      parameters: { topic: MARK },
      prompt: [{ role: "user", content: `Tell me about ${MARK}` }],
      store: "metadata",
    });
    const result = answered.json.result as string;
    expect(result.length).toBeGreaterThan(0);

    const { record, row } = await kept(answered.json.id);
    for (const text of [record, row]) {
      expect(text).not.toContain(MARK);
      expect(text).not.toContain(result);
    }
    const stored = await call("GET", `/runs/${answered.json.id}`);
    expect(stored.json).toMatchObject({
      id: answered.json.id,
      status: "completed",
      modelId: "test",
      environment: { id: environmentId },
      tags: ["private"],
      token_use: answered.json.token_use,
      execution_time: expect.any(Number),
      parameters: {},
      store: "metadata",
    });
    expect(stored.json.result).toBeUndefined();
    expect(stored.json.prompt).toBeUndefined();
    const listed = await call("GET", `/runs?interaction=${id}`);
    expect(listed.json).toEqual([
      expect.objectContaining({ id: answered.json.id, parameters: {}, store: "metadata" }),
    ]);
    expect(listed.json[0].result).toBeUndefined();
  });

  it("streams the result to its reader, then forgets its events; the stored run has none of it", async () => {
    const { id } = await interaction({ store: "metadata" });
    const created = await call("POST", "/runs", {
      interaction: id,
      stream: true,
      data: { topic: MARK },
    });
    expect(created.json).toMatchObject({ status: "created", parameters: { topic: MARK } });
    const events = parseSse((await call("GET", `/runs/${created.json.id}/stream`)).text);
    const close = events.at(-1)!;
    expect(close.event).toBe("close");
    const final = JSON.parse(close.data);
    expect(final).toMatchObject({
      status: "completed",
      parameters: { topic: MARK },
      store: "metadata",
    });
    const text = events
      .filter((e) => e.event === "message")
      .map((e) => JSON.parse(e.data) as string)
      .join("");
    expect(text).toBe(final.result);

    // Delivered, its events are gone from the bus: a reopened stream closes with the stored run.
    await expect.poll(() => bus.stored(created.json.id)).toEqual([]);
    const reopened = parseSse((await call("GET", `/runs/${created.json.id}/stream`)).text);
    expect(reopened.map((e) => e.event)).toEqual(["close"]);
    expect(JSON.parse(reopened[0]!.data)).toMatchObject({ parameters: {}, store: "metadata" });

    const { record, row } = await kept(created.json.id);
    for (const kept of [record, row]) {
      expect(kept).not.toContain(MARK);
      expect(kept).not.toContain(final.result);
    }
  });

  it("is found by its metadata, never by a Lucene term of its input", async () => {
    const full = await interaction();
    const metadata = await interaction({ store: "metadata" });
    const term = `${MARK}Search`;
    const ran = [];
    for (const { id } of [full, metadata]) {
      const r = await call("POST", `/interactions/${id}/execute`, { data: { topic: term } });
      expect(r.status, r.text).toBe(200);
      ran.push(r.json.id as string);
      await kept(r.json.id);
    }
    const found = async (query: string) =>
      (await call("POST", "/runs/search", { query })).json.results.map((r: { id: string }) => r.id);
    expect(await found(term)).toEqual([ran[0]]);
    expect(await found(`topic:${term}`)).toEqual([ran[0]]);
    const filtered = await call("POST", "/runs/search", {
      filters: { interaction: metadata.id },
    });
    expect(filtered.json.results.map((r: { id: string }) => r.id)).toEqual([ran[1]]);
  });
});
