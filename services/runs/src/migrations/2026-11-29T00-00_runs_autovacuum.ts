import { sql, type Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.

export async function up(db: Kysely<any>): Promise<void> {
  // Autovacuum of the runs table, paced and regular (docs/decisions/0057-runs-autovacuum-paced.md).
  // A vacuum of this table scans its whole indexes (GIN ones included) and starts when 20% more
  // rows came in, so it comes later and bigger as the table grows: unthrottled beyond the 2 ms
  // default it took a third of a core for 20 s at half a million rows. At 20 ms (PostgreSQL's
  // default before version 12) the same work spreads over minutes, between the next one's start.
  // Statistics are refreshed after a fixed number of changed rows rather than a tenth of the
  // table, so the planner knows the newest hours of an append-mostly table however large it is.
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
