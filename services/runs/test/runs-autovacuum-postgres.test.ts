import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql, type Kysely } from "kysely";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { createTestDatabase, type TestDatabase } from "@pies/testkit";
import { migrations } from "../src/migrations/index.js";
import { down } from "../src/migrations/2026-11-28T12-00_runs_autovacuum.js";
import { listPartitions, makePartitions } from "../src/partitions.js";

// The runs table's autovacuum settings (docs/decisions/0057-runs-autovacuum-paced.md), as the real
// PostgreSQL server reads them back: its vacuums paced, its statistics refreshed after a fixed
// number of changed rows; the migration's down leaves the server's defaults. Partitioned (0064),
// each daily partition carries them (a partitioned table has no storage of its own).
let testDb: TestDatabase;
let db: Kysely<any>;

const PACED = {
  autovacuum_vacuum_cost_delay: "20",
  autovacuum_analyze_scale_factor: "0",
  autovacuum_analyze_threshold: "50000",
};

async function options(table: string): Promise<Record<string, string>> {
  const { rows } = await sql<{ option: string }>`
    select unnest(reloptions) as option from pg_class where oid = ${table}::regclass`.execute(db);
  return Object.fromEntries(rows.map((r) => r.option.split("=") as [string, string]));
}

beforeAll(async () => {
  testDb = await createTestDatabase("runsvacuum");
  db = createDatabase({ url: testDb.url, poolMax: 2 });
});

afterAll(async () => {
  await db?.destroy();
  await testDb?.drop();
});

describe("the runs table's autovacuum", () => {
  const upToIt = Object.fromEntries(
    Object.entries(migrations).filter(([name]) => name <= "2026-11-28T12-00_runs_autovacuum"),
  );

  it("is paced, and analyzes after a fixed number of changed rows", async () => {
    await migrateToLatest(db, "runs", upToIt);
    expect(await options("runs.runs")).toEqual(PACED);
  });

  it("goes back to the server's defaults when its migration is undone", async () => {
    await down(db);
    expect(await options("runs.runs")).toEqual({});
  });

  it("is paced on every daily partition the service makes", async () => {
    await migrateToLatest(db, "runs", migrations);
    const made = await makePartitions(db, { daysAhead: 2, days: 1 });
    expect(made).toHaveLength(3);
    const daily = (await listPartitions(db)).filter((p) => !p.isDefault);
    expect(daily.map((p) => p.name)).toEqual(made);
    for (const p of daily) expect(await options(`runs.${p.name}`)).toEqual(PACED);
  });
});
