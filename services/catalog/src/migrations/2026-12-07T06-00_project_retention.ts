import type { Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // Days a project's runs are kept when fewer than the deployment keeps them (DESIGN.md §8); 0: as
  // the deployment does. A constant default: no rewrite of the table.
  await db.schema
    .withSchema("catalog")
    .alterTable("projects")
    .addColumn("retention_days", "integer", (c) => c.notNull().defaultTo(0))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema
    .withSchema("catalog")
    .alterTable("projects")
    .dropColumn("retention_days")
    .execute();
}
