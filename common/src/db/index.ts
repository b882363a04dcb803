// @pies/common/db: PostgreSQL through kysely (pg, whose global type parser it sets, or PGlite) and
// the start-up of a database-backed Connect service.
export * from "./db.js";
export * from "./db-service.js";
export * from "./index-builds.js";
export * from "./pglite-worker.js";
