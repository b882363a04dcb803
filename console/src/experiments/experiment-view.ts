import { formatView, parseView, RANGES, type RunsView } from "../runs/runs-view";
import { filtersOf } from "../runs/search-request";
import type { InteractionRef } from "../interactions/model";
import type { Comparison, CreateExperimentBody, ExperimentSummary, Pair, Progress } from "./model";

/** The new-experiment form as typed (numbers as text, so that a field can be emptied). */
export interface ExperimentForm {
  name: string;
  /** An interaction id, `Name@draft`, `Name@3` or `Name@latest`. */
  target: string;
  environment: string;
  model: string;
  temperature: string;
  maxTokens: string;
  judge: string;
  concurrency: string;
  limit: string;
}

/** Drops the members that are undefined; an object left empty is undefined. */
function compact<T extends Record<string, unknown>>(value: T): T | undefined {
  const entries = Object.entries(value).filter(([, v]) => v !== undefined);
  return entries.length ? (Object.fromEntries(entries) as T) : undefined;
}

const number = (text: string) => (text.trim() === "" ? undefined : Number(text));

/**
 * `POST /experiments` for the form and the runs page's view: the view's query and filters as the
 * source (a relative time range, "the last 24 hours", fixed at `now`: the source is taken once,
 * when the experiment starts), the target with the settings overridden, the judge if any.
 */
export function experimentBody(
  form: ExperimentForm,
  view: RunsView,
  now: number,
): CreateExperimentBody {
  const filters = filtersOf(view, now);
  return {
    name: form.name.trim(),
    source: {
      query: view.q || undefined,
      filters: filters && compact(filters),
      limit: number(form.limit),
    },
    target: {
      interaction: form.target.trim(),
      config: compact({
        environment: form.environment || undefined,
        model: form.model.trim() || undefined,
        temperature: number(form.temperature),
        max_tokens: number(form.maxTokens),
      }),
    },
    judge: form.judge.trim() || undefined,
    concurrency: number(form.concurrency),
  };
}

/** Where an API error belongs in the form: by field, and what no field takes. */
export interface FormErrors {
  fields: Partial<Record<keyof ExperimentForm, string>>;
  message?: string;
}

/** The form's field of a path of the body (`source.limit`, `target.config.model`). */
const FIELDS: [string, keyof ExperimentForm][] = [
  ["name", "name"],
  ["source.limit", "limit"],
  ["target.interaction", "target"],
  ["target.config.environment", "environment"],
  ["target.config.model", "model"],
  ["target.config.temperature", "temperature"],
  ["target.config.max_tokens", "maxTokens"],
  ["judge", "judge"],
  ["concurrency", "concurrency"],
];

const fieldOf = (path: string) => FIELDS.find(([p]) => path === p || path.startsWith(`${p}.`))?.[1];

/**
 * An error of `POST /experiments` at the fields it names: a 400's `details.issues` (each with its
 * path), a message that starts with a path (`judge: its result schema…`), a 404 of the target
 * (`interaction X not found`) at the target; the rest (a query that does not parse) above.
 */
export function formErrors(error: unknown, status?: number): FormErrors {
  const body = (error ?? {}) as {
    message?: string;
    details?: { issues?: { path?: string; message?: string }[] };
  };
  const fields: FormErrors["fields"] = {};
  const rest: string[] = [];
  const issues = body.details?.issues ?? [];
  for (const issue of issues) {
    const field = issue.path === undefined ? undefined : fieldOf(issue.path);
    if (field && !fields[field]) fields[field] = issue.message ?? "invalid";
    else rest.push(issue.path ? `${issue.path}: ${issue.message ?? ""}` : (issue.message ?? ""));
  }
  if (issues.length === 0 && body.message) {
    const [, path = "", text = ""] = /^([\w.]+): (.*)$/s.exec(body.message) ?? [];
    const field = path ? fieldOf(path) : undefined;
    if (field) fields[field] = text;
    else if (status === 404 && /^interaction /.test(body.message)) fields.target = body.message;
    else rest.push(body.message);
  }
  return { fields, message: rest.length ? rest.join("; ") : undefined };
}

/** A group of the target's choices: an interaction's draft, its latest version and each one. */
export interface TargetGroup {
  group: string;
  items: string[];
}

/**
 * What to replay against, offered by name as the API resolves it (`Name@draft`, `Name@latest`,
 * `Name@3`), from the project's drafts and published versions (newest version first).
 */
export function targetChoices(drafts: InteractionRef[], versions: InteractionRef[]): TargetGroup[] {
  const byName = new Map<string, { draft: boolean; versions: number[] }>();
  const entry = (name: string) => {
    let e = byName.get(name);
    if (!e) byName.set(name, (e = { draft: false, versions: [] }));
    return e;
  };
  for (const d of drafts) entry(d.name).draft = true;
  for (const v of versions) if (v.version) entry(v.name).versions.push(v.version);
  return [...byName]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, e]) => {
      const numbers = [...new Set(e.versions)].sort((a, b) => b - a);
      return {
        group: name,
        items: [
          ...(e.draft ? [`${name}@draft`] : []),
          ...(numbers.length ? [`${name}@latest`] : []),
          ...numbers.map((n) => `${name}@${n}`),
        ],
      };
    });
}

/** Interactions by id, named as the target field names them (`Name@draft`, `Name@2`). */
export function interactionNames(
  drafts: InteractionRef[],
  versions: InteractionRef[],
): Map<string, string> {
  return new Map([
    ...drafts.map((d) => [d.id, `${d.name}@draft`] as const),
    ...versions.map((v) => [v.id, `${v.name}@${v.version ?? "?"}`] as const),
  ]);
}

/**
 * The target to start from: the draft of the interaction the runs are filtered by (what one
 * usually tries: an edited draft against what ran), found among drafts and versions by id.
 */
export function defaultTarget(
  view: RunsView,
  drafts: InteractionRef[],
  versions: InteractionRef[],
): string {
  if (!view.interaction) return "";
  const found = [...drafts, ...versions].find((i) => i.id === view.interaction);
  if (!found) return view.interaction;
  const hasDraft = drafts.some((d) => d.name === found.name);
  return hasDraft ? `${found.name}@draft` : `${found.name}@latest`;
}

/**
 * The runs view's search in words: the query and each filter (the new-experiment form's summary),
 * an interaction by its name where `names` has it.
 */
export function describeView(view: RunsView, names = new Map<string, string>()): string[] {
  const lines: string[] = [];
  if (view.q) lines.push(`query: ${view.q}`);
  if (view.status) lines.push(`status: ${view.status}`);
  if (view.interaction)
    lines.push(`interaction: ${names.get(view.interaction) ?? view.interaction}`);
  if (view.model) lines.push(`model: ${view.model}`);
  if (view.environment) lines.push(`environment: ${view.environment}`);
  if (view.tags.length) lines.push(`tags: ${view.tags.join(", ")}`);
  if (view.range) lines.push(`time: ${RANGES[view.range]?.label.toLowerCase() ?? view.range}`);
  else if (view.from || view.to) lines.push(`time: ${view.from ?? "…"} – ${view.to ?? "now"}`);
  if (view.minCost || view.maxCost)
    lines.push(`cost: ${view.minCost ?? "0"} – ${view.maxCost ?? "…"} USD`);
  return lines;
}

type SourceFilters = NonNullable<CreateExperimentBody["source"]["filters"]>;

const first = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/**
 * An experiment's source as a runs page's address (`/runs?q=…&tags=…`), to look at the runs it
 * selected (those of its time window; runs made since then match too).
 */
export function sourceLink(source: Record<string, unknown>): string {
  const filters = (source.filters ?? {}) as SourceFilters;
  const updated = filters.updated_at ?? {};
  const tags = filters.tags;
  const view: RunsView = {
    ...parseView(""),
    q: typeof source.query === "string" ? source.query : "",
    status: filters.status,
    interaction: first(filters.interaction),
    model: first(filters.modelId),
    environment: first(filters.environment),
    tags: tags === undefined ? [] : Array.isArray(tags) ? tags : [tags],
    from: updated.gte ?? updated.gt,
    to: updated.lt ?? updated.lte,
    minCost: filters.cost?.gte === undefined ? undefined : String(filters.cost.gte),
    maxCost: filters.cost?.lte === undefined ? undefined : String(filters.cost.lte),
  };
  return `/runs${formatView(view)}`;
}

/** An experiment's source in words: the query, each filter, the limit. */
export function describeSource(source: Record<string, unknown>): string[] {
  const lines: string[] = [];
  if (typeof source.query === "string" && source.query) lines.push(`query: ${source.query}`);
  const filters = (source.filters ?? {}) as Record<string, unknown>;
  for (const [key, value] of Object.entries(filters)) {
    if (value === undefined) continue;
    if (value && typeof value === "object" && !Array.isArray(value)) {
      const bounds = Object.entries(value as Record<string, unknown>).map(
        ([op, v]) => `${OPS[op] ?? op} ${String(v)}`,
      );
      lines.push(`${key} ${bounds.join(", ")}`);
    } else {
      lines.push(`${key}: ${Array.isArray(value) ? value.join(", ") : String(value)}`);
    }
  }
  if (lines.length === 0) lines.push("every run");
  lines.push(`at most ${typeof source.limit === "number" ? source.limit : 100} runs, newest first`);
  return lines;
}

const OPS: Record<string, string> = { gte: "≥", gt: ">", lte: "≤", lt: "<" };

/**
 * The fresher of two states of an experiment, whichever way each came (the stream, a page of
 * pairs asked for meanwhile, the answer to a cancel): an ended experiment never goes back to
 * running, nor its pairs done back down, nor a cancel asked for back to not asked.
 */
export function fresher(
  current: ExperimentSummary | undefined,
  next: ExperimentSummary,
): ExperimentSummary {
  if (!current || current.id !== next.id) return next;
  const ended = (e: ExperimentSummary) => e.status !== "running";
  if (ended(current) && !ended(next)) return current;
  if (ended(next) && !ended(current)) return next;
  if (next.progress.done < current.progress.done) return current;
  // A state read before the cancel was asked for.
  if (current.cancel_requested && !next.cancel_requested)
    return { ...next, cancel_requested: true };
  return next;
}

/** Whether the experiment can still change (its stream is worth reading). */
export const isRunning = (e: Pick<ExperimentSummary, "status">) => e.status === "running";

/** Parts of the progress bar: each a share (percent) of the pairs to replay. */
export interface ProgressPart {
  key: "completed" | "failed" | "running" | "cancelled";
  label: string;
  count: number;
  percent: number;
}

export function progressParts(p: Progress): ProgressPart[] {
  const total = Math.max(p.total, 1);
  const parts: ProgressPart[] = [
    { key: "completed", label: "completed", count: p.completed, percent: 0 },
    { key: "failed", label: "failed", count: p.failed, percent: 0 },
    { key: "running", label: "running", count: p.running, percent: 0 },
    { key: "cancelled", label: "cancelled", count: p.cancelled, percent: 0 },
  ];
  return parts
    .filter((part) => part.count > 0)
    .map((part) => ({ ...part, percent: (part.count / total) * 100 }));
}

/** "12 of 40 pairs done" and the rest. */
export function progressText(p: Progress): string {
  if (p.total === 0) return "No pair to replay.";
  const parts = [
    `${p.done} of ${p.total} ${p.total === 1 ? "pair" : "pairs"} done`,
    `${p.completed} completed`,
    `${p.failed} failed`,
    `${p.running} running`,
    `${p.pending} pending`,
  ];
  if (p.cancelled) parts.push(`${p.cancelled} cancelled`);
  return parts.join(" · ");
}

/** Which way a difference goes, for its colour. */
export type Trend = "better" | "worse" | "changed" | "same" | "none";

/** A line of the comparison: one measure of both sides, and how the candidate differs. */
export interface ComparisonRow {
  key: string;
  label: string;
  original: string;
  candidate: string;
  change: string;
  trend: Trend;
}

export const percent = (rate: number | null | undefined) =>
  rate === null || rate === undefined
    ? "–"
    : `${(rate * 100).toFixed(rate === 1 || rate === 0 ? 0 : 1)} %`;
const ms = (v: number | null | undefined) =>
  v === null || v === undefined ? "–" : `${Math.round(v).toLocaleString("en")} ms`;
const integer = (v: number | null | undefined) =>
  v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en");
export const dollars = (v: number | null | undefined) =>
  v === null || v === undefined
    ? "–"
    : `$${v === 0 ? "0" : v < 0.01 ? v.toPrecision(2) : v.toFixed(4)}`;

/**
 * A measure compared: the change from the original to the candidate (points for a rate, percent
 * otherwise) and whether it is for the better (`higher` says which way is).
 */
function measure(
  key: string,
  label: string,
  original: number | null,
  candidate: number | null,
  format: (v: number | null) => string,
  higher: boolean,
  rate = false,
): ComparisonRow {
  const row = { key, label, original: format(original), candidate: format(candidate) };
  if (original === null || candidate === null) return { ...row, change: "", trend: "none" };
  const delta = candidate - original;
  if (Math.abs(delta) < 1e-9) return { ...row, change: "same", trend: "same" };
  const sign = delta > 0 ? "+" : "−";
  const ratio = original > 0 ? candidate / original : 0;
  const change = rate
    ? `${sign}${Math.abs(delta * 100).toFixed(1)} pt`
    : original === 0
      ? `${sign}${format(Math.abs(delta))}`
      : ratio >= 10
        ? `×${Math.round(ratio).toLocaleString("en")}`
        : `${sign}${Math.abs((delta / original) * 100).toFixed(0)} %`;
  return { ...row, change, trend: delta > 0 === higher ? "better" : "worse" };
}

/**
 * The comparison side by side: the schema-valid rate, the p50 latency, tokens and cost of each
 * side; the exact-match rate and the judge's mean score, which only the pairs have.
 */
export function comparisonRows(c: Comparison): ComparisonRow[] {
  const o = c.original;
  const n = c.candidate;
  const rows = [
    measure(
      "schema_valid",
      "Schema-valid",
      o.schema_valid_rate,
      n.schema_valid_rate,
      percent,
      true,
      true,
    ),
    {
      key: "exact_match",
      label: "Exact match",
      original: "",
      candidate: percent(c.exact_match_rate),
      change:
        c.exact_match_rate === null
          ? ""
          : c.exact_match_rate === 1
            ? "same"
            : `${changedCount(c)} of ${c.pairs} differ`,
      // A different result is neither better nor worse by itself (the judge may say).
      trend: (c.exact_match_rate === null
        ? "none"
        : c.exact_match_rate === 1
          ? "same"
          : "changed") as Trend,
    },
    measure("p50_latency", "p50 latency", o.p50_latency_ms, n.p50_latency_ms, ms, false),
    measure("tokens", "Tokens", o.tokens, n.tokens, integer, false),
    measure("cost", "Cost", o.cost, n.cost, dollars, false),
  ];
  if (c.judge) {
    rows.push({
      key: "judge",
      label: "Judge's mean score",
      original: "",
      candidate:
        c.judge.mean_score === null
          ? "–"
          : `${+c.judge.mean_score.toFixed(3)} (${c.judge.scored} scored${
              c.judge.failed ? `, ${c.judge.failed} failed` : ""
            })`,
      change: "",
      trend: "none",
    });
  }
  return rows;
}

/**
 * Pairs whose results differ or whose replay failed, among those done: what `changed=true`
 * answers (the API says the exact-match rate over the pairs done, not this count).
 */
export function changedCount(c: Comparison): number | undefined {
  if (c.exact_match_rate === null) return c.pairs === 0 ? 0 : undefined;
  return c.pairs - Math.round(c.exact_match_rate * c.pairs);
}

/** A pair's outcome in a word, for its row. */
export function pairOutcome(pair: Pair): {
  label: string;
  tone: "same" | "differs" | "failed" | "running" | "idle";
} {
  if (pair.status === "running") return { label: "running", tone: "running" };
  if (pair.status === "pending" || pair.status === "cancelled")
    return { label: pair.status, tone: "idle" };
  if (!pair.candidate || pair.status === "failed") return { label: "failed", tone: "failed" };
  if (pair.exact_match) return { label: "same", tone: "same" };
  if (pair.candidate.schema_valid === false) return { label: "invalid", tone: "failed" };
  return { label: "differs", tone: "differs" };
}
