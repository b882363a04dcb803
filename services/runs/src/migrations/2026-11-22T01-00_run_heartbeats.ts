import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .withSchema("runs")
    .alterTable("runs")
    .addColumn("heartbeat_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  // The sweeper looks only at runs that have not ended: a small partial index, whatever the table.
  await sql`create index runs_active_idx on runs.runs (status, heartbeat_at)
            where status in ('created', 'processing')`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index runs.runs_active_idx`.execute(db);
  await db.schema.withSchema("runs").alterTable("runs").dropColumn("heartbeat_at").execute();
}
