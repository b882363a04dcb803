import { randomBytes } from "node:crypto";
import pg from "pg";

/** Server used by tests: PIES_TEST_DATABASE_URL, or the local PostgreSQL with trust auth. */
export const testServerUrl = () =>
  process.env.PIES_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

export interface TestDatabase {
  url: string;
  drop(): Promise<void>;
}

/**
 * A fresh database on the real PostgreSQL server for one test file, dropped afterwards, so tests
 * never see each other's rows and a second run starts clean.
 */
export async function createTestDatabase(label = "t"): Promise<TestDatabase> {
  const name = `pies_${label}_${randomBytes(5).toString("hex")}`;
  const admin = new pg.Client({ connectionString: testServerUrl() });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(testServerUrl());
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: testServerUrl() });
      await client.connect();
      try {
        // Pools resolve end() before the server has seen every session go: give them a moment,
        // so that forcing the drop does not kill a session whose client has stopped listening.
        for (let i = 0; i < 50; i++) {
          const { rows } = await client.query(
            "select count(*)::int as n from pg_stat_activity where datname = $1",
            [name],
          );
          if (rows[0].n === 0) break;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        await client.query(`drop database if exists ${name} with (force)`);
      } finally {
        await client.end();
      }
    },
  };
}
