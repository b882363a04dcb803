import { AssertionError } from "node:assert";

/** One request to the REST API: GET unless a body is given (then POST, as JSON). */
export interface ApiRequest {
  method?: string;
  /** Sent as JSON; a string is sent as is, so that tests can send JSON JSON.stringify never makes. */
  body?: unknown;
  /** The bearer token, instead of the client's key. */
  token?: string;
}

/** Sends a request to a path under /api/v1 (e.g. "/runs?status=failed"). */
export type ApiClient = (path: string, request?: ApiRequest) => Promise<Response>;

/**
 * A client of a running gateway's REST API under `/api/v1`, over real HTTP, with `key` as the
 * bearer token: what the process-level tests (test/*.test.ts) use to talk to a started stack.
 */
export function gatewayApi(gatewayUrl: string, key: string): ApiClient {
  return (path, request = {}) =>
    fetch(`${gatewayUrl}/api/v1${path}`, {
      method: request.method ?? (request.body === undefined ? "GET" : "POST"),
      headers: {
        authorization: `Bearer ${request.token ?? key}`,
        ...(request.body === undefined ? {} : { "content-type": "application/json" }),
      },
      body:
        request.body === undefined
          ? undefined
          : typeof request.body === "string"
            ? request.body
            : JSON.stringify(request.body),
    });
}

/**
 * The parsed JSON body of a response that must have `status`. Otherwise it throws an assertion
 * error naming the URL, the status and the body, followed by `context()` (e.g. the processes'
 * output), so that a failure says what the server answered.
 */
export async function expectJson<T = any>(
  response: Response,
  status = 200,
  context?: () => string,
): Promise<T> {
  const text = await response.text();
  if (response.status !== status) {
    throw new AssertionError({
      message: `${response.url}: expected ${status}, got ${response.status}: ${text}${context ? `\n${context()}` : ""}`,
      actual: response.status,
      expected: status,
      operator: "strictEqual",
    });
  }
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new AssertionError({ message: `${response.url}: the body is not JSON: ${text}` });
  }
}
