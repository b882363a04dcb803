// @ts-check
import { percentile } from "./stats.mjs";

// The soak's figures and targets: the row of an interval, the windows the targets compare, and the
// targets' table. An interval's sample is
// { t, phase, ops: { blocking: {n, p50, p99}, streamed: {...}, reopened, errors }, cpu: {name: %},
//   rss: {name: MiB}, nats: {cpu, rss}, pgCpu, streams: {events, records}: {messages, consumers},
//   subscriptions, deadTuples: {table: n}, readyz: {maxMs, probes, failed, duringFault}, faults }.

/** @import { NatsState, Ops, Readyz } from "./soak-sampler.mjs" */

/**
 * One interval of the soak, as above.
 * @typedef {object} SoakSample
 * @property {number} t seconds since the load started, at the interval's end
 * @property {string} phase `load`, or after it
 * @property {Ops} ops
 * @property {Record<string, number | undefined>} cpu % of one core by process name
 * @property {Record<string, number | undefined>} rss MiB by process name
 * @property {{ cpu: number | undefined, rss: number | undefined }} [nats] nats-server's
 * @property {number | undefined} pgCpu the PostgreSQL cluster's %
 * @property {Pick<NatsState, "events" | "records">} [streams]
 * @property {number} [subscriptions]
 * @property {Record<string, number>} [deadTuples] by table
 * @property {Readyz} [readyz]
 * @property {string[]} faults applied in the interval
 */

/** @typedef {{ blocking: number[], streamed: number[] }} Latencies an interval's, by kind */

/** @typedef {[header: string, of: (s: SoakSample) => string]} Column */

/**
 * One target's verdict.
 * @typedef {{ target: string, first: string, last: string, value: string | number, pass: boolean }} TargetRow
 */

/**
 * @param {number | undefined} v
 * @param {number} [digits]
 */
const fixed = (v, digits = 0) =>
  v !== undefined && Number.isFinite(v) ? v.toFixed(digits) : "n/a";
/** @param {number[]} values */
const sum = (values) => values.reduce((a, b) => a + b, 0);
/** @param {number[]} values */
const mean = (values) => (values.length ? sum(values) / values.length : undefined);

/**
 * The markdown table's columns: [header, value of a sample].
 * @param {string[]} processNames
 * @returns {Column[]}
 */
export function columns(processNames) {
  return [
    ["t s", (s) => fixed(s.t)],
    ["blk", (s) => fixed(s.ops.blocking.n)],
    ["str", (s) => fixed(s.ops.streamed.n)],
    ["ops", (s) => fixed(s.ops.blocking.n + s.ops.streamed.n)],
    ["reop", (s) => fixed(s.ops.reopened)],
    ["err", (s) => fixed(s.ops.errors)],
    ["blk p50/p99 ms", (s) => `${fixed(s.ops.blocking.p50)}/${fixed(s.ops.blocking.p99)}`],
    ["str p50/p99 ms", (s) => `${fixed(s.ops.streamed.p50)}/${fixed(s.ops.streamed.p99)}`],
    ...processNames.map(
      (name) =>
        /** @type {Column} */ ([
          `${name} cpu%/MiB`,
          (s) => `${fixed(s.cpu[name])}/${fixed(s.rss[name])}`,
        ]),
    ),
    ["nats cpu%/MiB", (s) => `${fixed(s.nats?.cpu)}/${fixed(s.nats?.rss)}`],
    ["pg cpu%", (s) => fixed(s.pgCpu)],
    ["ev msgs", (s) => fixed(s.streams?.events?.messages)],
    ["ev cons", (s) => fixed(s.streams?.events?.consumers)],
    ["rec msgs", (s) => fixed(s.streams?.records?.messages)],
    ["rec cons", (s) => fixed(s.streams?.records?.consumers)],
    ["subs", (s) => fixed(s.subscriptions)],
    ["dead tup", (s) => (s.deadTuples ? fixed(sum(Object.values(s.deadTuples))) : "n/a")],
    [
      "readyz ms",
      (s) => `${fixed(s.readyz?.maxMs)}${s.readyz?.failed ? ` (${s.readyz.failed} failed)` : ""}`,
    ],
  ];
}

/** @param {(string | number)[]} cells */
export const markdownRow = (cells) => `| ${cells.join(" | ")} |`;
/** @param {string[]} headers */
export const markdownHeader = (headers) =>
  `${markdownRow(headers)}\n${markdownRow(headers.map((h) => "-".repeat(Math.max(3, h.length))))}`;

/**
 * The warm-up and the two compared windows, in intervals of the load: warm-up 5 min or a sixth of
 * the run, whichever is smaller; then the first and the last 5 minutes, or for shorter runs the
 * first and the last sixth of what follows the warm-up (at least one interval each). Five
 * minutes because V8 sizes a process's old generation to its allocation rate over the first
 * minutes of a load: the gateway's RSS rose 147 → 257 MiB in the first 4 minutes of 64-way load
 * and then held, while its heap in use after each major GC stayed flat (57–85 MiB) — no leak, and
 * a window that took in those minutes would count the sizing as growth.
 * @param {number} durationS
 * @param {number} intervalS
 * @param {number} [warmupS] the warm-up, when not the default (--warmup)
 */
export function planWindows(durationS, intervalS, warmupS = Math.min(300, durationS / 6)) {
  const intervals = Math.floor(durationS / intervalS);
  const warmup = Math.ceil(warmupS / intervalS);
  const rest = intervals - warmup;
  const window = Math.max(1, Math.min(Math.round(300 / intervalS), Math.floor(rest / 6)));
  return { intervals, warmup, window };
}

/**
 * The targets, each { target, first, last, value, pass } (first/last: the windows' figures), from
 * the load's full intervals `samples`, their operations' latencies `latencies` (one
 * {blocking: [], streamed: []} per sample), the plan, the NATS baseline and the reading after the
 * load, the runs check, and what else failed.
 * @param {object} inputs
 * @param {SoakSample[]} inputs.samples
 * @param {Latencies[]} inputs.latencies
 * @param {ReturnType<typeof planWindows>} inputs.plan
 * @param {number} inputs.intervalS
 * @param {NatsState | undefined} inputs.baseline
 * @param {NatsState | undefined} inputs.after
 * @param {{ lost: number, stuck: number }} inputs.runs
 * @param {Record<string, { text: string | number, pass: boolean }>} inputs.other
 * @returns {TargetRow[]}
 */
export function evaluateTargets({
  samples,
  latencies,
  plan,
  intervalS,
  baseline,
  after,
  runs,
  other,
}) {
  /** @type {TargetRow[]} */
  const rows = [];
  /**
   * @param {string} target
   * @param {string} first
   * @param {string} last
   * @param {string | number} value
   * @param {boolean} pass
   */
  const add = (target, first, last, value, pass) => rows.push({ target, first, last, value, pass });
  const from = plan.warmup;
  const usable = samples.length - from;
  if (usable < 2 * plan.window) {
    add("windows", "", "", `${samples.length} intervals: too few for two windows`, false);
    return rows;
  }
  const first = samples.slice(from, from + plan.window);
  const last = samples.slice(samples.length - plan.window);
  const firstLat = latencies.slice(from, from + plan.window);
  const lastLat = latencies.slice(latencies.length - plan.window);
  /** @param {SoakSample[]} window */
  const ops = (window) => sum(window.map((s) => s.ops.blocking.n + s.ops.streamed.n));
  /** @param {SoakSample[]} window */
  const perSecond = (window) => ops(window) / (window.length * intervalS);

  const [t1, t2] = [perSecond(first), perSecond(last)];
  add(
    "throughput last ≥ 90% of first (ops/s)",
    fixed(t1, 1),
    fixed(t2, 1),
    `${fixed((t2 / t1) * 100)}%`,
    t2 >= 0.9 * t1,
  );

  for (const kind of /** @type {const} */ (["blocking", "streamed"])) {
    // NaN for a window without one (fixed() prints n/a, the comparison fails: as undefined did).
    /** @param {Latencies[]} window */
    const p99 = (window) =>
      percentile(
        window.flatMap((l) => l[kind]).sort((a, b) => a - b),
        99,
      ) ?? NaN;
    const [a, b] = [p99(firstLat), p99(lastLat)];
    add(
      `${kind} p99 last ≤ 1.5× first (ms)`,
      fixed(a),
      fixed(b),
      `${fixed(b / a, 2)}×`,
      b <= 1.5 * a,
    );
  }

  // usable ≥ 2 windows: there is a last sample.
  const names = Object.keys(/** @type {SoakSample} */ (samples.at(-1)).rss);
  for (const name of names) {
    // NaN without a reading (as undefined did: n/a, and the comparison fails).
    /** @param {SoakSample[]} window */
    const rss = (window) =>
      mean(
        window
          .map((s) => s.rss[name])
          .filter((v) => v !== undefined)
          .filter(Number.isFinite),
      ) ?? NaN;
    // A process killed after the first window (--faults) is compared over its own life: its last
    // window is the one that ends at its kill (the process after it has not run long enough).
    const killedAt = samples.findIndex(
      (s, i) => i >= from + plan.window && (s.faults ?? []).includes(`kill -9 ${name}`),
    );
    const own =
      killedAt < 0 ? last : samples.slice(Math.max(from, killedAt - plan.window), killedAt);
    const [a, b] = [rss(first), rss(own)];
    add(
      `${name} RSS growth ≤ 10% (MiB)${killedAt < 0 ? "" : `, until its kill at ${samples[killedAt]?.t} s`}`,
      fixed(a, 1),
      fixed(b, 1),
      `${fixed((b / a - 1) * 100, 1)}%`,
      b <= 1.1 * a,
    );
  }

  // CPU time per operation (ms): the server's CPU% × the window's seconds over its operations.
  /**
   * @param {SoakSample[]} window
   * @param {(s: SoakSample) => number | undefined} cpuOf
   */
  const cpuPerOp = (window, cpuOf) => {
    const values = window.map(cpuOf);
    if (values.some((v) => v === undefined || !Number.isFinite(v))) return undefined;
    return ((sum(/** @type {number[]} */ (values)) / 100) * intervalS * 1000) / ops(window);
  };
  /** @type {[string, (s: SoakSample) => number | undefined][]} */
  const servers = [
    ["NATS", (s) => s.nats?.cpu],
    ["PostgreSQL", (s) => s.pgCpu],
  ];
  for (const [label, cpuOf] of servers) {
    const [a, b] = [cpuPerOp(first, cpuOf), cpuPerOp(last, cpuOf)];
    if (a === undefined || b === undefined) {
      add(`${label} CPU per op flat ±15% (ms)`, "n/a", "n/a", "n/a", true);
      continue;
    }
    add(
      `${label} CPU per op flat ±15% (ms)`,
      fixed(a, 3),
      fixed(b, 3),
      `${fixed((b / a - 1) * 100, 1)}%`,
      Math.abs(b / a - 1) <= 0.15,
    );
  }

  // After the warm-up, as the other figures (the first requests compile code paths).
  const probes = samples
    .slice(from)
    .map((s) => s.readyz)
    .filter((r) => r !== undefined);
  const worst = Math.max(
    ...probes
      .map((r) => r.maxMs)
      .filter((ms) => ms !== undefined)
      .filter(Number.isFinite),
  );
  const failedProbes = sum(probes.map((r) => r.failed));
  /** @type {Record<string, number>} */
  const failures = {};
  for (const r of probes) {
    for (const [status, n] of Object.entries(r.failures ?? {})) {
      failures[status] = (failures[status] ?? 0) + n;
    }
  }
  const failedText = Object.entries(failures)
    .map(([status, n]) => `${n} ${status}`)
    .join(", ");
  const duringFault = sum(probes.map((r) => r.duringFault));
  add(
    "/readyz ≤ 100 ms throughout (ms)",
    "",
    "",
    `max ${fixed(worst)}, ${failedProbes} failed${failedText ? ` (${failedText})` : ""}${duringFault ? `, ${duringFault} during or ≤ 10 s after faults not counted` : ""}`,
    worst <= 100 && failedProbes === 0,
  );

  add("0 lost", "", "", runs.lost, runs.lost === 0);
  add("0 stuck", "", "", runs.stuck, runs.stuck === 0);
  for (const [what, value] of Object.entries(other)) add(what, "", "", value.text, value.pass);

  if (baseline && after) {
    /** @type {[string, (s: NatsState) => number | undefined][]} */
    const figures = [
      ["event stream consumers back to baseline", (s) => s.events?.consumers],
      ["record stream consumers back to baseline", (s) => s.records?.consumers],
      ["NATS subscriptions back to baseline", (s) => s.subscriptions],
    ];
    for (const [label, of] of figures) {
      // A baseline without a reading compares as NaN (as undefined did: the target fails).
      const [a, b] = [of(baseline) ?? NaN, of(after)];
      add(
        label,
        fixed(a),
        fixed(b),
        b === undefined ? "no reading" : `${b - a >= 0 ? "+" : ""}${b - a}`,
        b !== undefined && b <= a,
      );
    }
  } else {
    add("consumers and subscriptions back to baseline", "n/a", "n/a", "no NATS in this mode", true);
  }
  return rows;
}

/**
 * The targets as a markdown table.
 * @param {TargetRow[]} rows
 */
export function targetsTable(rows) {
  const headers = ["target", "first window", "last window", "value", "pass"];
  return [
    markdownHeader(headers),
    ...rows.map((r) =>
      markdownRow([r.target, r.first, r.last, r.value, r.pass ? "pass" : "**FAIL**"]),
    ),
  ].join("\n");
}
