import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { NONCE_PLACEHOLDER } from "./console.js";

// The console's files as the gateway serves them (DESIGN.md §12, docs/console.md): a build of
// its own here (an index.html with the nonce placeholder, a hashed script), so that what is
// checked is the serving, not the console's code.
let pies: TestPies;
let dir: string;
const script = "console.log('pies console');".repeat(40);

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), "pies-console-"));
  await mkdir(path.join(dir, "assets"));
  await writeFile(
    path.join(dir, "index.html"),
    `<!doctype html><meta property="csp-nonce" nonce="${NONCE_PLACEHOLDER}">` +
      `<script type="module" src="/assets/index-Ab12Cd34.js" nonce="${NONCE_PLACEHOLDER}"></script>`,
  );
  await writeFile(path.join(dir, "assets/index-Ab12Cd34.js"), script);
  pies = await startTestPies({ gateway: { consoleDir: dir } });
});

afterAll(async () => {
  await pies?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const get = (url: string, headers: Record<string, string> = {}) =>
  pies.app.inject({ method: "GET", url, headers });

/** The nonce of a page: the one in its CSP header, which the page must carry in its tags. */
function nonceOf(csp: string): string {
  const nonce = /style-src 'self' 'nonce-([A-Za-z0-9+/=]+)'/.exec(csp)?.[1];
  expect(nonce, csp).toBeTruthy();
  return nonce!;
}

describe("the console at /", () => {
  it("answers index.html with a strict CSP, a fresh nonce in it and no caching", async () => {
    const first = await get("/");
    expect(first.statusCode).toBe(200);
    expect(first.headers["content-type"]).toBe("text/html; charset=utf-8");
    expect(first.headers["cache-control"]).toBe("no-cache");
    expect(first.headers["x-content-type-options"]).toBe("nosniff");
    expect(first.headers["referrer-policy"]).toBe("no-referrer");
    const csp = String(first.headers["content-security-policy"]);
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self';");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).not.toContain("unsafe-inline");
    expect(csp).not.toContain("unsafe-eval");
    const nonce = nonceOf(csp);
    expect(first.body).not.toContain(NONCE_PLACEHOLDER);
    expect(first.body).toContain(`nonce="${nonce}"`);
    // A nonce is good for one response only.
    const second = await get("/index.html");
    expect(nonceOf(String(second.headers["content-security-policy"]))).not.toBe(nonce);
  });

  it("serves hashed assets for a year, gzipped when asked", async () => {
    const plain = await get("/assets/index-Ab12Cd34.js");
    expect(plain.statusCode).toBe(200);
    expect(plain.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    expect(plain.headers["cache-control"]).toBe("public, max-age=31536000, immutable");
    expect(plain.headers["content-encoding"]).toBeUndefined();
    expect(plain.body).toBe(script);
    const gzipped = await get("/assets/index-Ab12Cd34.js", { "accept-encoding": "gzip, br" });
    expect(gzipped.headers["content-encoding"]).toBe("gzip");
    expect(gzipped.headers.vary).toContain("accept-encoding");
    expect(gunzipSync(gzipped.rawPayload).toString()).toBe(script);
  });

  it("answers index.html for the console's own paths (client routing)", async () => {
    for (const url of ["/runs", "/runs/r_123?x=1", "/interactions/abc/versions", "/favicon.ico"]) {
      const response = await get(url);
      expect(response.statusCode, url).toBe(200);
      expect(response.headers["content-type"], url).toBe("text/html; charset=utf-8");
      expect(response.headers["content-security-policy"], url).toBeDefined();
    }
    const head = await pies.app.inject({ method: "HEAD", url: "/runs" });
    expect(head.statusCode).toBe(200);
  });

  it("keeps the API's JSON errors: unknown API paths, missing assets, other methods", async () => {
    for (const [method, url] of [
      ["GET", "/api/v1/nope"],
      ["GET", "/api/nope"],
      ["GET", "/api"],
      ["GET", "/assets/index-gone.js"],
      ["POST", "/runs"],
      ["DELETE", "/"],
    ] as const) {
      const response = await pies.app.inject({ method, url });
      expect(response.statusCode, `${method} ${url}`).toBe(404);
      expect(response.headers["content-type"], url).toMatch(/^application\/json/);
      expect(response.json(), url).toMatchObject({ status: 404, code: "not_found" });
      expect(response.headers["content-security-policy"], url).toBeUndefined();
    }
    const unauthenticated = await get("/api/v1/runs");
    expect(unauthenticated.statusCode).toBe(401);
    expect(unauthenticated.json()).toMatchObject({ status: 401 });
  });

  it("leaves the probes and the OpenAPI document as they were", async () => {
    expect((await get("/healthz")).json()).toEqual({ status: "ok" });
    const openapi = await get("/api/v1/openapi.json");
    expect(openapi.statusCode).toBe(200);
    expect(Object.keys(openapi.json().paths)).not.toContain("/");
  });
});

describe("a gateway without a console", () => {
  it("answers / with the API's 404", async () => {
    const bare = await startTestPies({ gateway: { consoleDir: false } });
    try {
      const response = await bare.app.inject({ method: "GET", url: "/" });
      expect(response.statusCode).toBe(404);
      expect(response.json()).toMatchObject({ code: "not_found" });
    } finally {
      await bare.close();
    }
  });
});
