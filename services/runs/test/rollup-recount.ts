import { expect } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { sql, type Kysely } from "kysely";
import { toTimestamp } from "@pies/common";
import type { RunRecord } from "@pies/common/bus";
import { RunSchema, type RunStatus } from "@pies/proto/runs";
import type { RunsDatabase } from "../src/tables.js";

/**
 * The rollup's rows with a count, and the same counted over runs.runs now: they must be equal.
 * Resolves with the number of rows compared.
 */
export async function expectRecount(db: Kysely<RunsDatabase>): Promise<number> {
  let rows = 0;
  for (const [hours, unit] of [
    [1, "hour"],
    [24, "day"],
  ] as const) {
    const { rows: stored } = await sql`
      select project_id, bucket, status, model_id, top_level, n::int as n from runs.run_rollups
      where hours = ${hours} and n <> 0 order by 1, 2, 3, 4, 5`.execute(db);
    const { rows: recount } = await sql`
      select project_id, date_trunc(${unit}, updated_at at time zone 'UTC') at time zone 'UTC' as bucket,
        status, model_id, parent_id is null as top_level, count(*)::int as n
      from runs.runs group by 1, 2, 3, 4, 5 order by 1, 2, 3, 4, 5`.execute(db);
    expect(stored).toEqual(recount);
    rows += stored.length;
    // And by tag (a run's tag once).
    const { rows: storedTags } = await sql`
      select project_id, bucket, tag, status, top_level, n::int as n
      from runs.run_tag_rollups where hours = ${hours} and n <> 0 order by 1, 2, 3, 4, 5`.execute(
      db,
    );
    const { rows: recountTags } = await sql`
      select project_id, date_trunc(${unit}, updated_at at time zone 'UTC') at time zone 'UTC' as bucket,
        t.tag, status, parent_id is null as top_level, count(*)::int as n
      from runs.runs as r cross join lateral (select distinct unnest(r.tags) as tag) as t
      group by 1, 2, 3, 4, 5 order by 1, 2, 3, 4, 5`.execute(db);
    expect(storedTags).toEqual(recountTags);
    rows += storedTags.length;
  }
  const { rows: other } = await sql`
    select * from runs.run_rollups where n < 0 or hours not in (1, 24)`.execute(db);
  expect(other).toEqual([]);
  const { rows: otherTags } = await sql`
    select * from runs.run_tag_rollups where n < 0 or hours not in (1, 24)`.execute(db);
  expect(otherTags).toEqual([]);
  return rows;
}

/** A record of a run of `projectId` (a message as the log holds it), updated at `updatedAt`. */
export function runRecord(
  seq: number,
  id: string,
  projectId: string,
  status: RunStatus,
  fields: { modelId?: string; parentId?: string; updatedAt: number; parametersJson?: string },
): RunRecord {
  const run = create(RunSchema, {
    id,
    projectId,
    accountId: "acc",
    interactionId: "int",
    modelId: fields.modelId ?? "m-1",
    status,
    parentId: fields.parentId ?? "",
    updatedAt: toTimestamp(new Date(fields.updatedAt)),
    ...(fields.parametersJson
      ? { parametersJson: new TextEncoder().encode(fields.parametersJson) }
      : {}),
  });
  return { runId: id, seq, data: toBinary(RunSchema, run) };
}
