import { describe, expect, it } from "vitest";
import { consumerStuck, undeliveredIn, type StallSample } from "./jetstream-records.js";

// The record writer's watch (jetstream-records.ts, decision 0070): when a stall of its pull says
// the shared consumer itself is stuck, and it is made again from its floor.
const info = (over: Partial<Parameters<typeof undeliveredIn>[0]> = {}) => ({
  num_waiting: 1,
  num_pending: 40,
  num_ack_pending: 0,
  config: { max_ack_pending: 16_384 },
  ...over,
});

describe("a stalled pull's sample of the consumer", () => {
  it("is undelivered when records wait for a waiting pull with room for them", () => {
    expect(undeliveredIn(info())).toBe(true);
    // No pull waits (the server forgot this one): a new pull is the cure, not a new consumer.
    expect(undeliveredIn(info({ num_waiting: 0 }))).toBe(false);
    // Nothing waits to be delivered: held by a writer (the database down, say).
    expect(undeliveredIn(info({ num_pending: 0, num_ack_pending: 300 }))).toBe(false);
    // As many delivered and unacknowledged as the consumer allows: JetStream may not deliver.
    expect(undeliveredIn(info({ num_ack_pending: 16_384 }))).toBe(false);
  });
});

describe("a stuck consumer", () => {
  const stuck: StallSample = { undelivered: true, deliveredSeq: 500 };
  it("is two undelivered stalls in a row with nothing delivered to anyone between", () => {
    expect(consumerStuck(stuck, { undelivered: true, deliveredSeq: 500 })).toBe(true);
  });
  it("is not a first stall, nor one after a stall of another kind", () => {
    expect(consumerStuck(undefined, stuck)).toBe(false);
    expect(consumerStuck({ undelivered: false, deliveredSeq: 500 }, stuck)).toBe(false);
    expect(consumerStuck(stuck, { undelivered: false, deliveredSeq: 500 })).toBe(false);
  });
  it("is not one that still delivers to another replica: the trouble is this writer's", () => {
    expect(consumerStuck(stuck, { undelivered: true, deliveredSeq: 900 })).toBe(false);
  });
});
