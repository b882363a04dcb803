import type { FastifyRequest } from "fastify";
import { badRequest, type HttpError } from "./errors.js";
import { shownKey } from "./json-body.js";

/**
 * A NUL character (`%00`) in a path or query parameter: PostgreSQL cannot take one in a text
 * parameter, so it is refused here, once for every route, before any handler sees it.
 */
export function nulInParams(request: FastifyRequest): HttpError | undefined {
  // A NUL can only arrive percent-encoded (Node's parser refuses a raw one): most requests are
  // done with one look at the raw URL, without walking their parameters.
  if (!request.url.includes("%00")) return undefined;
  const sources: [string, unknown][] = [
    ["path", request.params],
    ["query", request.query],
  ];
  for (const [where, values] of sources) {
    if (!values || typeof values !== "object") continue;
    for (const [name, value] of Object.entries(values)) {
      const items: unknown[] = Array.isArray(value) ? value : [value];
      if (name.includes("\0") || items.some((v) => typeof v === "string" && v.includes("\0"))) {
        return badRequest(`${shownKey(name)}: ${where} parameters must not contain NUL (%00)`);
      }
    }
  }
  return undefined;
}
