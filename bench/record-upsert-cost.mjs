#!/usr/bin/env node
// @ts-check
// What the record writer's statement costs PostgreSQL, per row and per batch, and what of it goes
// where: UC_ROWS runs (one completed record each, as a fast blocking execution leaves) written in
// batches of each of UC_SIZES records, one statement per batch on one connection, on a scratch
// database with every index and the rollup trigger; the CPU of the cluster (postmaster and
// children, from /proc) per row. Variants (UC_VARIANTS, alternated over UC_ROUNDS):
//   base        the statement as an unnamed one (parsed, analysed and planned at each batch)
//   named       the same as a named prepared statement (what the writer sends now)
//   notrigger   named, the rollup's triggers disabled        nogin   named, without the 3 GIN indexes
//   nosync      named, synchronous_commit off (no WAL flush at commit)
//   plaininsert named, without ON CONFLICT                    select  named, decoding the rows only
//   empty       `select 1`: a round trip
// The variants other than base and named take something away that the store needs: they tell what
// it costs, nothing more. Run it on a cluster of its own (PIES_TEST_DATABASE_URL; UC_PG_PID = its
// postmaster) so that nobody else's work is counted.
import pg from "pg";
import { toBinary } from "@bufbuild/protobuf";
import { buildIndexes, createDatabase, migrateToLatest } from "@pies/common/db";
import { RunSchema } from "@pies/proto/runs";
import { runsIndexBuilds, runsMigrations, writeRecords } from "@pies/runs";
import { createTestDatabase } from "@pies/testkit";
import { clusterTicks, ticksOf as ticks, ticksSince } from "./lib/cpu.mjs";
import { benchRun } from "./lib/sample-run.mjs";
import { median } from "./lib/stats.mjs";

/** @import { CompiledQuery, Kysely } from "kysely" */
/** @import { RunRecord } from "@pies/common/bus" */
/** @import { RunsDatabase } from "@pies/runs" */

/** @typedef {{ sql: string, param: unknown }} Statement the writer's statement for one batch */
/** @typedef {(client: pg.Client, s: Statement) => Promise<unknown>} Variant */

const pgPid = Number(process.env.UC_PG_PID);
const ROWS = Number(process.env.UC_ROWS ?? 4000);
const sizes = (process.env.UC_SIZES ?? "1,8,32").split(",").map(Number);
const variantNames = (process.env.UC_VARIANTS ?? "base,named").split(",");
const rounds = Number(process.env.UC_ROUNDS ?? 3);

let seq = 0;
/** @returns {RunRecord} */
function record() {
  const run = benchRun(++seq);
  return { runId: run.id, seq, data: toBinary(RunSchema, run) };
}

/**
 * The writer's statement and parameter for a batch, captured from writeRecords.
 * @param {RunRecord[]} batch
 * @returns {Promise<Statement>}
 */
async function statementOf(batch) {
  /** @type {CompiledQuery | undefined} */
  let q;
  // A stand-in for the database that keeps the one statement writeRecords sends.
  const capture = {
    executeQuery: async (/** @type {CompiledQuery} */ c) => ((q = c), { rows: [] }),
  };
  await writeRecords(/** @type {Kysely<RunsDatabase>} */ (/** @type {unknown} */ (capture)), batch);
  if (!q) throw new Error("writeRecords sent no statement");
  return { sql: q.sql, param: q.parameters[0] };
}

/** @type {Record<string, Variant>} */
const variants = {
  base: async (client, s) => client.query(s.sql, [s.param]),
  named: async (client, s) => client.query({ name: "upsert", text: s.sql, values: [s.param] }),
  json: async (client, s) =>
    client.query({
      name: "upsertj",
      text: s.sql.replace("jsonb_to_recordset($1::jsonb)", "json_to_recordset($1::json)"),
      values: [s.param],
    }),
  notrigger: async (client, s) => client.query({ name: "upsert", text: s.sql, values: [s.param] }),
  nogin: async (client, s) => client.query({ name: "upsert", text: s.sql, values: [s.param] }),
  nosync: async (client, s) => client.query({ name: "upsert", text: s.sql, values: [s.param] }),
  select: async (client, s) =>
    client.query({
      name: "sel",
      text: `select count(*) from (${s.sql.slice(s.sql.indexOf("select"), s.sql.indexOf("on conflict"))}) x`,
      values: [s.param],
    }),
  plaininsert: async (client, s) =>
    client.query({
      name: "ins",
      text: s.sql.slice(0, s.sql.indexOf("on conflict")),
      values: [s.param],
    }),
  empty: async (client) => client.query({ name: "e", text: "select 1" }),
};

/**
 * @param {string} variant
 * @param {number} size
 */
async function run(variant, size) {
  const t = await createTestDatabase("uc");
  const db = createDatabase({ url: t.url, poolMax: 1 });
  const client = new pg.Client({ connectionString: t.url });
  try {
    await migrateToLatest(db, "runs", runsMigrations);
    await buildIndexes(db, "runs", runsIndexBuilds);
    await client.connect();
    if (variant === "notrigger") await client.query("alter table runs.runs disable trigger user");
    if (variant === "nogin")
      for (const i of ["runs_tags_idx", "runs_project_parameters_idx", "runs_project_strings_trgm_idx"])
        await client.query(`drop index runs.${i}`);
    if (variant === "nosync") await client.query("set synchronous_commit = off");
    const batches = [];
    for (let i = 0; i < ROWS / size; i++) {
      const b = Array.from({ length: size }, record);
      batches.push(await statementOf(b));
    }
    const send = variants[variant];
    if (!send) throw new Error(`no variant ${variant} (UC_VARIANTS)`);
    // warm
    for (const s of batches.slice(0, 20)) await send(client, s);
    const { rows } = await client.query("select pg_backend_pid() as pid");
    const c0 = clusterTicks(pgPid);
    const b0 = ticks(rows[0].pid);
    const t0 = performance.now();
    for (const s of batches.slice(20)) await send(client, s);
    const ms = performance.now() - t0;
    const n = (batches.length - 20) * size;
    return {
      variant,
      size,
      backendUsPerRow: ((ticks(rows[0].pid) - b0) * 1e4) / n,
      clusterUsPerRow: (ticksSince(c0, clusterTicks(pgPid)) * 1e4) / n,
      wallUsPerBatch: (ms * 1000) / (batches.length - 20),
    };
  } finally {
    await client.end();
    await db.destroy();
    await t.drop();
  }
}

const all = [];
for (let r = 0; r < rounds; r++)
  for (const size of sizes)
    for (const v of r % 2 ? [...variantNames].reverse() : variantNames) {
      const x = await run(v, size);
      all.push(x);
      console.log(JSON.stringify(x, (k, val) => (typeof val === "number" ? Math.round(val) : val)));
    }
console.log("\nmedian cluster µs/row (backend µs/row), wall µs/batch");
for (const size of sizes)
  for (const v of variantNames) {
    const xs = all.filter((x) => x.variant === v && x.size === size);
    console.log(
      `size ${size} ${v}: ${median(xs.map((x) => x.clusterUsPerRow)).toFixed(0)} (${median(xs.map((x) => x.backendUsPerRow)).toFixed(0)}), ${median(xs.map((x) => x.wallUsPerBatch)).toFixed(0)}`,
    );
  }
