// @ts-check
/** @import { Sample } from "./modes.mjs" */
/** @import { CpuSample } from "./cpu.mjs" */

/**
 * Nearest-rank percentile of an ascending array (undefined when empty).
 * @param {number[]} sorted
 * @param {number} p 0–100
 */
export function percentile(sorted, p) {
  if (sorted.length === 0) return undefined;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

/**
 * The median of the values (the mean of the middle two of an even count; NaN when empty).
 * @param {number[]} values
 * @returns {number}
 */
export function median(values) {
  const s = [...values].sort((a, b) => a - b);
  /** @param {number} i an index within s */
  const at = (i) => /** @type {number} */ (s[i]);
  if (s.length === 0) return NaN;
  return s.length % 2 ? at((s.length - 1) / 2) : (at(s.length / 2 - 1) + at(s.length / 2)) / 2;
}

/** @param {number[]} values */
function mean(values) {
  return values.length === 0 ? undefined : values.reduce((a, b) => a + b, 0) / values.length;
}

/**
 * @param {number | undefined} v
 * @returns {number | null}
 */
const round = (v, digits = 2) => (v === undefined ? null : Number(v.toFixed(digits)));

/**
 * Summarises one cell's samples ({ok, latencyMs, ttfcMs?, error?}) measured over wallMs.
 * @param {Sample[]} samples
 * @param {number} wallMs
 */
export function summarise(samples, wallMs) {
  const ok = samples.filter((s) => s.ok);
  const latencies = ok.map((s) => s.latencyMs).sort((a, b) => a - b);
  const ttfcs = ok
    .map((s) => s.ttfcMs)
    .filter((v) => v !== undefined)
    .sort((a, b) => a - b);
  const errors = samples.filter((s) => !s.ok);
  // Medians of any per-request breakdown (e.g. pies streamed: createMs, headersMs).
  const phaseNames = [...new Set(ok.flatMap((s) => Object.keys(s.phases ?? {})))];
  const phaseP50Ms = Object.fromEntries(
    phaseNames.map((name) => [
      name,
      round(
        percentile(
          ok
            .map((s) => s.phases?.[name])
            .filter((v) => v !== undefined)
            .sort((a, b) => a - b),
          50,
        ),
      ),
    ]),
  );
  /** @type {Map<string | undefined, number>} */
  const byKind = new Map();
  for (const e of errors) byKind.set(e.error, (byKind.get(e.error) ?? 0) + 1);
  return {
    requests: samples.length,
    ok: ok.length,
    errors: errors.length,
    errorKinds: [...byKind.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([error, count]) => ({ error, count })),
    wallMs: round(wallMs, 1),
    p50Ms: round(percentile(latencies, 50)),
    p90Ms: round(percentile(latencies, 90)),
    p99Ms: round(percentile(latencies, 99)),
    maxMs: round(latencies.at(-1)),
    meanMs: round(mean(latencies)),
    reqPerSec: wallMs > 0 ? round((ok.length * 1000) / wallMs, 1) : null,
    ttfcP50Ms: round(percentile(ttfcs, 50)),
    ttfcP99Ms: round(percentile(ttfcs, 99)),
    ttfcMeanMs: round(mean(ttfcs)),
    ...(phaseNames.length > 0 ? { phaseP50Ms } : {}),
  };
}

/**
 * One row of the bench's table: a cell's summary, with (after addRatios) its comparisons.
 * @typedef {ReturnType<typeof summarise> & {
 *   mode: string,
 *   concurrency: number,
 *   stoppedEarly?: boolean,
 *   cpu?: CpuSample,
 *   perExecution?: PerExecution,
 * } & Partial<Ratios>} Row
 */

/**
 * A cell's CPU per successful request: each process's CPU ms over the measured phase (CpuSample's
 * processCpuMs: the processes measured, postgres, nats and bench) divided by the requests that
 * succeeded in it, and the sum of that over `processes`, those that serve the row's mode.
 * @typedef {object} PerExecution
 * @property {string[]} processes
 * @property {Record<string, number>} cpuMs
 * @property {number | null} ownCpuMs null when no process serves the mode (direct)
 */

/**
 * A cell's PerExecution, undefined without a CPU sample or a successful request.
 * @param {CpuSample | undefined} cpu
 * @param {number} ok the successful requests of the measured phase
 * @param {string[]} own the processes that serve the row's mode
 * @returns {PerExecution | undefined}
 */
export function perExecution(cpu, ok, own) {
  if (!cpu || ok === 0) return undefined;
  const all = cpu.processCpuMs;
  const processes = own.filter((name) => all[name] !== undefined);
  /** @param {number} ms */
  const per = (ms) => /** @type {number} */ (round(ms / ok, 3));
  return {
    processes,
    cpuMs: Object.fromEntries(Object.entries(all).map(([name, ms]) => [name, per(ms)])),
    ownCpuMs:
      processes.length > 0 ? per(processes.reduce((sum, name) => sum + (all[name] ?? 0), 0)) : null,
  };
}

/**
 * What addRatios adds to a row (null where there is nothing to compare with).
 * @typedef {object} Ratios
 * @property {string | null} baseline
 * @property {number | null} p50Ratio
 * @property {number | null} throughputRatio
 * @property {number | null} ttfcP50Ratio
 * @property {number | null} addedP50Ms
 * @property {number | null} addedTtfcP50Ms
 * @property {string | null} peer
 * @property {number | null} p50VsPortkey
 * @property {number | null} throughputVsPortkey
 * @property {number | null} ttfcVsPortkey
 */

/**
 * Adds to each row its p50/throughput/ttfc ratios and added p50/ttfc (ms) against direct at the
 * same concurrency, and to each pies row (four processes, edge or embedded) its p50, throughput and
 * ttfc ratios against Portkey.
 * @template {Row} R
 * @param {R[]} rows
 * @returns {R[]}
 */
export function addRatios(rows) {
  /**
   * @param {number | null} a
   * @param {number | null} b
   */
  const ratio = (a, b) => (a == null || b == null || b === 0 ? null : round(a / b, 2));
  /**
   * @param {number | null} a
   * @param {number | null} b
   */
  const diff = (a, b) => (a == null || b == null ? null : round(a - b, 2));
  for (const row of rows) {
    // "direct" | "portkey" | "pies" | "edge" | "embedded", ["cached" | "one-request"],
    // "blocking" | "streamed": a variant compares with its system's baseline and peer of its kind.
    const words = row.mode.split(" ");
    // split() yields at least one word.
    const [system, kind] = [/** @type {string} */ (words[0]), words.at(-1)];
    /** @param {string} mode */
    const same = (mode) => rows.find((r) => r.mode === mode && r.concurrency === row.concurrency);
    const base = same(`direct ${kind}`);
    row.baseline = base ? base.mode : null;
    row.p50Ratio = base ? ratio(row.p50Ms, base.p50Ms) : null;
    row.throughputRatio = base ? ratio(row.reqPerSec, base.reqPerSec) : null;
    row.ttfcP50Ratio = base ? ratio(row.ttfcP50Ms, base.ttfcP50Ms) : null;
    row.addedP50Ms = base ? diff(row.p50Ms, base.p50Ms) : null;
    row.addedTtfcP50Ms = base ? diff(row.ttfcP50Ms, base.ttfcP50Ms) : null;
    const peer = ["pies", "edge", "embedded"].includes(system)
      ? same(`portkey ${kind}`)
      : undefined;
    row.peer = peer ? peer.mode : null;
    row.p50VsPortkey = peer ? ratio(row.p50Ms, peer.p50Ms) : null;
    row.throughputVsPortkey = peer ? ratio(row.reqPerSec, peer.reqPerSec) : null;
    row.ttfcVsPortkey = peer ? ratio(row.ttfcP50Ms, peer.ttfcP50Ms) : null;
  }
  return rows;
}

/**
 * A row's kind: the last word of its mode ("blocking" or "streamed").
 * @param {Row} row
 */
const kindOf = (row) => row.mode.split(" ").at(-1) ?? "";

/**
 * The main table, one per kind (blocking, then streamed): at each concurrency, the direct baseline
 * first, then Portkey, then the other rows in their order, so that each pies row (both streamed
 * flows too) is beside the rows it is compared with. The blocking table has no ttfc columns.
 * @param {Row[]} rows
 */
export function formatTable(rows) {
  /** @type {Column<Row>[]} */
  const head = [
    ["mode", (r) => (r.stoppedEarly ? `${r.mode} (partial)` : r.mode)],
    ["conc", (r) => r.concurrency],
    ["requests", (r) => r.requests],
    ["errors", (r) => r.errors],
    ["p50 ms", (r) => fmt(r.p50Ms)],
    ["p99 ms", (r) => fmt(r.p99Ms)],
    ["req/s", (r) => fmt(r.reqPerSec, 1)],
  ];
  /** @type {Column<Row>[]} */
  const blocking = [
    ...head,
    ["added p50 ms", (r) => fmt(r.addedP50Ms)],
    ["p50 ratio", (r) => fmt(r.p50Ratio)],
    ["thr ratio", (r) => fmt(r.throughputRatio)],
    ["p50 vs portkey", (r) => fmt(r.p50VsPortkey)],
    ["thr vs portkey", (r) => fmt(r.throughputVsPortkey)],
  ];
  /** @type {Column<Row>[]} */
  const streamed = [
    ...head,
    ["ttfc p50 ms", (r) => fmt(r.ttfcP50Ms)],
    ["added p50 ms", (r) => fmt(r.addedP50Ms)],
    ["added ttfc ms", (r) => fmt(r.addedTtfcP50Ms)],
    ["p50 ratio", (r) => fmt(r.p50Ratio)],
    ["thr ratio", (r) => fmt(r.throughputRatio)],
    ["ttfc ratio", (r) => fmt(r.ttfcP50Ratio)],
    ["p50 vs portkey", (r) => fmt(r.p50VsPortkey)],
    ["thr vs portkey", (r) => fmt(r.throughputVsPortkey)],
    ["ttfc vs portkey", (r) => fmt(r.ttfcVsPortkey)],
  ];
  const concurrencies = [...new Set(rows.map((r) => r.concurrency))];
  const first = ["direct", "portkey"];
  /** @param {Row} r */
  const rank = (r) => {
    const i = first.indexOf(r.mode.split(" ")[0] ?? "");
    return i < 0 ? first.length : i;
  };
  const kinds = ["blocking", "streamed"];
  return [...new Set([...kinds, ...rows.map(kindOf)])]
    .filter((kind) => rows.some((r) => kindOf(r) === kind))
    .map((kind) => {
      const mine = rows
        .filter((r) => kindOf(r) === kind)
        .map((r, i) => ({ r, i }))
        .sort(
          (a, b) =>
            concurrencies.indexOf(a.r.concurrency) - concurrencies.indexOf(b.r.concurrency) ||
            rank(a.r) - rank(b.r) ||
            a.i - b.i,
        )
        .map(({ r }) => r);
      return `${kind}:\n${textTable(kind === "blocking" ? blocking : streamed, mine)}`;
    })
    .join("\n\n");
}

/**
 * @param {number | null | undefined} v
 */
function fmt(v, digits = 2) {
  return v === null || v === undefined ? "-" : v.toFixed(digits);
}

/**
 * Per-process CPU % of one core during each row's measured phase, and the machine's busy %.
 * @param {Row[]} rows
 */
export function formatCpuTable(rows) {
  const names = [...new Set(rows.flatMap((r) => Object.keys(r.cpu?.processPercent ?? {})))];
  return textTable(
    [
      ["mode", (r) => r.mode],
      ["conc", (r) => r.concurrency],
      ...names.map(
        (n) => /** @type {Column<Row>} */ ([n, (r) => r.cpu?.processPercent?.[n] ?? "-"]),
      ),
      ["machine busy %", (r) => r.cpu?.machineBusyPercent ?? "-"],
    ],
    rows,
  );
}

/**
 * Each measured process's (pies', the edge's, the embedded one's, Portkey's) CPU ms per
 * successful request during each row's measured phase, their sum over the processes that serve the
 * row's mode (`own ms`), and each one's RSS (MiB) at the phase's end.
 * @param {Row[]} rows
 */
export function formatPerExecutionTable(rows) {
  const names = [...new Set(rows.flatMap((r) => Object.keys(r.cpu?.rssMiB ?? {})))];
  return textTable(
    [
      ["mode", (r) => r.mode],
      ["conc", (r) => r.concurrency],
      ["ok", (r) => r.ok],
      ...names.map(
        (n) => /** @type {Column<Row>} */ ([`${n} ms`, (r) => fmt(r.perExecution?.cpuMs[n], 3)]),
      ),
      ["own ms", (r) => fmt(r.perExecution?.ownCpuMs, 3)],
      ...names.map(
        (n) => /** @type {Column<Row>} */ ([`${n} MiB`, (r) => fmt(r.cpu?.rssMiB[n], 0)]),
      ),
    ],
    rows,
  );
}

/**
 * A column of a text table: its header, and its cell of a row.
 * @template T
 * @typedef {[name: string, get: (row: T) => string | number]} Column
 */

/**
 * A fixed-width text table: the header, a rule, a line per row; the first column aligned left,
 * the others right.
 * @template T
 * @param {Column<T>[]} columns
 * @param {T[]} rows
 */
function textTable(columns, rows) {
  const cells = rows.map((r) => columns.map(([, get]) => String(get(r))));
  const widths = columns.map(([name], i) =>
    Math.max(name.length, ...cells.map((c) => cellAt(c, i).length)),
  );
  /** @param {string[]} values one per column */
  const line = (values) =>
    values
      .map((v, i) => (i === 0 ? v.padEnd(widthAt(widths, i)) : v.padStart(widthAt(widths, i))))
      .join("  ");
  return [
    line(columns.map(([name]) => name)),
    widths.map((w) => "-".repeat(w)).join("  "),
    ...cells.map(line),
  ].join("\n");
}

/**
 * A row's cell of a table (every row has one per column).
 * @param {string[]} row
 * @param {number} i
 */
function cellAt(row, i) {
  return /** @type {string} */ (row[i]);
}

/**
 * A column's width (there is one per column).
 * @param {number[]} widths
 * @param {number} i
 */
function widthAt(widths, i) {
  return /** @type {number} */ (widths[i]);
}
