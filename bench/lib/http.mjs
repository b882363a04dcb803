// @ts-check
import { Agent, request } from "undici";

/**
 * The load generator's HTTP client: undici's request() on one keep-alive agent, for every mode
 * alike. fetch() (undici's WHATWG layer) cost the load generator about 210–230 µs of CPU per
 * request on this machine against about 30 µs here: at c=64 that was a third of the load CPU, the
 * CPU that PostgreSQL and NATS share with it, so the instrument itself held the four-process
 * figures down (Portkey, pinned alone on its own CPU, is not affected). Measured in
 * bench/README.md.
 */
const agent = new Agent({ keepAliveTimeout: 30_000, pipelining: 1 });

/**
 * @typedef {object} SendOptions
 * @property {import("undici").Dispatcher.HttpMethod} [method] GET by default
 * @property {Record<string, string | undefined>} [headers] those undefined are not sent
 * @property {string} [body]
 * @property {AbortSignal} [signal]
 */

/**
 * Sends one request; resolves to { status, ok, headers, body, text(), json() } where headers are
 * the response's (lower-case names) and body is the response body as an async iterable of bytes.
 * Every answer's body must be read or dumped (text() does), or its connection is not reused.
 * @param {string} url
 * @param {SendOptions} [options]
 */
export async function send(url, { method = "GET", headers, body, signal } = {}) {
  const response = await request(url, { method, headers, body, signal, dispatcher: agent });
  return {
    status: response.statusCode,
    ok: response.statusCode >= 200 && response.statusCode < 300,
    headers: response.headers,
    body: response.body,
    text: () => response.body.text(),
    json: () => response.body.json(),
  };
}
