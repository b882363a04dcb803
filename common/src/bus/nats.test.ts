import { describe, expect, it } from "vitest";
import { natsServers } from "./nats.js";

describe("natsServers", () => {
  it("reads one URL, or a comma-separated list of a cluster's nodes", () => {
    expect(natsServers("nats://n1:4222")).toEqual(["nats://n1:4222"]);
    expect(natsServers("nats://n1:4222, nats://n2:4222,,nats://n3:4222 ")).toEqual([
      "nats://n1:4222",
      "nats://n2:4222",
      "nats://n3:4222",
    ]);
  });
});
