import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompiledQuery, type Kysely } from "kysely";
import { createDatabase, preparedStatement, startDatabaseService } from "@pies/common/db";
import { createTestDatabase, type TestDatabase } from "@pies/testkit";

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
      expect(prepared).toEqual([{ name: "pies_test_add", statement: ADD }]);
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
        expect(prepared.map((p) => p.name)).toEqual(on ? ["pies_test_add"] : []);
      } finally {
        await service.stop();
      }
    }
  });

  it("refuse one name for two statements", () => {
    expect(preparedStatement("pies_test_add", ADD)).toBe(ADD);
    expect(() => preparedStatement("pies_test_add", "select 1")).toThrow(/named twice/);
  });
});
