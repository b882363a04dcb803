import type { FastifyRequest } from "fastify";
import { badRequest, type HttpError } from "./errors.js";

type Done = (err: Error | null, body?: unknown) => void;

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
    done(null, body);
  };
}

interface Node {
  value: unknown;
  depth: number;
  /** Where it sits: its container and its key there; none at the root. */
  in?: { parent: Node; key: string | number };
}

/**
 * Walks a parsed JSON value with an explicit stack (a recursive walk overflows the call stack on
 * deep input, which is precisely the input to refuse) and returns the first problem, if any.
 * A scalar is at depth 0; each object or array adds a level.
 */
export function checkJson(root: unknown, maxDepth: number): HttpError | undefined {
  const stack: Node[] = [{ value: root, depth: 0 }];
  for (let node = stack.pop(); node; node = stack.pop()) {
    const { value } = node;
    if (typeof value === "string") {
      if (value.includes("\0")) return nulIn(node);
    } else if (typeof value === "number") {
      if (!Number.isFinite(value)) {
        return badRequest(`${pathOf(node)}: the number is too large (beyond a double's range)`);
      }
    } else if (value !== null && typeof value === "object") {
      const depth = node.depth + 1;
      if (depth > maxDepth) {
        return badRequest(
          `${pathOf(node)}: the request body is nested deeper than ${maxDepth} levels (PIES_MAX_JSON_DEPTH)`,
          { limit: "PIES_MAX_JSON_DEPTH", max: maxDepth },
        );
      }
      if (Array.isArray(value)) {
        value.forEach((item, key) => stack.push({ value: item, depth, in: { parent: node, key } }));
      } else {
        for (const [key, item] of Object.entries(value)) {
          if (key.includes("\0")) return nulIn({ value: key, depth, in: { parent: node, key } });
          stack.push({ value: item, depth, in: { parent: node, key } });
        }
      }
    }
  }
  return undefined;
}

const nulIn = (node: Node) =>
  badRequest(`${pathOf(node)}: strings in the request body must not contain NUL (\\u0000)`);

/** `data.items.3.name` for a node, as toHttpError names the fields of zod issues; `body` at the root. */
function pathOf(node: Node): string {
  const keys: (string | number)[] = [];
  for (let at = node.in; at; at = at.parent.in) keys.push(at.key);
  return keys.length > 0 ? keys.reverse().map(shownKey).join(".") : "body";
}

/** A key as shown in a message: JSON-escaped (a NUL stays visible) and cut to a readable length. */
export function shownKey(key: string | number): string | number {
  if (typeof key === "number") return key;
  const escaped = JSON.stringify(key).slice(1, -1);
  return escaped.length > 64 ? `${escaped.slice(0, 64)}…` : escaped;
}
