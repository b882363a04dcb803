import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .withSchema("runs")
    .createTable("runs")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("account_id", "text", (c) => c.notNull())
    .addColumn("interaction_id", "text", (c) => c.notNull())
    .addColumn("interaction_name", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("environment_id", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("environment_name", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("provider", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("model_id", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("stream", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("parameters", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn("result", "jsonb")
    .addColumn("prompt", "jsonb")
    .addColumn("tags", sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'::text[]`))
    .addColumn("config", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn("source", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn("prompt_tokens", "integer")
    .addColumn("result_tokens", "integer")
    .addColumn("total_tokens", "integer")
    .addColumn("execution_time", "bigint")
    .addColumn("error", "jsonb")
    .addColumn("ttl", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("parent_id", "text")
    .addColumn("cache_policy", "jsonb")
    .addColumn("result_schema", "jsonb")
    .addColumn("cached", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  // Each list filter, with the default order (updated_at desc, id desc), is served by an index.
  const byProject = (name: string, column?: string) =>
    db.schema
      .withSchema("runs")
      .createIndex(name)
      .on("runs")
      .columns(["project_id", ...(column ? [column] : []), "updated_at desc", "id desc"])
      .execute();
  await byProject("runs_project_updated_idx");
  await byProject("runs_interaction_idx", "interaction_id");
  await byProject("runs_status_idx", "status");
  await byProject("runs_model_idx", "model_id");
  await byProject("runs_environment_idx", "environment_id");
  await byProject("runs_parent_idx", "parent_id");
  await db.schema
    .withSchema("runs")
    .createIndex("runs_tags_idx")
    .on("runs")
    .using("gin")
    .column("tags")
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.withSchema("runs").dropTable("runs").execute();
}
