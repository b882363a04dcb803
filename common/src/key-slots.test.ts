import { describe, expect, it } from "vitest";
import { KeySlots } from "./key-slots.js";

describe("KeySlots", () => {
  it("gives a key at most max slots, each released once, without affecting other keys", () => {
    const slots = new KeySlots(2);
    const first = slots.take("a")!;
    expect(slots.take("a")).toBeTypeOf("function");
    expect(slots.take("a")).toBeUndefined();
    expect(slots.take("b")).toBeTypeOf("function");
    first();
    first();
    expect(slots.count("a")).toBe(1);
    expect(slots.take("a")).toBeTypeOf("function");
    expect(slots.take("a")).toBeUndefined();
  });

  it("forgets a key that holds none, and has no limit at 0", () => {
    const slots = new KeySlots(0);
    const releases = Array.from({ length: 1000 }, () => slots.take("a")!);
    expect(slots.count("a")).toBe(1000);
    releases.forEach((release) => release());
    expect(slots.count("a")).toBe(0);
    expect((slots as unknown as { held: Map<string, number> }).held.size).toBe(0);
  });
});
