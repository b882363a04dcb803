import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyRequest } from "fastify";
import { create } from "@bufbuild/protobuf";
import { MemoryCatalogEvents } from "@pies/common/bus";
import { ApiKeyRole, PrincipalSchema } from "@pies/proto/catalog";
import { afterEach, describe, expect, it, vi } from "vitest";
import { Authenticator } from "./auth.js";
import type { GatewayDeps } from "./deps.js";
import { HttpError } from "./errors.js";

const GOOD = `sk-${"G".repeat(43)}`;
const principal = create(PrincipalSchema, { projectId: "p", role: ApiKeyRole.MEMBER });

/**
 * An Authenticator over a catalog that knows the keys in `keys` (GOOD at first), counting its
 * calls, and the catalog's change events in memory.
 */
function authenticator(negativeSeconds = 5, down = false) {
  const calls: string[] = [];
  const keys = new Set([GOOD]);
  /** Held verifications: each resolves when the test calls the function it was given. */
  const held: (() => void)[] = [];
  let hold = false;
  const catalog = {
    verifyApiKey: async ({ secret }: { secret: string }) => {
      calls.push(secret);
      // The catalog answers a little later, as over a network; it reads its keys at once.
      const known = keys.has(secret);
      await new Promise<void>((resolve) => (hold ? held.push(resolve) : setImmediate(resolve)));
      if (down) throw new ConnectError("catalog down", Code.Unavailable);
      if (!known) throw new ConnectError("invalid API key", Code.Unauthenticated);
      return { principal };
    },
  };
  const events = new MemoryCatalogEvents();
  const deps = {
    catalog,
    catalogEvents: events,
    options: { authCacheSeconds: 30, authNegativeCacheSeconds: negativeSeconds },
    tokenKey: new Uint8Array(32).fill(7),
  } as unknown as GatewayDeps;
  return {
    auth: new Authenticator(deps),
    calls,
    keys,
    events,
    held,
    holdAnswers: (on: boolean) => (hold = on),
  };
}

const request = (token: string) =>
  ({ headers: { authorization: `Bearer ${token}` }, query: {} }) as unknown as FastifyRequest;

async function status(promise: Promise<unknown>): Promise<number> {
  return promise.then(
    () => 200,
    (err: unknown) =>
      err instanceof HttpError ? err.status : err instanceof ConnectError ? -err.code : 0,
  );
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("Authenticator", () => {
  it("refuses what is not shaped like a key without asking the catalog", async () => {
    const { auth, calls } = authenticator();
    for (const token of ["nope", "sk-short", `sk-${"x".repeat(44)}`, `sk-${"-".repeat(43)}`]) {
      expect(await status(auth.authenticate(request(token)))).toBe(401);
    }
    expect(calls).toEqual([]);
  });

  it("asks the catalog once for a bad key until the negative cache expires", async () => {
    const { auth, calls } = authenticator(5);
    const bad = `sk-${"B".repeat(43)}`;
    expect(await status(auth.authenticate(request(bad)))).toBe(-Code.Unauthenticated);
    for (let i = 0; i < 100; i++) expect(await status(auth.authenticate(request(bad)))).toBe(401);
    expect(calls).toHaveLength(1);
    const now = Date.now();
    vi.spyOn(Date, "now").mockReturnValue(now + 5_001);
    expect(await status(auth.authenticate(request(bad)))).toBe(-Code.Unauthenticated);
    expect(calls).toHaveLength(2);
  });

  it("shares one verification among concurrent requests with the same key", async () => {
    const { auth, calls } = authenticator(5);
    const bad = `sk-${"C".repeat(43)}`;
    const results = await Promise.all(
      Array.from({ length: 50 }, () => status(auth.authenticate(request(bad)))),
    );
    expect(results.every((s) => s === -Code.Unauthenticated)).toBe(true);
    const good = await Promise.all(
      Array.from({ length: 50 }, () => auth.authenticate(request(GOOD))),
    );
    expect(good.every((p) => p === principal)).toBe(true);
    expect(calls).toEqual([bad, GOOD]);
  });

  it("does not remember a key as bad when the catalog is down", async () => {
    const { auth, calls } = authenticator(5, true);
    expect(await status(auth.authenticate(request(GOOD)))).toBe(-Code.Unavailable);
    expect(await status(auth.authenticate(request(GOOD)))).toBe(-Code.Unavailable);
    expect(calls).toHaveLength(2);
  });

  it("always asks when the negative cache is off", async () => {
    const { auth, calls } = authenticator(0);
    const bad = `sk-${"D".repeat(43)}`;
    await status(auth.authenticate(request(bad)));
    await status(auth.authenticate(request(bad)));
    expect(calls).toHaveLength(2);
  });

  it("keeps at most 10 000 bad keys, dropping the oldest", async () => {
    const { auth, calls } = authenticator(60);
    const key = (i: number) => `sk-${String(i).padStart(43, "0")}`;
    for (let i = 0; i < 10_050; i++) await status(auth.authenticate(request(key(i))));
    expect(calls).toHaveLength(10_050);
    // The newest are still remembered, the oldest were dropped and cost a call again.
    await status(auth.authenticate(request(key(10_049))));
    expect(calls).toHaveLength(10_050);
    await status(auth.authenticate(request(key(0))));
    expect(calls).toHaveLength(10_051);
  });

  it("keeps a verified key until its project's keys change, then asks again", async () => {
    const { auth, calls, keys, events } = authenticator();
    for (let i = 0; i < 10; i++) expect(await auth.authenticate(request(GOOD))).toBe(principal);
    expect(calls).toHaveLength(1);
    // Changes of what keys cannot see, or of another project's keys, keep it.
    events.publish({ projectId: "p", kind: "interaction", op: "create", id: "i" });
    events.publish({ projectId: "p", kind: "environment", op: "update", id: "e" });
    events.publish({ projectId: "q", kind: "apikey", op: "delete", id: "k" });
    expect(await auth.authenticate(request(GOOD))).toBe(principal);
    expect(calls).toHaveLength(1);
    // The key is revoked: the next request asks the catalog, which refuses it.
    keys.delete(GOOD);
    events.publish({ projectId: "p", kind: "apikey", op: "delete", id: "k" });
    expect(await status(auth.authenticate(request(GOOD)))).toBe(-Code.Unauthenticated);
    expect(calls).toHaveLength(2);
  });

  it("forgets every verified key when events may have been lost, and after the maximum age", async () => {
    const { auth, calls, keys, events } = authenticator();
    await auth.authenticate(request(GOOD));
    keys.delete(GOOD);
    // A change with no project (or a reconnect) drops everything.
    events.publish({ kind: "account", op: "create" });
    expect(await status(auth.authenticate(request(GOOD)))).toBe(-Code.Unauthenticated);
    keys.add(GOOD);
    // Past the negative cache: the catalog knows the key again.
    const now = Date.now();
    vi.spyOn(Date, "now").mockReturnValue(now + 5_001);
    expect(await auth.authenticate(request(GOOD))).toBe(principal);
    expect(calls).toHaveLength(3);
    // Lost event: the key goes without a word, and is refused once its 30 s are up.
    keys.delete(GOOD);
    vi.spyOn(Date, "now").mockReturnValue(now + 5_001 + 29_000);
    expect(await auth.authenticate(request(GOOD))).toBe(principal);
    vi.spyOn(Date, "now").mockReturnValue(now + 5_001 + 30_001);
    expect(await status(auth.authenticate(request(GOOD)))).toBe(-Code.Unauthenticated);
    expect(calls).toHaveLength(4);
  });

  it("lets a key refused a moment ago in once a key is created", async () => {
    const { auth, calls, keys, events } = authenticator(60);
    const fresh = `sk-${"F".repeat(43)}`;
    expect(await status(auth.authenticate(request(fresh)))).toBe(-Code.Unauthenticated);
    expect(await status(auth.authenticate(request(fresh)))).toBe(401);
    keys.add(fresh);
    // An interaction's change does not concern keys: still refused without asking.
    events.publish({ projectId: "p", kind: "interaction", op: "create", id: "i" });
    expect(await status(auth.authenticate(request(fresh)))).toBe(401);
    expect(calls).toHaveLength(1);
    events.publish({ projectId: "p", kind: "apikey", op: "create", id: "k" });
    expect(await auth.authenticate(request(fresh))).toBe(principal);
    expect(calls).toHaveLength(2);
  });

  it("does not keep a verification that a revocation overtook", async () => {
    const { auth, calls, keys, events, held, holdAnswers } = authenticator();
    holdAnswers(true);
    // The catalog has read the key as valid; its answer is still on the way when it is revoked.
    const first = auth.authenticate(request(GOOD));
    await vi.waitFor(() => expect(held).toHaveLength(1));
    keys.delete(GOOD);
    events.publish({ projectId: "p", kind: "apikey", op: "delete", id: "k" });
    // A request after the event does not join the verification under way: it asks again.
    const second = auth.authenticate(request(GOOD));
    await vi.waitFor(() => expect(held).toHaveLength(2));
    holdAnswers(false);
    for (const answer of held) answer();
    expect(await first).toBe(principal);
    expect(await status(second)).toBe(-Code.Unauthenticated);
    // The first answer was not kept: the key is refused from now on.
    expect(await status(auth.authenticate(request(GOOD)))).toBe(401);
    expect(calls).toHaveLength(2);
  });
});
