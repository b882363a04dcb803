import { SignJWT } from "jose";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, testTokenKey, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";
import { TokenIssuer, tokenKeyFrom } from "./tokens.js";

// Token exchange (DESIGN.md §9) through the real gateway over the real services, in memory.
let pies: TestPies;
let app: FastifyInstance;

beforeAll(async () => {
  pies = await startTestPies();
  app = pies.app;
}, 60_000);

afterAll(async () => {
  await pies?.close();
});

/** POST /token/issue at the root (where @vertesia/client asks) or under /api/v1. */
async function issue(key: string | undefined, root = true) {
  const response = await app.inject({
    method: "POST",
    url: root ? "/token/issue" : "/api/v1/token/issue",
    headers: {
      "content-type": "application/json",
      ...(key === undefined ? {} : { authorization: `Bearer ${key}` }),
    },
  });
  return { status: response.statusCode, json: response.json() };
}

/** A token as the gateway would sign it, with any claims and key (to forge and to expire). */
function sign(claims: Record<string, unknown>, key = testTokenKey, exp: string | number = "1h") {
  return new SignJWT({ account: "a", project: pies.projectId, role: "admin", ...claims })
    .setProtectedHeader({ alg: "HS256" })
    .setIssuer("pies")
    .setAudience("pies-api")
    .setSubject("k")
    .setIssuedAt()
    .setExpirationTime(exp)
    .sign(key);
}

describe("POST /token/issue", () => {
  it("turns a key into a JWT that works as the bearer, at the root and under /api/v1", async () => {
    for (const root of [true, false]) {
      const { status, json } = await issue(pies.key, root);
      expect(status, JSON.stringify(json)).toBe(200);
      expect(json.token).toMatch(/^eyJ[\w-]+\.[\w-]+\.[\w-]+$/);
      const expires = Date.parse(json.expires_at);
      expect(expires - Date.now()).toBeGreaterThan(3500_000);
      expect(expires - Date.now()).toBeLessThanOrEqual(3600_000);
      const payload = JSON.parse(Buffer.from(json.token.split(".")[1], "base64url").toString());
      expect(payload).toMatchObject({ project: pies.projectId, role: "admin", iss: "pies" });
      expect(JSON.stringify(payload)).not.toContain(pies.key);

      const account = await request(app, "GET", "/account", { key: json.token });
      expect(account.status, account.text).toBe(200);
      expect(account.json.project.id).toBe(pies.projectId);
      const environments = await request(app, "GET", "/environments", { key: json.token });
      expect(environments.status).toBe(200);
      expect(environments.json.map((e: { id: string }) => e.id)).toContain(pies.environmentId);
    }
  });

  it("refuses no key, a bad key, and a token in place of a key (401)", async () => {
    expect((await issue(undefined)).status).toBe(401);
    expect((await issue(`sk-${"x".repeat(43)}`)).status).toBe(401);
    const { json } = await issue(pies.key);
    const renewed = await issue(json.token);
    expect(renewed.status).toBe(401);
    expect(renewed.json.code).toBe("unauthorized");
  });

  it("keeps the role: a member key's token is refused what members are refused", async () => {
    const member = await request(app, "POST", "/apikeys", { key: pies.key, body: { name: "m" } });
    const { json } = await issue(member.json.key);
    expect((await request(app, "GET", "/apikeys", { key: json.token })).status).toBe(403);
    expect((await request(app, "GET", "/environments", { key: json.token })).status).toBe(200);
  });
});

describe("a JWT as the bearer", () => {
  it("is refused when expired, forged with another key, or missing claims", async () => {
    const expired = await sign({}, testTokenKey, Math.floor(Date.now() / 1000) - 10);
    const late = await request(app, "GET", "/account", { key: expired });
    expect(late.status).toBe(401);
    expect(late.json.message).toMatch(/expired/);

    const forged = await sign({}, new Uint8Array(32).fill(9));
    const refused = await request(app, "GET", "/account", { key: forged });
    expect(refused.status).toBe(401);
    expect(refused.json).toMatchObject({ code: "unauthorized", message: "invalid token" });

    const noRole = await sign({ role: "root" });
    expect((await request(app, "GET", "/account", { key: noRole })).status).toBe(401);
    // A well-signed token is accepted (the forgeries above fail for what they are).
    expect((await request(app, "GET", "/environments", { key: await sign({}) })).status).toBe(200);
  });

  it("of a key revoked since is refused at once (the catalog's event), not at its exp", async () => {
    const created = await request(app, "POST", "/apikeys", {
      key: pies.key,
      body: { name: "short-lived" },
    });
    const { json } = await issue(created.json.key);
    expect((await request(app, "GET", "/account", { key: json.token })).status).toBe(200);
    const deleted = await request(app, "DELETE", `/apikeys/${created.json.id}`, { key: pies.key });
    expect(deleted.status).toBe(204);
    const after = await request(app, "GET", "/account", { key: json.token });
    expect(after.status).toBe(401);
    expect(after.json.message).toMatch(/revoked/);
  });

  it("is accepted as ?access_token= on the stream route only", async () => {
    const { json } = await issue(pies.key);
    const listed = await app.inject({
      method: "GET",
      url: `/api/v1/runs?access_token=${json.token}`,
    });
    expect(listed.statusCode).toBe(401);
    const stream = await app.inject({
      method: "GET",
      url: `/api/v1/runs/no-such-run/stream?access_token=${json.token}`,
    });
    expect(stream.statusCode).toBe(404);
  });
});

describe("the signing key", () => {
  it("is PIES_JWT_SECRET when set, else derived from the internal token, the same on every replica", () => {
    const token = "t".repeat(40);
    const a = tokenKeyFrom({ PIES_INTERNAL_TOKEN: token });
    expect(Buffer.from(a)).toEqual(Buffer.from(tokenKeyFrom({ PIES_INTERNAL_TOKEN: token })));
    expect(Buffer.from(a)).not.toEqual(
      Buffer.from(tokenKeyFrom({ PIES_INTERNAL_TOKEN: `${token}x` })),
    );
    // Not the internal token itself: a JWT key that leaks does not open the internal calls.
    expect(Buffer.from(a).toString()).not.toContain(token);
    const secret = Buffer.alloc(32, 5).toString("base64");
    expect(
      Buffer.from(tokenKeyFrom({ PIES_JWT_SECRET: secret, PIES_INTERNAL_TOKEN: token })),
    ).toEqual(Buffer.alloc(32, 5));
  });

  it("is refused when shorter than 32 bytes (an empty one made every call a 500)", () => {
    expect(() => new TokenIssuer(new Uint8Array(0), 60)).toThrow(/at least 32 bytes/);
    expect(() => new TokenIssuer(new Uint8Array(31), 60)).toThrow(/at least 32 bytes/);
    expect(() => new TokenIssuer(new Uint8Array(32), 60)).not.toThrow();
  });
});
