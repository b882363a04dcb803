import { randomBytes } from "node:crypto";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";

export const testNatsUrl = () => process.env.PIES_TEST_NATS_URL ?? "nats://127.0.0.1:4222";

export interface TestStream {
  url: string;
  stream: string;
  subjectPrefix: string;
  /** Environment variables that point a pies process at this stream. */
  env: Record<string, string>;
  remove(): Promise<void>;
}

/** A JetStream stream and subject prefix of a test's own on the real NATS server, removed after. */
export function createTestStream(): TestStream {
  const suffix = randomBytes(4).toString("hex");
  const stream = `PIES_TEST_${suffix}`;
  const subjectPrefix = `piestest${suffix}`;
  const url = testNatsUrl();
  return {
    url,
    stream,
    subjectPrefix,
    env: { NATS_URL: url, PIES_NATS_STREAM: stream, PIES_NATS_SUBJECT_PREFIX: subjectPrefix },
    async remove() {
      const nc = await connect({ servers: url });
      try {
        const jsm = await jetstreamManager(nc);
        await jsm.streams.delete(stream).catch(() => false);
        // The run record log beside it (see recordsFromConfig).
        await jsm.streams.delete(`${stream}_RECORDS`).catch(() => false);
        // The result cache (see resultCacheFromConfig).
        await jsm.streams.delete(`${stream}_RESULTS`).catch(() => false);
        // The inputs of metadata-only streamed runs (see runInputsFromConfig).
        await jsm.streams.delete(`${stream}_INPUTS`).catch(() => false);
      } finally {
        await nc.close();
      }
    },
  };
}
