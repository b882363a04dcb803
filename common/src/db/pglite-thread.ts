// The thread that owns the embedded mode's PGlite (see pglite-worker.ts): it opens the database
// in the directory it is given, with the extensions named, and answers one request at a time.
import { parentPort, workerData } from "node:worker_threads";
import { PGlite, type Extensions } from "@electric-sql/pglite";
import type { ThreadReply, ThreadRequest } from "./pglite-worker.js";

const { dataDir, extensions: names } = workerData as { dataDir: string; extensions: string[] };

/** The extensions pies loads, by name (only these can be asked for). */
async function loadExtensions(wanted: string[]): Promise<Extensions> {
  const loaded: Extensions = {};
  for (const name of wanted) {
    if (name === "pg_trgm") {
      loaded.pg_trgm = (await import("@electric-sql/pglite/contrib/pg_trgm")).pg_trgm;
    } else if (name === "btree_gin") {
      loaded.btree_gin = (await import("@electric-sql/pglite/contrib/btree_gin")).btree_gin;
    } else {
      throw new Error(`unknown PGlite extension ${name}`);
    }
  }
  return loaded;
}

/** What a failed statement carries (SQLSTATE `code`, `detail`, `constraint` …), all but functions. */
function errorFields(err: unknown): Record<string, unknown> {
  if (!(err instanceof Error)) return { message: String(err) };
  const fields: Record<string, unknown> = { message: err.message, name: err.name };
  for (const [key, value] of Object.entries(err)) {
    if (typeof value !== "function" && typeof value !== "object") fields[key] = value;
  }
  return fields;
}

const port = parentPort;
if (!port) throw new Error("pglite-thread runs as a worker thread");

const opened = loadExtensions(names).then((extensions) => PGlite.create(dataDir, { extensions }));
// Reported once, so that the owner's start fails with the cause rather than waiting.
opened.then(
  () => port.postMessage({ id: 0, ok: true } satisfies ThreadReply),
  (err: unknown) => port.postMessage({ id: 0, ok: false, error: errorFields(err) }),
);

port.on("message", (request: ThreadRequest) => {
  void (async () => {
    try {
      const db = await opened;
      let reply: ThreadReply;
      if (request.op === "query") {
        const result = await db.query(request.sql, request.params);
        reply = { id: request.id, ok: true, rows: result.rows, affectedRows: result.affectedRows };
      } else if (request.op === "exec") {
        await db.exec(request.sql);
        reply = { id: request.id, ok: true };
      } else {
        await db.close();
        reply = { id: request.id, ok: true };
      }
      port.postMessage(reply);
    } catch (err) {
      port.postMessage({
        id: request.id,
        ok: false,
        error: errorFields(err),
      } satisfies ThreadReply);
    }
  })();
});
