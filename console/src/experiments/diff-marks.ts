import type { PatchOp } from "./model";

/** How a value differs: shown on the original's side (removed) or the candidate's (added). */
export type MarkKind = "added" | "removed" | "changed" | "moved";

/** The values to highlight, by their JSON Pointer (RFC 6901; "" is the whole value). */
export interface DiffMarks {
  original: Map<string, MarkKind>;
  candidate: Map<string, MarkKind>;
}

/** A JSON Pointer's reference tokens ("/a/b~1c" → ["a", "b/c"]); undefined if it is not one. */
export function parsePointer(pointer: string): string[] | undefined {
  if (pointer === "") return [];
  if (!pointer.startsWith("/")) return undefined;
  return pointer
    .slice(1)
    .split("/")
    .map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
}

/** The pointer of a child of `parent`. */
export function childPointer(parent: string, key: string | number): string {
  return `${parent}/${String(key).replace(/~/g, "~0").replace(/\//g, "~1")}`;
}

/**
 * A value of the original as the patch is applied: where it came from in the original (none for
 * a value the patch brought), and how it got where it is.
 */
interface Node {
  origin?: string;
  mark?: MarkKind;
  value?: unknown;
  object?: Map<string, Node>;
  array?: Node[];
}

function track(value: unknown, origin: string | undefined): Node {
  if (Array.isArray(value)) {
    return {
      origin,
      array: value.map((v, i) =>
        track(v, origin === undefined ? undefined : childPointer(origin, i)),
      ),
    };
  }
  if (value !== null && typeof value === "object") {
    return {
      origin,
      object: new Map(
        Object.entries(value).map(([k, v]) => [
          k,
          track(v, origin === undefined ? undefined : childPointer(origin, k)),
        ]),
      ),
    };
  }
  return { origin, value };
}

/** Thrown when an operation does not apply (a path that is not there): the marks fall back. */
class NotApplicable extends Error {}

/**
 * Which parts of the original and candidate results a pair's `diff` changes, to highlight them
 * side by side: removed or replaced values in the original, added or replaced ones in the
 * candidate, moved ones on both sides. A patch's paths refer to the document as each operation
 * finds it (array indexes shift as items are removed and added), so the patch is applied to a
 * copy of the original whose values remember where they came from; what ends up in the candidate
 * without an origin was added. A patch that does not apply, or does not give the candidate,
 * marks both wholes as changed.
 */
export function diffMarks(
  original: unknown,
  candidate: unknown,
  ops: PatchOp[] | null | undefined,
): DiffMarks {
  const marks: DiffMarks = { original: new Map(), candidate: new Map() };
  if (!ops || ops.length === 0) return marks;
  const root: { doc: Node } = { doc: track(original, "") };
  const markOriginal = (node: Node | undefined, kind: MarkKind) => {
    if (node?.origin !== undefined) marks.original.set(node.origin, kind);
    // A value the patch brought and took away again leaves nothing in the original; one that
    // was moved there leaves its origin marked already.
  };
  try {
    for (const op of ops) {
      const path = parsePointer(op.path);
      if (!path) throw new NotApplicable();
      switch (op.op) {
        case "add":
          put(root, path, fresh(op.value, "added"), "insert", markOriginal);
          break;
        case "remove":
          markOriginal(take(root, path), "removed");
          break;
        case "replace": {
          const old = take(root, path, true);
          markOriginal(old, "changed");
          put(root, path, fresh(op.value, "changed"), "replace", markOriginal);
          break;
        }
        case "move": {
          const from = parsePointer(String(op.from ?? ""));
          if (!from) throw new NotApplicable();
          const node = take(root, from);
          markOriginal(node, "moved");
          // A value of the original moves; one the patch brought stays an addition.
          if (node && node.origin !== undefined) node.mark = "moved";
          put(root, path, node ?? fresh(undefined, "moved"), "insert", markOriginal);
          break;
        }
        case "copy": {
          const from = parsePointer(String(op.from ?? ""));
          if (!from) throw new NotApplicable();
          put(root, path, fresh(plain(get(root.doc, from)), "added"), "insert", markOriginal);
          break;
        }
        default:
          // "test" changes nothing.
          break;
      }
    }
    if (canonical(plain(root.doc)) !== canonical(candidate)) throw new NotApplicable();
  } catch (err) {
    if (!(err instanceof NotApplicable)) throw err;
    return {
      original: new Map([["", "changed"]]),
      candidate: new Map([["", "changed"]]),
    };
  }
  collect(root.doc, "", marks.candidate);
  return marks;
}

/** JSON with every object's keys sorted: equal values, equal texts (as the API compares). */
export function canonical(value: unknown): string {
  return (
    JSON.stringify(value, (_key, v: unknown) =>
      v && typeof v === "object" && !Array.isArray(v)
        ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
        : v,
    ) ?? "undefined"
  );
}

function fresh(value: unknown, mark: MarkKind): Node {
  return { ...track(value, undefined), mark };
}

/** A node's value again (a copy's source). */
function plain(node: Node): unknown {
  if (node.array) return node.array.map(plain);
  if (node.object) return Object.fromEntries([...node.object].map(([k, v]) => [k, plain(v)]));
  return node.value;
}

function get(node: Node, path: string[]): Node {
  let current = node;
  for (const token of path) {
    const next = child(current, token);
    if (!next) throw new NotApplicable();
    current = next;
  }
  return current;
}

function child(node: Node, token: string): Node | undefined {
  if (node.array) return node.array[arrayIndex(token, node.array.length)];
  return node.object?.get(token);
}

function arrayIndex(token: string, length: number, insert = false): number {
  if (token === "-" && insert) return length;
  if (!/^(0|[1-9]\d*)$/.test(token)) throw new NotApplicable();
  const i = Number(token);
  if (i > length || (!insert && i === length)) throw new NotApplicable();
  return i;
}

/** Removes and answers the value at `path` (the root: replaced by nothing until a put). */
function take(root: { doc: Node }, path: string[], keepPlace = false): Node | undefined {
  if (path.length === 0) return root.doc;
  const parent = get(root.doc, path.slice(0, -1));
  const token = path.at(-1) ?? "";
  if (parent.array) {
    const i = arrayIndex(token, parent.array.length);
    return keepPlace ? parent.array[i] : parent.array.splice(i, 1)[0];
  }
  if (!parent.object?.has(token)) throw new NotApplicable();
  const node = parent.object.get(token);
  if (!keepPlace) parent.object.delete(token);
  return node;
}

/** Puts `node` at `path`: inserted into an array (or in place of the item, for a replace). */
function put(
  root: { doc: Node },
  path: string[],
  node: Node,
  how: "insert" | "replace",
  markOriginal: (node: Node | undefined, kind: MarkKind) => void,
) {
  if (path.length === 0) {
    // The whole value replaced.
    if (how === "insert") markOriginal(root.doc, "changed");
    if (node.mark === "added") node.mark = "changed";
    root.doc = node;
    return;
  }
  const parent = get(root.doc, path.slice(0, -1));
  const token = path.at(-1) ?? "";
  if (parent.array) {
    const i = arrayIndex(token, parent.array.length, how === "insert");
    if (how === "insert") parent.array.splice(i, 0, node);
    else parent.array[i] = node;
    return;
  }
  if (!parent.object) throw new NotApplicable();
  // An add onto a member that exists replaces it (RFC 6902 §4.1).
  if (how === "insert" && parent.object.has(token)) {
    markOriginal(parent.object.get(token), "changed");
    node.mark = node.mark === "added" ? "changed" : node.mark;
  }
  parent.object.set(token, node);
}

/** The candidate's marks: every value the patch brought or moved, by where it ends up. */
function collect(node: Node, pointer: string, out: Map<string, MarkKind>) {
  if (node.mark) {
    out.set(pointer, node.mark);
    return;
  }
  if (node.array) node.array.forEach((n, i) => collect(n, childPointer(pointer, i), out));
  else if (node.object) for (const [k, n] of node.object) collect(n, childPointer(pointer, k), out);
}
