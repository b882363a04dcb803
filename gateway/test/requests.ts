import type { FastifyInstance } from "fastify";

/** What a test reads of a response: the status, the parsed JSON (if any) and the raw text. */
export interface TestResponse {
  status: number;
  json: any;
  text: string;
  headers: Record<string, unknown>;
}

/**
 * A request through Fastify's inject under /api/v1, with the key as a bearer token. A string body
 * is sent as is (application/json), so that tests can send JSON that JSON.stringify never makes.
 */
export function requester(app: FastifyInstance, key: string) {
  return async (
    method: string,
    url: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<TestResponse> => {
    const response = await app.inject({
      method: method as "GET",
      url: `/api/v1${url}`,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...headers,
      },
      ...(body === undefined
        ? {}
        : { payload: typeof body === "string" ? body : JSON.stringify(body) }),
    });
    let json: unknown;
    try {
      json = response.body ? JSON.parse(response.body) : undefined;
    } catch {
      json = undefined;
    }
    return { status: response.statusCode, json, text: response.body, headers: response.headers };
  };
}
