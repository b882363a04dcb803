import type { Kysely } from "kysely";

// Frozen: a migration never imports application code and never changes once released.
//
// Changed before release, once: it built the search indexes inside the migrator's transaction,
// which blocks every insert into runs.runs until the build ends (minutes at millions of runs).
// They are built concurrently now, outside the migrations (./index-builds.ts); a database that
// ran the earlier version has them already, and the builds find them valid.

export async function up(_db: Kysely<any>): Promise<void> {}

export async function down(_db: Kysely<any>): Promise<void> {}
