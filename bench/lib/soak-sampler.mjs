// @ts-check
import { performance } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import pg from "pg";
import { natsSubscriptions, streamCounts } from "@pies/testkit";
import { clusterTicks, processTicks, ticksSince } from "./cpu.mjs";
import { percentile } from "./stats.mjs";

// What `npm run soak` reads every interval, besides the operations its clients report: each
// process's CPU and RSS (from /proc), nats-server's and the PostgreSQL cluster's CPU, the
// JetStream streams' messages and consumers, the server's subscriptions, the runs tables' dead
// tuples, and /readyz latency measured by a light client of its own.

/**
 * One readiness probe, as readyz-worker.mjs posts it.
 * @typedef {object} Probe
 * @property {number} at Date.now() when it started
 * @property {number} ms
 * @property {boolean} ok
 * @property {string} status the HTTP status, `timeout` or `no answer`
 */

/**
 * The probes of an interval (ReadyzProber.take).
 * @typedef {object} Readyz
 * @property {number | undefined} maxMs
 * @property {number} probes
 * @property {number} failed
 * @property {Record<string, number>} failures the failed probes by status
 * @property {number} duringFault probes that started while a fault was applied (not counted)
 */

/** @typedef {{ n: number, p50: number | undefined, p99: number | undefined }} OpStats */

/**
 * The operations that ended in an interval (OperationWindow.take).
 * @typedef {{ blocking: OpStats, streamed: OpStats, reopened: number, errors: number }} Ops
 */

/**
 * What NATS holds for pies (natsStateReader): the streams' counts, the server's subscriptions;
 * a figure it could not read now is undefined.
 * @typedef {{ events?: StreamCounts, records?: StreamCounts, subscriptions?: number }} NatsState
 */

/** @import { Operation, StreamCounts } from "@pies/testkit" */

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/**
 * CPU% (100 = one core) of named processes between two readings, by name. A pid seen for the first
 * time (started, or restarted after a kill) counts from 0: its whole life is in the interval.
 */
export class CpuMeter {
  /** @type {Map<string, { pid: number, ticks: number }>} */
  #last = new Map();
  #at = performance.now();

  /**
   * `processes`: [{ name, pid }]. Returns { name: percent } since the previous call.
   * @param {{ name: string, pid: number | undefined }[]} processes
   */
  read(processes) {
    const now = performance.now();
    const seconds = (now - this.#at) / 1000;
    this.#at = now;
    /** @type {Record<string, number>} */
    const out = {};
    for (const { name, pid } of processes) {
      const ticks = pid === undefined ? undefined : processTicks(pid);
      const last = this.#last.get(name);
      if (pid === undefined || ticks === undefined) {
        this.#last.delete(name);
        continue;
      }
      const before = last?.pid === pid ? last.ticks : 0;
      this.#last.set(name, { pid, ticks });
      if (last !== undefined) out[name] = ((ticks - before) / TICKS_PER_SECOND / seconds) * 100;
    }
    return out;
  }
}

/** The PostgreSQL cluster's CPU% (the postmaster and every child) between two readings. */
export class ClusterCpuMeter {
  /** @type {Map<number, number> | undefined} */
  #last;
  #at = performance.now();

  /** @param {number | undefined} postmasterPid */
  read(postmasterPid) {
    const now = performance.now();
    const seconds = (now - this.#at) / 1000;
    this.#at = now;
    if (postmasterPid === undefined) return undefined;
    const ticks = clusterTicks(postmasterPid);
    const last = this.#last;
    this.#last = ticks;
    if (last === undefined) return undefined;
    return (ticksSince(last, ticks) / TICKS_PER_SECOND / seconds) * 100;
  }
}

/**
 * Probes `url` (the gateway's /readyz) every `everyMs` from a worker thread of its own
 * (readyz-worker.mjs), as a Kubernetes readiness probe does; take() hands over the probes since the
 * last take(): { maxMs, probes, failed, failures, duringFault } where probes that started while a fault was
 * applied (faultStarted()..faultEnded()) or within AFTER_FAULT_MS of its end are kept apart (a
 * killed gateway cannot answer, and readiness says a dependency is back at its next background
 * check, up to a period and a check's time limit later: decision 0003), and a failed probe counts
 * its time to failure.
 */
/**
 * How long after a fault readiness may still say what the fault did: the gateway sees a dependency
 * back at a background check (every 1 s, each part limited to 2 s: decision 0003) once its
 * connection to a restarted peer is made again and that peer is ready itself. 503s came up to two
 * probes (4–6 s) after a peer's restart in the soak of 2026-11-28; the chart's readiness probe
 * takes 2 failures 5 s apart to take a pod out.
 */
const AFTER_FAULT_MS = 10_000;

export class ReadyzProber {
  /** @type {Probe[]} */
  #probes = [];
  /** @type {[from: number, to: number | undefined][]} (Date.now()), `to` undefined while one is applied */
  #faults = [];
  #worker;
  /** @type {Promise<void> | undefined} */
  #stopped;

  /**
   * @param {string} url
   * @param {{ everyMs?: number, timeoutMs?: number }} [options]
   */
  constructor(url, { everyMs = 2000, timeoutMs = 5000 } = {}) {
    this.#worker = new Worker(new URL("./readyz-worker.mjs", import.meta.url), {
      workerData: { url, everyMs, timeoutMs },
    });
    this.#worker.on("message", (probe) => this.#probes.push(probe));
    this.#worker.unref();
  }

  faultStarted() {
    this.#faults.push([Date.now(), undefined]);
  }

  faultEnded() {
    const last = this.#faults.at(-1);
    if (last) last[1] = Date.now();
  }

  /** Stops the probes (once; later calls wait for the same). */
  stop() {
    this.#stopped ??= new Promise((resolve) => {
      const timer = setTimeout(() => void this.#worker.terminate().then(() => resolve()), 6000);
      this.#worker.once("exit", () => (clearTimeout(timer), resolve()));
      this.#worker.postMessage("stop");
    });
    return this.#stopped;
  }

  /** @returns {Readyz} */
  take() {
    const probes = this.#probes;
    this.#probes = [];
    /** @param {number} at */
    const inFault = (at) =>
      this.#faults.some(
        ([from, to]) => at >= from && (to === undefined || at <= to + AFTER_FAULT_MS),
      );
    const counted = probes.filter((p) => !inFault(p.at));
    return {
      maxMs: counted.length ? Math.max(...counted.map((p) => p.ms)) : undefined,
      probes: counted.length,
      failed: counted.filter((p) => !p.ok).length,
      // The failed probes' answers by status (`503`, `timeout`, …).
      failures: counted
        .filter((p) => !p.ok)
        .reduce(
          (by, p) => ({ ...by, [p.status]: (by[p.status] ?? 0) + 1 }),
          /** @type {Record<string, number>} */ ({}),
        ),
      duringFault: probes.length - counted.length,
    };
  }
}

/**
 * The runs schema's tables' dead tuples (pg_stat_user_tables), by table; undefined when down.
 * @param {string} databaseUrl
 * @returns {Promise<Record<string, number> | undefined>}
 */
export async function deadTuples(databaseUrl) {
  const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 3000 });
  // A restart of PostgreSQL (a fault) ends the connection mid-query: an 'error' event, which would
  // end the soak unheard; the query's rejection already tells (undefined).
  client.on("error", () => {});
  try {
    await client.connect();
    const { rows } = await client.query(
      "select relname, n_dead_tup::int as dead from pg_stat_user_tables where schemaname = 'runs'",
    );
    return Object.fromEntries(rows.map((r) => [r.relname, r.dead]));
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * The NATS server's state as pies leaves it: { streams: { events, records }: {messages,
 * consumers}, subscriptions }, from a connection of the bench's own (which reconnects across a
 * NATS restart; figures it cannot get now are left undefined). close() ends the connection.
 * @param {object} options
 * @param {string} options.url
 * @param {string} options.monitorUrl
 * @param {{ events: string, records: string }} options.streams
 */
export async function natsStateReader({ url, monitorUrl, streams }) {
  const nc = await connect({
    servers: url,
    name: "soak-sampler",
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
  });
  const jsm = await jetstreamManager(nc, { timeout: 5000 });
  return {
    /** @returns {Promise<NatsState>} */
    async read() {
      const [counts, subscriptions] = await Promise.all([
        streamCounts(jsm, [streams.events, streams.records]),
        natsSubscriptions(monitorUrl).catch(() => undefined),
      ]);
      return {
        events: counts[streams.events],
        records: counts[streams.records],
        subscriptions,
      };
    },
    close: () => nc.close(),
  };
}

/** Operations ended in one interval: counts and latency percentiles by kind. */
export class OperationWindow {
  /** @type {Record<Operation["kind"], number[]>} latencies (ms) of the successful ones */
  #ops = { blocking: [], streamed: [], reopen: [] };
  #errors = 0;

  /** @param {Operation} operation */
  add(operation) {
    if (!operation.ok) this.#errors++;
    else this.#ops[operation.kind].push(operation.latencyMs);
  }

  /**
   * The interval's figures; the window starts empty again.
   * @returns {Ops}
   */
  take() {
    /** @param {number[]} values */
    const stats = (values) => {
      const sorted = values.sort((a, b) => a - b);
      return {
        n: sorted.length,
        p50: percentile(sorted, 50),
        p99: percentile(sorted, 99),
      };
    };
    const out = {
      blocking: stats(this.#ops.blocking),
      streamed: stats(this.#ops.streamed),
      reopened: this.#ops.reopen.length,
      errors: this.#errors,
    };
    this.#ops = { blocking: [], streamed: [], reopen: [] };
    this.#errors = 0;
    return out;
  }
}
