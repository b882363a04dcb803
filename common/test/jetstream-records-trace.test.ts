import { afterAll, beforeAll, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { connectNats, JetStreamRunRecords } from "@pies/common/bus";
import { currentTraceparent, inSpan, startTracing } from "@pies/common";
import {
  createTestStream,
  startTraceCollector,
  type TestStream,
  type TraceCollector,
} from "@pies/testkit";

// Puts coalesced into one turn of the event loop each carry their own caller's trace: the turn's
// callback runs in the context of the put that scheduled it, which was every put's trace.

let stream: TestStream;
let nc: NatsConnection;
let records: JetStreamRunRecords;
let collector: TraceCollector;
let stopTracing: () => Promise<void>;

beforeAll(async () => {
  collector = await startTraceCollector();
  stopTracing = await startTracing("records-trace-test", {
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
  });
  stream = createTestStream();
  nc = await connectNats(stream.url, "records-trace-test");
  records = await JetStreamRunRecords.over(nc, {
    stream: `${stream.stream}_RECORDS`,
    subjectPrefix: stream.subjectPrefix,
    maxAgeSeconds: 60,
  });
});

afterAll(async () => {
  await nc?.close();
  await stream?.remove();
  await stopTracing?.();
  await collector?.close();
});

it("sends each put of one turn with its own caller's traceparent", async () => {
  // Three puts, each in a span of its own, from timers due together (one turn, one batch).
  const sent = await Promise.all(
    ["t0", "t1", "t2"].map(
      (runId) =>
        new Promise<string>((resolve, reject) =>
          setTimeout(() => {
            void inSpan(`put ${runId}`, {}, async () => {
              const traceparent = currentTraceparent();
              await records.put(runId, new TextEncoder().encode(runId), { dedupId: runId });
              return traceparent;
            }).then(resolve, reject);
          }, 5),
        ),
    ),
  );
  expect(new Set(sent).size).toBe(3);
  const jsm = await jetstreamManager(nc);
  for (const [i, runId] of ["t0", "t1", "t2"].entries()) {
    const msg = await jsm.streams.getMessage(`${stream.stream}_RECORDS`, {
      last_by_subj: `${stream.subjectPrefix}.record.${runId}`,
    });
    expect(msg?.header.get("traceparent"), runId).toBe(sent[i]);
  }
});
