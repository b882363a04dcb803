import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  const s = db.schema.withSchema("catalog");
  await s
    .createTable("accounts")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await s
    .createTable("projects")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("account_id", "text", (c) => c.notNull().references("catalog.accounts.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await s.createIndex("projects_account_idx").on("projects").column("account_id").execute();
  await s
    .createTable("api_keys")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull().references("catalog.projects.id"))
    .addColumn("account_id", "text", (c) => c.notNull())
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("key_hash", "text", (c) => c.notNull().unique())
    .addColumn("key_hint", "text", (c) => c.notNull())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("revoked_at", "timestamptz")
    .execute();
  await s.createIndex("api_keys_project_idx").on("api_keys").column("project_id").execute();
  await s
    .createTable("environments")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull().references("catalog.projects.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("provider", "text", (c) => c.notNull())
    .addColumn("endpoint_url", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("api_key_enc", "text")
    .addColumn("api_key_hint", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("default_model", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("enabled_models", "jsonb", (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn("config", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await s
    .createIndex("environments_project_idx")
    .on("environments")
    .columns(["project_id", "updated_at desc"])
    .execute();
  await s
    .createTable("prompts")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull().references("catalog.projects.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("role", "text", (c) => c.notNull())
    .addColumn("content_type", "text", (c) => c.notNull())
    .addColumn("content", "text", (c) => c.notNull())
    .addColumn("test_data", "jsonb")
    .addColumn("input_schema", "jsonb")
    .addColumn("status", "text", (c) => c.notNull().defaultTo("draft"))
    .addColumn("version", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("latest", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await s
    .createIndex("prompts_project_idx")
    .on("prompts")
    .columns(["project_id", "updated_at desc", "id desc"])
    .execute();
  await s
    .createTable("interactions")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull().references("catalog.projects.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("description", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("status", "text", (c) => c.notNull().defaultTo("draft"))
    .addColumn("test_data", "jsonb")
    .addColumn("result_schema", "jsonb")
    .addColumn("cache_policy", "jsonb")
    .addColumn("model", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("temperature", "double precision")
    .addColumn("max_tokens", "integer")
    .addColumn("environment_id", "text")
    // [{id, type, template_id, chat_path, template?}]: template is set on published snapshots.
    .addColumn("prompts", "jsonb", (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn("tags", sql`text[]`, (c) => c.notNull().defaultTo(sql`'{}'::text[]`))
    .addColumn("visibility", "text", (c) => c.notNull().defaultTo("private"))
    .addColumn("version", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("latest", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("parent_id", "text")
    .addColumn("formatter", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await s
    .createIndex("interactions_project_idx")
    .on("interactions")
    .columns(["project_id", "updated_at desc", "id desc"])
    .execute();
  await s
    .createIndex("interactions_name_idx")
    .on("interactions")
    .columns(["project_id", "name", "version"])
    .execute();
  await s
    .createIndex("interactions_parent_idx")
    .on("interactions")
    .columns(["parent_id", "version"])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of [
    "interactions",
    "prompts",
    "environments",
    "api_keys",
    "projects",
    "accounts",
  ]) {
    await db.schema.withSchema("catalog").dropTable(table).execute();
  }
}
