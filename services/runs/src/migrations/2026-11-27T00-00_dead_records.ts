import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // Records of the log the writer can never decode: kept here (bytes as they were) so the writer
  // acknowledges them and goes on, where retrying them held every later record back. One row per
  // stream sequence, so a batch written again adds nothing.
  await db.schema
    .withSchema("runs")
    .createTable("dead_records")
    .ifNotExists()
    .addColumn("record_seq", "bigint", (c) => c.primaryKey())
    // The run its subject names (`<prefix>.record.<run id>`): the id even when the bytes have none.
    .addColumn("run_id", "text", (c) => c.notNull())
    .addColumn("data", "bytea", (c) => c.notNull())
    .addColumn("error", "text", (c) => c.notNull())
    .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.withSchema("runs").dropTable("dead_records").ifExists().execute();
}
