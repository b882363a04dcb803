import { describe, expect, it } from "vitest";
import { PGlite } from "@electric-sql/pglite";
import { btree_gin } from "@electric-sql/pglite/contrib/btree_gin";
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm";
import { sql } from "kysely";
import { buildIndexes, createDatabase, migrateToLatest } from "@pies/common/db";
import { indexBuilds } from "./migrations/index-builds.js";
import { migrations } from "./migrations/index.js";

const TRIGRAM = "runs_project_strings_trgm_idx";
const JSONPATH = "runs_project_parameters_idx";
/** Built in JSONPATH's place without btree_gin. */
const JSONPATH_ALONE = "runs_parameters_idx";

// The embedded mode (PGlite) builds the search indexes as the service does on PostgreSQL; the
// ones under the project (the trigram one, the jsonpath one) only where PGlite has the extensions
// they need loaded (the embedded mode loads both).
describe("the runs search indexes on PGlite", () => {
  it.each([
    ["with pg_trgm and btree_gin loaded", { pg_trgm, btree_gin }, [] as string[]],
    ["with pg_trgm alone", { pg_trgm }, [JSONPATH, TRIGRAM]],
    ["with btree_gin alone", { btree_gin }, [TRIGRAM]],
    ["without either", {}, [JSONPATH, TRIGRAM]],
  ])("are built %s", async (_, extensions, skipped) => {
    const db = createDatabase({ pglite: await PGlite.create({ extensions }) });
    try {
      await migrateToLatest(db, "runs", migrations);
      const names = indexBuilds.map((b) => b.name);
      expect(await buildIndexes(db, "runs", indexBuilds)).toEqual({
        built: names.flatMap((n) =>
          n === JSONPATH && skipped.includes(n) ? [JSONPATH_ALONE] : skipped.includes(n) ? [] : [n],
        ),
        present: [],
        skipped,
        busy: false,
      });
      const again = await buildIndexes(db, "runs", indexBuilds);
      expect(again.built).toEqual([]);
      expect(again.present.includes(JSONPATH_ALONE)).toBe(skipped.includes(JSONPATH));
      if (!skipped.includes(TRIGRAM)) {
        const { rows } = await sql<{ def: string }>`
          select pg_get_indexdef(${`runs.${TRIGRAM}`}::regclass) as def`.execute(db);
        expect(rows[0]?.def).toMatch(
          /USING gin \(project_id, \(\(jsonb_path_query_array\(parameters, 'strict \$\.\*\*/,
        );
      }
    } finally {
      await db.destroy();
    }
  });
});
