import { setTimeout as sleep } from "node:timers/promises";
import { addAbortListener } from "node:events";
import { describe, expect, it } from "vitest";
import { CallAbortController } from "./call-signal.js";

describe("CallAbortController", () => {
  it("aborts its signal once, with the reason given, calling its listeners in order", () => {
    const controller = new CallAbortController();
    const { signal } = controller;
    const calls: string[] = [];
    const first = (e: Event) => calls.push(`first ${e.type} ${e.target === signal}`);
    const second = () => calls.push("second");
    signal.onabort = () => calls.push("onabort");
    signal.addEventListener("abort", first);
    signal.addEventListener("abort", first); // not twice, as EventTarget
    signal.addEventListener("abort", second, { once: true });
    signal.addEventListener("other" as "abort", () => calls.push("other"));
    expect(signal.aborted).toBe(false);
    expect(() => signal.throwIfAborted()).not.toThrow();
    const reason = new Error("gone");
    controller.abort(reason);
    controller.abort(new Error("again"));
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe(reason);
    expect(() => signal.throwIfAborted()).toThrow(reason);
    expect(calls).toEqual(["onabort", "first abort true", "second"]);
    // Added after the abort: never called, as with EventTarget.
    signal.addEventListener("abort", () => calls.push("late"));
    controller.abort();
    expect(calls).toHaveLength(3);
    expect(Object.prototype.toString.call(signal)).toBe("[object AbortSignal]");
  });

  it("does not call a listener removed before the abort, nor one removed by another listener", () => {
    const controller = new CallAbortController();
    const calls: string[] = [];
    const removed = () => calls.push("removed");
    const kept = () => calls.push("kept");
    controller.signal.addEventListener("abort", removed);
    controller.signal.addEventListener("abort", kept);
    controller.signal.removeEventListener("abort", removed);
    controller.abort();
    expect(calls).toEqual(["kept"]);
  });

  it("aborts with an AbortError when no reason is given, as AbortController", () => {
    const controller = new CallAbortController();
    controller.abort();
    expect(controller.signal.reason).toBeInstanceOf(DOMException);
    expect((controller.signal.reason as DOMException).name).toBe("AbortError");
  });

  it("is taken where Node takes an AbortSignal for a call: timers/promises and addAbortListener", async () => {
    const controller = new CallAbortController();
    const waiting = sleep(60_000, undefined, { signal: controller.signal });
    let heard = 0;
    addAbortListener(controller.signal, () => heard++);
    const reason = new Error("stop");
    controller.abort(reason);
    await expect(waiting).rejects.toMatchObject({ name: "AbortError", cause: reason });
    expect(heard).toBe(1);
    // Already aborted: refused at once.
    await expect(sleep(10, undefined, { signal: controller.signal })).rejects.toMatchObject({
      name: "AbortError",
    });
  });
});
