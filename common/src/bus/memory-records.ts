import { setTimeout as sleep } from "node:timers/promises";
import {
  RecordConflict,
  retryDelayMs,
  takeBatch,
  type ConsumeOptions,
  type RecordBatchWriter,
  type RunRecord,
  type RunRecords,
} from "./run-records.js";

interface Pending {
  record: RunRecord;
  stored: () => void;
}

/**
 * The embedded mode's record log, in memory. Nothing in memory survives the process, so a put
 * resolves only once the writer has stored its record (group commit: records that arrive while a
 * batch is being written form the next batch). The last record of each run is kept for
 * `maxAgeMs` after its put, so that a conditional put made from a read of the store just before
 * still finds it (the store has it by then: a minute is ample).
 */
export class MemoryRunRecords implements RunRecords {
  private readonly lastByRun = new Map<string, RunRecord & { at: number }>();
  private readonly dedup = new Map<string, number>();
  private pending: Pending[] = [];
  private seq = 0;
  private wake?: () => void;

  constructor(private readonly maxAgeMs = 60_000) {}

  async put(
    runId: string,
    data: Uint8Array,
    options: { dedupId: string; expectSeq?: number; accepted?: boolean },
  ) {
    const known = this.dedup.get(options.dedupId);
    if (known !== undefined) return known;
    const last = this.lastByRun.get(runId);
    if (options.expectSeq !== undefined && (last?.seq ?? 0) !== options.expectSeq) {
      throw new RecordConflict(runId);
    }
    const record = { runId, seq: ++this.seq, data };
    this.prune();
    // Re-inserted, so the map stays in the order of each run's last put (oldest first).
    this.lastByRun.delete(runId);
    this.lastByRun.set(runId, { ...record, at: Date.now() });
    this.dedup.set(options.dedupId, record.seq);
    const stored = new Promise<void>((stored) => {
      this.pending.push({ record, stored });
      this.wake?.();
    });
    // Batches are written in the order of the puts: a later put of the run, once stored, is
    // stored with this one or after it.
    if (!options.accepted) await stored;
    return record.seq;
  }

  async last(runId: string) {
    const last = this.lastByRun.get(runId);
    return last && { runId, seq: last.seq, data: last.data };
  }

  consume(write: RecordBatchWriter, { onError, maxBatch, maxBatchBytes }: ConsumeOptions) {
    const stop = new AbortController();
    // One listener for the consumer's life: stopping wakes a consumer that waits for records.
    stop.signal.addEventListener("abort", () => this.wake?.(), { once: true });
    const loop = (async () => {
      while (!stop.signal.aborted) {
        if (this.pending.length === 0) {
          await new Promise<void>((resolve) => (this.wake = resolve));
          this.wake = undefined;
          continue;
        }
        const batch = takeBatch(this.pending, (p) => p.record.data.length, maxBatch, maxBatchBytes);
        for (let attempt = 0; !stop.signal.aborted; attempt++) {
          try {
            await write(batch.map((p) => p.record));
            for (const p of batch) p.stored();
            break;
          } catch (err) {
            onError(err, attempt);
            await sleep(retryDelayMs(attempt), undefined, { signal: stop.signal }).catch(() => {});
          }
        }
      }
    })();
    return {
      async stop() {
        stop.abort();
        await loop;
      },
    };
  }

  async ready() {
    return true;
  }

  /** Forgets the runs whose last record is older than the maximum age. */
  private prune() {
    const before = Date.now() - this.maxAgeMs;
    for (const [runId, last] of this.lastByRun) {
      if (last.at >= before) break;
      this.lastByRun.delete(runId);
    }
    const oldest = this.lastByRun.values().next().value?.seq ?? this.seq + 1;
    for (const [id, seq] of this.dedup) {
      if (seq >= oldest) break;
      this.dedup.delete(id);
    }
  }
}
