import type { Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // Every provider call of a run when it took more than one (repairs), and the run a cache hit
  // answered from.
  await db.schema
    .withSchema("runs")
    .alterTable("runs")
    .addColumn("attempts", "jsonb")
    .addColumn("cached_from", "text")
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema
    .withSchema("runs")
    .alterTable("runs")
    .dropColumn("attempts")
    .dropColumn("cached_from")
    .execute();
}
