/**
 * An AbortController for one call whose signal is not an EventTarget: what pies' code and the
 * libraries it hands a call's signal to use of an AbortSignal (`aborted`, `reason`,
 * `throwIfAborted()`, `onabort`, "abort" listeners added and removed, `once`), for a fraction of
 * its cost. Node's AbortSignal is an EventTarget given its prototype after it is made (an object V8
 * keeps as a dictionary, slow at every access: making one, adding and removing a listener and
 * aborting each cost microseconds; docs/decisions/0013-per-call-costs-cut.md); an internal call
 * made or met several of each on either side (the gateway's caller signal and its client's, the
 * executor's handler signal and the provider call's listener on it).
 *
 * Listeners are called in the order they were added (`onabort` first), each with an event of type
 * "abort" whose target is the signal; one that throws is reported as EventTarget reports it (an
 * uncaught exception, on the next tick), after the others have run. As with EventTarget, a
 * listener removed during the abort (by one called before it) is not called, one added after it
 * is never called, and one added with `{ signal }` is removed when that signal aborts (not added
 * when it has); one added during the abort is not called either, as the DOM specifies (Node's
 * EventTarget calls it). Not an EventTarget: it is refused by `AbortSignal.any()` and by whatever
 * checks `instanceof AbortSignal` (nothing it reaches does: pies' transports and servers,
 * connect's in-process context, undici's request(), node:timers/promises, which take any object
 * with `aborted` and the listener methods, as openai.ts's AttemptSignal is taken by undici).
 */
export class CallAbortController {
  readonly signal: AbortSignal = new CallSignal() as unknown as AbortSignal;

  abort(reason?: unknown): void {
    (this.signal as unknown as CallSignal).abort(reason);
  }
}

type Listener =
  ((this: unknown, event: AbortEvent) => unknown) | { handleEvent(event: AbortEvent): unknown };

interface AbortEvent {
  type: "abort";
  target: CallSignal;
  currentTarget: CallSignal;
}

class CallSignal {
  aborted = false;
  reason: unknown = undefined;
  onabort: ((this: unknown, event: AbortEvent) => unknown) | null = null;
  /**
   * The listeners, in the order they were added; during the abort's dispatch, a listener removed
   * leaves an empty slot (the loop does not call it). `once` needs nothing more: a signal aborts
   * once, and its listeners are dropped then.
   */
  private listeners: (Listener | null)[] | undefined = undefined;
  /**
   * The listeners that the `{ signal }` option put on other signals, taken off them when this one
   * aborts (every call's signal does at its end), so a long-lived signal does not keep them.
   */
  private removers: { signal: AbortSignal; remove: () => void }[] | undefined = undefined;

  addEventListener(
    type: string,
    listener: Listener | null,
    options?: boolean | { once?: boolean; signal?: AbortSignal },
  ) {
    // Added during the abort or after it: never called, as with EventTarget.
    if (type !== "abort" || !listener || this.aborted) return;
    const until = typeof options === "object" ? options.signal : undefined;
    if (until?.aborted) return;
    const list = (this.listeners ??= []);
    // As EventTarget: the same listener added again is not added twice.
    if (!list.includes(listener)) list.push(listener);
    if (until) {
      const remove = () => this.removeEventListener("abort", listener);
      until.addEventListener("abort", remove, { once: true });
      (this.removers ??= []).push({ signal: until, remove });
    }
  }

  removeEventListener(type: string, listener: Listener | null) {
    const list = this.listeners;
    if (type !== "abort" || !list || !listener) return;
    const i = list.indexOf(listener);
    if (i < 0) return;
    if (this.aborted) list[i] = null;
    else list.splice(i, 1);
  }

  throwIfAborted(): void {
    if (this.aborted) throw this.reason;
  }

  /** What AbortController.abort() does to its signal (a reason, else an AbortError). */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason =
      reason === undefined ? new DOMException("This operation was aborted", "AbortError") : reason;
    const event: AbortEvent = { type: "abort", target: this, currentTarget: this };
    if (this.onabort) call(this, this.onabort, event);
    const list = this.listeners;
    if (list) {
      // By index, the list live: a listener removed by an earlier one is null by then.
      for (let i = 0; i < list.length; i++) {
        const listener = list[i];
        if (listener) call(this, listener, event);
      }
      this.listeners = undefined;
    }
    const removers = this.removers;
    if (removers) {
      this.removers = undefined;
      for (const { signal, remove } of removers) signal.removeEventListener("abort", remove);
    }
  }

  get [Symbol.toStringTag]() {
    return "AbortSignal";
  }
}

function call(signal: CallSignal, listener: Listener, event: AbortEvent) {
  try {
    if (typeof listener === "function") listener.call(signal, event);
    else listener.handleEvent(event);
  } catch (err) {
    process.nextTick(() => {
      throw err;
    });
  }
}
