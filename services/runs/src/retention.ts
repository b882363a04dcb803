import type { Client } from "@connectrpc/connect";
import { sql, type Kysely } from "kysely";
import type { Logger } from "@pies/common";
import type { CatalogService } from "@pies/proto/catalog";
import { deleteExperimentsOf, deleteRunsWhere } from "./deletions.js";
import {
  DAY_MS,
  droppedBelow,
  dropPartitionsBelow,
  idPrefix,
  listPartitions,
  makePartitions,
} from "./partitions.js";
import type { RunsDatabase } from "./tables.js";

export interface RetentionResult {
  /** Partitions dropped whole. */
  dropped: string[];
  /** Runs deleted one batch at a time: of partitions the floor cuts, and of projects' shorter retention. */
  deleted: number;
  /** Experiments deleted with the runs they copied (deleteExperimentsOf). */
  experiments: number;
}

/**
 * Applies the retention once (DESIGN.md §8 "Lifecycle"): runs created more than `retentionDays`
 * ago go (0: none), a partition at a time once the floor lies past its end (so a run is kept that
 * many days and at most a partition's width more, PIES_RUN_PARTITION_DAYS; the record writer
 * refuses them from the floor on: record-writer.ts), and in batches from the partitions that are
 * not a period's (the legacy one, the default one); a project's shorter retention deletes its
 * older runs in batches.
 * The partitions are dropped an hour past the floor, so that no record the writer let through
 * under a clock a little behind lands in one being dropped. Tombstones of runs past the floor go
 * too: the writer refuses those runs anyway. An experiment goes with the runs it copied (its
 * pairs hold their inputs and results): once one of them is past the retention, the
 * deployment's or its project's.
 */
export async function applyRetention(
  db: Kysely<RunsDatabase>,
  options: {
    retentionDays: number;
    /** Projects' own retention, in days (shorter than the deployment's to matter). */
    projectDays?: ReadonlyMap<string, number>;
    now?: number;
    logger?: Logger;
  },
): Promise<RetentionResult> {
  const now = options.now ?? Date.now();
  const result: RetentionResult = { dropped: [], deleted: 0, experiments: 0 };
  const { retentionDays } = options;
  const below = droppedBelow(now, retentionDays);
  if (below !== null) {
    const floor = now - retentionDays * DAY_MS;
    result.dropped = await dropPartitionsBelow(db, below, options);
    const floorId = idPrefix(floor);
    // Runs go one by one only from the partitions that are not a period's (the legacy one, the
    // default one): a period's partition goes whole once the floor has passed its end.
    for (const p of await listPartitions(db)) {
      if (!p.isDefault && p.from !== null) continue;
      const partition = sql.raw(`runs."${p.name}"`);
      result.deleted += await deleteRunsWhere(
        db,
        (limit) =>
          sql`select id from ${partition} where id < ${floorId} order by id limit ${limit}`,
      );
    }
    await sql`delete from runs.deleted_runs where id < ${floorId}`.execute(db);
    result.experiments += await deleteExperimentsOf(db, { floorId });
  }
  for (const [projectId, days] of options.projectDays ?? []) {
    if (days <= 0 || (retentionDays > 0 && days >= retentionDays)) continue;
    const cutoff = now - days * DAY_MS;
    // By the project's index in updated_at order; a run updated after the cutoff (created before
    // it) goes at a later pass. The id bound leaves out the partitions after the cutoff.
    const n = await deleteRunsWhere(
      db,
      (limit) => sql`select id from runs.runs
        where project_id = ${projectId} and updated_at < ${new Date(cutoff)} and id < ${idPrefix(cutoff)}
        order by updated_at limit ${limit}`,
    );
    const experiments = await deleteExperimentsOf(db, {
      floorId: idPrefix(cutoff),
      projectId,
    });
    if (n > 0 || experiments > 0)
      options.logger?.info(
        { projectId, days, runs: n, experiments },
        "project's runs past its retention deleted",
      );
    result.deleted += n;
    result.experiments += experiments;
  }
  return result;
}

/**
 * The runs store's upkeep, at start and every `intervalMs`: the next days' partitions, then the
 * retention (`projectDays` asked each time: the catalog's projects with a retention of their
 * own; a failure to ask is logged and the deployment's retention applied alone).
 */
export function startMaintenance(
  db: Kysely<RunsDatabase>,
  options: {
    intervalMs: number;
    retentionDays: number;
    /** A partition's width in days (PIES_RUN_PARTITION_DAYS). */
    partitionDays?: number;
    projectDays?: () => Promise<ReadonlyMap<string, number>>;
    logger: Logger;
  },
): { stop(): Promise<void>; runOnce(): Promise<void> } {
  const { logger } = options;
  let running: Promise<void> = Promise.resolve();
  let stopped = false;
  const once = async () => {
    await makePartitions(db, {
      logger,
      days: options.partitionDays,
      retentionDays: options.retentionDays,
    });
    let projectDays: ReadonlyMap<string, number> | undefined;
    try {
      projectDays = await options.projectDays?.();
    } catch (err) {
      logger.warn({ err }, "projects' retention could not be read: applied at the next pass");
    }
    const result = await applyRetention(db, {
      retentionDays: options.retentionDays,
      projectDays,
      logger,
    });
    if (result.dropped.length || result.deleted || result.experiments)
      logger.info(result, "runs retention applied");
  };
  const tick = () => {
    if (stopped) return running;
    running = running.then(once).catch((err: unknown) => {
      logger.warn({ err }, "runs store upkeep failed; tried again at the next pass");
    });
    return running;
  };
  const timer = setInterval(() => void tick(), options.intervalMs);
  timer.unref();
  return {
    runOnce: tick,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}

/** The catalog's projects that keep their runs for a number of days of their own. */
export async function projectRetention(
  catalog: Pick<Client<typeof CatalogService>, "listProjectRetention">,
): Promise<ReadonlyMap<string, number>> {
  const { projects } = await catalog.listProjectRetention({});
  return new Map(projects.map((p) => [p.projectId, p.retentionDays]));
}
