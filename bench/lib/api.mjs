// @ts-check

/**
 * @typedef {object} ApiAnswer
 * @property {number} status
 * @property {any} json the body as JSON, whatever the path answers (each caller knows its shape,
 *   as with testkit's expectJson); undefined when the body is not JSON
 * @property {string} text the body as received
 */

/**
 * One pies API request (GET, or POST with a JSON body) with the key as a bearer token, within 30 s
 * (and `signal`, if given): its status and parsed JSON body (undefined when it is not JSON).
 * @param {string} gatewayUrl
 * @param {string} key
 * @param {string} pathname
 * @param {unknown} [body]
 * @param {AbortSignal} [signal]
 * @returns {Promise<ApiAnswer>}
 */
export async function api(gatewayUrl, key, pathname, body, signal) {
  const timeout = AbortSignal.timeout(30_000);
  const response = await fetch(`${gatewayUrl}/api/v1${pathname}`, {
    method: body === undefined ? "GET" : "POST",
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
  });
  const text = await response.text();
  /** @type {ApiAnswer["json"]} */
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, json, text };
}
