import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // An experiment (DESIGN.md §13): what it replays against, its progress, and who replays it now
  // (owner and lease: a process that dies leaves it to the next one to claim it).
  await db.schema
    .withSchema("runs")
    .createTable("experiments")
    .ifNotExists()
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("name", "text", (c) => c.notNull())
    // running | completed | cancelled | failed
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("cancel_requested", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("source", "jsonb", (c) => c.notNull())
    .addColumn("target", "jsonb", (c) => c.notNull())
    .addColumn("judge", "text")
    // The ExecuteRequests of a pair and of its judge, but for their data, parent and tags
    // (protobuf binary).
    .addColumn("request", "bytea", (c) => c.notNull())
    .addColumn("judge_request", "bytea")
    .addColumn("concurrency", "integer", (c) => c.notNull())
    // Runs the source matched, and those of them with no input to replay (metadata-only).
    .addColumn("selected", "integer", (c) => c.notNull())
    .addColumn("skipped", "integer", (c) => c.notNull())
    .addColumn("error", "text")
    .addColumn("owner", "text")
    .addColumn("lease_until", "timestamptz")
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("ended_at", "timestamptz")
    .execute();
  await db.schema
    .withSchema("runs")
    .createIndex("experiments_project_created_idx")
    .ifNotExists()
    .on("experiments")
    .columns(["project_id", "created_at desc", "id desc"])
    .execute();
  // What a process looks through for an experiment to claim: only the running ones.
  await sql`create index if not exists experiments_running_idx on runs.experiments (lease_until)
    where status = 'running'`.execute(db);

  // One pair per selected run: the original's side copied at the selection (the source run may
  // be deleted before the replay), the candidate's as its run ended.
  await db.schema
    .withSchema("runs")
    .createTable("experiment_pairs")
    .ifNotExists()
    .addColumn("experiment_id", "text", (c) =>
      c.notNull().references("runs.experiments.id").onDelete("cascade"),
    )
    .addColumn("position", "integer", (c) => c.notNull())
    .addColumn("source_run_id", "text", (c) => c.notNull())
    // pending | running | completed | failed | cancelled
    .addColumn("status", "text", (c) => c.notNull().defaultTo("pending"))
    .addColumn("attempts", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("input", "jsonb", (c) => c.notNull())
    .addColumn("original", "jsonb")
    .addColumn("original_valid", "boolean", (c) => c.notNull())
    .addColumn("original_latency_ms", "integer")
    .addColumn("original_tokens", "integer")
    .addColumn("original_cost", "double precision")
    .addColumn("run_id", "text")
    .addColumn("candidate", "jsonb")
    .addColumn("candidate_valid", "boolean")
    .addColumn("candidate_latency_ms", "integer")
    .addColumn("candidate_tokens", "integer")
    .addColumn("candidate_cost", "double precision")
    .addColumn("exact_match", "boolean")
    .addColumn("diff", "jsonb")
    .addColumn("error", "jsonb")
    .addColumn("judge_run_id", "text")
    .addColumn("judge_score", "double precision")
    .addColumn("judge_error", "text")
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint("experiment_pairs_pkey", ["experiment_id", "position"])
    .execute();
  // The pairs still to replay, in order: what the replay takes next.
  await sql`create index if not exists experiment_pairs_pending_idx
    on runs.experiment_pairs (experiment_id, position) where status = 'pending'`.execute(db);
  // The experiments that copied a run (replayed it, or made it as a replay or a judge's run):
  // they go with it, deleted or past the retention.
  await sql`create index if not exists experiment_pairs_source_idx
    on runs.experiment_pairs (source_run_id)`.execute(db);
  await sql`create index if not exists experiment_pairs_run_idx
    on runs.experiment_pairs (run_id) where run_id is not null`.execute(db);
  await sql`create index if not exists experiment_pairs_judge_run_idx
    on runs.experiment_pairs (judge_run_id) where judge_run_id is not null`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.withSchema("runs").dropTable("experiment_pairs").ifExists().execute();
  await db.schema.withSchema("runs").dropTable("experiments").ifExists().execute();
}
