import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

/**
 * GET /interactions selects versions by their tags and by their number alone (SPEC.md's `tags`
 * and `version` filters): both by index, tags by overlap (`tags && $1`, GIN), numbers within the
 * project's versions.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index interactions_tags_idx on catalog.interactions using gin (tags)`.execute(
    db,
  );
  await db.schema
    .withSchema("catalog")
    .createIndex("interactions_version_idx")
    .on("interactions")
    .columns(["project_id", "version"])
    .where(sql.ref("parent_id"), "is not", null)
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const index of ["interactions_version_idx", "interactions_tags_idx"]) {
    await db.schema.withSchema("catalog").dropIndex(index).execute();
  }
}
