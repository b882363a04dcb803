import type { FastifyRequest } from "fastify";
import { badRequest } from "./errors.js";

type Done = (err: Error | null, body?: unknown) => void;

/**
 * JSON bodies, parsed as Fastify would, but refusing a NUL character (\u0000) in any string or
 * key: PostgreSQL cannot store one in text or jsonb, so it is the caller's error (400) here rather
 * than a failed write later.
 */
export function parseJsonBody(_request: FastifyRequest, text: string | Buffer, done: Done) {
  const source = typeof text === "string" ? text : text.toString("utf8");
  if (source.length === 0) return done(null, undefined);
  let body: unknown;
  try {
    body = JSON.parse(source);
  } catch {
    return done(badRequest("the request body is not valid JSON"));
  }
  if (source.includes("\\u0000") && hasNul(body)) {
    return done(badRequest("strings in the request body must not contain NUL (\\u0000)"));
  }
  done(null, body);
}

function hasNul(value: unknown): boolean {
  if (typeof value === "string") return value.includes("\0");
  if (Array.isArray(value)) return value.some(hasNul);
  if (value && typeof value === "object") {
    return Object.entries(value).some(([k, v]) => k.includes("\0") || hasNul(v));
  }
  return false;
}
