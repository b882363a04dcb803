import { Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectNats, JetStreamRunRecords, RecordConflict, RecordTooLarge } from "@pies/common/bus";
import { jetstreamManager } from "@nats-io/jetstream";
import { createTestStream, startPrivateNats, type TestStream } from "@pies/testkit";

let stream: TestStream;
let nc: NatsConnection;
let records: JetStreamRunRecords;

beforeAll(async () => {
  stream = createTestStream();
  nc = await connectNats(stream.url, "records-test");
  records = await JetStreamRunRecords.over(nc, {
    stream: `${stream.stream}_RECORDS`,
    subjectPrefix: stream.subjectPrefix,
    maxAgeSeconds: 60,
  });
});

afterAll(async () => {
  await nc?.close();
  await stream?.remove();
});

const bytes = (text: string) => new TextEncoder().encode(text);

/** A record log on a stream of its own (a test of the writer's consumer: it is the stream's). */
async function ownLog() {
  const own = createTestStream();
  const log = await JetStreamRunRecords.over(nc, {
    stream: `${own.stream}_RECORDS`,
    subjectPrefix: own.subjectPrefix,
    maxAgeSeconds: 60,
  });
  return { own, log };
}

describe("the JetStream record log's puts", () => {
  it("sends the puts of one event-loop turn to NATS in one socket write", async () => {
    const write = vi.spyOn(Socket.prototype, "write");
    try {
      // 40 puts, each from a callback of its own (as executions end, each on its provider's
      // answer): timers due together run in one turn, with microtasks run between them.
      const puts = await Promise.all(
        Array.from(
          { length: 40 },
          (_, i) =>
            new Promise<number>((resolve, reject) =>
              setTimeout(() => {
                records
                  .put(`w${i}`, bytes(`record ${i}`), { dedupId: `w${i}` })
                  .then(resolve, reject);
              }, 5),
            ),
        ),
      );
      const toNats = write.mock.contexts.filter(
        (socket) => (socket as Socket).remotePort === Number(new URL(stream.url).port),
      );
      // One write for the 40 (nats.js may add one of its own, a PING).
      expect(toNats.length).toBeLessThanOrEqual(2);
      expect(new Set(puts).size).toBe(40);
    } finally {
      write.mockRestore();
    }
    for (let i = 0; i < 40; i += 13) {
      expect(await records.last(`w${i}`)).toMatchObject({ data: bytes(`record ${i}`) });
    }
  });

  it("fails a put whose header nats.js refuses alone, the rest of its turn published", async () => {
    const [bad, good] = await Promise.allSettled([
      records.put("h1", bytes("a"), { dedupId: "bad\nid" }),
      records.put("h2", bytes("b"), { dedupId: "h2" }),
    ]);
    expect(bad).toMatchObject({ status: "rejected" });
    expect(good).toMatchObject({ status: "fulfilled" });
    expect(await records.last("h2")).toMatchObject({ data: bytes("b") });
  });

  it("keeps each put's answer: its sequence, a repeat's, a conflict", async () => {
    const first = await records.put("c1", bytes("a"), { dedupId: "c1-a", expectSeq: 0 });
    const [second, repeated, conflict] = await Promise.all([
      records.put("c1", bytes("b"), { dedupId: "c1-b", expectSeq: first }),
      // The same put again (its answer lost): stored once, answered with the same sequence.
      records.put("c1", bytes("a"), { dedupId: "c1-a", expectSeq: 0 }),
      records.put("c2", bytes("x"), { dedupId: "c2-x", expectSeq: 7 }).catch((err) => err),
    ]);
    expect(second).toBeGreaterThan(first);
    expect(repeated).toBe(first);
    expect(conflict).toBeInstanceOf(RecordConflict);
    expect(await records.last("c1")).toMatchObject({ seq: second, data: bytes("b") });
  });

  it("refuses a record over the server's max_payload at once, as too large; the largest fits", async () => {
    const limit = records.maxRecordBytes!;
    expect(limit).toBeLessThan(nc.info!.max_payload);
    expect(limit).toBeGreaterThan(nc.info!.max_payload - 4096);
    const err: unknown = await records
      .put("big", new Uint8Array(limit + 1), { dedupId: "big-1" })
      .catch((e) => e);
    expect(err).toBeInstanceOf(RecordTooLarge);
    expect(err).toMatchObject({ bytes: limit + 1, limit });
    // With every header a put may carry (tracing's too), the largest record is taken.
    const seq = await records.put("big", new Uint8Array(limit), { dedupId: "big-2", expectSeq: 0 });
    expect((await records.last("big"))?.seq).toBe(seq);
  });

  it("fails a put that no stream takes, at once", async () => {
    const other = createTestStream();
    const gone = await JetStreamRunRecords.over(nc, {
      stream: `${other.stream}_RECORDS`,
      subjectPrefix: other.subjectPrefix,
      maxAgeSeconds: 60,
    });
    await (await jetstreamManager(nc)).streams.delete(`${other.stream}_RECORDS`);
    const started = Date.now();
    const err: unknown = await gone.put("g1", bytes("x"), { dedupId: "g1" }).catch((e) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(RecordConflict);
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it("fails a put left unanswered (NATS down) after its timeout; the next put succeeds", async () => {
    // A server of the test's own, to stop.
    const nats = await startPrivateNats();
    const own = await connectNats(nats.url, "records-outage-test");
    try {
      const log = await JetStreamRunRecords.over(own, {
        stream: "PIES_RECORDS_OUTAGE",
        subjectPrefix: "outage",
        maxAgeSeconds: 60,
      });
      // A second connection, closed while its put waits: the put fails at once.
      const closing = await connectNats(nats.url, "records-closing-test");
      const closingLog = await JetStreamRunRecords.over(closing, {
        stream: "PIES_RECORDS_OUTAGE",
        subjectPrefix: "outage",
        maxAgeSeconds: 60,
      });
      await nats.restart(async () => {
        const waiting = closingLog
          .put("o2", bytes("y"), { dedupId: "o2" })
          .catch((e: unknown) => e);
        // Published (queued in nats.js while disconnected), then the connection closes.
        await new Promise((resolve) => setTimeout(resolve, 50));
        const closedAt = Date.now();
        await closing.close();
        expect(await waiting).toBeInstanceOf(Error);
        expect(Date.now() - closedAt).toBeLessThan(1000);
        const started = Date.now();
        const err: unknown = await log.put("o1", bytes("x"), { dedupId: "o1" }).catch((e) => e);
        expect(err).toBeInstanceOf(Error);
        expect(Date.now() - started).toBeGreaterThanOrEqual(4900);
        expect(Date.now() - started).toBeLessThan(7500);
      });
      let seq: number | undefined;
      const deadline = Date.now() + 15_000;
      while (seq === undefined && Date.now() < deadline) {
        seq = await log.put("o1", bytes("x"), { dedupId: "o1" }).catch(() => undefined);
      }
      expect(seq).toBeGreaterThan(0);
      expect(await log.last("o1")).toMatchObject({ seq, data: bytes("x") });
    } finally {
      await own.close();
      await nats.stop();
    }
  }, 40_000);
});

describe("the JetStream record log's consumer", () => {
  it("under a steady flow starts a batch no sooner than batchIntervalMs after the last; a record after a pause, and full batches, at once", async () => {
    // A stream of the test's own: the consumer reads every record of its stream.
    const { own, log } = await ownLog();
    const INTERVAL = 400;
    const batches: { started: number; ended: number; ids: string[] }[] = [];
    let slow = false;
    const consumer = log.consume(
      async (batch) => {
        const started = performance.now();
        if (slow) {
          slow = false;
          await sleep(300);
        }
        batches.push({ started, ended: performance.now(), ids: batch.map((r) => r.runId) });
      },
      { onError: () => {}, batchIntervalMs: INTERVAL, maxBatch: 20 },
    );
    const written = () => batches.flatMap((b) => b.ids).length;
    const put = (id: string) => log.put(id, bytes(id), { dedupId: `${own.stream}-${id}` });
    try {
      // A steady flow: a record every 25 ms for 1.5 s (about 16 per interval, less than a batch).
      const flowStarted = performance.now();
      for (let i = 0; i < 60; i++) {
        await put(`f${i}`);
        await sleep(25);
      }
      await expect.poll(written, { timeout: 5000 }).toBe(60);
      const flowTook = performance.now() - flowStarted;
      const flow = batches.splice(0);
      // Every batch started within flowTook, at least INTERVAL after the previous one unless it
      // is full (records that a busy machine delivered late, all at once): that bounds their
      // number however long the puts took. Without the interval, about one batch per record.
      const full = flow.filter((b) => b.ids.length === 20).length;
      expect(flow.length).toBeLessThanOrEqual(Math.floor(flowTook / INTERVAL) + 1 + full);
      for (let i = 1; i < flow.length; i++) {
        if (flow[i]!.ids.length === 20) continue;
        // Less a little: the writer's clock starts just before the batch is handed over.
        expect(flow[i]!.started - flow[i - 1]!.started).toBeGreaterThanOrEqual(INTERVAL * 0.9);
      }

      // A record after a pause longer than the interval: written at once.
      await sleep(INTERVAL + 200);
      const putAt = performance.now();
      await put("p0");
      await expect.poll(written, { timeout: 5000 }).toBe(1);
      expect(batches[0]!.started - putAt).toBeLessThan(INTERVAL / 2);
      batches.splice(0);

      // Records that arrive while a batch is being written, more than a batch of them: the full
      // batches go at once when it ends, the rest after the interval.
      await sleep(INTERVAL + 100);
      slow = true;
      await put("s0");
      await expect.poll(() => slow, { timeout: 5000 }).toBe(false);
      await Promise.all(Array.from({ length: 45 }, (_, i) => put(`b${i}`)));
      await expect.poll(written, { timeout: 5000 }).toBe(46);
      const [first, full1, full2, rest] = batches;
      expect(first!.ids).toEqual(["s0"]);
      expect(full1!.ids.length).toBe(20);
      expect(full2!.ids.length).toBe(20);
      expect(rest!.ids.length).toBe(5);
      expect(full1!.started - first!.ended).toBeLessThan(100);
      expect(full2!.started - full1!.ended).toBeLessThan(100);
      expect(rest!.started - full2!.started).toBeGreaterThanOrEqual(INTERVAL * 0.9);
    } finally {
      await consumer.stop();
      await own.remove();
    }
  }, 30_000);

  it("ends the wait for the interval when the waiting records fill a batch, by count or by bytes", async () => {
    const { own, log } = await ownLog();
    const INTERVAL = 3000;
    const batches: { started: number; ids: string[] }[] = [];
    const consumer = log.consume(
      async (batch) => {
        batches.push({ started: performance.now(), ids: batch.map((r) => r.runId) });
      },
      { onError: () => {}, batchIntervalMs: INTERVAL, maxBatch: 10, maxBatchBytes: 1000 },
    );
    const written = () => batches.flatMap((b) => b.ids).length;
    const put = (id: string, size = 1) =>
      log.put(id, new Uint8Array(size), { dedupId: `${own.stream}-${id}` });
    try {
      await put("first");
      await expect.poll(written, { timeout: 5000 }).toBe(1);
      // Ten small records, one after another, while the writer waits out the interval: the
      // tenth fills a batch, which goes then.
      for (let i = 0; i < 10; i++) await put(`n${i}`);
      let filled = performance.now();
      await expect.poll(written, { timeout: 5000 }).toBe(11);
      expect(batches[1]!.ids.length).toBe(10);
      expect(batches[1]!.started - filled).toBeLessThan(INTERVAL / 3);
      // Four records of 300 bytes: the fourth takes the waiting bytes past maxBatchBytes, and
      // the three that fit go then; the fourth waits out the interval.
      for (let i = 0; i < 4; i++) await put(`b${i}`, 300);
      filled = performance.now();
      await expect.poll(written, { timeout: 5000 }).toBe(14);
      expect(batches[2]!.ids).toEqual(["b0", "b1", "b2"]);
      expect(batches[2]!.started - filled).toBeLessThan(INTERVAL / 3);
      await expect.poll(written, { timeout: INTERVAL + 2000 }).toBe(15);
      expect(batches[3]!.started - batches[2]!.started).toBeGreaterThanOrEqual(INTERVAL * 0.9);
    } finally {
      await consumer.stop();
      await own.remove();
    }
  }, 30_000);

  it("makes its consumer again when it is lost under it, and writes what came meanwhile", async () => {
    const { own, log } = await ownLog();
    const written = new Set<string>();
    const stalls: string[] = [];
    const put = (id: string) => log.put(id, bytes(id), { dedupId: `${own.stream}-${id}` });
    const consumer = log.consume(async (batch) => batch.forEach((r) => written.add(r.runId)), {
      onError: () => {},
      onStall: (reason) => stalls.push(reason),
    });
    try {
      await put("before");
      await expect.poll(() => written.has("before"), { timeout: 5000 }).toBe(true);
      // What a node that held the consumer's only copy takes with it: nats.js pulls again and
      // again from a consumer that no longer is, and the records put meanwhile wait unread.
      const jsm = await jetstreamManager(nc);
      await jsm.consumers.delete(`${own.stream}_RECORDS`, "runs-store");
      await put("after");
      await expect.poll(() => written.has("after"), { timeout: 15_000 }).toBe(true);
      expect(stalls).toEqual(["consumer deleted"]);
    } finally {
      await consumer.stop();
      await own.remove();
    }
  }, 30_000);

  it("makes its consumer again from the acknowledged floor: the records after it come, once", async () => {
    const { own, log } = await ownLog();
    const written: string[] = [];
    const write = async (batch: { runId: string }[]) => {
      written.push(...batch.map((r) => r.runId));
    };
    const put = (id: string) => log.put(id, bytes(id), { dedupId: `${own.stream}-${id}` });
    let consumer = log.consume(write, { onError: () => {} });
    try {
      for (const id of ["a", "b", "c"]) await put(id);
      await expect.poll(() => written.length, { timeout: 5000 }).toBe(3);
      await consumer.stop();
      const floor = await put("d");
      await put("e");
      await log.remakeConsumer();
      const jsm = await jetstreamManager(nc);
      const info = await jsm.consumers.info(`${own.stream}_RECORDS`, "runs-store");
      expect(info.config.opt_start_seq).toBe(floor);
      // A writer started now (another replica, or this one's loop) takes the consumer as it is.
      consumer = log.consume(write, { onError: () => {} });
      await expect.poll(() => written.length, { timeout: 5000 }).toBe(5);
      await sleep(300);
      expect(written).toEqual(["a", "b", "c", "d", "e"]);
    } finally {
      await consumer.stop();
      await own.remove();
    }
  }, 30_000);

  it("hands back the records waiting out the interval when it stops: delivered again at once", async () => {
    const { own, log } = await ownLog();
    const written: string[] = [];
    const write = async (batch: { runId: string }[]) => {
      written.push(...batch.map((r) => r.runId));
    };
    const put = (id: string) => log.put(id, bytes(id), { dedupId: `${own.stream}-${id}` });
    let consumer = log.consume(write, { onError: () => {}, batchIntervalMs: 20_000 });
    try {
      await put("r0");
      await expect.poll(() => written.length, { timeout: 5000 }).toBe(1);
      await put("r1");
      await put("r2");
      // Delivered to the writer, which waits out the interval with them.
      await sleep(300);
      const stopping = performance.now();
      await consumer.stop();
      expect(performance.now() - stopping).toBeLessThan(1000);
      expect(written).toEqual(["r0"]);
      // The next writer (another replica, or this one started again) has them at once, not
      // after the ack wait (10 s).
      consumer = log.consume(write, { onError: () => {} });
      await expect.poll(() => written.length, { timeout: 4000 }).toBe(3);
      expect(written).toEqual(["r0", "r1", "r2"]);
    } finally {
      await consumer.stop();
      await own.remove();
    }
  }, 30_000);
});
