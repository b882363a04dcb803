import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema";
import { currentToken, endSession } from "../auth/session";

/** A run as the API answers it. */
export type Run = components["schemas"]["Run"];
/** An error body (DESIGN.md §10). */
export type ApiError = components["schemas"]["Error"];

/** What a 401 on a signed-in request tells the user on the sign-in page. */
export const SESSION_ENDED =
  "Your session has ended (the token expired or its key was revoked). Sign in again.";

/**
 * Signs requests with the session's token (unless the caller set its own Authorization, as sign-in
 * does with the key), and ends the session on a 401 to a signed request: the user is sent back to
 * sign in instead of staying on a page that can no longer load anything.
 */
const auth: Middleware = {
  onRequest({ request }) {
    const token = currentToken();
    if (token && !request.headers.has("authorization")) {
      request.headers.set("authorization", `Bearer ${token}`);
    }
    return request;
  },
  onResponse({ request, response }) {
    const token = currentToken();
    if (
      response.status === 401 &&
      token &&
      request.headers.get("authorization") === `Bearer ${token}`
    ) {
      endSession(SESSION_ENDED);
    }
    return response;
  },
};

/** The public REST API (`/api/v1`), typed from the gateway's OpenAPI document. */
// JSON only: the console reads streams with readRunStream, never as an execute route's answer.
export const api = createClient<paths, "application/json">({ baseUrl: window.location.origin });
api.use(auth);

/** A fetch of this origin with the session's token: for what openapi-fetch does not read (SSE). */
export async function signedFetch(path: string, init: RequestInit = {}): Promise<Response> {
  const token = currentToken();
  const headers = new Headers(init.headers);
  if (token) headers.set("authorization", `Bearer ${token}`);
  const response = await fetch(path, { ...init, headers });
  if (response.status === 401 && token) endSession(SESSION_ENDED);
  return response;
}

/** The message to show for an error the API answered (or a failed request). */
export function errorMessage(error: unknown): string {
  if (error && typeof error === "object" && "message" in error) {
    return String((error as { message: unknown }).message);
  }
  return String(error);
}
