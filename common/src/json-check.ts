/**
 * The deepest JSON the services carry: data reach them as google.protobuf.Struct and Value, and
 * protobuf's recursion limit (100 messages; each JSON level is two, a Struct or ListValue and a
 * Value) lets one hold at most 48 levels where it sits deepest (a template's input schema inside
 * an interaction, inside a response). Deeper, fromBinary refuses the message: a body is refused
 * at the gateway (PIES_MAX_JSON_DEPTH, at most this) and a model's answer is invalid.
 */
export const MAX_JSON_DEPTH = 48;

/** What makes a JSON value one the services cannot take, and where (keys from the root). */
export interface JsonProblem {
  /** Nested deeper than the limit; a NUL in a string or key; a number beyond a double's range. */
  kind: "depth" | "nul" | "number";
  path: (string | number)[];
}

interface Node {
  value: unknown;
  depth: number;
  /** Where it sits: its container and its key there; none at the root. */
  in?: { parent: Node; key: string | number };
}

/**
 * Walks a parsed JSON value with an explicit stack (a recursive walk overflows the call stack on
 * deep input, which is precisely the input to refuse) and returns the first problem, if any:
 * nesting deeper than `maxDepth` (a scalar is at depth 0; each object or array adds a level), a
 * NUL character in a string or key (PostgreSQL cannot store one in text or jsonb) or a number too
 * large for a double (JSON.parse makes it Infinity, which neither JSON nor protobuf can carry).
 */
export function jsonProblem(root: unknown, maxDepth: number): JsonProblem | undefined {
  const stack: Node[] = [{ value: root, depth: 0 }];
  for (let node = stack.pop(); node; node = stack.pop()) {
    const { value } = node;
    if (typeof value === "string") {
      if (value.includes("\0")) return { kind: "nul", path: pathOf(node) };
    } else if (typeof value === "number") {
      if (!Number.isFinite(value)) return { kind: "number", path: pathOf(node) };
    } else if (value !== null && typeof value === "object") {
      const depth = node.depth + 1;
      if (depth > maxDepth) return { kind: "depth", path: pathOf(node) };
      if (Array.isArray(value)) {
        value.forEach((item, key) => stack.push({ value: item, depth, in: { parent: node, key } }));
      } else {
        for (const [key, item] of Object.entries(value)) {
          if (key.includes("\0")) {
            return { kind: "nul", path: pathOf({ value: key, depth, in: { parent: node, key } }) };
          }
          stack.push({ value: item, depth, in: { parent: node, key } });
        }
      }
    }
  }
  return undefined;
}

function pathOf(node: Node): (string | number)[] {
  const keys: (string | number)[] = [];
  for (let at = node.in; at; at = at.parent.in) keys.push(at.key);
  return keys.reverse();
}
