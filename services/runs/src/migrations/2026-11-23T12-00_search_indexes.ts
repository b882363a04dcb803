import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // Lucene queries over the input data compile to `parameters @? <jsonpath>` tests, which a GIN
  // index with jsonb_path_ops serves (equality at a path; smaller and cheaper to maintain than the
  // default jsonb_ops).
  await sql`create index if not exists runs_parameters_idx on runs.runs
            using gin (parameters jsonb_path_ops)`.execute(db);
  // The project's index in the default order, now covering what the facets group by (status,
  // model, execution time; updated_at is in the key): facets over a project are an index-only
  // scan instead of reading every row. It replaces the index of the same key, so a write still
  // maintains as many indexes on the same columns as before.
  await sql`create index if not exists runs_project_updated_cover_idx on runs.runs
            (project_id, updated_at desc, id desc) include (status, model_id, execution_time)`.execute(
    db,
  );
  await sql`drop index if exists runs.runs_project_updated_idx`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`create index if not exists runs_project_updated_idx on runs.runs
            (project_id, updated_at desc, id desc)`.execute(db);
  await sql`drop index if exists runs.runs_project_updated_cover_idx`.execute(db);
  await sql`drop index if exists runs.runs_parameters_idx`.execute(db);
}
