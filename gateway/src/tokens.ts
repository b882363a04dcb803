import { hkdfSync, webcrypto } from "node:crypto";
import { errors, jwtVerify, SignJWT } from "jose";
import { ApiKeyRole, type Principal } from "@pies/proto/catalog";
import { unauthorized } from "./errors.js";

/**
 * Token exchange (DESIGN.md §9): `POST /token/issue` turns an `sk-` key into a short-lived JWT
 * (HS256, `jose`) that carries the key's principal, so that the gateway that receives it verifies
 * it without asking the catalog. Every gateway replica shares the signing key: `PIES_JWT_SECRET`
 * when set, else one derived (HKDF-SHA256) from `PIES_INTERNAL_TOKEN`, which every deployed
 * process already shares (the embedded mode keeps one in its data dir). A token of a key revoked
 * since is refused as soon as the catalog's event for it arrives; without the event, at its `exp`.
 */
const ISSUER = "pies";
const AUDIENCE = "pies-api";
const ALGORITHM = "HS256";

/** A JWT as `jose` makes them: three base64url parts, the header starting `{"` (`eyJ`). */
export const JWT_FORMAT = /^eyJ[\w-]*\.[\w-]+\.[\w-]+$/;

/** The signing key from the gateway's settings (see above). */
export function tokenKeyFrom(settings: {
  PIES_JWT_SECRET?: string | undefined;
  PIES_INTERNAL_TOKEN?: string | undefined;
}): Uint8Array {
  if (settings.PIES_JWT_SECRET)
    return new Uint8Array(Buffer.from(settings.PIES_JWT_SECRET, "base64"));
  if (!settings.PIES_INTERNAL_TOKEN)
    throw new Error("PIES_JWT_SECRET or PIES_INTERNAL_TOKEN is needed");
  return new Uint8Array(
    hkdfSync("sha256", settings.PIES_INTERNAL_TOKEN, "pies", "pies jwt signing key v1", 32),
  );
}

const ROLES: Record<string, ApiKeyRole> = {
  admin: ApiKeyRole.ADMIN,
  member: ApiKeyRole.MEMBER,
};
const roleName = (role: ApiKeyRole) =>
  Object.entries(ROLES).find(([, value]) => value === role)?.[0] ?? "member";

/** The shortest signing key accepted: HS256's own output size. */
const MIN_KEY_BYTES = 32;

export class TokenIssuer {
  /**
   * The signing key, imported once as a WebCrypto key: given as bytes, jose imports it at every
   * call, which made a verification cost several times as much (bench/gateway-overhead.mjs;
   * docs/decisions/0021-gateway-read-and-credential-cost.md).
   */
  private readonly key: Promise<webcrypto.CryptoKey>;

  constructor(
    key: Uint8Array,
    private readonly ttlSeconds: number,
  ) {
    // Refused at start: a short key would make every token forgeable, an empty one every call 500.
    if (key.length < MIN_KEY_BYTES) {
      throw new Error(`the token signing key must be at least ${MIN_KEY_BYTES} bytes`);
    }
    this.key = webcrypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, [
      "sign",
      "verify",
    ]);
    // Awaited at each use; a rejection is reported there, not as unhandled here.
    this.key.catch(() => {});
  }

  /** A token for the principal of a verified key, and when it expires (seconds since the epoch). */
  async issue(principal: Principal): Promise<{ token: string; expiresAt: number }> {
    const now = Math.floor(Date.now() / 1000);
    const expiresAt = now + this.ttlSeconds;
    const token = await new SignJWT({
      account: principal.accountId,
      account_name: principal.accountName,
      project: principal.projectId,
      project_name: principal.projectName,
      key_name: principal.apiKeyName,
      role: roleName(principal.role),
    })
      .setProtectedHeader({ alg: ALGORITHM, typ: "JWT" })
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setSubject(principal.apiKeyId)
      .setIssuedAt(now)
      .setExpirationTime(expiresAt)
      .sign(await this.key);
    return { token, expiresAt };
  }

  /** The principal a token carries; 401 when it is expired, forged, or not one of ours. */
  async verify(token: string): Promise<Principal> {
    let payload;
    const key = await this.key;
    try {
      ({ payload } = await jwtVerify(token, key, {
        algorithms: [ALGORITHM],
        issuer: ISSUER,
        audience: AUDIENCE,
        requiredClaims: ["exp", "sub", "project", "account"],
      }));
    } catch (err) {
      if (err instanceof errors.JWTExpired) throw unauthorized("the token has expired");
      throw unauthorized("invalid token");
    }
    const text = (value: unknown) => (typeof value === "string" ? value : "");
    const role = ROLES[text(payload.role)];
    if (role === undefined || !payload.sub || !text(payload.project) || !text(payload.account)) {
      throw unauthorized("invalid token");
    }
    return {
      $typeName: "pies.catalog.v1.Principal",
      accountId: text(payload.account),
      accountName: text(payload.account_name),
      projectId: text(payload.project),
      projectName: text(payload.project_name),
      apiKeyId: payload.sub,
      apiKeyName: text(payload.key_name),
      role,
    };
  }
}
