#!/usr/bin/env node
// @ts-check
// The console's runs page on a big project (issue 27), in Chromium driven by Playwright: "on a
// project with 1M runs, the runs page shows results and three facet charts ≤ 1 s after
// navigation, and a facet click refilters ≤ 300 ms".
//
// The four-process stack on a fresh database, seeded as bench/runs.mjs seeds it (testkit
// seedRuns: four projects, the API key's one of them, so it holds a quarter; 90 days of
// partitions; vacuum analyze), first to BENCH_CONSOLE_BASE runs (the baseline), then to
// BENCH_CONSOLE_N. At each size, in one signed-in tab (the HTTP cache warm, as a returning user
// has it), BENCH_CONSOLE_WARMUP + BENCH_CONSOLE_SAMPLES times: a fresh navigation to /runs, then a
// click on a button of the status facet. The times are the page's own (performance.now(),
// whose zero is the navigation's start), taken by a MutationObserver the page gets before its
// scripts run, at the first animation frame after the DOM shows:
//   table      the runs table has rows
//   charts ≥3  three facet charts are drawn (uPlot's draw hook marks them data-drawn)
//   charts 6   all six
//   refilter   from the click to the table showing only runs of that status (the address has
//              status=<it>, every row's status badge says it, the rows are not the old ones);
//              the status clicked is `failed`, or the next one if the table shows only failed runs
// and, from the page's resource timings, when the API requests started and ended.
//
//   npm run bench:console
//   BENCH_CONSOLE_N=1000000 BENCH_CONSOLE_BASE=10000 BENCH_CONSOLE_SAMPLES=15 BENCH_CONSOLE_WARMUP=3
//   BENCH_CONSOLE_KEEP=1 (leave the database and stream, print the database's URL)
import { execFileSync } from "node:child_process";
import os from "node:os";
import pg from "pg";
import { chromium } from "playwright-core";
import { createDatabase } from "@pies/common/db";
import { makePartitions } from "@pies/runs";
import { createTestDatabase, createTestStream, seedRuns, startStack } from "@pies/testkit";
import { percentile } from "./lib/stats.mjs";

/** @import { Page } from "playwright-core" */

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
const N = int("BENCH_CONSOLE_N", 1_000_000);
const BASE = Math.min(N, int("BENCH_CONSOLE_BASE", 10_000));
const SAMPLES = int("BENCH_CONSOLE_SAMPLES", 15);
const WARMUP = int("BENCH_CONSOLE_WARMUP", 3);
const KEEP = process.env.BENCH_CONSOLE_KEEP === "1";
const CHROMIUM = process.env.PIES_CHROMIUM ?? "/usr/bin/chromium";
/** How long one wait may take before the sample counts as failed. */
const TIMEOUT_MS = 30_000;
/** The status facet's buckets, in the order tried for the click (see once). */
const CLICKABLE = ["failed", "completed", "processing", "created"];
const DAY_MS = 86_400_000;

const load = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
/** @param {unknown[]} args */
const log = (...args) =>
  console.error(`[console bench ${new Date().toISOString().slice(11, 19)}]`, ...args);
/** @param {number} n */
const fmt = (n) => n.toLocaleString("en-US");
/** @param {number} n */
const short = (n) => (n >= 1_000_000 ? `${n / 1_000_000}M` : `${n / 1000}k`);

// --- In the page -------------------------------------------------------------------------------

// Run in every document of the tab before its scripts (addInitScript): window.__bench.marks
// gets, once each, the DOM time (performance.now()) of `table`, `charts3`, `charts6` and
// `refiltered`, and `<name>.frame`: the first animation frame after it (the frame that paints it).
// A click on a status facet button sets `click` (capture phase: before React handles it).
const INIT = `(() => {
  const b = { marks: {}, click: undefined, status: undefined, before: undefined };
  window.__bench = b;
  const mark = (name) => {
    if (b.marks[name] !== undefined) return;
    b.marks[name] = performance.now();
    requestAnimationFrame(() => { b.marks[name + ".frame"] = performance.now(); });
  };
  const rows = () => [...document.querySelectorAll('[data-testid="runs-table"] tbody tr')];
  const check = () => {
    const shown = rows();
    if (shown.length > 0) mark("table");
    const drawn = document.querySelectorAll(".facet-chart[data-drawn]").length;
    if (drawn >= 3) mark("charts3");
    if (drawn >= 6) mark("charts6");
    if (b.click === undefined || b.marks.refiltered !== undefined) return;
    if (new URLSearchParams(location.search).get("status") !== b.status) return;
    const statuses = shown.map((r) => r.children[1] && r.children[1].textContent.trim());
    const ids = shown.map((r) => r.getAttribute("data-run-id")).join(",");
    if (shown.length > 0 && statuses.every((s) => s === b.status) && ids !== b.before) {
      mark("refiltered");
    }
  };
  new MutationObserver(check).observe(document, {
    subtree: true, childList: true, attributes: true, characterData: true,
  });
  document.addEventListener("click", (event) => {
    const button = event.target instanceof Element
      ? event.target.closest('button[aria-label^="Filter by status "]') : null;
    if (!button) return;
    const status = /^Filter by status (\\S+) /.exec(button.getAttribute("aria-label") || "");
    b.status = status ? status[1] : undefined;
    b.before = rows().map((r) => r.getAttribute("data-run-id")).join(",");
    b.click = performance.now();
  }, true);
})();`;

/**
 * What the page recorded: its marks, the API requests' resource timings, and the number of
 * scripts and styles fetched over the network (not from the cache).
 * @typedef {{ marks: Record<string, number>, click?: number,
 *   api: { path: string, start: number, end: number }[], fetchedAssets: number,
 *   chunk?: { start: number, end: number },
 *   assets: number }} PageRecord
 */

/**
 * @param {Page} page
 * @returns {Promise<PageRecord>}
 */
const record = (page) =>
  // A function, not a string: the console's CSP (script-src 'self') forbids eval.
  page.evaluate(() => {
    const g = /** @type {any} */ (globalThis);
    /** @type {any[]} */
    const entries = g.performance.getEntriesByType("resource");
    const assets = entries.filter((e) => e.name.includes("/assets/"));
    return {
      marks: g.__bench.marks,
      click: g.__bench.click,
      api: entries
        .filter((e) => e.name.includes("/api/v1/"))
        .map((e) => ({
          path: new URL(e.name).pathname.replace("/api/v1", ""),
          start: e.startTime,
          end: e.responseEnd,
        })),
      chunk: assets
        .filter((e) => /\/facet-chart-[^/]*\.js$/.test(e.name))
        .map((e) => ({ start: e.startTime, end: e.responseEnd }))[0],
      assets: assets.length,
      fetchedAssets: assets.filter((e) => e.transferSize > 0).length,
    };
  });

/**
 * Waits until the page's marks include every one of `names`.
 * @param {Page} page
 * @param {string[]} names
 * @param {number} [timeout]
 */
const marked = (page, names, timeout = TIMEOUT_MS) =>
  page.waitForFunction(
    (names) => {
      const b = /** @type {any} */ (globalThis).__bench;
      return b !== undefined && names.every((n) => b.marks[n] !== undefined);
    },
    names,
    { timeout, polling: 50 },
  );

/**
 * Waits until the page has the answers of its four filter-options requests.
 * @param {Page} page
 */
const optionsLoaded = (page) =>
  page.waitForFunction(
    () =>
      /** @type {any} */ (globalThis).performance
        .getEntriesByType("resource")
        .filter((/** @type {any} */ e) => e.name.includes("/filter-options/") && e.responseEnd > 0)
        .length >= 4,
    undefined,
    { timeout: 10_000, polling: 50 },
  );

/**
 * @typedef {object} Sample
 * @property {number} table
 * @property {number} charts3
 * @property {number | undefined} charts6
 * @property {number | undefined} search the search request's response end (navigation)
 * @property {number | undefined} searchStart when the page sent it
 * @property {number | undefined} slowFacets the second search request's response end (the
 *   facets asked apart: interaction, execution time), if the page sends one
 * @property {number | undefined} options the last filter-options response's end
 * @property {number | undefined} refilter from the click to the refiltered table
 * @property {string} [clicked] the status bucket clicked
 * @property {number | undefined} clickSearchStart from the click to the search request's start
 * @property {number | undefined} clickSearch the search request's duration after the click
 * @property {number | undefined} chunkStart when the charts' chunk (uPlot) was asked for
 * @property {number | undefined} chunkEnd when it was there
 * @property {number} fetchedAssets
 * @property {string[]} apiCalls the API paths the navigation called, in order of start
 */

/**
 * One fresh navigation to /runs, then a click on a status facet button (`failed` mostly).
 * @param {Page} page
 * @param {string} url
 * @returns {Promise<{ sample?: Sample, failed?: string }>}
 */
async function once(page, url) {
  await page.goto(`${url}/runs`);
  await marked(page, ["table.frame", "charts3.frame"]);
  // Everything the page loads (the other charts, the filters' options) before the click.
  await marked(page, ["charts6.frame"], 10_000).catch(() => {});
  await optionsLoaded(page).catch(() => {});
  const nav = await record(page);
  const m = nav.marks;
  /** @param {string} part */
  const calls = (part) => nav.api.filter((a) => a.path.includes(part));
  // The page's search, then (since the console asks them apart) the facets no rollup counts.
  const [search, slowFacets] = calls("/runs/search").sort((a, b) => a.start - b.start);
  const options = calls("/filter-options/");
  /** @type {Sample} */
  const sample = {
    table: /** @type {number} */ (m["table.frame"]),
    charts3: /** @type {number} */ (m["charts3.frame"]),
    charts6: m["charts6.frame"],
    search: search?.end,
    searchStart: search?.start,
    slowFacets: slowFacets?.end,
    options: options.length ? Math.max(...options.map((o) => o.end)) : undefined,
    refilter: undefined,
    clickSearchStart: undefined,
    clickSearch: undefined,
    chunkStart: nav.chunk?.start,
    chunkEnd: nav.chunk?.end,
    fetchedAssets: nav.fetchedAssets,
    apiCalls: [...nav.api].sort((a, b) => a.start - b.start).map((a) => a.path),
  };
  try {
    // The first status of CLICKABLE with a bucket that the table does not show alone already:
    // its refiltered table differs from the one before the click.
    const shown = await page.evaluate(() => [
      ...new Set(
        [
          .../** @type {any} */ (globalThis).document.querySelectorAll(
            '[data-testid="runs-table"] tbody tr',
          ),
        ].map((/** @type {any} */ r) => r.children[1]?.textContent),
      ),
    ]);
    /** @type {string | undefined} */
    let clicked;
    for (const status of CLICKABLE) {
      const button = page.getByRole("button", { name: new RegExp(`^Filter by status ${status} `) });
      if (shown.length === 1 && shown[0] === status) continue;
      if ((await button.count()) === 0) continue;
      clicked = status;
      await button.click({ timeout: 10_000 });
      break;
    }
    if (!clicked)
      throw new Error(`no status bucket to click (the table shows ${shown.join(", ")})`);
    sample.clicked = clicked;
    await marked(page, ["refiltered.frame"]);
    const after = await record(page);
    const click = /** @type {number} */ (after.click);
    sample.refilter = /** @type {number} */ (after.marks["refiltered.frame"]) - click;
    const next = after.api
      .filter((a) => a.path.includes("/runs/search") && a.start >= click)
      .sort((a, b) => a.start - b.start)[0];
    if (next) {
      sample.clickSearchStart = next.start - click;
      sample.clickSearch = next.end - next.start;
    }
    return { sample };
  } catch (err) {
    // What the page showed when the wait gave up.
    const state = await page
      .evaluate(() => {
        const g = /** @type {any} */ (globalThis);
        const b = g.__bench;
        /** @type {any[]} */
        const rows = [...g.document.querySelectorAll('[data-testid="runs-table"] tbody tr')];
        return JSON.stringify({
          clicked: b.status ?? null,
          clickAt: b.click ?? null,
          address: g.location.search,
          rows: rows.length,
          statuses: [...new Set(rows.map((r) => r.children[1]?.textContent))],
          sameRows: rows.map((r) => r.getAttribute("data-run-id")).join(",") === b.before,
        });
      })
      .catch(() => "?");
    const message = err instanceof Error ? err.message.split("\n")[0] : String(err);
    return { sample, failed: `refilter: ${message} (${state})` };
  }
}

/**
 * @typedef {object} Measured
 * @property {Sample[]} samples
 * @property {string[]} failures
 * @property {string} load the load average (1, 5, 15 min) before → after
 * @property {number} ms how long the measuring took
 * @property {Awaited<ReturnType<typeof replay>>} api the page's searches again, from Node alone
 */

/**
 * WARMUP + SAMPLES navigations and clicks; the warm-ups are not kept.
 * @param {Page} page
 * @param {string} url
 * @returns {Promise<Measured>}
 */
async function measure(page, url) {
  const loadBefore = load();
  const started = performance.now();
  /** @type {Sample[]} */
  const samples = [];
  /** @type {string[]} */
  const failures = [];
  for (let i = 0; i < WARMUP + SAMPLES; i++) {
    /** @type {{ sample?: Sample, failed?: string }} */
    let result;
    try {
      result = await once(page, url);
    } catch (err) {
      result = { failed: err instanceof Error ? err.message.split("\n")[0] : String(err) };
    }
    if (result.failed) failures.push(`${i < WARMUP ? "warm-up" : "sample"} ${i}: ${result.failed}`);
    if (i >= WARMUP && result.sample) samples.push(result.sample);
  }
  const loadAfter = load();
  const ms = performance.now() - started;
  return { samples, failures, load: `${loadBefore} → ${loadAfter}`, ms, api: await replay(url) };
}

/**
 * The searches the page sent (request.postData, with its token), the latest of each kind: the
 * page's search and the facets apart, unfiltered and after the click.
 * @type {Map<string, { body: string, auth: string }>}
 */
const sent = new Map();

/** @param {import("playwright-core").Request} request */
function remember(request) {
  if (request.method() !== "POST" || !request.url().endsWith("/api/v1/runs/search")) return;
  const body = request.postData() ?? "{}";
  const parsed = JSON.parse(body);
  const status = parsed.filters?.status;
  const kind = parsed.onlyMeta ? "facets apart" : "page + its facets";
  sent.set(`${kind}, ${status ? `status=${status}` : "no filter"}`, {
    body,
    auth: request.headers().authorization ?? "",
  });
}

/**
 * The API alone: each search the page sent last, again from Node (fetch, one at a time, SAMPLES
 * times), no browser beside it: how long the gateway and the runs service take for it.
 * @param {string} url
 * @returns {Promise<{ label: string, p50?: number, p99?: number, failed?: string }[]>}
 */
async function replay(url) {
  const out = [];
  for (const [label, { body, auth }] of [...sent].sort(([a], [b]) => a.localeCompare(b))) {
    /** @type {number[]} */
    const times = [];
    try {
      for (let i = 0; i < SAMPLES + 1; i++) {
        const started = performance.now();
        const response = await fetch(`${url}/api/v1/runs/search`, {
          method: "POST",
          headers: { authorization: auth, "content-type": "application/json" },
          body,
        });
        await response.arrayBuffer();
        if (response.status !== 200) throw new Error(`status ${response.status}`);
        // The first is a warm-up.
        if (i > 0) times.push(performance.now() - started);
      }
      times.sort((a, b) => a - b);
      out.push({ label, p50: percentile(times, 50), p99: percentile(times, 99) });
    } catch (err) {
      out.push({ label, failed: err instanceof Error ? err.message : String(err) });
    }
  }
  sent.clear();
  return out;
}

// --- The report --------------------------------------------------------------------------------

/**
 * The rows of the table: label, how to read a sample, the target (ms) if any.
 * @type {[string, (s: Sample) => number | undefined, number | undefined][]}
 */
const CASES = [
  ["navigation → runs table rows", (s) => s.table, 1000],
  ["navigation → 3 facet charts drawn", (s) => s.charts3, 1000],
  ["navigation → all 6 facet charts drawn", (s) => s.charts6, undefined],
  ["facet click (a status bucket) → refiltered table", (s) => s.refilter, 300],
  ["  navigation → search request sent", (s) => s.searchStart, undefined],
  ["  navigation → search response end", (s) => s.search, undefined],
  ["  navigation → charts' chunk asked for", (s) => s.chunkStart, undefined],
  ["  navigation → charts' chunk loaded", (s) => s.chunkEnd, undefined],
  ["  navigation → apart facets' response end", (s) => s.slowFacets, undefined],
  ["  navigation → last filter-options response end", (s) => s.options, undefined],
  ["  search request (navigation), duration", (s) => ms0(s.search, s.searchStart), undefined],
  ["  click → search request sent", (s) => s.clickSearchStart, undefined],
  ["  search request (click), duration", (s) => s.clickSearch, undefined],
];

/**
 * @param {number | undefined} end
 * @param {number | undefined} start
 */
const ms0 = (end, start) => (end === undefined || start === undefined ? undefined : end - start);

/**
 * p50 and p99 (nearest rank: of 15 samples, p99 is the slowest) of a case.
 * @param {Sample[]} samples
 * @param {(s: Sample) => number | undefined} read
 */
function stats(samples, read) {
  const values = samples
    .map(read)
    .filter((v) => v !== undefined)
    .sort((a, b) => a - b);
  return { p50: percentile(values, 50), p99: percentile(values, 99), n: values.length };
}

/**
 * How often each status was clicked: `failed ×15`.
 * @param {Sample[]} samples
 */
function clickedOf(samples) {
  /** @type {Map<string, number>} */
  const counts = new Map();
  for (const s of samples)
    counts.set(s.clicked ?? "none", (counts.get(s.clicked ?? "none") ?? 0) + 1);
  return [...counts].map(([status, n]) => `${status} ×${n}`).join(", ");
}

/** @param {number | undefined} v */
const ms = (v) => (v === undefined ? "–" : `${v.toFixed(0)} ms`);

/**
 * @param {{ size: number, projectRuns: number, measured: Measured }[]} results
 * @param {number} samples
 */
function table(results, samples) {
  const header = ["case"];
  for (const r of results) header.push(`p50 @${short(r.size)}`, `p99 @${short(r.size)}`);
  header.push("target", "met? (p50 / p99)");
  if (results.length === 2)
    header.push(`p50 ${short(results[1]?.size ?? 0)} / ${short(results[0]?.size ?? 0)}`);
  const lines = [`| ${header.join(" | ")} |`, `|${header.map(() => "---").join("|")}|`];
  for (const [label, read, target] of CASES) {
    const row = [label];
    const per = results.map((r) => stats(r.measured.samples, read));
    for (const s of per) {
      const missing = s.n < samples ? ` (${s.n}/${samples})` : "";
      row.push(`${ms(s.p50)}${missing}`, ms(s.p99));
    }
    const last = per.at(-1);
    row.push(target === undefined ? "" : `≤ ${target} ms`);
    row.push(
      target === undefined || !last || last.p50 === undefined || last.p99 === undefined
        ? target === undefined
          ? ""
          : "no sample"
        : `${last.p50 <= target ? "yes" : "**no**"} / ${last.p99 <= target ? "yes" : "**no**"}`,
    );
    if (per.length === 2) {
      const [a, b] = per;
      row.push(
        a?.p50 && b?.p50 !== undefined && a.p50 > 0 ? `×${(b.p50 / a.p50).toFixed(2)}` : "–",
      );
    }
    lines.push(`| ${row.join(" | ")} |`);
  }
  return lines;
}

// --- The run -----------------------------------------------------------------------------------

async function main() {
  const lines = [`## console bench (${new Date().toISOString()})`, ""];
  const loadStart = load();
  log(`starting the stack (catalog, runs, executor, gateway); load ${loadStart}`);
  const database = await createTestDatabase("consolebench");
  const stream = createTestStream();
  /** @type {import("@pies/testkit").Stack | undefined} */
  let stack;
  /** @type {pg.Client | undefined} */
  let client;
  /** @type {import("playwright-core").Browser | undefined} */
  let browser;
  /** @type {{ size: number, projectRuns: number, seedMs: number, analyzeMs: number, measured: Measured }[]} */
  const results = [];
  /** @type {string[]} */
  const problems = [];
  let chromiumVersion = "?";
  try {
    // Nothing of the seed is dropped meanwhile (90 days of runs, up to now).
    stack = await startStack({
      databaseUrl: database.url,
      natsEnv: stream.env,
      env: {
        PIES_RUN_RETENTION_DAYS: "0",
        // The seed's processing runs (5%) have heartbeats days old: the sweeper would fail them
        // as executor_lost, 1,000 every 10 s, for minutes, writing while the bench measures,
        // and make the newest runs by update all failed. The seed stays as seeded.
        PIES_RUN_LEASE_SECONDS: String(365 * 86_400),
        PIES_SWEEP_INTERVAL_SECONDS: "86400",
      },
    });
    const url = stack.gatewayUrl;
    const project = stack.bootstrap.project;
    const projects = [project, "bench-p2", "bench-p3", "bench-p4"];
    client = new pg.Client({ connectionString: database.url });
    await client.connect();
    // The partitions of the seed's 90 days, as a deployment of that age has them.
    const partitioner = createDatabase({ url: database.url, poolMax: 1 });
    await makePartitions(partitioner, { from: Date.now() - 91 * DAY_MS });
    await partitioner.destroy();

    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      // As test/console/browser.ts launches it: nothing that reaches out.
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    });
    chromiumVersion = browser.version();
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const page = await context.newPage();
    await page.addInitScript({ content: INIT });
    page.on("console", (message) => {
      if (message.type() === "error") problems.push(`console: ${message.text()}`);
    });
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    page.on("request", remember);
    // Signed in by the link `npm start` prints: the tab keeps its session (sessionStorage).
    await page.goto(`${url}/#key=${stack.bootstrap.key}`);
    await page.getByRole("heading", { name: "Runs", level: 1 }).waitFor({ timeout: TIMEOUT_MS });

    let seeded = 0;
    for (const size of BASE < N ? [BASE, N] : [N]) {
      log(`seeding to ${fmt(size)} runs (${fmt(size - seeded)} more), four projects`);
      const seedMs = await seedRuns(client, {
        count: size - seeded,
        from: seeded,
        projects,
        onProgress: (n) => (n % 200_000 === 0 ? log(`  ${fmt(seeded + n)}`) : undefined),
      });
      seeded = size;
      const analyze = performance.now();
      await client.query("vacuum analyze runs.runs");
      await client.query("vacuum analyze runs.run_rollups");
      const analyzeMs = performance.now() - analyze;
      const { rows } = await client.query(
        "select count(*)::int as n from runs.runs where project_id = $1",
        [project],
      );
      log(
        `seeded in ${(seedMs / 1000).toFixed(1)} s, vacuum analyze ${(analyzeMs / 1000).toFixed(1)} s; measuring (${WARMUP} warm-ups, ${SAMPLES} samples)`,
      );
      const measured = await measure(page, url);
      log(`measured in ${(measured.ms / 1000).toFixed(1)} s, load ${measured.load}`);
      for (const f of measured.failures) log(`  failed: ${f}`);
      results.push({ size, projectRuns: rows[0].n, seedMs, analyzeMs, measured });
    }
  } catch (err) {
    problems.push(`the bench stopped: ${err instanceof Error ? err.stack : err}`);
    log(`the bench stopped: ${err instanceof Error ? err.message : err}`);
  } finally {
    await browser?.close().catch(() => {});
    await client?.end().catch(() => {});
    if (stack) {
      const codes = await stack.stop().catch((err) => ({ error: String(err) }));
      log(`stack stopped: ${JSON.stringify(codes)}`);
    }
    await stream.remove().catch((err) => log(`stream not removed: ${err}`));
    if (KEEP) log(`kept: ${database.url} (stream ${stream.stream})`);
    else await database.drop().catch((err) => log(`database not dropped: ${err}`));
  }

  const node = process.version;
  let cpu = os.cpus()[0]?.model ?? "?";
  try {
    cpu += `, ${execFileSync("nproc", { encoding: "utf8" }).trim()} cores`;
  } catch {
    cpu += `, ${os.cpus().length} cores`;
  }
  lines.push(
    `Node ${node}, Chromium ${chromiumVersion} (headless, playwright-core), ${cpu}. ` +
      `Load average (1, 5, 15 min) at the start: ${loadStart}; at the end: ${load()}.`,
    "",
  );
  for (const r of results) {
    const first = r.measured.samples[0];
    lines.push(
      `- ${fmt(r.size)} runs (the key's project ${fmt(r.projectRuns)}): seeded in ` +
        `${(r.seedMs / 1000).toFixed(1)} s (+ vacuum analyze ${(r.analyzeMs / 1000).toFixed(1)} s); ` +
        `${WARMUP} warm-ups + ${SAMPLES} samples in ${(r.measured.ms / 1000).toFixed(1)} s, load ` +
        `${r.measured.load}; scripts and styles fetched over the network per navigation ` +
        `(not from the cache): ${first ? first.fetchedAssets : "?"}; the navigation's API calls: ` +
        `${first ? first.apiCalls.join(", ") : "?"}; status clicked: ${clickedOf(r.measured.samples)}; failed samples: ${r.measured.failures.length}` +
        (r.measured.failures.length ? ` (${r.measured.failures.slice(0, 3).join("; ")})` : "") +
        ".",
    );
  }
  lines.push("");
  if (results.length) lines.push(...table(results, SAMPLES));
  if (results.length) {
    lines.push(
      "",
      `The API alone: the searches the page sent last, again from Node (fetch, one at a time, ` +
        `${SAMPLES} times after one more), no browser beside them:`,
      "",
      `| search | ${results.map((r) => `p50 @${short(r.size)} | p99 @${short(r.size)}`).join(" | ")} |`,
      `|---|${results.map(() => "---|---").join("|")}|`,
    );
    const labels = [...new Set(results.flatMap((r) => r.measured.api.map((a) => a.label)))];
    for (const label of labels) {
      const cells = results.map((r) => {
        const a = r.measured.api.find((x) => x.label === label);
        return a?.failed ? `${a.failed} | ` : `${ms(a?.p50)} | ${ms(a?.p99)}`;
      });
      lines.push(`| ${label} | ${cells.join(" | ")} |`);
    }
  }
  lines.push(
    "",
    "Times from the page's navigation start (performance.now()) or from the click, to the first " +
      "animation frame after the DOM shows it; p99 of 15 samples is the slowest of them.",
  );
  if (problems.length) {
    lines.push("", `Problems (${problems.length}):`, ...problems.slice(0, 10).map((p) => `- ${p}`));
    process.exitCode = 1;
  }
  console.log(lines.join("\n"));
}

await main();
