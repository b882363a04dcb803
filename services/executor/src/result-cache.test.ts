import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CachePolicySchema, InteractionSchema } from "@pies/proto/catalog";
import { ResultCache } from "./result-cache.js";

describe("ResultCache.key", () => {
  const interaction = create(InteractionSchema, { id: "i1", version: 2 });
  const request = {
    model: "m",
    messages: [{ role: "user" as const, content: "hello" }],
    temperature: 0.5,
  };
  const policy = create(CachePolicySchema, { type: "cache", variesOn: ["user.id"] });
  const key = (over: Partial<{ project: string; environment: string; data: object }> = {}) =>
    ResultCache.key(
      over.project ?? "p1",
      over.environment ?? "e1",
      interaction,
      request,
      policy,
      (over.data ?? { user: { id: 1 } }) as never,
    );

  it("is the same for the same execution, and differs with the project, the environment or varies_on", () => {
    expect(key()).toBe(key());
    // The same interaction id, prompt and model in another project never shares an entry.
    expect(key({ project: "p2" })).not.toBe(key());
    // Two environments may serve one model name from different backends.
    expect(key({ environment: "e2" })).not.toBe(key());
    expect(key({ data: { user: { id: 2 } } })).not.toBe(key());
    // Data outside varies_on does not split entries.
    expect(key({ data: { user: { id: 1 }, other: true } })).toBe(key());
  });
});
