import { afterEach, describe, expect, it, vi } from "vitest";
import { CatalogCache } from "./catalog-cache.js";
import { MemoryCatalogEvents, type CatalogEvents, type CatalogListener } from "./catalog-events.js";

/** A loader that counts its calls and answers when the test releases it. */
function loader() {
  const calls: string[] = [];
  const waiting: { key: string; resolve: (v: string) => void; reject: (e: Error) => void }[] = [];
  const load = (key: string, version: () => string) => () => {
    calls.push(key);
    return new Promise<string>((resolve, reject) =>
      waiting.push({ key, resolve: () => resolve(`${key}@${version()}`), reject }),
    );
  };
  const answerAll = () => {
    for (const w of waiting.splice(0)) w.resolve("");
  };
  return { calls, waiting, load, answerAll };
}

const cacheOf = (maxAgeMs = 60_000) => {
  const events = new MemoryCatalogEvents();
  const cache = new CatalogCache<string>({ maxAgeMs, max: 100 });
  cache.follow(events);
  return { cache, events };
};

afterEach(() => {
  vi.restoreAllMocks();
});

describe("CatalogCache", () => {
  it("shares one load among concurrent misses, then answers from memory", async () => {
    const { cache } = cacheOf();
    const { calls, load, answerAll } = loader();
    let version = 1;
    const all = Array.from({ length: 20 }, () =>
      cache.get(
        "a",
        load("a", () => `${version}`),
        "p",
      ),
    );
    answerAll();
    expect(new Set(await Promise.all(all))).toEqual(new Set(["a@1"]));
    version = 2;
    expect(
      await cache.get(
        "a",
        load("a", () => `${version}`),
        "p",
      ),
    ).toBe("a@1");
    expect(calls).toEqual(["a"]);
  });

  it("drops a project's entries on its change events, and only its own", async () => {
    const { cache, events } = cacheOf();
    let version = 1;
    const get = (key: string, project: string) =>
      cache.get(key, async () => `${key}@${version}`, project);
    expect(await get("a", "p")).toBe("a@1");
    expect(await get("b", "q")).toBe("b@1");
    version = 2;
    events.publish({ projectId: "p", kind: "environment", op: "update", id: "e" });
    expect(await get("a", "p")).toBe("a@2");
    expect(await get("b", "q")).toBe("b@1");
    // A change that names no project drops every entry.
    version = 3;
    events.publish({ kind: "account", op: "create" });
    expect(await get("a", "p")).toBe("a@3");
    expect(await get("b", "q")).toBe("b@3");
  });

  it("flushes everything on a reset (a reconnect: events may have been lost)", async () => {
    const listeners: CatalogListener[] = [];
    const events: CatalogEvents = {
      publish: () => {},
      listen: (listener) => (listeners.push(listener), () => {}),
      close: async () => {},
    };
    const cache = new CatalogCache<string>({ maxAgeMs: 60_000, max: 100 });
    cache.follow(events);
    let version = 1;
    await cache.get("a", async () => `a@${version}`, "p");
    await cache.get("b", async () => `b@${version}`, "q");
    expect(cache.size).toBe(2);
    for (const l of listeners) l.reset();
    expect(cache.size).toBe(0);
    version = 2;
    expect(await cache.get("a", async () => `a@${version}`, "p")).toBe("a@2");
  });

  it("keeps an entry at most its maximum age, events or not", async () => {
    const { cache } = cacheOf(2_000);
    let version = 1;
    const get = () => cache.get("a", async () => `a@${version}`, "p");
    // The clock stands still from the first load on (a busy machine must not age the entry).
    const now = Date.now();
    vi.spyOn(Date, "now").mockReturnValue(now);
    expect(await get()).toBe("a@1");
    version = 2;
    vi.spyOn(Date, "now").mockReturnValue(now + 1_900);
    expect(await get()).toBe("a@1");
    vi.spyOn(Date, "now").mockReturnValue(now + 2_001);
    expect(await get()).toBe("a@2");
  });

  it("keeps nothing with a maximum age of 0", async () => {
    const { cache } = cacheOf(0);
    let calls = 0;
    for (let i = 0; i < 3; i++) await cache.get("a", async () => `a@${++calls}`, "p");
    expect(calls).toBe(3);
    expect(cache.size).toBe(0);
  });

  it("does not keep what a load read before its project changed, nor share it with later callers", async () => {
    const { cache, events } = cacheOf();
    const { calls, waiting, load } = loader();
    const before = cache.get(
      "a",
      load("a", () => "old"),
      "p",
    );
    // The catalog changes while the load is on the way; its answer is the old one.
    events.publish({ projectId: "p", kind: "interaction", op: "create", id: "i" });
    const after = cache.get(
      "a",
      load("a", () => "2"),
      "p",
    );
    expect(calls).toEqual(["a", "a"]);
    for (const w of waiting.splice(0)) w.resolve("");
    expect(await before).toBe("a@old");
    expect(await after).toBe("a@2");
    // What is kept is the answer read after the change.
    expect(
      await cache.get(
        "a",
        load("a", () => "never"),
        "p",
      ),
    ).toBe("a@2");
    expect(calls).toHaveLength(2);
  });

  it("keeps a load that another project's change overlapped", async () => {
    const { cache, events } = cacheOf();
    const { calls, load, answerAll } = loader();
    const pending = cache.get(
      "a",
      load("a", () => "1"),
      "p",
    );
    events.publish({ projectId: "q", kind: "prompt", op: "create", id: "t" });
    answerAll();
    expect(await pending).toBe("a@1");
    expect(
      await cache.get(
        "a",
        load("a", () => "2"),
        "p",
      ),
    ).toBe("a@1");
    expect(calls).toHaveLength(1);
  });

  it("learns an entry's project from its answer when the key does not say it", async () => {
    const events = new MemoryCatalogEvents();
    const cache = new CatalogCache<{ project: string; n: number }>({
      maxAgeMs: 60_000,
      max: 100,
      projectOf: (v) => v.project,
      concerns: (c) => c.kind === "apikey",
    });
    cache.follow(events);
    let n = 1;
    const get = () => cache.get("key", async () => ({ project: "p", n }));
    expect((await get()).n).toBe(1);
    n = 2;
    events.publish({ projectId: "p", kind: "interaction", op: "create" });
    events.publish({ projectId: "q", kind: "apikey", op: "delete" });
    expect((await get()).n).toBe(1);
    events.publish({ projectId: "p", kind: "apikey", op: "delete" });
    expect((await get()).n).toBe(2);
  });

  it("keeps no error, and the next caller loads again", async () => {
    const { cache } = cacheOf();
    let calls = 0;
    const failing = () =>
      cache.get(
        "a",
        () => {
          calls++;
          throw new Error("catalog down");
        },
        "p",
      );
    await expect(failing()).rejects.toThrow("catalog down");
    await expect(failing()).rejects.toThrow("catalog down");
    expect(calls).toBe(2);
    expect(await cache.get("a", async () => "a@1", "p")).toBe("a@1");
  });

  it("stops dropping once it no longer follows the events", async () => {
    const events = new MemoryCatalogEvents();
    const cache = new CatalogCache<string>({ maxAgeMs: 60_000, max: 100 });
    const stop = cache.follow(events);
    await cache.get("a", async () => "a@1", "p");
    stop();
    events.publish({ projectId: "p", kind: "interaction", op: "create" });
    expect(await cache.get("a", async () => "a@2", "p")).toBe("a@1");
  });
});
