import { PGlite } from "@electric-sql/pglite";
import { afterAll, expect, it } from "vitest";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import { migrations } from "./index.js";

const pglite = await PGlite.create();
const db = createDatabase<any>({ pglite });

afterAll(async () => {
  await db.destroy();
});

const key = (id: string, role?: string) =>
  db
    .insertInto("catalog.api_keys")
    .values({
      id,
      project_id: "p1",
      account_id: "a1",
      name: id,
      key_hash: `hash-${id}`,
      key_hint: "sk-xxxx",
      ...(role ? { role } : {}),
    })
    .execute();

it("makes the keys that existed before roles admin, and later keys member unless told", async () => {
  await migrateToLatest(db, "catalog", {
    "2026-11-22T00-00_initial": migrations["2026-11-22T00-00_initial"]!,
  });
  await db.insertInto("catalog.accounts").values({ id: "a1", name: "a" }).execute();
  await db
    .insertInto("catalog.projects")
    .values({ id: "p1", account_id: "a1", name: "p" })
    .execute();
  await key("old");

  await migrateToLatest(db, "catalog", migrations);
  await key("new");
  await key("named", "admin");
  const roles = await db
    .selectFrom("catalog.api_keys")
    .select(["id", "role"])
    .orderBy("id")
    .execute();
  expect(roles).toEqual([
    { id: "named", role: "admin" },
    { id: "new", role: "member" },
    { id: "old", role: "admin" },
  ]);
  await expect(key("bad", "owner")).rejects.toThrow(/check constraint/);
});
