import type { paths } from "../api/schema";
import { windowOf, type RunsView, RANGES } from "./runs-view";

export type SearchBody =
  paths["/api/v1/runs/search"]["post"]["requestBody"]["content"]["application/json"];
export type SearchAnswer =
  paths["/api/v1/runs/search"]["post"]["responses"][200]["content"]["application/json"];

export const PAGE_SIZE = 25;

/** Execution time histogram, in ms (lower bounds; the last bucket is `more`). */
export const TIME_BOUNDARIES = [0, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000];

const HOUR_MS = 3_600_000;

/**
 * The buckets of the runs-over-time chart: the view's window cut in equal parts. Buckets of an
 * hour or more that end now end at the next full hour instead, each a whole number of hours: the
 * runs service counts them from its hourly rollup, where a boundary inside an hour costs a count
 * of that hour's runs (150 ms at a million runs for the thirty boundaries of "all time").
 */
export function timeBoundaries(view: RunsView, now: number): number[] {
  const window = windowOf(view, now);
  let to = window.to ?? now;
  const preset = view.range ? RANGES[view.range] : undefined;
  // All time: the last 30 days, daily; older runs count in an `earlier` bucket.
  const from = window.from ?? to - 30 * 86_400_000;
  const count = preset?.buckets ?? (window.from === undefined ? 30 : 24);
  let step = Math.max(1000, Math.ceil((to - from) / count / 1000) * 1000);
  if (step >= HOUR_MS && window.to === undefined) {
    step = Math.ceil(step / HOUR_MS) * HOUR_MS;
    to = Math.ceil(to / HOUR_MS) * HOUR_MS;
  }
  const start = to - step * count;
  return Array.from({ length: count + 1 }, (_, i) => start + i * step);
}

/**
 * `POST /runs/search` for a view: the page of runs and the facets the runs service counts from its
 * rollup when the view has no query (status, model, tags, time of update; DESIGN.md §12), so that
 * on a big project the table and these charts come at once. The other facets are asked apart
 * (slowFacetsBody): counted over every matching run, they take seconds at a million runs.
 */
export function searchBody(view: RunsView, now: number): SearchBody {
  const window = windowOf(view, now);
  return {
    query: view.q || undefined,
    limit: PAGE_SIZE,
    offset: (view.page - 1) * PAGE_SIZE,
    filters: filtersOf(view, now),
    facets: {
      status: { type: "string", path: "status" },
      model: { type: "string", path: "modelId", numBuckets: 10 },
      tags: { type: "string", path: "tags", numBuckets: 12 },
      updated: {
        type: "date",
        path: "updated_at",
        boundaries: timeBoundaries(view, now).map((t) => new Date(t).toISOString()),
        // All time: the runs older than the chart's thirty days.
        default: window.from === undefined ? "earlier" : undefined,
      },
    },
  };
}

/** The facets no rollup counts (interaction, execution time), for the same runs: no page. */
export function slowFacetsBody(view: RunsView, now: number): SearchBody {
  return {
    query: view.q || undefined,
    onlyMeta: true,
    filters: filtersOf(view, now),
    facets: {
      interaction: { type: "string", path: "interaction", numBuckets: 10 },
      time: {
        type: "number",
        path: "execution_time",
        boundaries: TIME_BOUNDARIES,
        default: "more",
      },
    },
  };
}

/** The view's filters as `POST /runs/search` (and an experiment's `source`) takes them. */
export function filtersOf(view: RunsView, now: number): SearchBody["filters"] {
  const window = windowOf(view, now);
  const updated: { gte?: string; lt?: string } = {};
  if (window.from !== undefined) updated.gte = new Date(window.from).toISOString();
  if (window.to !== undefined) updated.lt = new Date(window.to).toISOString();
  return {
    status: view.status as "completed" | undefined,
    interaction: view.interaction,
    modelId: view.model,
    environment: view.environment,
    tags: view.tags.length ? view.tags : undefined,
    updated_at: updated.gte || updated.lt ? updated : undefined,
    cost:
      view.minCost || view.maxCost
        ? {
            gte: view.minCost ? Number(view.minCost) : undefined,
            lte: view.maxCost ? Number(view.maxCost) : undefined,
          }
        : undefined,
  };
}

/** Where a Lucene query broke, from the API's 400 message (`… at position 9`). */
export function errorPosition(message: string): number | undefined {
  const match = /at position (\d+)/.exec(message);
  return match ? Number(match[1]) : undefined;
}
