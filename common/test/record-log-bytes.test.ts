import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { DiscardPolicy, JetStreamApiError, jetstreamManager } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { connectNats, recordsFromConfig } from "@pies/common/bus";
import { createTestStream, type TestStream } from "@pies/testkit";

// The record log's byte bound (PIES_RECORD_MAX_BYTES): full, it refuses a new run's record
// rather than drop the oldest, which may not be written yet; a run's later record still replaces
// its earlier one. A log made before the bound takes it at the next start.
let stream: TestStream;
let nc: NatsConnection;

const config = (maxBytes: number) => ({
  PIES_NATS_STREAM: stream.stream,
  PIES_NATS_SUBJECT_PREFIX: stream.subjectPrefix,
  PIES_RECORD_MAX_AGE_SECONDS: 600,
  PIES_RECORD_MAX_BYTES: maxBytes,
});
const record = (n: number) => new Uint8Array(1000).fill(n);
let dedup = 0;
const put = (log: Awaited<ReturnType<typeof recordsFromConfig>>, runId: string, n: number) =>
  log.put(runId, record(n), { dedupId: `d${dedup++}` });

beforeAll(async () => {
  stream = createTestStream();
  nc = await connectNats(stream.url, "record-log-bytes-test");
});

afterAll(async () => {
  await nc?.close();
  await stream?.remove();
});

describe("the record log's byte bound", () => {
  it("takes the bound on an existing log, then refuses new runs when full, dropping none", async () => {
    const jsm = await jetstreamManager(nc);
    // The log as pies made it before: no byte bound, the oldest discarded.
    await jsm.streams.add({
      name: `${stream.stream}_RECORDS`,
      subjects: [`${stream.subjectPrefix}.record.>`],
      max_msgs_per_subject: 1,
      max_age: nanos(600_000),
      discard: DiscardPolicy.Old,
    });
    const log = await recordsFromConfig(nc, config(8 * 1024));
    const info = await jsm.streams.info(`${stream.stream}_RECORDS`);
    expect(info.config).toMatchObject({ max_bytes: 8 * 1024, discard: DiscardPolicy.New });

    const stored: string[] = [];
    let refusal: unknown;
    for (let i = 0; i < 20 && !refusal; i++) {
      await put(log, `run${i}`, i).then(
        () => stored.push(`run${i}`),
        (err: unknown) => (refusal = err),
      );
    }
    expect(refusal).toBeInstanceOf(JetStreamApiError);
    expect((refusal as JetStreamApiError).code).toBe(10077); // maximum bytes exceeded
    expect(stored.length).toBeGreaterThan(3);
    // None of those taken was dropped to make room.
    for (const runId of stored) expect((await log.last(runId))?.runId).toBe(runId);
    // A run already in the log still records its end over its start.
    const seq = await put(log, stored[0]!, 99);
    expect((await log.last(stored[0]!))?.seq).toBe(seq);
  });

  it("is no bound at 0", async () => {
    await recordsFromConfig(nc, config(0));
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(`${stream.stream}_RECORDS`);
    expect(info.config.max_bytes).toBe(-1);
  });
});
