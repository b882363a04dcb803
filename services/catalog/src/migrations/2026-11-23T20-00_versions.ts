import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

/**
 * Published versions and the lookups of who uses what. A version number is unique among the
 * versions of one interaction and only one of them is the latest (the database refuses a
 * duplicate whatever the code does); deleting a template or an environment looks for the
 * interactions and versions that use it, by index.
 */
export async function up(db: Kysely<any>): Promise<void> {
  const s = db.schema.withSchema("catalog");
  await s
    .createIndex("interactions_parent_version_key")
    .on("interactions")
    .columns(["parent_id", "version"])
    .unique()
    .where(sql.ref("parent_id"), "is not", null)
    .execute();
  await s
    .createIndex("interactions_parent_latest_key")
    .on("interactions")
    .column("parent_id")
    .unique()
    .where(sql.ref("latest"), "=", true)
    .execute();
  // Segments name their template as {"template_id": …}: found with jsonb containment (@>).
  await sql`create index interactions_prompts_idx on catalog.interactions using gin (prompts jsonb_path_ops)`.execute(
    db,
  );
  await s
    .createIndex("interactions_environment_idx")
    .on("interactions")
    .columns(["project_id", "environment_id"])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const index of [
    "interactions_environment_idx",
    "interactions_prompts_idx",
    "interactions_parent_latest_key",
    "interactions_parent_version_key",
  ]) {
    await db.schema.withSchema("catalog").dropIndex(index).execute();
  }
}
