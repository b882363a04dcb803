import type { Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // What a run's references show beyond ids and names (SPEC.md's interaction reference: status,
  // prompts, updated_at; DESIGN.md §3: the project's and account's names), as they were when it
  // ran. Constant defaults: no rewrite of existing partitions.
  await db.schema
    .withSchema("runs")
    .alterTable("runs")
    .addColumn("interaction_status", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("interaction_prompts", "jsonb")
    .addColumn("interaction_updated_at", "timestamptz")
    .addColumn("project_name", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("account_name", "text", (c) => c.notNull().defaultTo(""))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema
    .withSchema("runs")
    .alterTable("runs")
    .dropColumn("interaction_status")
    .dropColumn("interaction_prompts")
    .dropColumn("interaction_updated_at")
    .dropColumn("project_name")
    .dropColumn("account_name")
    .execute();
}
