import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { gzipSync } from "node:zlib";
import type { FastifyReply, FastifyRequest } from "fastify";

/** What index.html carries where each response puts its own CSP nonce (console/vite.config.ts). */
export const NONCE_PLACEHOLDER = "__PIES_CSP_NONCE__";

/** Hashed names: a file's content never changes under its name. */
const IMMUTABLE = "public, max-age=31536000, immutable";

const TYPES: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".html": "text/html; charset=utf-8",
  ".json": "application/json",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".woff2": "font/woff2",
  ".txt": "text/plain; charset=utf-8",
  ".map": "application/json",
};

interface Asset {
  type: string;
  body: Buffer;
  /** The gzipped body when it is smaller. */
  gzip?: Buffer;
}

/** The console's built files, read once into memory (a few hundred KB). */
export interface ConsoleFiles {
  index: string;
  /** By URL path (`/assets/index-3f2a.js`); index.html is not among them. */
  files: Map<string, Asset>;
}

/**
 * The console's build output (`console/dist`, made by `npm run build`), or undefined when it was
 * not built: the gateway then serves the API alone.
 */
export function consoleDistDir(): string | undefined {
  try {
    const manifest = createRequire(import.meta.url).resolve("@pies/console/package.json");
    const dist = path.join(path.dirname(manifest), "dist");
    return existsSync(path.join(dist, "index.html")) ? dist : undefined;
  } catch {
    return undefined;
  }
}

const loaded = new Map<string, ConsoleFiles>();

/** The files of a build, read once per process (tests make many gateways). */
export function loadConsole(dir: string): ConsoleFiles {
  let files = loaded.get(dir);
  if (!files) loaded.set(dir, (files = readConsole(dir)));
  return files;
}

function readConsole(dir: string): ConsoleFiles {
  const files = new Map<string, Asset>();
  const walk = (folder: string) => {
    for (const entry of readdirSync(folder)) {
      const full = path.join(folder, entry);
      if (statSync(full).isDirectory()) {
        walk(full);
        continue;
      }
      const url = "/" + path.relative(dir, full).split(path.sep).join("/");
      if (url === "/index.html") continue;
      const body = readFileSync(full);
      const gzip = gzipSync(body, { level: 9 });
      const type = TYPES[path.extname(full)] ?? "application/octet-stream";
      files.set(url, { type, body, gzip: gzip.length < body.length ? gzip : undefined });
    }
  };
  walk(dir);
  return { index: readFileSync(path.join(dir, "index.html"), "utf8"), files };
}

/**
 * The console's Content-Security-Policy: its own scripts only (no inline script, no eval); styles
 * from its own files and the `<style>` tags the UI library writes, which carry this response's
 * nonce; requests to this origin only (the public API).
 */
export function consolePolicy(nonce: string): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    `style-src 'self' 'nonce-${nonce}'`,
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "manifest-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join("; ");
}

function secure(reply: FastifyReply) {
  reply.header("x-content-type-options", "nosniff");
  reply.header("referrer-policy", "no-referrer");
  reply.header("x-frame-options", "DENY");
}

function sendIndex(reply: FastifyReply, files: ConsoleFiles) {
  const nonce = randomBytes(16).toString("base64");
  secure(reply);
  return reply
    .code(200)
    .header("content-security-policy", consolePolicy(nonce))
    .header("cache-control", "no-cache")
    .type("text/html; charset=utf-8")
    .send(files.index.replaceAll(NONCE_PLACEHOLDER, nonce));
}

/**
 * Serves the console at `/`, from the not-found handler (the console's paths are not routes of
 * the API, nor of its OpenAPI document): a GET outside the API (`isConsolePath`) answers a file
 * of the build (hashed names, cached for a year), else index.html (never used without asking
 * again: its nonce is new on every response), so that the console's own routes load from a link.
 */
export function consoleFallback(request: FastifyRequest, reply: FastifyReply, files: ConsoleFiles) {
  const asset = files.files.get(pathOf(request));
  if (!asset) return sendIndex(reply, files);
  secure(reply);
  reply
    .code(200)
    .header("cache-control", IMMUTABLE)
    .header("vary", "accept-encoding")
    .type(asset.type);
  if (asset.gzip && /\bgzip\b/.test(String(request.headers["accept-encoding"] ?? ""))) {
    return reply.header("content-encoding", "gzip").send(asset.gzip);
  }
  return reply.send(asset.body);
}

/**
 * Paths the console may answer when no route matched: GETs outside the API; under `/assets/` only
 * files that exist (a missing chunk must fail as a 404, not load index.html as a script).
 */
export function isConsolePath(request: FastifyRequest, files: ConsoleFiles): boolean {
  if (request.method !== "GET" && request.method !== "HEAD") return false;
  const pathname = pathOf(request);
  if (pathname === "/api" || pathname.startsWith("/api/")) return false;
  if (pathname.startsWith("/assets/")) return files.files.has(pathname);
  return true;
}

const pathOf = (request: FastifyRequest) => request.url.split("?", 1)[0] ?? "/";
