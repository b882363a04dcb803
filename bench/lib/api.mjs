/**
 * One pies API request (GET, or POST with a JSON body) with the key as a bearer token, within 30 s
 * (and `signal`, if given): its status and parsed JSON body (undefined when it is not JSON).
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
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, json, text };
}
