// @ts-check
import pg from "pg";
import { api } from "./api.mjs";

/**
 * What a wait for the recorded runs saw.
 * @typedef {object} RunsCount
 * @property {number} expected
 * @property {number} recorded the last count
 * @property {number} waitedMs
 * @property {Record<string, number>} byStatus
 */

/**
 * Waits (polling, at most `timeoutMs`) until the runs store (table runs.runs of the database at
 * `databaseUrl`) holds `expected` runs: recording may lag behind the answers (it is asynchronous).
 * Stops waiting early once there are more runs than expected (runs are never removed).
 * Resolves to { expected, recorded, waitedMs, byStatus } with the last count seen.
 * @param {object} options
 * @param {string} options.databaseUrl
 * @param {number} options.expected
 * @param {number} options.timeoutMs
 * @param {number} [options.pollMs]
 * @returns {Promise<RunsCount>}
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
      recorded = /** @type {number} */ (rows[0].n);
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

/**
 * The same wait through pies' API, for a runs store that cannot be reached with SQL from outside
 * (the embedded mode's PGlite): pages of `GET /api/v1/runs?interaction=<id>&limit=1000&offset=…`
 * read to the last, the runs counted by id. The list is ordered by last update, so a run updated
 * while the pages are read can move between pages: a pass may see fewer runs than there are (never
 * more, ids are counted once), and the next pass counts again. Same result shape as above.
 * @param {object} options
 * @param {string} options.gatewayUrl
 * @param {string} options.apiKey
 * @param {string} options.interactionId
 * @param {number} options.expected
 * @param {number} options.timeoutMs
 * @param {number} [options.pollMs]
 * @param {number} [options.pageSize]
 * @returns {Promise<RunsCount>}
 */
export async function waitForRunsViaApi({
  gatewayUrl,
  apiKey,
  interactionId,
  expected,
  timeoutMs,
  pollMs = 250,
  pageSize = 1000,
}) {
  const started = Date.now();
  /** @type {Map<string, string>} run id → status */
  let seen;
  for (;;) {
    seen = new Map();
    for (let offset = 0; ; offset += pageSize) {
      const query = `interaction=${encodeURIComponent(interactionId)}&limit=${pageSize}&offset=${offset}`;
      const page = await api(gatewayUrl, apiKey, `/runs?${query}`);
      if (page.status !== 200 || !Array.isArray(page.json)) {
        throw new Error(`GET /runs?${query}: HTTP ${page.status}: ${page.text.slice(0, 300)}`);
      }
      for (const run of page.json) seen.set(run.id, run.status);
      if (page.json.length < pageSize) break;
    }
    if (seen.size >= expected || Date.now() - started >= timeoutMs) break;
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
  /** @type {Record<string, number>} */
  const byStatus = {};
  for (const status of [...seen.values()].sort()) byStatus[status] = (byStatus[status] ?? 0) + 1;
  return { expected, recorded: seen.size, waitedMs: Date.now() - started, byStatus };
}
