import path from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";

/** The thread's script, compiled: beside this module in dist, or in dist when run from source (tests). */
function threadScript(): string {
  const here = fileURLToPath(import.meta.url);
  return here.endsWith(".ts")
    ? path.resolve(here, "../../../dist/db/pglite-thread.js")
    : path.resolve(here, "../pglite-thread.js");
}

/** What PGliteDialect needs of a PGlite: an instance in this thread, or one in a worker thread. */
export interface PGliteHandle {
  query<R>(
    sql: string,
    params?: unknown[],
  ): Promise<{ rows: R[]; affectedRows?: number | undefined }>;
  exec(sql: string): Promise<unknown>;
  close(): Promise<void>;
}

type Request =
  { op: "query"; sql: string; params: unknown[] } | { op: "exec"; sql: string } | { op: "close" };
/** PGlite in a worker thread: the handle, and the thread (tests end it to play a crash). */
export interface PGliteWorkerHandle extends PGliteHandle {
  readonly thread: Worker;
}

export type ThreadRequest = Request & { id: number };

export type ThreadReply =
  | { id: number; ok: true; rows?: unknown[]; affectedRows?: number | undefined }
  | { id: number; ok: false; error: Record<string, unknown> };

/** A statement's failure as it was thrown in the thread: its message and fields (`code` …). */
export class PGliteThreadError extends Error {
  constructor(fields: Record<string, unknown>) {
    super(String(fields.message ?? "PGlite failed"));
    Object.assign(this, fields);
  }
}

/**
 * PGlite in a worker thread of its own (the embedded mode). PGlite runs each statement to its end
 * on the thread that calls it: in the event loop's thread, a batch of the record writer (tens of
 * ms at 64 streams) stalled every request and stream of the process meanwhile. Here statements
 * run beside the event loop (on another core when there is one), and what crosses is the
 * statement, its parameters and the rows (structured clone: dates, arrays, objects, bigints).
 * Resolves once the database is open, or rejects with why it could not be.
 */
export async function openPGliteWorker(
  dataDir: string,
  options: {
    /** PGlite's extensions to load, by name: pg_trgm, btree_gin. */
    extensions?: string[];
    /**
     * Called once if the thread fails or exits before close(): every statement fails from then
     * on, so the owner should stop (the embedded mode exits, for its supervisor to restart it).
     */
    onFailure?: (err: Error) => void;
  } = {},
): Promise<PGliteWorkerHandle> {
  const worker = new Worker(threadScript(), {
    workerData: { dataDir, extensions: options.extensions ?? [] },
  });
  let closing = false;
  let ready = false;
  const pending = new Map<number, { resolve(r: ThreadReply): void; reject(e: Error): void }>();
  let nextId = 1;
  let gone: Error | undefined;
  const fail = (err: Error) => {
    if (!gone && ready && !closing) options.onFailure?.(err);
    gone ??= err;
    for (const { reject } of pending.values()) reject(gone);
    pending.clear();
  };
  const opened = new Promise<void>((resolve, reject) => {
    pending.set(0, {
      resolve: (reply) => (reply.ok ? resolve() : reject(new PGliteThreadError(reply.error))),
      reject,
    });
  });
  worker.on("message", (reply: ThreadReply) => {
    const waiter = pending.get(reply.id);
    pending.delete(reply.id);
    waiter?.resolve(reply);
  });
  worker.on("error", (err) => fail(new Error("the PGlite thread failed", { cause: err })));
  worker.on("exit", (code) => fail(new Error(`the PGlite thread exited (code ${code})`)));

  const call = (request: Request): Promise<ThreadReply> => {
    if (gone) return Promise.reject(gone);
    const id = nextId++;
    return new Promise<ThreadReply>((resolve, reject) => {
      pending.set(id, { resolve, reject });
      try {
        worker.postMessage({ ...request, id });
      } catch (err) {
        // A parameter that cannot cross (DataCloneError): this call fails, nothing waits for it.
        pending.delete(id);
        reject(err as Error);
      }
    }).then((reply) => {
      if (!reply.ok) throw new PGliteThreadError(reply.error);
      return reply;
    });
  };
  try {
    await opened;
    ready = true;
  } catch (err) {
    await worker.terminate();
    throw err;
  }
  return {
    thread: worker,
    async query<R>(sql: string, params: unknown[] = []) {
      const reply = (await call({ op: "query", sql, params })) as {
        rows?: R[];
        affectedRows?: number;
      };
      return { rows: reply.rows ?? [], affectedRows: reply.affectedRows };
    },
    exec: (sql: string) => call({ op: "exec", sql }),
    async close() {
      closing = true;
      if (!gone) await call({ op: "close" }).catch(() => {});
      fail(new Error("the PGlite thread is closed"));
      await worker.terminate();
    },
  };
}
