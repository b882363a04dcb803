import type { FastifyRequest } from "fastify";
import { jsonProblem } from "@pies/common";
import { badRequest, type HttpError } from "./errors.js";

type Done = (err: Error | null, body?: unknown) => void;

/**
 * A body that is the JSON `null`, as the parser hands it on. Fastify makes a request without a body
 * `null` too, and the two must differ: no body is a route's `{}` (all its fields optional), while
 * `null` is a body of the wrong type (400). The route's validator reads this back as `null`.
 */
export const JSON_NULL: unique symbol = Symbol("JSON null");

/**
 * A parser of JSON bodies, as Fastify's, that also refuses (400) what the services cannot take:
 * nesting deeper than `maxDepth` (PIES_MAX_JSON_DEPTH; protobuf's recursion limit), a NUL
 * character in a string or key (PostgreSQL cannot store one in text or jsonb) and a number too
 * large for a double (JSON.parse makes it Infinity, which neither JSON nor protobuf can carry).
 */
export function jsonBodyParser(maxDepth: number) {
  return (_request: FastifyRequest, text: string | Buffer, done: Done) => {
    const source = typeof text === "string" ? text : text.toString("utf8");
    if (source.length === 0) return done(null, undefined);
    let body: unknown;
    try {
      body = JSON.parse(source);
    } catch {
      return done(badRequest("the request body is not valid JSON"));
    }
    const problem = checkJson(body, maxDepth);
    if (problem) return done(problem);
    done(null, body === null ? JSON_NULL : body);
  };
}

/**
 * The first problem of a parsed JSON value (jsonProblem: nesting, NUL, a number out of range), as
 * a 400 naming where it is.
 */
export function checkJson(root: unknown, maxDepth: number): HttpError | undefined {
  const problem = jsonProblem(root, maxDepth);
  if (!problem) return undefined;
  const where = problem.path.length > 0 ? problem.path.map(shownKey).join(".") : "body";
  switch (problem.kind) {
    case "depth":
      return badRequest(
        `${where}: the request body is nested deeper than ${maxDepth} levels (PIES_MAX_JSON_DEPTH)`,
        { limit: "PIES_MAX_JSON_DEPTH", max: maxDepth },
      );
    case "number":
      return badRequest(`${where}: the number is too large (beyond a double's range)`);
    case "nul":
      return badRequest(`${where}: strings in the request body must not contain NUL (\\u0000)`);
  }
}

/** A key as shown in a message: JSON-escaped (a NUL stays visible) and cut to a readable length. */
export function shownKey(key: string | number): string | number {
  if (typeof key === "number") return key;
  const escaped = JSON.stringify(key).slice(1, -1);
  return escaped.length > 64 ? `${escaped.slice(0, 64)}…` : escaped;
}
