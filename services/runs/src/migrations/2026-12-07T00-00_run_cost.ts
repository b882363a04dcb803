import type { Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // What a run's tokens cost, in USD (DESIGN.md §7): null for a run of a model of no known price.
  // Its index (for filters, ranges and facets) is built concurrently (index-builds.ts).
  await db.schema
    .withSchema("runs")
    .alterTable("runs")
    .addColumn("cost_input", "float8")
    .addColumn("cost_output", "float8")
    .addColumn("cost_total", "float8")
    .addColumn("cost_estimated", "boolean")
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema
    .withSchema("runs")
    .alterTable("runs")
    .dropColumn("cost_input")
    .dropColumn("cost_output")
    .dropColumn("cost_total")
    .dropColumn("cost_estimated")
    .execute();
}
