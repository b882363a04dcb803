import type { FastifyInstance } from "fastify";
import type { TestPies } from "./in-memory-pies.js";

/** What a test reads of a response: the status, the parsed JSON (if any) and the raw text. */
export interface TestResponse {
  status: number;
  json: any;
  text: string;
  headers: Record<string, unknown>;
}

/** What a request carries besides its method and path. */
export interface TestRequest {
  /** Sent as a bearer token; none without. */
  key?: string;
  /** A string is sent as is (application/json), so that tests can send JSON that JSON.stringify never makes. */
  body?: unknown;
  /** Added last: they may replace the content type or the authorization. */
  headers?: Record<string, string>;
}

/** A request through Fastify's inject under /api/v1. */
export async function request(
  app: FastifyInstance,
  method: string,
  url: string,
  { key, body, headers = {} }: TestRequest = {},
): Promise<TestResponse> {
  const response = await app.inject({
    method: method as "GET",
    url: `/api/v1${url}`,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
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
}

/** `request` with one key for every call. */
export function requester(app: FastifyInstance, key: string) {
  return (method: string, url: string, body?: unknown, headers: Record<string, string> = {}) =>
    request(app, method, url, { key, body, headers });
}

/**
 * A streamed run, still `created`, of a new one-template interaction in the test project (on
 * `model` when given); its id.
 */
export async function createStreamedRun(pies: TestPies, model?: string): Promise<string> {
  const call = requester(pies.app, pies.key);
  const prompt = await call("POST", "/prompts", { content: "Hello", content_type: "text" });
  const interaction = await call("POST", "/interactions", {
    name: `i-${model ?? "test"}`,
    environment: pies.environmentId,
    ...(model ? { model } : {}),
    prompts: [{ template: prompt.json.id }],
  });
  const run = await call("POST", "/runs", { interaction: interaction.json.id, stream: true });
  return run.json.id as string;
}
