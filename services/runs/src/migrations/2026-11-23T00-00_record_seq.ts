import type { Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // The position in the record log of the record a row holds: a record replaces the row only if
  // it is later (with the status order), so batches applied out of order or twice change nothing.
  await db.schema
    .withSchema("runs")
    .alterTable("runs")
    .addColumn("record_seq", "bigint", (c) => c.notNull().defaultTo(0))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.withSchema("runs").alterTable("runs").dropColumn("record_seq").execute();
}
