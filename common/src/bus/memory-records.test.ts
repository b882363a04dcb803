import { describe, expect, it } from "vitest";
import { MemoryRunRecords } from "./memory-records.js";
import { RecordConflict, takeBatch, type RunRecord } from "./run-records.js";

const bytes = (text: string) => new TextEncoder().encode(text);

/** A log with a writer that keeps what it is given (and fails its first `failures` batches). */
function logWithWriter(failures = 0) {
  const records = new MemoryRunRecords();
  const written: RunRecord[][] = [];
  const errors: unknown[] = [];
  const consumer = records.consume(
    async (batch) => {
      if (failures-- > 0) throw new Error("the database is down");
      written.push(batch);
    },
    { onError: (err) => errors.push(err) },
  );
  return { records, written, errors, consumer };
}

describe("the in-memory record log", () => {
  it("resolves a put once its record is written, and answers the run's last record", async () => {
    const { records, written, consumer } = logWithWriter();
    const seq = await records.put("r1", bytes("created"), { dedupId: "a" });
    expect(written.flat()).toEqual([{ runId: "r1", seq, data: bytes("created") }]);
    const next = await records.put("r1", bytes("processing"), { dedupId: "b", expectSeq: seq });
    expect(next).toBeGreaterThan(seq);
    expect(await records.last("r1")).toEqual({ runId: "r1", seq: next, data: bytes("processing") });
    expect(await records.last("r2")).toBeUndefined();
    await consumer.stop();
  });

  it("refuses a conditional put that expected another last record, and stores a repeat once", async () => {
    const { records, written, consumer } = logWithWriter();
    const seq = await records.put("r1", bytes("created"), { dedupId: "a", expectSeq: 0 });
    await expect(records.put("r1", bytes("again"), { dedupId: "b", expectSeq: 0 })).rejects.toThrow(
      RecordConflict,
    );
    const started = await records.put("r1", bytes("processing"), { dedupId: "c", expectSeq: seq });
    // Two starters that both read `seq`: the second conflicts.
    await expect(
      records.put("r1", bytes("processing"), { dedupId: "d", expectSeq: seq }),
    ).rejects.toThrow(RecordConflict);
    // A repeat of put "c" (its first answer lost) is the same record, not a new one.
    expect(await records.put("r1", bytes("processing"), { dedupId: "c", expectSeq: seq })).toBe(
      started,
    );
    expect(written.flat().map((r) => r.seq)).toEqual([seq, started]);
    await consumer.stop();
  });

  it("answers an `accepted` put before its record is written; a later put of the run waits for both", async () => {
    const records = new MemoryRunRecords();
    const written: RunRecord[][] = [];
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const consumer = records.consume(
      async (batch) => {
        await gate;
        written.push(batch);
      },
      { onError: () => {} },
    );
    const created = records.put("r1", bytes("created"), { dedupId: "a", expectSeq: 0 });
    // The writer holds the first batch: an accepted put answers anyway, its condition checked.
    const startedSeq = await records.put("r1", bytes("processing"), {
      dedupId: "b",
      expectSeq: 1,
      accepted: true,
    });
    expect(startedSeq).toBe(2);
    expect(written).toEqual([]);
    await expect(
      records.put("r1", bytes("again"), { dedupId: "c", expectSeq: 1, accepted: true }),
    ).rejects.toThrow(RecordConflict);
    let ended = false;
    const end = records
      .put("r1", bytes("completed"), { dedupId: "d", expectSeq: startedSeq })
      .then(() => (ended = true));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(ended).toBe(false);
    open();
    await Promise.all([created, end]);
    // Stored in the order of the puts: the accepted record before the end.
    expect(written.flat().map((r) => r.seq)).toEqual([1, 2, 3]);
    await consumer.stop();
  });

  it("batches what arrives while a batch is written, and retries a failed batch", async () => {
    const { records, written, errors, consumer } = logWithWriter(2);
    const seqs = await Promise.all(
      Array.from({ length: 50 }, (_, i) => records.put(`r${i}`, bytes("x"), { dedupId: `${i}` })),
    );
    expect(errors).toHaveLength(2);
    expect(written.flat().map((r) => r.seq)).toEqual(seqs);
    // 50 puts at once: far fewer batches than records.
    expect(written.length).toBeLessThan(10);
    await consumer.stop();
  });

  it("bounds a batch by bytes as well as by count; a record over the bound is a batch alone", async () => {
    const records = new MemoryRunRecords();
    const written: RunRecord[][] = [];
    const consumer = records.consume(async (batch) => void written.push(batch), {
      onError: () => {},
      maxBatch: 3,
      maxBatchBytes: 10,
    });
    // Put in one turn: all pending when the first batch forms.
    const sizes = [4, 4, 4, 12, 1, 1, 1, 1];
    await Promise.all(
      sizes.map((n, i) => records.put(`r${i}`, bytes("x".repeat(n)), { dedupId: `${i}` })),
    );
    expect(written.map((b) => b.map((r) => r.data.length))).toEqual([
      [4, 4],
      [4],
      [12],
      [1, 1, 1],
      [1],
    ]);
    await consumer.stop();
    expect(takeBatch([20, 1], (n) => n, 5, 10)).toEqual([20]);
  });

  it("keeps no listener per idle wait (thousands of puts raise no MaxListeners warning)", async () => {
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on("warning", onWarning);
    try {
      const { records, consumer } = logWithWriter();
      for (let i = 0; i < 2000; i++) await records.put(`r${i}`, bytes("x"), { dedupId: `${i}` });
      await consumer.stop();
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off("warning", onWarning);
    }
    expect(warnings.map((w) => w.name)).not.toContain("MaxListenersExceededWarning");
  });

  it("stops a consumer that waits for records", async () => {
    const { consumer } = logWithWriter();
    await expect(consumer.stop()).resolves.toBeUndefined();
  });
});
