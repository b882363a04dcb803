import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

/**
 * What the runs store keeps of an interaction's runs (DESIGN.md §8): `full`, or `metadata` (no
 * parameters, prompt or result). Every interaction and version made before had full runs. A
 * constant default: PostgreSQL adds the column without rewriting the table.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .withSchema("catalog")
    .alterTable("interactions")
    .addColumn("store", "text", (c) =>
      c
        .notNull()
        .defaultTo("full")
        .check(sql`store in ('full', 'metadata')`),
    )
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.withSchema("catalog").alterTable("interactions").dropColumn("store").execute();
}
