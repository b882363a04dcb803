import { describe, expect, it } from "vitest";
import { PGlite } from "@electric-sql/pglite";
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm";
import { buildIndexes, createDatabase, migrateToLatest } from "@pies/common/db";
import { indexBuilds } from "./migrations/index-builds.js";
import { migrations } from "./migrations/index.js";

// The embedded mode (PGlite) builds the search indexes as the service does on PostgreSQL; the
// trigram one only where PGlite has pg_trgm loaded (the embedded mode loads it).
describe("the runs search indexes on PGlite", () => {
  it.each([
    ["with pg_trgm loaded", true],
    ["without it", false],
  ])("are built %s", async (_, trigram) => {
    const db = createDatabase({
      pglite: await PGlite.create(trigram ? { extensions: { pg_trgm } } : {}),
    });
    try {
      await migrateToLatest(db, "runs", migrations);
      const names = indexBuilds.map((b) => b.name);
      expect(await buildIndexes(db, "runs", indexBuilds)).toEqual({
        built: trigram ? names : names.filter((n) => n !== "runs_parameters_trgm_idx"),
        present: [],
        skipped: trigram ? [] : ["runs_parameters_trgm_idx"],
        busy: false,
      });
      expect((await buildIndexes(db, "runs", indexBuilds)).built).toEqual([]);
    } finally {
      await db.destroy();
    }
  });
});
