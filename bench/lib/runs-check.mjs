import pg from "pg";

/**
 * Waits (polling, at most `timeoutMs`) until the runs store (table runs.runs of the database at
 * `databaseUrl`) holds `expected` runs: recording may lag behind the answers (it is asynchronous).
 * Stops waiting early once there are more runs than expected (runs are never removed).
 * Resolves to { expected, recorded, waitedMs, byStatus } with the last count seen.
 */
export async function waitForRecordedRuns({ databaseUrl, expected, timeoutMs, pollMs = 250 }) {
  const client = new pg.Client({
    connectionString: databaseUrl,
    connectionTimeoutMillis: 5_000,
    statement_timeout: 5_000,
  });
  await client.connect();
  const started = Date.now();
  try {
    let recorded;
    for (;;) {
      const { rows } = await client.query("select count(*)::int as n from runs.runs");
      recorded = rows[0].n;
      if (recorded >= expected || Date.now() - started >= timeoutMs) break;
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
    const { rows } = await client.query(
      "select status::text as status, count(*)::int as n from runs.runs group by 1 order by 1",
    );
    return {
      expected,
      recorded,
      waitedMs: Date.now() - started,
      byStatus: Object.fromEntries(rows.map((r) => [r.status, r.n])),
    };
  } finally {
    await client.end().catch(() => {});
  }
}
