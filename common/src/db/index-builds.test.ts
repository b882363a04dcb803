import { describe, expect, it } from "vitest";
import { PGlite } from "@electric-sql/pglite";
import { pino } from "pino";
import { sql } from "kysely";
import { createDatabase } from "./db.js";
import { prepareIndexBuilds, type IndexBuild } from "./index-builds.js";

const builds: IndexBuild[] = [
  { name: "t_a_idx", table: "s.t", definition: () => "(a)" },
  { name: "t_b_idx", table: "s.t", definition: () => "(b, a)" },
];

describe("index builds on an in-process database (PGlite)", () => {
  it("are done, plainly, before the start goes on (a background build would stall the process)", async () => {
    const db = createDatabase({ pglite: await PGlite.create() });
    const lines: { msg: string; index?: string }[] = [];
    const logger = pino({ level: "info" }, { write: (s: string) => lines.push(JSON.parse(s)) });
    try {
      await sql`create schema s`.execute(db);
      await sql`create table s.t (a int, b text)`.execute(db);
      await sql`insert into s.t select i, md5(i::text) from generate_series(1, 1000) as i`.execute(
        db,
      );
      const indexes = await prepareIndexBuilds(db, "s", builds, logger);
      // Done when the start goes on: nothing of the build is left to run while serving.
      const { rows } = await sql<{ name: string; valid: boolean }>`
        select c.relname as name, i.indisvalid as valid from pg_index i
        join pg_class c on c.oid = i.indexrelid
        join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 's' order by 1`.execute(db);
      expect(rows).toEqual([
        { name: "t_a_idx", valid: true },
        { name: "t_b_idx", valid: true },
      ]);
      expect(lines.map((l) => l.msg)).toEqual([
        "building the indexes before serving: the embedded database runs in this process",
        "building an index",
        "index built",
        "building an index",
        "index built",
      ]);
      expect((await indexes.done)?.built).toEqual(["t_a_idx", "t_b_idx"]);
      await indexes.stop();
    } finally {
      await db.destroy();
    }
  });
});
