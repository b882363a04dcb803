import { setTimeout as sleep } from "node:timers/promises";
import { addAbortListener, getEventListeners } from "node:events";
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

  // Each case on CallAbortController and on Node's AbortController: the same calls.
  const controllers = [
    ["CallAbortController", () => new CallAbortController()],
    ["AbortController", () => new AbortController()],
  ] as const;

  it.each(controllers)(
    "does not call a listener removed before the abort, nor one removed by another listener (%s)",
    (_, make) => {
      const controller = make();
      const { signal } = controller;
      const calls: string[] = [];
      const removed = () => calls.push("removed");
      const removedDuring = () => calls.push("removed during");
      const remover = () => {
        calls.push("remover");
        signal.removeEventListener("abort", removedDuring);
      };
      const kept = () => calls.push("kept");
      signal.addEventListener("abort", removed);
      signal.addEventListener("abort", remover);
      signal.addEventListener("abort", removedDuring);
      signal.addEventListener("abort", kept);
      signal.removeEventListener("abort", removed);
      controller.abort();
      expect(calls).toEqual(["remover", "kept"]);
    },
  );

  it("does not call a listener added during the abort (as the DOM says; Node's EventTarget would)", () => {
    const controller = new CallAbortController();
    const calls: string[] = [];
    controller.signal.addEventListener("abort", () => {
      calls.push("first");
      controller.signal.addEventListener("abort", () => calls.push("added during"));
    });
    controller.abort();
    expect(calls).toEqual(["first"]);
  });

  it.each(controllers)(
    "removes a listener added with { signal } when that signal aborts (%s)",
    (_, make) => {
      const controller = make();
      const { signal } = controller;
      const calls: string[] = [];
      const until = new AbortController();
      const during = new AbortController();
      const already = new AbortController();
      already.abort();
      const lasting = new AbortController();
      signal.addEventListener("abort", () => calls.push("until"), { signal: until.signal });
      signal.addEventListener("abort", () => during.abort());
      signal.addEventListener("abort", () => calls.push("during"), { signal: during.signal });
      signal.addEventListener("abort", () => calls.push("already"), { signal: already.signal });
      signal.addEventListener("abort", () => calls.push("lasting"), { signal: lasting.signal });
      until.abort();
      expect(getEventListeners(lasting.signal, "abort")).toHaveLength(1);
      controller.abort();
      // Removed before the abort, and during it (by a listener called before it): not called.
      expect(calls).toEqual(["lasting"]);
      // Not left on the other signal once this one has aborted.
      if (controller instanceof CallAbortController) {
        expect(getEventListeners(lasting.signal, "abort")).toHaveLength(0);
      }
    },
  );

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
