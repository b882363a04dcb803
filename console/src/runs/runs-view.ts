import { useLocation, useSearch } from "wouter";

/**
 * What the runs page shows, all of it in the address's query string (a link shows the same view,
 * back and forward step through views): the Lucene query, filters, time range and page.
 */
export interface RunsView {
  q: string;
  status?: string;
  interaction?: string;
  model?: string;
  environment?: string;
  tags: string[];
  /** A preset (`1h`, `24h`, `7d`, `30d`), or absent for all time or a custom from/to. */
  range?: string;
  from?: string;
  to?: string;
  /** Bounds on a run's total cost in USD, both inclusive (`min_cost`, `max_cost`). */
  minCost?: string;
  maxCost?: string;
  page: number;
}

export const RANGES: Record<string, { label: string; ms: number; buckets: number }> = {
  "1h": { label: "Last hour", ms: 3_600_000, buckets: 12 },
  "24h": { label: "Last 24 hours", ms: 86_400_000, buckets: 24 },
  "7d": { label: "Last 7 days", ms: 7 * 86_400_000, buckets: 28 },
  "30d": { label: "Last 30 days", ms: 30 * 86_400_000, buckets: 30 },
};

export function parseView(search: string): RunsView {
  const p = new URLSearchParams(search);
  const text = (key: string) => p.get(key) || undefined;
  const range = text("range");
  return {
    q: p.get("q") ?? "",
    status: text("status"),
    interaction: text("interaction"),
    model: text("model"),
    environment: text("environment"),
    tags: (p.get("tags") ?? "").split(",").filter(Boolean),
    range: range && RANGES[range] ? range : undefined,
    from: text("from"),
    to: text("to"),
    minCost: cost(p.get("min_cost")),
    maxCost: cost(p.get("max_cost")),
    page: Math.max(1, Number(p.get("page")) || 1),
  };
}

/** A cost bound from the address: a non-negative number, else none. */
function cost(value: string | null): string | undefined {
  if (!value) return undefined;
  const n = Number(value);
  return Number.isFinite(n) && n >= 0 ? value : undefined;
}

export function formatView(view: RunsView): string {
  const p = new URLSearchParams();
  if (view.q) p.set("q", view.q);
  for (const key of [
    "status",
    "interaction",
    "model",
    "environment",
    "range",
    "from",
    "to",
  ] as const) {
    const value = view[key];
    if (value) p.set(key, value);
  }
  if (view.tags.length) p.set("tags", view.tags.join(","));
  if (view.minCost) p.set("min_cost", view.minCost);
  if (view.maxCost) p.set("max_cost", view.maxCost);
  if (view.page > 1) p.set("page", String(view.page));
  const text = p.toString();
  return text ? `?${text}` : "";
}

/** The view in the address, and a way to change it (a new history entry, page 1 unless given). */
export function useRunsView(): [RunsView, (change: Partial<RunsView>) => void] {
  const search = useSearch();
  const [, navigate] = useLocation();
  const view = parseView(search);
  const update = (change: Partial<RunsView>) =>
    navigate(`/runs${formatView({ ...view, page: 1, ...change })}`);
  return [view, update];
}

/** The updated_at window of the view: [from, to), either end open. */
export function windowOf(view: RunsView, now: number): { from?: number; to?: number } {
  if (view.range) {
    const range = RANGES[view.range];
    return range ? { from: now - range.ms } : {};
  }
  const from = view.from ? Date.parse(view.from) : undefined;
  const to = view.to ? Date.parse(view.to) : undefined;
  return {
    from: Number.isFinite(from) ? from : undefined,
    to: Number.isFinite(to) ? to : undefined,
  };
}
