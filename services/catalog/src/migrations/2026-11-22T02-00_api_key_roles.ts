import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

/** Keys carry a role, admin or member. Keys made before roles existed could do everything: admin. */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .withSchema("catalog")
    .alterTable("api_keys")
    .addColumn("role", "text", (c) =>
      c
        .notNull()
        .defaultTo("admin")
        .check(sql`role in ('admin', 'member')`),
    )
    .execute();
  // New rows name their role; a row that does not is the least it can be.
  await db.schema
    .withSchema("catalog")
    .alterTable("api_keys")
    .alterColumn("role", (c) => c.setDefault("member"))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.withSchema("catalog").alterTable("api_keys").dropColumn("role").execute();
}
