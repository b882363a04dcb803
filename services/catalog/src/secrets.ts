import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import { randomBase62 } from "@pies/common";

/** Encrypts provider API keys at rest (AES-256-GCM; stored as base64 of iv ‖ tag ‖ ciphertext). */
export class SecretBox {
  private readonly key: Buffer | undefined;

  /**
   * @param base64Key PIES_SECRET_KEY. Undefined (the CLI without one) makes a box that refuses to
   * seal or open, so that no provider key is ever sealed with a made-up key.
   */
  constructor(base64Key: string | undefined) {
    this.key = base64Key === undefined ? undefined : Buffer.from(base64Key, "base64");
    if (this.key && this.key.length !== 32) {
      throw new Error("PIES_SECRET_KEY must be 32 bytes, base64-encoded");
    }
  }

  private requireKey(): Buffer {
    if (!this.key) throw new Error("PIES_SECRET_KEY is required to store or read provider keys");
    return this.key;
  }

  seal(plaintext: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.requireKey(), iv);
    const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), body]).toString("base64");
  }

  open(sealed: string): string {
    const raw = Buffer.from(sealed, "base64");
    const decipher = createDecipheriv("aes-256-gcm", this.requireKey(), raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString("utf8");
  }
}

/** A new API key: `sk-` and 43 base62 characters (256 bits). */
export function newApiKeySecret(): string {
  return `sk-${randomBase62(43)}`;
}

/**
 * SHA-256 of a key. Keys are 256 random bits, so a fast hash is as safe as a slow one here and
 * keeps verification to one indexed lookup.
 */
export function hashApiKey(secret: string): string {
  return createHash("sha256").update(secret).digest("hex");
}

/** The last four characters of a provider key, for display. */
export function secretHint(secret: string): string {
  return secret.length <= 8 ? "…" : `…${secret.slice(-4)}`;
}
