import { randomBytes } from "node:crypto";

/**
 * A 24-hex-character identifier, time-ordered like a MongoDB ObjectId (which the clients of this
 * API are used to): 6 bytes of milliseconds then 6 random bytes.
 */
export function newId(): string {
  return Date.now().toString(16).padStart(12, "0") + randomBytes(6).toString("hex");
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** `bytes` random bytes as base62 (rejection sampling, so every character is uniform). */
export function randomBase62(length: number): string {
  let out = "";
  while (out.length < length) {
    for (const b of randomBytes(length * 2)) {
      if (b < 248 && out.length < length) out += base62[b % 62];
    }
  }
  return out;
}
