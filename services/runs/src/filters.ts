import type { SelectQueryBuilder } from "kysely";
import { fromTimestamp } from "@pies/common";
import { hasAnyTag } from "@pies/common/db";
import { AnchorDirection, RunStatus, type RunFilters } from "@pies/proto/runs";
import { statusName } from "./mappers.js";
import type { RunsDatabase } from "./tables.js";

type RunsQuery<O> = SelectQueryBuilder<RunsDatabase, "runs.runs", O>;

/** Applies list/search filters; every one is served by an index that starts with project_id. */
export function applyFilters<O>(
  query: RunsQuery<O>,
  filters: RunFilters | undefined,
): RunsQuery<O> {
  if (!filters) return query;
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
  if (filters.parentId) query = query.where("parent_id", "=", filters.parentId);
  const anchor = fromTimestamp(filters.anchorDate);
  if (anchor) {
    query =
      filters.anchorDirection === AnchorDirection.BEFORE
        ? query.where("updated_at", "<", anchor)
        : query.where("updated_at", ">", anchor);
  }
  const after = fromTimestamp(filters.updatedAfter);
  if (after) query = query.where("updated_at", filters.updatedAfterInclusive ? ">=" : ">", after);
  const before = fromTimestamp(filters.updatedBefore);
  if (before) {
    query = query.where("updated_at", filters.updatedBeforeInclusive ? "<=" : "<", before);
  }
  if (filters.costAbove !== undefined) {
    query = query.where("cost_total", filters.costAboveInclusive ? ">=" : ">", filters.costAbove);
  }
  if (filters.costBelow !== undefined) {
    query = query.where("cost_total", filters.costBelowInclusive ? "<=" : "<", filters.costBelow);
  }
  return query;
}
