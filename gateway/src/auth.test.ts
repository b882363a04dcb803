import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyRequest } from "fastify";
import { create } from "@bufbuild/protobuf";
import { ApiKeyRole, PrincipalSchema } from "@pies/proto/catalog";
import { afterEach, describe, expect, it, vi } from "vitest";
import { Authenticator } from "./auth.js";
import type { GatewayDeps } from "./deps.js";
import { HttpError } from "./errors.js";

const GOOD = `sk-${"G".repeat(43)}`;
const principal = create(PrincipalSchema, { projectId: "p", role: ApiKeyRole.MEMBER });

/** An Authenticator over a catalog that knows one key, counting its calls. */
function authenticator(negativeSeconds = 5, down = false) {
  const calls: string[] = [];
  const catalog = {
    verifyApiKey: async ({ secret }: { secret: string }) => {
      calls.push(secret);
      // The catalog answers a little later, as over a network.
      await new Promise((resolve) => setImmediate(resolve));
      if (down) throw new ConnectError("catalog down", Code.Unavailable);
      if (secret !== GOOD) throw new ConnectError("invalid API key", Code.Unauthenticated);
      return { principal };
    },
  };
  const deps = {
    catalog,
    options: { authCacheSeconds: 30, authNegativeCacheSeconds: negativeSeconds },
  } as unknown as GatewayDeps;
  return { auth: new Authenticator(deps), calls };
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
});
