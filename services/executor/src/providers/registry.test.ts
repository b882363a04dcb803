import { afterEach, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { EndpointPolicy } from "@pies/common";
import { MemoryCatalogEvents } from "@pies/common/bus";
import { EnvironmentSchema } from "@pies/proto/catalog";
import { ProviderRegistry } from "./registry.js";

const environment = ({ id = "e_1", version = 100n } = {}) =>
  create(EnvironmentSchema, {
    id,
    projectId: "p_1",
    provider: "openai_compatible",
    endpointUrl: "http://127.0.0.1:1/v1",
    updatedAt: { seconds: version, nanos: 0 },
  });

describe("ProviderRegistry", () => {
  let registry: ProviderRegistry;
  afterEach(() => registry.close());

  it("hands out one client per environment version and key, and a new one once its project changes", () => {
    registry = new ProviderRegistry({ timeoutMs: 1000, maxRetries: 0 }, new EndpointPolicy());
    const events = new MemoryCatalogEvents();
    registry.follow(events);
    const env = environment();
    const first = registry.client(env, "sk-1");
    // The same environment object (as the resolver keeps it), or the same environment again.
    expect(registry.client(env, "sk-1")).toBe(first);
    expect(registry.client(environment(), "sk-1")).toBe(first);
    // Another key, another version, another environment: another client.
    expect(registry.client(env, "sk-2")).not.toBe(first);
    expect(registry.client(environment({ version: 101n }), "sk-1")).not.toBe(first);
    expect(registry.client(environment({ id: "e_2" }), "sk-1")).not.toBe(first);
    // Another project's change keeps it; its own drops it, for the same environment object too.
    events.publish({ projectId: "p_2", kind: "environment", op: "update" });
    expect(registry.client(env, "sk-1")).toBe(first);
    events.publish({ projectId: "p_1", kind: "environment", op: "update" });
    const second = registry.client(env, "sk-1");
    expect(second).not.toBe(first);
    expect(registry.client(env, "sk-1")).toBe(second);
  });
});
