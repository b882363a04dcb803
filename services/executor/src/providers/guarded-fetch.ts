import { isIP } from "node:net";
import { pipeline, type Readable } from "node:stream";
import { createBrotliDecompress, createGunzip, createInflate } from "node:zlib";
import { Agent, buildConnector, fetch as undiciFetch, request } from "undici";
import type { EndpointPolicy } from "@pies/common";

/** A `fetch` for the openai SDK whose every connection the endpoint policy allowed. */
export interface GuardedFetch {
  fetch: typeof globalThis.fetch;
  /** Closes the connections it keeps alive. */
  close(): Promise<void>;
}

/**
 * A lean `fetch` over the guarded pool (see {@link guardedAgent}) for the openai SDK: a request
 * with a string URL and a string or byte body (every chat completion) goes through undici's
 * `request()`, whose answer is handed over as a minimal Response with undici's Node stream as its
 * body, instead of through undici's WHATWG fetch (request clone and body tee, web streams, Headers
 * objects), which cost more CPU than all the rest of the call (bench/provider.mjs). Anything else,
 * and a redirect, goes through undici's fetch over the same pool, as before.
 */
export function createGuardedFetch(policy: EndpointPolicy): GuardedFetch {
  const agent = guardedAgent(policy);
  return { fetch: leanFetch(agent), close: () => agent.close() };
}

/** The connection pool whose every connection the endpoint policy allowed. */
export function guardedAgent(policy: EndpointPolicy): Agent {
  const connector = buildConnector({ lookup: policy.lookup, timeout: 10_000 });
  /*
   * The connector checks the address each connection is about to use: the resolved addresses of a
   * name (its `lookup`), or the IP literal itself (which `net.connect` does not look up). A name
   * that passed when its environment was saved and resolves to a refused address now (DNS
   * rebinding) is refused here; no request reaches a refused address. Connections are reused
   * across calls and clients.
   */
  return new Agent({
    connect: (options, callback) => {
      try {
        policy.checkAddresses(
          options.hostname,
          isLiteral(options.hostname) ? [options.hostname] : [],
        );
      } catch (err) {
        callback(err as Error, null);
        return;
      }
      connector(options, callback);
    },
  });
}

const isLiteral = (hostname: string) => isIP(hostname.replace(/^\[(.*)\]$/, "$1")) !== 0;

type FetchInput = Parameters<typeof globalThis.fetch>[0];

function leanFetch(agent: Agent): typeof globalThis.fetch {
  const fullFetch = (input: FetchInput, init: RequestInit | undefined) =>
    // undici's fetch is the one Node's global fetch is built on; their types differ in details.
    undiciFetch(input as Parameters<typeof undiciFetch>[0], {
      ...(init as Parameters<typeof undiciFetch>[1]),
      dispatcher: agent,
    }) as unknown as Promise<Response>;

  return async (input, init) => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : undefined;
    const body = init?.body;
    if (
      url === undefined ||
      !(body == null || typeof body === "string" || body instanceof Uint8Array) ||
      (init?.redirect !== undefined && init.redirect !== "follow")
    ) {
      return fullFetch(input, init);
    }
    const method = init?.method?.toUpperCase() ?? "GET";
    const answer = await request(url, {
      dispatcher: agent,
      method: method as "GET",
      headers: flatHeaders(init?.headers),
      body: body ?? null,
      signal: init?.signal ?? undefined,
    });
    const location = answer.headers.location;
    if (answer.statusCode >= 300 && answer.statusCode < 400 && location) {
      // Rare: fetch follows it as it did before (method and body rewriting, credentials dropped
      // on a change of origin, limits), asking the redirecting server once more.
      await answer.body.dump().catch(() => {});
      return fullFetch(input, init);
    }
    const response = new LeanResponse(
      url,
      answer.statusCode,
      answer.statusText,
      answer.headers,
      answer.body,
    );
    // Not a whole Response (no clone, blob, formData): the SDK uses none of that on chat calls.
    return response as unknown as Response;
  };
}

/** Request headers as undici takes them: a flat [name, value, name, value…] array. */
function flatHeaders(headers: RequestInit["headers"]): string[] | Record<string, string> {
  if (!headers) return {};
  if (Array.isArray(headers)) return headers.flat();
  // The SDK's: a WHATWG Headers (Node's own class, or undici's).
  if (typeof (headers as Headers).forEach === "function") {
    const flat: string[] = [];
    (headers as Headers).forEach((value, name) => flat.push(name, value));
    return flat;
  }
  return headers as Record<string, string>;
}

type RawHeaders = Record<string, string | string[] | undefined>;

/**
 * What the SDK reads of response headers (`get`, `has`, iteration), over the object undici
 * parsed, without building a WHATWG Headers (which validates and copies every header).
 */
class LeanHeaders {
  constructor(private readonly raw: RawHeaders) {}

  get(name: string): string | null {
    const value = this.raw[name.toLowerCase()];
    if (value === undefined) return null;
    return Array.isArray(value) ? value.join(", ") : value;
  }

  has(name: string): boolean {
    return this.raw[name.toLowerCase()] !== undefined;
  }

  getSetCookie(): string[] {
    const value = this.raw["set-cookie"];
    return value === undefined ? [] : Array.isArray(value) ? value : [value];
  }

  forEach(callback: (value: string, name: string, parent: LeanHeaders) => void): void {
    for (const [name, value] of this.entries()) callback(value, name, this);
  }

  *entries(): IterableIterator<[string, string]> {
    for (const name of Object.keys(this.raw).sort()) {
      const value = this.get(name);
      if (value !== null) yield [name, value];
    }
  }

  *keys(): IterableIterator<string> {
    for (const [name] of this.entries()) yield name;
  }

  *values(): IterableIterator<string> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }
}

/**
 * What the SDK uses of a Response: `status`, `ok`, `url`, `headers` (`get`, `entries`), `json()`
 * and `text()`, and for a stream `body` as an async iterable of bytes (it iterates a body with
 * `Symbol.asyncIterator` directly, and cancels one by returning its iterator). The body is
 * undici's Node stream: chunks are delivered as they arrive, and the request's signal destroys it.
 */
class LeanResponse {
  readonly ok: boolean;
  readonly headers: LeanHeaders;
  readonly body: Readable;
  readonly redirected = false;
  readonly type = "basic";

  constructor(
    readonly url: string,
    readonly status: number,
    readonly statusText: string,
    raw: RawHeaders,
    body: Readable,
  ) {
    this.ok = status >= 200 && status < 300;
    this.headers = new LeanHeaders(raw);
    // undici's body emits 'error' when the connection drops; its readers (the SDK iterating it,
    // text(), a pipeline) see that error through their own listeners, but a body nobody reads yet
    // (or one the SDK has let go of) would otherwise throw it out of the process.
    body.on("error", () => {});
    this.body = decoded(raw["content-encoding"], body);
  }

  get bodyUsed(): boolean {
    return this.body.readableDidRead || this.body.destroyed;
  }

  async text(): Promise<string> {
    return (await this.bytes()).toString("utf8");
  }

  async json(): Promise<unknown> {
    return JSON.parse(await this.text());
  }

  async arrayBuffer(): Promise<ArrayBuffer> {
    const all = await this.bytes();
    return all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength) as ArrayBuffer;
  }

  async bytes(): Promise<Buffer> {
    const chunks: Buffer[] = [];
    for await (const chunk of this.body) chunks.push(chunk as Buffer);
    return chunks.length === 1 && chunks[0] ? chunks[0] : Buffer.concat(chunks);
  }
}

/**
 * The body as sent, should a server compress it although no Accept-Encoding asked for it (fetch
 * asks for gzip and deflate; this fetch does not, which saves decompressing small JSON bodies).
 */
function decoded(encoding: string | string[] | undefined, body: Readable): Readable {
  const coding = (Array.isArray(encoding) ? encoding.join(",") : (encoding ?? ""))
    .trim()
    .toLowerCase();
  if (!coding || coding === "identity") return body;
  const decoder =
    coding === "gzip" || coding === "x-gzip"
      ? createGunzip()
      : coding === "deflate"
        ? createInflate()
        : coding === "br"
          ? createBrotliDecompress()
          : undefined;
  if (!decoder) return body;
  return pipeline(body, decoder, () => {});
}
