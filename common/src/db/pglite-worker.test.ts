import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDatabase } from "./db.js";
import { openPGliteWorker, PGliteThreadError, type PGliteHandle } from "./pglite-worker.js";

describe("PGlite in a worker thread (the embedded mode's database)", () => {
  let dir: string;
  // One thread for the statements' cases (opening PGlite takes seconds), tables of their own each.
  let shared: PGliteHandle;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "pies-pglite-worker-"));
    shared = await openPGliteWorker(path.join(dir, "shared"));
  });
  afterAll(async () => {
    await shared?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("answers statements with their rows, values typed as in this thread", async () => {
    const db = createDatabase({ pglite: shared });
    const { rows } = await sql<{
      n: number;
      t: string;
      at: Date;
      doc: unknown;
      tags: string[];
      big: number;
    }>`select ${7}::int as n, ${"a'b"}::text as t, ${"2026-11-24T01:02:03.004Z"}::timestamptz as at,
         ${JSON.stringify({ a: [1, { b: null }] })}::jsonb as doc,
         array['x', 'y'] as tags, count(*) as big from generate_series(1, 3)`.execute(db);
    expect(rows).toEqual([
      {
        n: 7,
        t: "a'b",
        at: new Date("2026-11-24T01:02:03.004Z"),
        doc: { a: [1, { b: null }] },
        tags: ["x", "y"],
        big: 3,
      },
    ]);
    expect(rows[0]?.at).toBeInstanceOf(Date);
    await sql`create table t (id text primary key, v int)`.execute(db);
    const inserted = await sql`insert into t values ('a', 1), ('b', 2)`.execute(db);
    expect(inserted.numAffectedRows).toBe(2n);
  });

  it("fails a statement with PostgreSQL's fields (SQLSTATE code …), and goes on", async () => {
    const pglite = shared;
    await pglite.exec("create table e (id text primary key)");
    await pglite.query("insert into e values ($1)", ["a"]);
    const err = await pglite.query("insert into e values ($1)", ["a"]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PGliteThreadError);
    expect(err).toMatchObject({ code: "23505", message: expect.stringMatching(/duplicate key/) });
    await expect(pglite.query("select nonsense from nowhere")).rejects.toMatchObject({
      code: "42P01",
    });
    expect((await pglite.query<{ n: number }>("select count(*)::int as n from e")).rows).toEqual([
      { n: 1 },
    ]);
  });

  it("keeps a transaction's statements together and rolls back a failed one", async () => {
    const db = createDatabase<{ x: { id: string } }>({ pglite: shared });
    await sql`create table x (id text primary key)`.execute(db);
    // A statement outside the transaction, sent while it is open, waits for its end.
    const [, outside] = await Promise.all([
      db.transaction().execute(async (tx) => {
        await tx.insertInto("x").values({ id: "in-1" }).execute();
        await new Promise((resolve) => setTimeout(resolve, 50));
        await tx.insertInto("x").values({ id: "in-2" }).execute();
      }),
      db.selectFrom("x").select("id").execute(),
    ]);
    expect(outside.map((r) => r.id).sort()).toEqual(["in-1", "in-2"]);
    await expect(
      db.transaction().execute(async (tx) => {
        await tx.insertInto("x").values({ id: "lost" }).execute();
        await tx.insertInto("x").values({ id: "in-1" }).execute(); // duplicate: fails
      }),
    ).rejects.toMatchObject({ code: "23505" });
    const ids = (await db.selectFrom("x").select("id").execute()).map((r) => r.id).sort();
    expect(ids).toEqual(["in-1", "in-2"]);
  });

  it("keeps the data in its directory across a close and a new open, with the extensions asked for", async () => {
    const where = path.join(dir, "kept");
    let pglite: PGliteHandle = await openPGliteWorker(where, { extensions: ["pg_trgm"] });
    await pglite.exec("create extension if not exists pg_trgm; create table t (v text)");
    await pglite.query("insert into t values ($1)", ["kept"]);
    await pglite.close();
    await expect(pglite.query("select 1")).rejects.toThrow(/closed/);
    pglite = await openPGliteWorker(where, { extensions: ["pg_trgm"] });
    try {
      const { rows } = await pglite.query<{ v: string; s: number }>(
        "select v, similarity(v, 'kept') as s from t",
      );
      expect(rows).toEqual([{ v: "kept", s: 1 }]);
    } finally {
      await pglite.close();
    }
  });

  it("refuses to open with an extension it does not know, and says why", async () => {
    await expect(
      openPGliteWorker(path.join(dir, "bad"), { extensions: ["no_such_thing"] }),
    ).rejects.toThrow(/unknown PGlite extension no_such_thing/);
  });

  it("tells its owner, once, when the thread dies, and fails what was waiting", async () => {
    const failures: Error[] = [];
    const pglite = await openPGliteWorker(path.join(dir, "dies"), {
      onFailure: (err) => failures.push(err),
    });
    const waiting = pglite.query("select pg_sleep(5)");
    await new Promise((resolve) => setTimeout(resolve, 50));
    // Ended as a crash of the engine would end it (not through close()).
    await pglite.thread.terminate();
    await expect(waiting).rejects.toThrow(/PGlite thread/);
    await expect(pglite.query("select 1")).rejects.toThrow(/PGlite thread/);
    expect(failures).toHaveLength(1);
    await pglite.close();
    expect(failures).toHaveLength(1);
  });
});
