import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // Autovacuum of the runs table, paced and regular (docs/decisions/0057-runs-autovacuum-paced.md).
  // A vacuum of this table reads its whole indexes and starts once 20% more rows came in, so on
  // an append-mostly table each comes later and costs more than the one before; paced at 20 ms
  // (PostgreSQL's default before version 12) its work spreads over minutes rather than seconds.
  // Statistics are refreshed after a fixed number of changed rows rather than a tenth of the
  // table, so analyze costs the same at any size and the newest hours are always in them.
  await sql`
    alter table runs.runs set (
      autovacuum_vacuum_cost_delay = 20,
      autovacuum_analyze_scale_factor = 0,
      autovacuum_analyze_threshold = 50000
    )
  `.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    alter table runs.runs reset (
      autovacuum_vacuum_cost_delay,
      autovacuum_analyze_scale_factor,
      autovacuum_analyze_threshold
    )
  `.execute(db);
}
