import { collectDefaultMetrics, Counter, Gauge, Registry } from "prom-client";
import type { RecordLogState } from "@pies/common/bus";

/** What the runs service's metrics read at each scrape. */
export interface RunsMetricsSources {
  /** Rows in runs.dead_records. */
  deadRecords(): Promise<number>;
  /** The record log's stream and its writers' consumer (JetStreamRunRecords.state). */
  recordLog(): Promise<RecordLogState>;
}

/** The runs service's metrics, and the counter its dead-record pruner adds to. */
export interface RunsMetrics {
  registry: Registry;
  deadRecordsDeleted: Counter;
}

/** A scrape reads the log's state once for its three gauges (each collect asks for it). */
const SCRAPE_MS = 1000;

/**
 * The runs service's metrics (`GET /metrics` on PIES_METRICS_PORT, serveMetrics), read at scrape
 * time, with Node's own prefixed `pies_runs_`:
 * - `pies_runs_dead_records`: records the writer could not decode, kept for replay;
 * - `pies_runs_dead_records_deleted_total`: dead records deleted past their bounds;
 * - `pies_record_log_messages`, `pies_record_log_bytes`, `pies_record_log_max_bytes` (-1: none):
 *   what the record log holds, against its bound;
 * - `pies_record_writer_pending`: records of the log the writers have not written yet.
 * A source that fails (NATS or PostgreSQL down) leaves its gauges out of that scrape.
 */
export function createRunsMetrics(sources: RunsMetricsSources): RunsMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "pies_runs_" });
  new Gauge({
    name: "pies_runs_dead_records",
    help: "Run records the writer could not decode, kept in runs.dead_records for replay",
    registers: [registry],
    async collect() {
      this.reset();
      const n = await sources.deadRecords().catch(() => undefined);
      if (n !== undefined) this.set(n);
    },
  });
  let read: { at: number; state: Promise<RecordLogState | undefined> } | undefined;
  const logState = () => {
    const now = Date.now();
    if (!read || now - read.at > SCRAPE_MS) {
      read = { at: now, state: sources.recordLog().catch(() => undefined) };
    }
    return read.state;
  };
  const fromLog = (name: string, help: string, value: (s: RecordLogState) => number | undefined) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        this.reset();
        const state = await logState();
        const v = state && value(state);
        if (v !== undefined) this.set(v);
      },
    });
  fromLog("pies_record_log_messages", "Run records in the record log", (s) => s.messages);
  fromLog("pies_record_log_bytes", "Bytes of the record log", (s) => s.bytes);
  fromLog(
    "pies_record_log_max_bytes",
    "The record log's byte bound (PIES_RECORD_MAX_BYTES; -1: none)",
    (s) => s.maxBytes,
  );
  fromLog(
    "pies_record_writer_pending",
    "Records of the record log the runs writers have not written yet",
    (s) => s.pending,
  );
  const deadRecordsDeleted = new Counter({
    name: "pies_runs_dead_records_deleted_total",
    help: "Dead records deleted past PIES_DEAD_RECORDS_MAX or PIES_DEAD_RECORDS_MAX_AGE_DAYS",
    registers: [registry],
  });
  return { registry, deadRecordsDeleted };
}
