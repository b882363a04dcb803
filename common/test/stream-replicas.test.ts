import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { ConfigError } from "@pies/common";
import { connectNats, recordsFromConfig, resultCacheFromConfig } from "@pies/common/bus";
import { createTestStream, startProcess, type TestStream } from "@pies/testkit";

// PIES_NATS_REPLICAS on the shared NATS server, which is not part of a cluster: asking it for
// more than one replica stops the process at start with the setting named, for a new stream and
// for one that exists (which nats-server 2.9 would otherwise take without a word). Replicas on a
// real cluster: test/nats-cluster-node-loss.test.ts.
let stream: TestStream;
let nc: NatsConnection;

const config = (replicas: number) => ({
  PIES_NATS_STREAM: stream.stream,
  PIES_NATS_SUBJECT_PREFIX: stream.subjectPrefix,
  PIES_RECORD_MAX_AGE_SECONDS: 600,
  PIES_RESULT_CACHE_MAX_BYTES: 1024 * 1024,
  PIES_RESULT_CACHE_MAX_AGE_SECONDS: 600,
  PIES_NATS_REPLICAS: replicas,
});

beforeAll(async () => {
  stream = createTestStream();
  nc = await connectNats(stream.url, "stream-replicas-test");
});

afterAll(async () => {
  await nc?.close();
  await stream?.remove();
});

describe("PIES_NATS_REPLICAS on a single NATS server", () => {
  it("refuses to make a stream with 3 replicas, naming the setting", async () => {
    const made = resultCacheFromConfig(nc, config(3));
    await expect(made).rejects.toBeInstanceOf(ConfigError);
    await expect(made).rejects.toThrow(
      `NATS refused the stream ${stream.stream}_RESULTS as configured (PIES_NATS_REPLICAS=3`,
    );
    await expect(made).rejects.toThrow(/not supported in non-clustered mode/);
  });

  it("refuses to scale an existing stream to 3, and leaves it as it was", async () => {
    await recordsFromConfig(nc, config(1));
    const scaled = recordsFromConfig(nc, config(3));
    await expect(scaled).rejects.toBeInstanceOf(ConfigError);
    await expect(scaled).rejects.toThrow(/PIES_NATS_REPLICAS=3.*not part of a cluster/);
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(`${stream.stream}_RECORDS`);
    expect(info.config.num_replicas).toBe(1);
  });

  it("stops the runs service at start with one line that names the setting", async () => {
    const runs = startProcess("runs-replicas", "services/runs/dist/main.js", {
      ...stream.env,
      PIES_NATS_REPLICAS: "3",
      // Never reached: the record log is made first.
      DATABASE_URL: "postgres://nobody@127.0.0.1:1/none",
    });
    const code = await Promise.race([
      runs.exited,
      new Promise<string>((resolve) => setTimeout(() => resolve("still running"), 30_000)),
    ]);
    await runs.stop();
    expect(code, runs.output()).toBe(1);
    const fatal = runs
      .output()
      .split("\n")
      .find((line) => line.includes('"level":60'));
    expect(fatal, runs.output()).toMatch(/NATS refused the stream .*PIES_NATS_REPLICAS=3/);
  });
});
