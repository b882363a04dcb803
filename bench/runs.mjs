#!/usr/bin/env node
// @ts-check
// pies runs search benchmark (issue 9): the record writer's insert throughput with the search
// indexes and without (runs recorded once, and runs recorded twice: processing, then ended); then the four-process stack on real PostgreSQL, with runs seeded straight
// into its database (testkit seedRuns: four projects, the API key's one of them), measured at
// 100,000 runs and at BENCH_RUNS_N: p50/p99 over HTTP of GET /runs (no filter, each filter) and
// POST /runs/search (Lucene terms, three facets, onlyMeta). Whether any list query scanned the runs
// table sequentially is read from pg_stat_user_tables. Settings (environment, all optional):
//   BENCH_RUNS_N=1000000  BENCH_RUNS_SAMPLES=40  BENCH_RUNS_WRITE=20000 (runs per write round)
//   BENCH_RUNS_WRITE_BATCH=100  BENCH_RUNS_KEEP=1 (leave the database, print its URL)
//   BENCH_RUNS_PARTS=write,trgm,search (any of them; also rollupwrite: the facet rollup's
//   triggers' cost to the record writer, disabled and enabled in alternated rounds)
//   BENCH_RUNS_TRGM_N=1000000 (runs seeded for the trigram part)
//   BENCH_RUNS_SIZES=1000000,10000000 (the sizes measured; default 100,000 and BENCH_RUNS_N)
//   BENCH_RUNS_PARTS also takes partwrite (the writer into one table and into partitions, in
//   alternated rounds) and drop (a day's partition dropped while the writer writes; BENCH_RUNS_DROP_N
//   runs over 10 days). The stack keeps every run (PIES_RUN_RETENTION_DAYS=0); the seed's 90 days
//   have their partitions, as a deployment of that age has them: BENCH_RUNS_PARTITION_DAYS wide
//   (PIES_RUN_PARTITION_DAYS; its default), and BENCH_RUNS_DROP_PARTITION_DAYS=1 for the drop part.
// The trgm part: searches the jsonpath index cannot serve (wildcards, bare terms, string ranges),
// in the runs service, on a scratch database of BENCH_RUNS_TRGM_N seeded runs, before and after
// the trigram index is built (concurrently, while a writer keeps inserting), with their plans.
import fs from "node:fs";
import os from "node:os";
import { CompiledQuery, Kysely, PostgresDialect, sql } from "kysely";
import pg from "pg";
import { create, toBinary } from "@bufbuild/protobuf";
import { toTimestamp } from "@pies/common";
import { buildIndexes, createDatabase, migrateToLatest } from "@pies/common/db";
import {
  createTestDatabase,
  createTestStream,
  expectJson,
  gatewayApi,
  seedRuns,
  startStack,
} from "@pies/testkit";
import {
  FacetType,
  ListRunsRequestSchema,
  RunSchema,
  RunStatus,
  SearchRunsRequestSchema,
} from "@pies/proto/runs";
import {
  createRunsService,
  dropPartitionsBelow,
  DEFAULT_PARTITION_DAYS,
  idPrefix,
  listPartitions,
  makePartitions,
  runsIndexBuilds,
  runsMigrations,
  writeRecords,
} from "@pies/runs";
import { percentile } from "./lib/stats.mjs";

/** @import { MessageInitShape } from "@bufbuild/protobuf" */
/** @import { Timestamp } from "@bufbuild/protobuf/wkt" */
/** @import { RunRecord } from "@pies/common/bus" */
/** @import { ListRunsRequest, Run, RunFiltersSchema, SearchRunsRequest } from "@pies/proto/runs" */
/** @import { RunsDatabase } from "@pies/runs" */
/** @import { Stack } from "@pies/testkit" */

/**
 * The runs service's reads, as this process calls them (see runsReads).
 * @typedef {object} RunsReads
 * @property {(req: ListRunsRequest) => Promise<{ runs: Run[] }>} listRuns
 * @property {(req: SearchRunsRequest) => Promise<{ runs: Run[], meta?: { total: bigint } }>} searchRuns
 */

/** @typedef {{ label: string, p50: number | undefined, p99: number | undefined, failed?: string }} Timing */

/**
 * The runs service's reads (listRuns, searchRuns) in this process, on `db`: with no record log,
 * which they do not read, and called without a call context, which they do not use.
 * @param {Kysely<RunsDatabase>} db
 * @param {{ facetRollups?: boolean }} [options]
 * @returns {RunsReads}
 */
function runsReads(db, options = {}) {
  // @ts-expect-error -- no record log (RunsDeps.log): the reads do not use it
  const service = createRunsService({ db, log: undefined, ...options });
  return /** @type {RunsReads} */ (/** @type {unknown} */ (service));
}

/**
 * @param {string} name
 * @param {number} fallback
 */
const int = (name, fallback) => {
  const raw = process.env[name];
  const value = raw === undefined || raw === "" ? fallback : Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name}: a non-negative integer`);
  return value;
};
const N = int("BENCH_RUNS_N", 1_000_000);
const SAMPLES = int("BENCH_RUNS_SAMPLES", 40);
const WRITE = int("BENCH_RUNS_WRITE", 20_000);
const WRITE_BATCH = int("BENCH_RUNS_WRITE_BATCH", 100);
const PARTS = (process.env.BENCH_RUNS_PARTS ?? "write,trgm,search").split(",").map((p) => p.trim());
// loadavg() has the 1, 5 and 15 minute averages.
const load = () => /** @type {number} */ (os.loadavg()[0]).toFixed(1);
/** @param {unknown[]} args */
const log = (...args) =>
  console.error(`[runs bench ${new Date().toISOString().slice(11, 19)}]`, ...args);
/** @param {number} n */
const fmt = (n) => n.toLocaleString("en-US");

// --- 1. The record writer's throughput, before and after the search indexes -------------------

const ROUNDS = int("BENCH_RUNS_WRITE_ROUNDS", 3);
/** The width of the search part's partitions, in days (PIES_RUN_PARTITION_DAYS). */
const PARTITION_DAYS = int("BENCH_RUNS_PARTITION_DAYS", DEFAULT_PARTITION_DAYS);

/** When the bench started: its written runs' ids are of this time, as pies makes them (newId). */
const T_WRITE = Date.now();
/** @param {number} i */
const wid = (i) => idPrefix(T_WRITE) + i.toString(16).padStart(12, "0");

/**
 * Run i as the executor records it: `processing` (no result yet), or `completed`.
 * @param {number} i
 */
function benchRun(i, status = RunStatus.COMPLETED) {
  const ended = status === RunStatus.COMPLETED;
  return create(RunSchema, {
    id: wid(i),
    projectId: `bench-w${i % 4}`,
    accountId: "acc",
    interactionId: `int-${i % 24}`,
    interactionName: "Summary",
    environmentId: `env-${i % 3}`,
    modelId: ["gpt-4o", "gpt-4o-mini", "o3-mini"][i % 3],
    status,
    parameters: {
      customer: {
        name: /** @type {string} */ (["Acme", "Globex", "Initech"][i % 3]),
        tier: "pro",
        id: i % 100000,
      },
      message: "please summarise the invoice for order " + i + " and draft a reply to support",
      lang: "en",
      priority: i % 5,
      items: [{ sku: `sku-${i % 500}`, qty: 1 + (i % 9) }],
    },
    tags: i % 3 === 0 ? ["prod", "chat"] : ["eval"],
    ...(ended && {
      tokenUse: { prompt: 120, result: 80, total: 200 },
      executionTime: BigInt(100 + (i % 5000)),
    }),
  });
}

/**
 * @param {number} from
 * @param {number} count
 * @returns {RunRecord[]}
 */
function recordBatch(from, count, status = RunStatus.COMPLETED, seqBase = 0) {
  const records = [];
  for (let i = from; i < from + count; i++) {
    records.push({
      runId: wid(i),
      seq: seqBase + i + 1,
      data: toBinary(RunSchema, benchRun(i, status)),
    });
  }
  return records;
}

/** How many batches after its `processing` record a slow run's `completed` one comes. */
const SLOW_LAG = 10;

/**
 * The record log of WRITE runs in batches of WRITE_BATCH. `fast`: one `completed` record per run
 * (a run that ends within PIES_RECORD_START_AFTER_MS is recorded once, at its end). `slow`: a
 * `processing` record, then the `completed` one SLOW_LAG batches later, half of each batch each
 * (a slower run is recorded twice: its row is inserted, then updated).
 * @param {"fast" | "slow"} pattern
 * @returns {RunRecord[][]}
 */
function recordLog(pattern) {
  if (pattern === "fast") {
    const batches = [];
    for (let i = 0; i < WRITE; i += WRITE_BATCH) batches.push(recordBatch(i, WRITE_BATCH));
    return batches;
  }
  const half = WRITE_BATCH / 2;
  const batches = [];
  let seq = 1;
  /**
   * @param {number} i
   * @param {RunStatus} status
   */
  const record = (i, status) => ({
    runId: wid(i),
    seq: seq++,
    data: toBinary(RunSchema, benchRun(i, status)),
  });
  for (let k = 0; k < Math.ceil(WRITE / half) + SLOW_LAG; k++) {
    const batch = [];
    for (let j = 0; j < half; j++) {
      const started = k * half + j;
      if (started < WRITE) batch.push(record(started, RunStatus.PROCESSING));
      const ended = (k - SLOW_LAG) * half + j;
      if (ended >= 0 && ended < WRITE) batch.push(record(ended, RunStatus.COMPLETED));
    }
    batches.push(batch);
  }
  return batches;
}

/**
 * One round: a scratch database migrated, with every search index (built as the service builds
 * them) or with none of them, then WRITE runs written by the record writer's statement, on one
 * connection: the runs per second, and the CPU time its PostgreSQL backend spent (read from
 * /proc where the server runs on this machine; less moved by other work than the wall clock).
 * @param {boolean} withIndexes
 * @param {"fast" | "slow"} pattern
 */
async function writeRound(withIndexes, pattern, layout = PARTITIONED) {
  const t = await createTestDatabase("runswrite");
  const db = createDatabase({ url: t.url, poolMax: 1 });
  try {
    await migrateLayout(db, layout);
    if (withIndexes) {
      const report = await buildIndexes(db, "runs", runsIndexBuilds);
      if (report.built.length !== runsIndexBuilds.length) throw new Error("indexes not built");
    }
    const batches = recordLog(pattern);
    const backend = await backendCpu(db);
    const cpuBefore = backend();
    const started = performance.now();
    for (const batch of batches) await writeRecords(db, batch);
    const ms = performance.now() - started;
    const cpuAfter = backend();
    return {
      label: layout === PARTITIONED ? (withIndexes ? "after" : "before") : ONE_TABLE,
      runsPerSecond: Math.round((WRITE / ms) * 1000),
      dbCpuMs: cpuBefore === null || cpuAfter === null ? null : cpuAfter - cpuBefore,
    };
  } finally {
    await db.destroy();
    await t.drop();
  }
}

const PARTITIONED = "partitioned";
const ONE_TABLE = "one table";
const PARTITIONING = "2026-12-07T06-00_runs_partitioned";

/**
 * The runs schema as it is (`partitioned`, with the partitions of the next days made), or as one
 * table (every migration but the one that partitions it, and the tombstones it adds: the record
 * writer's statement reads them).
 * @param {Kysely<RunsDatabase>} db
 * @param {string} layout
 */
async function migrateLayout(db, layout) {
  if (layout === PARTITIONED) {
    await migrateToLatest(db, "runs", runsMigrations);
    await makePartitions(db);
    return;
  }
  await migrateToLatest(
    db,
    "runs",
    Object.fromEntries(Object.entries(runsMigrations).filter(([name]) => name !== PARTITIONING)),
  );
  await sql`create table runs.deleted_runs (id text primary key, deleted_at timestamptz not null default now())`.execute(
    db,
  );
}

/**
 * A reader of the CPU time (ms) of the pool's one backend so far; null if not on this machine.
 * @param {Kysely<RunsDatabase>} db
 */
async function backendCpu(db) {
  const { rows } = await sql`select pg_backend_pid() as pid`.execute(db);
  const file = `/proc/${/** @type {{ pid: number }} */ (rows[0]).pid}/stat`;
  const tick = 1000 / 100; // USER_HZ is 100 on Linux
  return () => {
    try {
      // utime and stime: the 14th and 15th fields, the 12th and 13th after the command's ")".
      // (A stat without ") " throws here, as a missing file does: null.)
      const fields = /** @type {string} */ (fs.readFileSync(file, "utf8").split(") ")[1]).split(
        " ",
      );
      return (Number(fields[11]) + Number(fields[12])) * tick;
    } catch {
      return null;
    }
  };
}

/**
 * @param {"fast" | "slow"} pattern
 * @param {"indexes" | "partitions"} compare without and with the search indexes (partitioned),
 *   or one table and partitioned (with the indexes)
 */
async function writeThroughput(pattern, compare = "indexes") {
  /** @type {Awaited<ReturnType<typeof writeRound>>[]} */
  const rounds = [];
  // Alternated, ROUNDS rounds each, so that a noisy neighbour hits both alike.
  for (let r = 0; r < ROUNDS; r++) {
    if (compare === "indexes") rounds.push(await writeRound(false, pattern));
    else rounds.push(await writeRound(true, pattern, ONE_TABLE));
    rounds.push(await writeRound(true, pattern));
  }
  const first = compare === "indexes" ? "before" : ONE_TABLE;
  /**
   * @param {string} label
   * @param {"runsPerSecond" | "dbCpuMs"} key
   * @returns {number | null} null when a round has no figure (dbCpuMs off this machine)
   */
  const median = (label, key) => {
    const values = rounds.filter((x) => x.label === label).map((x) => x[key]);
    if (values.includes(null)) return null;
    // ROUNDS ≥ 1: a value in the middle.
    return /** @type {number} */ (
      /** @type {number[]} */ (values).sort((a, b) => a - b)[Math.floor(values.length / 2)]
    );
  };
  /** @param {string} label */
  const best = (label) =>
    Math.max(...rounds.filter((x) => x.label === label).map((x) => x.runsPerSecond));
  return {
    // runsPerSecond is never null.
    before: /** @type {number} */ (median(first, "runsPerSecond")),
    after: /** @type {number} */ (median("after", "runsPerSecond")),
    bestBefore: best(first),
    bestAfter: best("after"),
    cpuBefore: median(first, "dbCpuMs"),
    cpuAfter: median("after", "dbCpuMs"),
    rounds: rounds
      .map(
        (r) =>
          `${r.label} ${fmt(r.runsPerSecond)}${r.dbCpuMs === null ? "" : ` (${r.dbCpuMs} ms)`}`,
      )
      .join(", "),
  };
}

/**
 * One round of the rollup's write cost: a scratch database migrated with every search index, its
 * rollup triggers enabled or disabled, then WRITE runs written by the record writer's statement,
 * each twice (processing, then completed: an insert, then an update of the same rows).
 * @param {boolean} withRollup
 */
async function rollupWriteRound(withRollup) {
  const t = await createTestDatabase("runsrollupwrite");
  const db = createDatabase({ url: t.url, poolMax: 2 });
  try {
    await migrateToLatest(db, "runs", runsMigrations);
    const report = await buildIndexes(db, "runs", runsIndexBuilds);
    if (report.built.length !== runsIndexBuilds.length) throw new Error("indexes not built");
    if (!withRollup) {
      for (const trigger of ["insert", "update", "delete", "truncate"]) {
        await db.executeQuery(
          CompiledQuery.raw(`alter table runs.runs disable trigger run_rollups_${trigger}`),
        );
      }
    }
    const batches = [];
    for (let i = 0; i < WRITE; i += WRITE_BATCH) {
      batches.push(recordBatch(i, WRITE_BATCH, RunStatus.PROCESSING));
      batches.push(recordBatch(i, WRITE_BATCH, RunStatus.COMPLETED, WRITE));
    }
    const started = performance.now();
    for (const batch of batches) await writeRecords(db, batch);
    const ms = performance.now() - started;
    return {
      label: withRollup ? "after" : "before",
      runsPerSecond: Math.round((WRITE / ms) * 1000),
      ms,
    };
  } finally {
    await db.destroy();
    await t.drop();
  }
}

async function rollupWriteThroughput() {
  /** @type {Awaited<ReturnType<typeof rollupWriteRound>>[]} */
  const rounds = [];
  // Alternated, ROUNDS rounds each, so that a noisy neighbour hits both alike.
  for (let r = 0; r < ROUNDS; r++) {
    rounds.push(await rollupWriteRound(false));
    rounds.push(await rollupWriteRound(true));
  }
  /** @param {string} label */
  const median = (label) => {
    const values = rounds.filter((x) => x.label === label).map((x) => x.runsPerSecond);
    // ROUNDS ≥ 1: a value in the middle.
    return /** @type {number} */ (values.sort((a, b) => a - b)[Math.floor(values.length / 2)]);
  };
  return {
    before: median("before"),
    after: median("after"),
    rounds: rounds.map((r) => `${r.label} ${fmt(r.runsPerSecond)}`).join(", "),
  };
}

// --- 2. The trigram index: searches before and after it, writes while it builds --------------

const TRGM_N = int("BENCH_RUNS_TRGM_N", 1_000_000);
/** The seeder's first project (of its default four). */
const TRGM_PROJECT = "seed-p1";
/** @type {[string, { query: string, onlyMeta?: boolean }][]} */
const TRGM_CASES = [
  ["wildcard prefix customer.name:Glob*", { query: "customer.name:Glob*" }],
  ["wildcard substring message:*refund*", { query: "message:*refund*" }],
  ["wildcard 1% message:*subscription*renewal*", { query: "message:*subscription*renewal*" }],
  [
    "wildcard rare message:*urgent*subscription*thanks*",
    { query: "message:*urgent*subscription*thanks*" },
  ],
  ["bare term Vandelay (any value)", { query: "Vandelay" }],
  ["string range customer.name:[Stark TO Starz]", { query: "customer.name:[Stark TO Starz]" }],
  ["onlyMeta total of message:*refund*", { query: "message:*refund*", onlyMeta: true }],
  ["onlyMeta total of Vandelay", { query: "Vandelay", onlyMeta: true }],
];

/**
 * Each case's p50/p99 in the runs service, and the indexes its statements' plans use.
 * @param {string} url
 * @param {string} project
 */
async function trigramCases(url, project) {
  /** @type {CompiledQuery[]} */
  const queries = [];
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  /** @type {Kysely<RunsDatabase>} */
  const db = new Kysely({
    dialect: new PostgresDialect({ pool }),
    log: (event) => {
      if (event.level === "query") queries.push(event.query);
    },
  });
  const svc = runsReads(db);
  const out = [];
  try {
    for (const [label, body] of TRGM_CASES) {
      const send = () =>
        svc.searchRuns(create(SearchRunsRequestSchema, { projectId: project, ...body }));
      const m = await measure(label, send);
      queries.length = 0;
      const res = await send();
      const plans = [];
      for (const q of queries.filter((x) => x.sql.includes("@?"))) {
        const { rows } = await db.executeQuery(
          CompiledQuery.raw(`explain (analyze, timing off) ${q.sql}`, [...q.parameters]),
        );
        const text = /** @type {{ "QUERY PLAN": string }[]} */ (rows)
          .map((r) => r["QUERY PLAN"])
          .join("\n");
        const used = [...new Set(text.match(/runs_[a-z_]+_idx|Seq Scan on runs/g) ?? [])];
        const time = /Execution Time: ([\d.]+) ms/.exec(text)?.[1];
        plans.push(`${used.join(" + ") || "?"} (${time} ms)`);
      }
      out.push({
        ...m,
        matches: body.onlyMeta ? Number(res.meta?.total ?? 0) : res.runs.length,
        plans: plans.join("; "),
      });
    }
  } finally {
    await db.destroy();
  }
  return out;
}

async function trigramPart() {
  const given = process.env.BENCH_RUNS_TRGM_URL;
  const t = given ? { url: given, drop: async () => {} } : await createTestDatabase("runstrgm");
  const db = createDatabase({ url: t.url, poolMax: 4 });
  const client = new pg.Client({ connectionString: t.url });
  await client.connect();
  const trigram = runsIndexBuilds.filter((b) => b.extensions?.includes("pg_trgm"));
  const lines = [];
  try {
    await migrateToLatest(db, "runs", runsMigrations);
    await client.query("drop index if exists runs.runs_parameters_trgm_idx");
    await client.query("drop index if exists runs.runs_project_parameters_trgm_idx");
    await client.query("drop index if exists runs.runs_project_strings_trgm_idx");
    await buildIndexes(
      db,
      "runs",
      runsIndexBuilds.filter((b) => !b.extensions),
    );
    const { rows } = await client.query("select count(*)::int as n from runs.runs");
    let seedMs = 0;
    if (rows[0].n === 0) {
      await makePartitions(db, { from: Date.now() - 91 * DAY_MS });
      log(`trgm: seeding ${fmt(TRGM_N)} runs into a scratch database`);
      seedMs = await seedRuns(client, { count: TRGM_N });
      await client.query("vacuum analyze runs.runs");
      await client.query("vacuum analyze runs.run_rollups");
    }
    const { rows: sized } = await client.query(
      "select count(*)::int as n, count(*) filter (where project_id = $1)::int as p from runs.runs",
      [TRGM_PROJECT],
    );
    log(`trgm: ${fmt(sized[0].n)} runs; measuring without the trigram index`);
    const before = await trigramCases(t.url, TRGM_PROJECT);

    // The build, concurrently, while the record writer's statement keeps inserting.
    let writing = true;
    /** @type {number[]} */
    const latencies = [];
    const writer = (async () => {
      for (let i = 0; writing; i += WRITE_BATCH) {
        const batch = recordBatch(10_000_000 + i, WRITE_BATCH);
        const started = performance.now();
        await writeRecords(db, batch);
        latencies.push(performance.now() - started);
      }
    })();
    const started = performance.now();
    const report = await buildIndexes(db, "runs", trigram);
    const buildMs = performance.now() - started;
    writing = false;
    await writer;
    if (report.built.length !== 1)
      throw new Error(`trigram index not built: ${JSON.stringify(report)}`);
    const { rows: size } = await client.query(
      "select pg_size_pretty(pg_relation_size('runs.runs_project_strings_trgm_idx')) as trgm, " +
        "pg_size_pretty(pg_relation_size('runs.runs')) as heap",
    );
    latencies.sort((a, b) => a - b);
    log(`trgm: built in ${(buildMs / 1000).toFixed(1)} s; measuring with it`);
    const after = await trigramCases(t.url, TRGM_PROJECT);
    lines.push(
      `Trigram index: ${fmt(sized[0].n)} runs (the project searched holds ${fmt(sized[0].p)})` +
        (seedMs ? `, seeded in ${(seedMs / 1000).toFixed(1)} s` : "") +
        `; built concurrently in ${(buildMs / 1000).toFixed(1)} s (${size[0].trgm}; table ` +
        `${size[0].heap}) while the record writer's statement inserted ${fmt(latencies.length * WRITE_BATCH)} ` +
        `runs in batches of ${WRITE_BATCH} (batch p50 ${ms(percentile(latencies, 50) ?? 0)}, ` +
        `max ${ms(latencies.at(-1) ?? 0)}). Runs service, ${SAMPLES} samples each, load ${load()}:`,
      "",
      "| case | matches | p50 without | p99 without | p50 with | p99 with | plan without | plan with |",
      "|---|---|---|---|---|---|---|---|",
      ...before.map((b, i) => {
        // The same cases in the same order.
        const a = /** @type {(typeof after)[number]} */ (after[i]);
        return `| ${b.label} | ${fmt(a.matches)} | ${ms(b.p50)} | ${ms(b.p99)} | ${ms(a.p50)} | ${ms(a.p99)} | ${b.plans} | ${a.plans} |`;
      }),
      "",
    );
  } finally {
    await client.end();
    await db.destroy();
    if (!given) await t.drop();
  }
  return lines;
}

// --- 2b. Dropping a day's partition while the record writer writes --------------------------

const DAY_MS = 86_400_000;
const DROP_N = int("BENCH_RUNS_DROP_N", 1_000_000);
const DROP_DAYS = 10;
/** The width of the drop part's partitions, in days. */
const DROP_WIDTH = int("BENCH_RUNS_DROP_PARTITION_DAYS", 1);

/**
 * DROP_N runs seeded over DROP_DAYS daily partitions (with the search indexes), then the oldest
 * three partitions dropped one by one (the retention's dropPartitionsBelow: the rollups' counts of
 * its runs taken out, then the drop) while the record writer's statement keeps writing new runs in
 * batches of WRITE_BATCH: each drop's time, and the writer's batch latencies during the drops and
 * outside them.
 */
async function dropPart() {
  const t = await createTestDatabase("runsdrop");
  const db = createDatabase({ url: t.url, poolMax: 4 });
  const client = new pg.Client({ connectionString: t.url });
  await client.connect();
  const lines = [];
  try {
    await migrateToLatest(db, "runs", runsMigrations);
    await buildIndexes(db, "runs", runsIndexBuilds);
    const now = Date.now();
    await makePartitions(db, { now, from: now - (DROP_DAYS + 1) * DAY_MS, days: DROP_WIDTH });
    log(`drop: seeding ${fmt(DROP_N)} runs over ${DROP_DAYS} days`);
    await seedRuns(client, { count: DROP_N, spanDays: DROP_DAYS, end: new Date(now) });
    await client.query("vacuum analyze runs.runs");
    /** @type {{ at: number, ms: number }[]} */
    const batches = [];
    let writing = true;
    const writer = (async () => {
      for (let i = 0; writing; i += WRITE_BATCH) {
        const started = performance.now();
        await writeRecords(db, recordBatch(20_000_000 + i, WRITE_BATCH));
        batches.push({ at: started, ms: performance.now() - started });
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 3000));
    /** @type {{ name: string, runs: number, ms: number, lockedMs: number, from: number, to: number }[]} */
    const drops = [];
    // The oldest three that end before the writer's runs begin (a partition the writer writes
    // is never past the retention: the writer refuses runs past the floor).
    const past = (await listPartitions(db)).filter(
      (x) => !x.isDefault && x.to !== null && x.to <= idPrefix(now),
    );
    for (const p of past.slice(0, 3)) {
      const { rows } = await client.query(`select count(*)::int as n from runs."${p.name}"`);
      const from = performance.now();
      let lockedMs = 0;
      const dropped = await dropPartitionsBelow(db, /** @type {string} */ (p.to), {
        lockTimeoutMs: 1000,
        onDropped: (d) => (lockedMs = d.lockedMs),
      });
      const to = performance.now();
      if (!dropped.includes(p.name)) throw new Error(`${p.name} not dropped: ${dropped}`);
      drops.push({ name: p.name, runs: rows[0].n, ms: to - from, lockedMs, from, to });
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
    writing = false;
    await writer;
    const during = batches.filter((b) => drops.some((d) => b.at + b.ms >= d.from && b.at <= d.to));
    const outside = batches.filter((b) => !during.includes(b));
    /** @param {{ ms: number }[]} xs */
    const stats = (xs) => {
      const sorted = xs.map((x) => x.ms).sort((a, b) => a - b);
      return `p50 ${ms(percentile(sorted, 50) ?? 0)}, max ${ms(sorted.at(-1) ?? 0)} (${sorted.length} batches)`;
    };
    lines.push(
      `Dropping a partition (${fmt(DROP_N)} runs over ${DROP_DAYS} days, partitions ${DROP_WIDTH} ` +
        `day${DROP_WIDTH === 1 ? "" : "s"} wide, search ` +
        `indexes built; the record writer's statement writing batches of ${WRITE_BATCH} new runs ` +
        `5 ms apart throughout; load ${load()}): ` +
        drops
          .map(
            (d) =>
              `${d.name} (${fmt(d.runs)} runs) ${ms(d.ms)} in all, runs.runs locked ${ms(d.lockedMs)}`,
          )
          .join(", ") +
        `. The writer's batches during the drops: ${stats(during)}; outside them: ${stats(outside)}.`,
      "",
    );
  } finally {
    await client.end();
    await db.destroy();
    await t.drop();
  }
  return lines;
}

// --- 3. The stack, seeded, measured over HTTP ------------------------------------------------

/**
 * Two cases measured sample by sample in turn, so that a noisy neighbour hits both alike. A case
 * whose call fails (a count over every run past the search's timeout on a loaded machine) is not
 * sampled again: its row says why, and the run goes on.
 * @param {[string, () => Promise<unknown>]} a
 * @param {[string, () => Promise<unknown>]} b
 * @returns {Promise<Timing[]>}
 */
async function measurePair([labelA, sendA], [labelB, sendB]) {
  /** @type {(string | undefined)[]} */
  const failed = [undefined, undefined];
  /** @type {[number[], number[]]} */
  const times = [[], []];
  for (let i = 0; i < SAMPLES + 3; i++) {
    for (const [k, send] of [sendA, sendB].entries()) {
      if (failed[k]) continue;
      const started = performance.now();
      try {
        await send();
      } catch (err) {
        failed[k] = /** @type {Error} */ (err).message;
        continue;
      }
      if (i >= 3) /** @type {number[]} */ (times[k]).push(performance.now() - started); // 3 warm-ups
    }
  }
  return [labelA, labelB].map((label, k) => {
    const sorted = /** @type {number[]} */ (times[k]).sort((a, b) => a - b);
    const why = failed[k] && `failed after ${sorted.length} samples: ${failed[k]}`;
    return { label, p50: percentile(sorted, 50), p99: percentile(sorted, 99), failed: why };
  });
}

/**
 * @template T
 * @param {string} label
 * @param {() => Promise<T>} send
 */
async function measure(label, send) {
  for (let i = 0; i < 3; i++) await send(); // warm up
  /** @type {number[]} */
  const times = [];
  /** @type {T | undefined} */
  let last;
  for (let i = 0; i < SAMPLES; i++) {
    const started = performance.now();
    last = await send();
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  return { label, p50: percentile(times, 50), p99: percentile(times, 99), last };
}

/**
 * @param {Stack} stack
 * @param {pg.Client} client
 * @param {string} project
 * @param {string} databaseUrl
 */
async function measureAll(stack, client, project, databaseUrl) {
  const api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
  /**
   * @param {string} method
   * @param {string} path
   * @param {unknown} [body]
   */
  const call = async (method, path, body) => expectJson(await api(path, { method, body }));
  const { rows } = await client.query(
    "select parent_id from runs.runs where project_id = $1 and parent_id is not null limit 1",
    [project],
  );
  const parent = rows[0]?.parent_id;
  const { rows: span } = await client.query(
    "select min(updated_at) as lo, max(updated_at) as hi from runs.runs where project_id = $1",
    [project],
  );
  const lo = span[0].lo.getTime();
  const hi = span[0].hi.getTime() + 1;
  const anchor = new Date(lo + (hi - lo) / 2).toISOString();
  const months = [0, 1, 2, 3].map((i) => new Date(lo + ((hi - lo) * i) / 3).toISOString());
  const threeFacets = {
    status: { type: "string", path: "status" },
    model: { type: "string", path: "modelId" },
    month: { type: "date", path: "updated_at", boundaries: months, default: "other" },
  };

  const seqBefore = await seqScans(client);
  const list = [];
  /** @type {[string, string][]} */
  const lists = [
    ["GET /runs (no filter)", ""],
    ["GET /runs ?limit=10", "?limit=10"],
    ["GET /runs ?interaction=", "?interaction=int-5"],
    ["GET /runs ?model=", "?model=o3-mini"],
    ["GET /runs ?environment=", "?environment=env-1"],
    ["GET /runs ?status=failed", "?status=failed"],
    ["GET /runs ?tag=", "?tag=nightly"],
    ["GET /runs ?parent=false", "?parent=false"],
    ["GET /runs ?parent=<id>", `?parent=${parent}`],
    ["GET /runs ?anchorDate= (before)", `?anchorDate=${anchor}&anchorDateDirection=before`],
    ["GET /runs ?status&model&tag", "?status=completed&model=gpt-4o&tag=prod"],
  ];
  for (const [label, query] of lists) {
    list.push(await measure(label, () => call("GET", `/runs${query}`)));
  }
  const seqAfter = await seqScans(client);
  const plans = await explainLists(databaseUrl, project, parent, anchor);
  const search = [];
  /** @type {[string, object][]} */
  const searches = [
    ["search Lucene field term", { query: "customer.name:Acme" }],
    ["search Lucene rare term", { query: "customer.id:4242" }],
    [
      "search Lucene AND + filter",
      { query: "customer.tier:pro AND lang:fr", filters: { status: "failed" } },
    ],
    ["search Lucene wildcard", { query: "customer.name:Ac*" }],
    ["search bare term (any value)", { query: "Globex" }],
    ["search 3 facets (whole project)", { facets: threeFacets }],
    ["search onlyMeta + 3 facets", { onlyMeta: true, facets: threeFacets }],
    ["search onlyMeta total of a term", { onlyMeta: true, query: "customer.name:Acme" }],
    ["search tags facet", { onlyMeta: true, facets: { tags: { type: "string", path: "tags" } } }],
  ];
  for (const [label, body] of searches) {
    search.push(await measure(label, () => call("POST", "/runs/search", body)));
  }
  // The runs service alone, in this process on the same database: the store's share of the above.
  /** @type {Kysely<RunsDatabase>} */
  const db = createDatabase({ url: databaseUrl, poolMax: 4 });
  const svc = runsReads(db);
  const overRuns = runsReads(db, { facetRollups: false });
  const facets = {
    status: { type: FacetType.STRING, path: "status" },
    model: { type: FacetType.STRING, path: "modelId" },
    month: {
      type: FacetType.DATE,
      path: "updated_at",
      // Dates: each a timestamp.
      dateBoundaries: months.map((m) => /** @type {Timestamp} */ (toTimestamp(m))),
      defaultBucket: "other",
    },
  };
  /** @type {Timing[]} */
  const service = [];
  try {
    /** @type {[string, () => Promise<unknown>][]} */
    const cases = [
      [
        "service ListRuns (no filter)",
        () => svc.listRuns(create(ListRunsRequestSchema, { projectId: project })),
      ],
      [
        "service ListRuns ?status=failed",
        () =>
          svc.listRuns(
            create(ListRunsRequestSchema, {
              projectId: project,
              filters: { status: RunStatus.FAILED },
            }),
          ),
      ],
      [
        "service SearchRuns Lucene field term",
        () =>
          svc.searchRuns(
            create(SearchRunsRequestSchema, { projectId: project, query: "customer.name:Acme" }),
          ),
      ],
    ];
    for (const [label, send] of cases) {
      service.push(await measure(label, send));
    }
    // The rollup's answer and the count over the runs, in turn.
    /** @param {RunsReads} s */
    const threeFacetsOf = (s) => () =>
      s.searchRuns(create(SearchRunsRequestSchema, { projectId: project, onlyMeta: true, facets }));
    service.push(
      ...(await measurePair(
        ["service SearchRuns 3 facets (rollup)", threeFacetsOf(svc)],
        ["service SearchRuns 3 facets (counted over the runs)", threeFacetsOf(overRuns)],
      )),
    );
  } finally {
    await db.destroy();
  }
  return { cases: [...list, ...search, ...service], listSeqScans: seqAfter - seqBefore, plans };
}

/**
 * EXPLAIN of the exact SQL ListRuns sends for each list filter (the runs service in this process,
 * over a Kysely that records its queries): the filters whose plan scans the runs table sequentially.
 * @param {string} databaseUrl
 * @param {string} project
 * @param {string} parent
 * @param {string} anchor
 */
async function explainLists(databaseUrl, project, parent, anchor) {
  /** @type {CompiledQuery[]} */
  const queries = [];
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  /** @type {Kysely<RunsDatabase>} */
  const db = new Kysely({
    dialect: new PostgresDialect({ pool }),
    log: (event) => {
      if (event.level === "query") queries.push(event.query);
    },
  });
  const svc = runsReads(db);
  /** @type {string[]} */
  const seq = [];
  try {
    /** @type {[string, MessageInitShape<typeof RunFiltersSchema>][]} */
    const lists = [
      ["none", {}],
      ["interaction", { interactionIds: ["int-5"] }],
      ["model", { models: ["o3-mini"] }],
      ["environment", { environmentIds: ["env-1"] }],
      ["status", { status: RunStatus.FAILED }],
      ["tag", { tags: ["nightly"] }],
      ["parent=false", { topLevelOnly: true }],
      ["parent=<id>", { parentId: parent }],
      ["anchorDate", { anchorDate: toTimestamp(anchor), anchorDirection: 2 }],
      ["status&model&tag", { status: RunStatus.COMPLETED, models: ["gpt-4o"], tags: ["prod"] }],
    ];
    for (const [label, filters] of lists) {
      queries.length = 0;
      await svc.listRuns(create(ListRunsRequestSchema, { projectId: project, filters }));
      // ListRuns sends one statement.
      const query = /** @type {CompiledQuery} */ (queries.at(-1));
      const { rows } = await db.executeQuery(
        CompiledQuery.raw(`explain ${query.sql}`, [...query.parameters]),
      );
      const plan = /** @type {{ "QUERY PLAN": string }[]} */ (rows)
        .map((r) => r["QUERY PLAN"])
        .join("\n");
      if (/Seq Scan on runs/.test(plan)) seq.push(label);
    }
  } finally {
    await db.destroy();
  }
  return { explained: 10, seq };
}

/** @param {pg.Client} client */
async function seqScans(client) {
  const { rows } = await client.query(
    "select seq_scan from pg_stat_user_tables where schemaname = 'runs' and relname = 'runs'",
  );
  // Statistics reach the view with a delay (stats_fetch_consistency, flush interval): wait it out.
  await new Promise((resolve) => setTimeout(resolve, 1500));
  await client.query("select pg_stat_clear_snapshot()");
  return Number(rows[0].seq_scan);
}

async function main() {
  const lines = [`## runs search bench (${new Date().toISOString()})`, ""];
  if (PARTS.includes("write")) {
    for (const pattern of /** @type {const} */ (["fast", "slow"])) {
      log(
        `write throughput, ${pattern} runs: ${fmt(WRITE)} runs in batches of ${WRITE_BATCH}, ${ROUNDS} rounds each`,
      );
      const loadBefore = load();
      const write = await writeThroughput(pattern);
      log(
        `writer runs/s: before ${fmt(write.before)}, after ${fmt(write.after)} (${write.rounds})`,
      );
      /** @param {number | null} ms */
      const perRun = (ms) => (ms === null ? "?" : `${((ms * 1000) / WRITE).toFixed(1)} µs`);
      lines.push(
        `Record writer, ${fmt(WRITE)} ${pattern} runs (${
          pattern === "fast"
            ? "one completed record each"
            : `a processing record, then the completed one ${SLOW_LAG} batches later`
        }) in batches of ${WRITE_BATCH} into an empty table, ` +
          `${ROUNDS} alternated rounds, load ${loadBefore} → ${load()}: median ` +
          `${fmt(write.before)} runs/s without the search indexes, ${fmt(write.after)} with them; ` +
          `best ${fmt(write.bestBefore)} and ${fmt(write.bestAfter)}; the database backend's CPU ` +
          `per run ${perRun(write.cpuBefore)} without, ${perRun(write.cpuAfter)} with ` +
          `(rounds, runs/s and backend CPU: ${write.rounds}).`,
        "",
      );
    }
  }
  if (PARTS.includes("partwrite")) {
    for (const pattern of /** @type {const} */ (["fast", "slow"])) {
      log(`partitioned write, ${pattern} runs: ${fmt(WRITE)} runs, ${ROUNDS} rounds each`);
      const loadBefore = load();
      const write = await writeThroughput(pattern, "partitions");
      /** @param {number | null} ms */
      const perRun = (ms) => (ms === null ? "?" : `${((ms * 1000) / WRITE).toFixed(1)} µs`);
      lines.push(
        `Record writer with the search indexes, ${fmt(WRITE)} ${pattern} runs in batches of ` +
          `${WRITE_BATCH}, one table against partitioned (today's partition), ${ROUNDS} ` +
          `alternated rounds, load ${loadBefore} → ${load()}: median ${fmt(write.before)} runs/s ` +
          `one table, ${fmt(write.after)} partitioned (×${(write.after / write.before).toFixed(2)}); ` +
          `best ${fmt(write.bestBefore)} and ${fmt(write.bestAfter)}; backend CPU per run ` +
          `${perRun(write.cpuBefore)} and ${perRun(write.cpuAfter)} (${write.rounds}).`,
        "",
      );
    }
  }
  if (PARTS.includes("drop")) lines.push(...(await dropPart()));
  if (PARTS.includes("rollupwrite")) {
    log(`rollup write cost: ${fmt(WRITE)} runs, each written twice, ${ROUNDS} rounds each`);
    const loadBefore = load();
    const write = await rollupWriteThroughput();
    lines.push(
      `Record writer with the search indexes, ${fmt(WRITE)} runs in batches of ${WRITE_BATCH}, ` +
        `each written twice (processing, then completed), ${ROUNDS} alternated rounds each ` +
        `(load average ${loadBefore} → ${load()}): median ${fmt(write.before)} runs/s with the ` +
        `rollup triggers disabled, ${fmt(write.after)} with them (${write.rounds}).`,
      "",
    );
  }
  if (PARTS.includes("trgm")) lines.push(...(await trigramPart()));
  if (!PARTS.includes("search")) {
    console.log(lines.join("\n"));
    return;
  }

  log("starting the stack (catalog, runs, executor, gateway)");
  const database = await createTestDatabase("runsbench");
  const stream = createTestStream();
  // Nothing of the seed is dropped meanwhile (90 days of runs, up to now).
  const stack = await startStack({
    databaseUrl: database.url,
    natsEnv: stream.env,
    env: {
      PIES_RUN_RETENTION_DAYS: "0",
      PIES_RUN_PARTITION_DAYS: String(PARTITION_DAYS),
      // The seed's processing runs have heartbeats days old: the sweeper would fail them, 1,000
      // every 10 s, rewriting runs while the cases are measured (bench/console.mjs found it).
      PIES_RUN_LEASE_SECONDS: String(365 * 86_400),
      PIES_SWEEP_INTERVAL_SECONDS: "86400",
    },
  });
  const project = stack.bootstrap.project;
  const projects = [project, "bench-p2", "bench-p3", "bench-p4"];
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  const sizes = process.env.BENCH_RUNS_SIZES
    ? process.env.BENCH_RUNS_SIZES.split(",").map(Number)
    : N > 100_000
      ? [100_000, N]
      : [N];
  // The partitions of the seed's 90 days, as a deployment of that age has them.
  const partitioner = createDatabase({ url: database.url, poolMax: 1 });
  await makePartitions(partitioner, { from: Date.now() - 91 * DAY_MS, days: PARTITION_DAYS });
  await partitioner.destroy();
  /**
   * @type {({ size: number, projectRuns: number, seedMs: number, seededRuns: number,
   *   analyzeMs: number, load: string, rollup: { rows: number, project_rows: number,
   *   bytes: number, run_bytes: number, partitions: number } }
   *   & Awaited<ReturnType<typeof measureAll>>)[]}
   */
  const results = [];
  let seeded = 0;
  let seedMs = 0;
  try {
    for (const size of sizes) {
      log(`seeding to ${fmt(size)} runs (${fmt(size - seeded)} more), four projects`);
      const more = size - seeded;
      const ms = await seedRuns(client, {
        count: size - seeded,
        from: seeded,
        projects,
        onProgress: (n) => (n % 200_000 === 0 ? log(`  ${fmt(seeded + n)}`) : undefined),
      });
      seedMs += ms;
      seeded = size;
      const analyze = performance.now();
      await client.query("vacuum analyze runs.runs");
      await client.query("vacuum analyze runs.run_rollups");
      const analyzeMs = performance.now() - analyze;
      log(
        `seeded in ${(ms / 1000).toFixed(1)} s; vacuum analyze ${(analyzeMs / 1000).toFixed(1)} s`,
      );
      const { rows } = await client.query(
        "select count(*)::int as n from runs.runs where project_id = $1",
        [project],
      );
      const { rows: rollupSize } = await client.query(
        `select (select count(*)::int from runs.run_rollups) as rows,
           (select count(*)::int from runs.run_rollups where project_id = $1) as project_rows,
           pg_total_relation_size('runs.run_rollups') + pg_total_relation_size('runs.run_tag_rollups') as bytes,
           (select sum(pg_total_relation_size(i.inhrelid)) from pg_inherits i
            where i.inhparent = 'runs.runs'::regclass)::bigint as run_bytes,
           (select count(*)::int from pg_inherits i where i.inhparent = 'runs.runs'::regclass) as partitions`,
        [project],
      );
      const loadBefore = load();
      const measured = await measureAll(stack, client, project, database.url);
      results.push({
        size,
        projectRuns: rows[0].n,
        seedMs: ms,
        seededRuns: more,
        analyzeMs,
        load: `${loadBefore} → ${load()}`,
        rollup: rollupSize[0],
        ...measured,
      });
    }
  } finally {
    await client.end();
    await stack.stop();
    await stream.remove();
    if (process.env.BENCH_RUNS_KEEP !== "1") await database.drop();
    else log(`kept: ${database.url}`);
  }

  for (const r of results) {
    lines.push(
      `Seeding to ${fmt(r.size)} runs: ${(r.seedMs / 1000).toFixed(1)} s (+ vacuum analyze ` +
        `${(r.analyzeMs / 1000).toFixed(1)} s); the key's project holds ${fmt(r.projectRuns)}. ` +
        `EXPLAIN of the ${r.plans.explained} list queries: ` +
        `${r.plans.seq.length === 0 ? "no sequential scan of runs" : `sequential scan with ${r.plans.seq.join(", ")}`}` +
        ` (pg_stat_user_tables counted ${r.listSeqScans} sequential scans of runs.runs, by any ` +
        `process, while the list cases ran). ` +
        `Load average (1 min) before → after measuring: ${r.load} on ${os.cpus().length} cores.`,
    );
  }
  for (const r of results) {
    lines.push(
      `Rollups at ${fmt(r.size)} runs: ${fmt(r.rollup.rows)} rows of run_rollups (the key's project ` +
        `${fmt(r.rollup.project_rows)}), ${(r.rollup.bytes / 1048576).toFixed(1)} MiB with the tags' ` +
        `and their indexes, beside ${(r.rollup.run_bytes / 1048576).toFixed(0)} MiB of runs.runs ` +
        `(${r.rollup.partitions} partitions, ${PARTITION_DAYS} day${PARTITION_DAYS === 1 ? "" : "s"} wide) with its indexes: ` +
        `${fmt(Math.round(Number(r.rollup.run_bytes) / r.size))} bytes a run on disk; seeded at ` +
        `${fmt(Math.round(r.seededRuns / (r.seedMs / 1000)))} runs/s.`,
    );
  }
  lines.push(`Seeding ${fmt(seeded)} runs in all: ${(seedMs / 1000).toFixed(1)} s.`);
  lines.push("");
  const header = [
    "case",
    ...results.flatMap((r) => [`p50 @${short(r.size)}`, `p99 @${short(r.size)}`]),
  ];
  if (results.length === 2) header.push("p50 growth");
  lines.push(`| ${header.join(" | ")} |`);
  lines.push(`|${header.map(() => "---").join("|")}|`);
  // At least one size was measured; each measured the same cases in the same order.
  const [first, second] = /** @type {[(typeof results)[number], ...typeof results]} */ (results);
  /**
   * @param {(typeof results)[number]} r
   * @param {number} i
   */
  const caseOf = (r, i) => /** @type {Timing} */ (r.cases[i]);
  for (let i = 0; i < first.cases.length; i++) {
    const row = [caseOf(first, i).label];
    for (const r of results) {
      const { p50, p99, failed } = caseOf(r, i);
      row.push(failed ? `${ms(p50)} (${failed})` : ms(p50), ms(p99));
    }
    if (second) {
      row.push(`×${(Number(caseOf(second, i).p50) / Number(caseOf(first, i).p50)).toFixed(2)}`);
    }
    lines.push(`| ${row.join(" | ")} |`);
  }
  console.log(lines.join("\n"));
}

/** @param {number | undefined} v undefined: no sample (BENCH_RUNS_SAMPLES=0) */
const ms = (v) => (v === undefined ? "-" : `${v.toFixed(1)} ms`);
/** @param {number} n */
const short = (n) => (n >= 1_000_000 ? `${n / 1_000_000}M` : `${n / 1000}k`);

await main();
