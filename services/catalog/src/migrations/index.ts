import type { Migration } from "kysely";
import * as initial from "./2026-11-22T00-00_initial.js";

/** Every migration of the catalog schema, by name (names sort in the order they apply). */
export const migrations: Record<string, Migration> = {
  "2026-11-22T00-00_initial": initial,
};
