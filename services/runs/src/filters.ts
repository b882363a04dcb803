import { sql, type RawBuilder, type SelectQueryBuilder } from "kysely";
import { fromTimestamp } from "@pies/common";
import { hasAnyTag } from "@pies/common/db";
import { AnchorDirection, RunStatus, type RunFilters } from "@pies/proto/runs";
import { statusName } from "./mappers.js";
import { idPrefix, isTimeId } from "./partitions.js";
import type { RunsDatabase } from "./tables.js";

type RunsQuery<O> = SelectQueryBuilder<RunsDatabase, "runs.runs", O>;

/**
 * The bounds on ids that bounds on updated_at imply (runs.runs is partitioned by id, which starts
 * with the creation time: partitions.ts), so that PostgreSQL reads only the partitions that may
 * hold a match. A run is created before it is updated (its id's time at most RUN_CLOCK_SKEW_MS
 * after, the id and the update being stamped on different machines), and updated for the last time
 * at most MAX_RUN_SPAN_MS after its creation (an execution ends within minutes, and the sweeper ends
 * one abandoned within a lease). Ids not made by pies are kept by an upper bound: a time id
 * starts with "0" for centuries, so every id from "1" on is another kind (in the default partition
 * only). See docs/decisions/0064-runs-partitioned-by-id.md.
 */
export function idBounds(after: Date | undefined, before: Date | undefined) {
  const bounds: RawBuilder<boolean>[] = [];
  if (before) {
    bounds.push(
      sql<boolean>`(id < ${idPrefix(before.getTime() + RUN_CLOCK_SKEW_MS)} or id >= '1')`,
    );
  }
  if (after) bounds.push(sql<boolean>`id >= ${idPrefix(after.getTime() - MAX_RUN_SPAN_MS)}`);
  return bounds;
}

/** See idBounds. */
export const RUN_CLOCK_SKEW_MS = 3_600_000;
export const MAX_RUN_SPAN_MS = 7 * 86_400_000;

/** How far back a newest-first page is first looked for (newestFirst). */
export const RECENT_WINDOW_MS = MAX_RUN_SPAN_MS + RUN_CLOCK_SKEW_MS + 86_400_000;

/** Past this age a newest-first page's floor is dropped: the read is over every partition. */
export const FLOOR_MAX_AGE_MS = 45 * 86_400_000;

/**
 * A newest-first page (`read`, the rows in updated_at order: `page.limit` of them after
 * `page.offset` when there are so many), read from the partitions from a floor on first:
 * `read(floorId)` adds `id >= floorId`. Planning a statement over every partition costs more than
 * running it (tens of ms over 90 daily partitions, against 1–2 over the nine of the window:
 * docs/decisions/0064; fewer with partitions a week wide, 0071), so a page is read over the last
 * RECENT_WINDOW_MS first, then, when that did not hold it, from a floor as far back as the
 * window's matches say the page needs, and only then over all. A read's page is the page when it
 * is full and its last run was updated after every run made before the floor could have been
 * (created before it, updated at most MAX_RUN_SPAN_MS later: idBounds). A full page whose last
 * run is older moves the floor to the oldest run that could be updated after it (the next read
 * then holds the page); a short one tells how many matches a span of days has. A search with no
 * match in the window (a rare term) reads over all at once, and so do filters bounded before the
 * window.
 */
export async function newestFirst<R extends { updated_at: Date }>(
  read: (floorId?: string) => Promise<R[]>,
  page: { limit: number; offset: number },
  filters: RunFilters | undefined,
  now = Date.now(),
): Promise<R[]> {
  const before = [
    fromTimestamp(filters?.updatedBefore),
    filters?.anchorDirection === AnchorDirection.BEFORE
      ? fromTimestamp(filters.anchorDate)
      : undefined,
  ].filter((d) => d !== undefined);
  if (before.some((d) => d.getTime() < now - 86_400_000)) return read();
  const reach = MAX_RUN_SPAN_MS + RUN_CLOCK_SKEW_MS;
  let floor = now - RECENT_WINDOW_MS;
  for (let reads = 0; reads < 3 && floor >= now - FLOOR_MAX_AGE_MS; reads++) {
    const rows = await read(idPrefix(floor));
    const last = rows.at(-1);
    if (rows.length >= page.limit && last) {
      if (last.updated_at.getTime() >= floor + reach) return rows;
      floor = last.updated_at.getTime() - reach;
      continue;
    }
    // Short: every match from the floor on is in it, or before the offset.
    const found = page.offset + rows.length;
    if (found === 0) break;
    // Twice the days that held `found` for the page's runs, and a run's span for its last.
    const wanted = page.offset + page.limit;
    floor = now - (2 * wanted * (now - floor)) / found - reach;
  }
  return read();
}

/** Applies list/search filters; every one is served by an index that starts with project_id. */
export function applyFilters<O>(
  query: RunsQuery<O>,
  filters: RunFilters | undefined,
): RunsQuery<O> {
  if (!filters) return query;
  const bound = (
    a: Date | undefined,
    b: Date | undefined,
    pick: (x: number, y: number) => number,
  ) => (a && b ? new Date(pick(a.getTime(), b.getTime())) : (a ?? b));
  if (filters.interactionIds.length > 0) {
    query = query.where("interaction_id", "in", filters.interactionIds);
  }
  if (filters.models.length > 0) query = query.where("model_id", "in", filters.models);
  if (filters.environmentIds.length > 0) {
    query = query.where("environment_id", "in", filters.environmentIds);
  }
  if (filters.status !== RunStatus.UNSPECIFIED) {
    query = query.where("status", "=", statusName(filters.status));
  }
  if (filters.tags.length > 0) query = query.where(hasAnyTag(filters.tags));
  if (filters.topLevelOnly) query = query.where("parent_id", "is", null);
  if (filters.parentId) {
    query = query.where("parent_id", "=", filters.parentId);
    // A child is made after its parent: its id's time is at least the parent's (an hour less
    // for clocks apart), so only the partitions from the parent's day on can hold one.
    if (isTimeId(filters.parentId)) {
      const made = parseInt(filters.parentId.slice(0, 12), 16);
      query = query.where("id", ">=", idPrefix(made - RUN_CLOCK_SKEW_MS));
    }
  }
  const anchor = fromTimestamp(filters.anchorDate);
  const anchorBefore = filters.anchorDirection === AnchorDirection.BEFORE;
  if (anchor) {
    query = anchorBefore
      ? query.where("updated_at", "<", anchor)
      : query.where("updated_at", ">", anchor);
  }
  const after = fromTimestamp(filters.updatedAfter);
  if (after) query = query.where("updated_at", filters.updatedAfterInclusive ? ">=" : ">", after);
  const before = fromTimestamp(filters.updatedBefore);
  if (before) {
    query = query.where("updated_at", filters.updatedBeforeInclusive ? "<=" : "<", before);
  }
  for (const b of idBounds(
    bound(after, anchor && !anchorBefore ? anchor : undefined, Math.max),
    bound(before, anchor && anchorBefore ? anchor : undefined, Math.min),
  )) {
    query = query.where(b);
  }
  if (filters.costAbove !== undefined) {
    query = query.where("cost_total", filters.costAboveInclusive ? ">=" : ">", filters.costAbove);
  }
  if (filters.costBelow !== undefined) {
    query = query.where("cost_total", filters.costBelowInclusive ? "<=" : "<", filters.costBelow);
  }
  return query;
}
