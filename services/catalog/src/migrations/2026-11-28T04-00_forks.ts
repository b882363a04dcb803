import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

/**
 * A draft made by forking an interaction or a version names its source (`forked_from`), so that
 * the forks of one are listed (GET /interactions/:id/forks) by index.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .withSchema("catalog")
    .alterTable("interactions")
    .addColumn("forked_from", "text")
    .execute();
  await db.schema
    .withSchema("catalog")
    .createIndex("interactions_forked_from_idx")
    .on("interactions")
    .columns(["project_id", "forked_from"])
    .where(sql.ref("forked_from"), "is not", null)
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.withSchema("catalog").dropIndex("interactions_forked_from_idx").execute();
  await db.schema
    .withSchema("catalog")
    .alterTable("interactions")
    .dropColumn("forked_from")
    .execute();
}
