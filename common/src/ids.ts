import { randomBytes, randomFillSync } from "node:crypto";

/** Random bytes for ids, drawn from the CSPRNG 6 KB at a time (one call per 1,024 ids). */
const pool = Buffer.alloc(6 * 1024);
let used = pool.length;

/**
 * A 24-hex-character identifier, time-ordered like a MongoDB ObjectId (which the clients of this
 * API are used to): 6 bytes of milliseconds then 6 random bytes. A run's id starts with its
 * creation time, which the runs store partitions by (`at`: another time than now, for tests and
 * data made for a past time).
 */
export function newId(at = Date.now()): string {
  if (used === pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  const random = pool.toString("hex", used, used + 6);
  used += 6;
  return Math.max(0, Math.floor(at)).toString(16).padStart(12, "0") + random;
}

/** Whether `text` has the shape newId gives (24 lower-case hex characters). */
export function isNewId(text: string): boolean {
  return /^[0-9a-f]{24}$/.test(text);
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
