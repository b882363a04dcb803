import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompiledQuery, type Kysely } from "kysely";
import { createDatabase, preparedStatement, startDatabaseService } from "@pies/common/db";
import { pino } from "pino";
import { createTestDatabase, startTransactionPooler, type TestDatabase } from "@pies/testkit";

// Statements named with preparedStatement are named prepared statements on a PostgreSQL pool
// (parsed and planned once per connection), unless DATABASE_PREPARED_STATEMENTS turns them off
// (behind PgBouncer in transaction mode before 1.21, which does not keep them).
let testDb: TestDatabase;

beforeAll(async () => {
  testDb = await createTestDatabase("prepared");
});

afterAll(async () => {
  await testDb?.drop();
});

const ADD = preparedStatement("pies_test_add", "select $1::int + $2::int as n");
/** Its name on the server: named after its text too (preparedStatement). */
const ADD_NAME = `pies_test_add_${createHash("sha256").update(ADD).digest("hex").slice(0, 12)}`;

/** Runs ADD twice, then lists the connection's prepared statements (one connection: the same). */
async function addTwiceAndList(db: Kysely<any>) {
  const sums: number[] = [];
  for (const [a, b] of [
    [1, 2],
    [40, 2],
  ] as const) {
    const { rows } = await db.executeQuery<{ n: number }>(CompiledQuery.raw(ADD, [a, b]));
    sums.push(rows[0]!.n);
  }
  const { rows } = await db.executeQuery<{ name: string; statement: string }>(
    CompiledQuery.raw("select name, statement from pg_prepared_statements"),
  );
  return { sums, prepared: rows };
}

describe("prepared statements", () => {
  it("are prepared once on a connection and run with their parameters", async () => {
    const db = createDatabase({ url: testDb.url, poolMax: 1 });
    try {
      const { sums, prepared } = await addTwiceAndList(db);
      expect(sums).toEqual([3, 42]);
      expect(prepared).toEqual([{ name: ADD_NAME, statement: ADD }]);
    } finally {
      await db.destroy();
    }
  });

  it("are unnamed statements with preparedStatements off, and answer the same", async () => {
    const db = createDatabase({ url: testDb.url, poolMax: 1, preparedStatements: false });
    try {
      const { sums, prepared } = await addTwiceAndList(db);
      expect(sums).toEqual([3, 42]);
      expect(prepared).toEqual([]);
    } finally {
      await db.destroy();
    }
  });

  it("follow DATABASE_PREPARED_STATEMENTS in a database service", async () => {
    for (const on of [true, false]) {
      let db: Kysely<any> | undefined;
      const service = await startDatabaseService({
        name: "prepared-test",
        schema: "prepared_test",
        migrations: {},
        serviceName: "pies.test.v1.None",
        config: {
          HOST: "127.0.0.1",
          PORT: 0,
          DATABASE_URL: testDb.url,
          DATABASE_POOL_MAX: 1,
          DATABASE_PREPARED_STATEMENTS: on,
          LOG_LEVEL: "silent",
          PIES_INTERNAL_TOKEN: "t".repeat(32),
        },
        routes: (made) => {
          db = made;
          return () => {};
        },
      });
      try {
        const { prepared } = await addTwiceAndList(db!);
        expect(prepared.map((p) => p.name)).toEqual(on ? [ADD_NAME] : []);
      } finally {
        await service.stop();
      }
    }
  });

  it("are prepared again on a connection that lost them (DEALLOCATE ALL)", async () => {
    const db = createDatabase({ url: testDb.url, poolMax: 1 });
    try {
      expect((await addTwiceAndList(db)).sums).toEqual([3, 42]);
      await db.executeQuery(CompiledQuery.raw("deallocate all"));
      // node-postgres believes the statement is still there: it only binds it (26000).
      const { sums, prepared } = await addTwiceAndList(db);
      expect(sums).toEqual([3, 42]);
      expect(prepared).toEqual([{ name: ADD_NAME, statement: ADD }]);
    } finally {
      await db.destroy();
    }
  });

  it("lost in a transaction, fail it and are prepared again in the next", async () => {
    const db = createDatabase({ url: testDb.url, poolMax: 1 });
    const add = (a: number, b: number) =>
      db.transaction().execute(async (tx) => {
        const { rows } = await tx.executeQuery<{ n: number }>(CompiledQuery.raw(ADD, [a, b]));
        return rows[0]!.n;
      });
    try {
      expect(await add(1, 2)).toBe(3);
      await db.executeQuery(CompiledQuery.raw("deallocate all"));
      // The failure aborted the transaction: nothing of it can be run again within it.
      await expect(add(40, 2)).rejects.toMatchObject({ code: "26000" });
      expect(await add(40, 2)).toBe(42);
      expect((await addTwiceAndList(db)).prepared).toEqual([{ name: ADD_NAME, statement: ADD }]);
    } finally {
      await db.destroy();
    }
  });

  it("replace a statement of their name that the connection has and pg does not know (42P05)", async () => {
    const db = createDatabase({ url: testDb.url, poolMax: 1 });
    try {
      await db.executeQuery(CompiledQuery.raw(`prepare ${ADD_NAME} as select 0 as n`));
      const { sums, prepared } = await addTwiceAndList(db);
      expect(sums).toEqual([3, 42]);
      expect(prepared).toEqual([{ name: ADD_NAME, statement: ADD }]);
    } finally {
      await db.destroy();
    }
  });

  it("are sent unnamed, with one error logged, behind a pooler that loses them", async () => {
    const pooler = await startTransactionPooler(testDb.url);
    const logged: { level: number; msg: string }[] = [];
    const logger = pino({ level: "info" }, { write: (s: string) => logged.push(JSON.parse(s)) });
    const db = createDatabase({ url: pooler.url, poolMax: 1, logger });
    try {
      // Each statement on the other of two server connections: the second finds the statement
      // missing (26000), prepared again it meets the first one's (42P05).
      for (let i = 0; i < 6; i++) {
        const { rows } = await db.executeQuery<{ n: number }>(CompiledQuery.raw(ADD, [i, 1]));
        expect(rows[0]!.n).toBe(i + 1);
      }
      // A transaction stays on its server connection, and its statements are unnamed now.
      const n = await db.transaction().execute(async (tx) => {
        const { rows } = await tx.executeQuery<{ n: number }>(CompiledQuery.raw(ADD, [2, 2]));
        return rows[0]!.n;
      });
      expect(n).toBe(4);
      expect(logged.filter((l) => l.level >= 50).map((l) => l.msg)).toEqual([
        expect.stringMatching(/DATABASE_PREPARED_STATEMENTS=false/),
      ]);
    } finally {
      await db.destroy();
      await pooler.stop();
    }
  });

  it("refuse one name for two statements", () => {
    expect(preparedStatement("pies_test_add", ADD)).toBe(ADD);
    expect(() => preparedStatement("pies_test_add", "select 1")).toThrow(/named twice/);
  });
});
