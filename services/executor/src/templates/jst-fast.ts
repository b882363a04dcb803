import { LRUCache } from "lru-cache";
import type { SandboxLimits } from "./jst-engine.js";

/**
 * A `jst` template that is one template literal over plain variables, as the sandbox would read
 * it: `texts` are the literal's text between the `${name}` substitutions (cooked: escapes
 * resolved), so `texts.length === names.length + 1`.
 */
interface PlainLiteral {
  texts: string[];
  names: string[];
}

/**
 * The fast path of `jst`: a template that is a template literal whose substitutions are all plain
 * variables (`` return `Summarise ${text}` ``, or `Summarise ${text}` read as the inside of one),
 * each a key of the data, renders here, on the calling thread, without QuickJS or a worker. The
 * output is the sandbox's, character for character (jst-fast.test.ts renders a corpus both ways):
 * the template is read as the sandbox's PRELUDE reads it, the data's values are what JSON makes of
 * them there, and a value becomes text as JavaScript's template literals make it (arrays joined
 * with commas, objects `[object Object]`).
 *
 * Anything this cannot prove gives undefined, and the caller renders in the sandbox: every other
 * template, a variable that is not a data key (a global or a ReferenceError there), data that is
 * not plain JSON (the sandbox would see it through JSON.stringify), has over 1000 keys or is so
 * large that the sandbox might run out of memory, and an object whose conversion would throw there
 * (an own `toString` key). What it renders takes time linear in the data, so it cannot run out of
 * time as the sandbox could with a far smaller limit on a far slower machine.
 */
export function renderFast(
  content: string,
  data: Record<string, unknown>,
  limits: SandboxLimits,
): string | undefined {
  const literal = plainLiteral(content);
  if (!literal || typeof data !== "object" || data === null) return undefined;
  const isKey = (name: string) => Object.prototype.propertyIsEnumerable.call(data, name);
  if (!literal.names.every(isKey)) return undefined;
  // The sandbox passes every data key as an argument: keep well clear of its limits.
  if (Object.keys(data).length > MAX_KEYS) return undefined;
  const size = jsonSize(data);
  if (size === undefined) return undefined;
  // The sandbox holds the data several times over (its JSON as code, that as a string, the parsed
  // values, the output and the output's JSON, two bytes a character when not Latin-1): a large
  // input there may fail at the memory limit. Far below it, it cannot.
  if ((size + content.length) * 32 > limits.memoryBytes) return undefined;
  let out = literal.texts[0] ?? "";
  for (let i = 0; i < literal.names.length; i++) {
    const text = toText(data[literal.names[i] ?? ""]);
    if (text === undefined) return undefined;
    out += text + (literal.texts[i + 1] ?? "");
  }
  return out;
}

/** Templates read, by their content: a plain literal, or false (the sandbox renders it). */
const literals = new LRUCache<string, PlainLiteral | false>({
  max: 2000,
  // The content is the key: bound the characters held, not only the entries.
  maxSize: 8 * 1024 * 1024,
  sizeCalculation: (literal, content) =>
    content.length + (literal ? literal.texts.reduce((n, t) => n + t.length, 0) : 0) + 1,
});

function plainLiteral(content: string): PlainLiteral | undefined {
  let literal = literals.get(content);
  if (literal === undefined) {
    literal = parseBody(sandboxBody(content)) ?? false;
    literals.set(content, literal);
  }
  return literal || undefined;
}

/** The function body the sandbox makes of a template (PRELUDE in jst-engine.ts, the same code). */
function sandboxBody(content: string): string {
  return /(^|[;{}])\s*return\b/m.test(content)
    ? content
    : "return `" + content.replace(/\\?`/g, (m) => (m === "`" ? "\\`" : m)) + "`;";
}

/**
 * `body` when it is `return` and one untagged template literal whose substitutions are plain
 * identifiers, then at most a `;`, with only spaces, tabs and line ends around (no line end
 * between `return` and the literal: that would return undefined).
 */
function parseBody(body: string): PlainLiteral | undefined {
  const start = /^[ \t\n\r]*return[ \t]*`/.exec(body);
  if (!start) return undefined;
  const texts: string[] = [];
  const names: string[] = [];
  let text = "";
  let i = start[0].length;
  for (;;) {
    if (i >= body.length) return undefined;
    const c = body[i] ?? "";
    if (c === "`") {
      i++;
      break;
    }
    if (c === "\\") {
      const escape = readEscape(body, i + 1);
      if (!escape) return undefined;
      text += escape.text;
      i = escape.end;
    } else if (c === "$" && body[i + 1] === "{") {
      const substitution = /^[ \t\n\r]*([A-Za-z_$][A-Za-z0-9_$]*)[ \t\n\r]*\}/.exec(
        body.slice(i + 2, i + 2 + 300),
      );
      const name = substitution?.[1];
      if (!substitution || !name || RESERVED.has(name)) return undefined;
      names.push(name);
      texts.push(text);
      text = "";
      i += 2 + substitution[0].length;
    } else if (c === "\r") {
      // A literal's CR and CRLF are LF (in the cooked and the raw string alike).
      text += "\n";
      i += body[i + 1] === "\n" ? 2 : 1;
    } else {
      text += c;
      i++;
    }
  }
  if (!/^[ \t\n\r]*;?[ \t\n\r]*$/.test(body.slice(i))) return undefined;
  texts.push(text);
  return { texts, names };
}

const SINGLE: Record<string, string> = {
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
  v: "\v",
};

/**
 * The cooked text of the escape whose character after the backslash is at `at`, and where the
 * literal goes on; undefined for what is a SyntaxError in an untagged literal (`\1`, `\01`, a bad
 * `\x` or `\u`), which the sandbox reports.
 */
function readEscape(body: string, at: number): { text: string; end: number } | undefined {
  const c = body[at];
  if (c === undefined) return undefined;
  // A line continuation: nothing.
  if (c === "\n" || c === "\u2028" || c === "\u2029") return { text: "", end: at + 1 };
  if (c === "\r") return { text: "", end: body[at + 1] === "\n" ? at + 2 : at + 1 };
  const single = SINGLE[c];
  if (single !== undefined) return { text: single, end: at + 1 };
  if (c === "0") {
    return /[0-9]/.test(body[at + 1] ?? "") ? undefined : { text: "\0", end: at + 1 };
  }
  if (c >= "1" && c <= "9") return undefined;
  if (c === "x") {
    const hex = /^[0-9a-fA-F]{2}/.exec(body.slice(at + 1, at + 3));
    return hex ? { text: String.fromCharCode(parseInt(hex[0], 16)), end: at + 3 } : undefined;
  }
  if (c === "u") {
    const four = /^[0-9a-fA-F]{4}/.exec(body.slice(at + 1, at + 5));
    if (four) return { text: String.fromCharCode(parseInt(four[0], 16)), end: at + 5 };
    const braced = /^\{([0-9a-fA-F]{1,32})\}/.exec(body.slice(at + 1, at + 36));
    const code = braced?.[1] ? parseInt(braced[1], 16) : NaN;
    if (!braced || !(code <= 0x10ffff)) return undefined;
    return { text: String.fromCodePoint(code), end: at + 1 + braced[0].length };
  }
  // Any other character stands for itself: \` \$ \{ \\ \' \" and the rest.
  return { text: c, end: at + 1 };
}

/**
 * Names that are not a plain variable in the sandbox's function (sloppy mode, not async, not a
 * generator), or not one that is simple to prove: reserved words, the words that are reserved
 * only sometimes, and `arguments` and `eval`. Such a template renders in the sandbox.
 */
const RESERVED = new Set(
  (
    "await break case catch class const continue debugger default delete do else enum export " +
    "extends false finally for function if import in instanceof new null return super switch " +
    "this throw true try typeof var void while with yield let static implements interface " +
    "package private protected public arguments eval async of get set"
  ).split(" "),
);

/** At most this many keys at the top of the data, values in all, nested this deep. */
const MAX_KEYS = 1000;
const MAX_VALUES = 100_000;
const MAX_DEPTH = 64;

/**
 * The characters of the strings (keys and values) in `data` when it is plain JSON: plain objects
 * and arrays of strings, finite or not numbers (JSON makes NaN and Infinity null), booleans and
 * null, without cycles; undefined otherwise (undefined, functions, symbols, bigints, class
 * instances, `toJSON`, too many or too deep values: the sandbox sees what JSON.stringify makes of
 * them, or fails).
 */
function jsonSize(data: unknown): number | undefined {
  let values = 0;
  let size = 0;
  const walk = (value: unknown, depth: number): boolean => {
    if (++values > MAX_VALUES) return false;
    switch (typeof value) {
      case "string":
        size += value.length;
        return true;
      case "number":
      case "boolean":
        return true;
      case "object": {
        if (value === null) return true;
        if (depth >= MAX_DEPTH || "toJSON" in value) return false;
        const proto = Object.getPrototypeOf(value) as unknown;
        if (Array.isArray(value)) {
          if (proto !== Array.prototype) return false;
          for (let i = 0; i < value.length; i++) {
            if (!(i in value) || !walk(value[i], depth + 1)) return false;
          }
          return true;
        }
        if (proto !== Object.prototype && proto !== null) return false;
        for (const key of Object.keys(value)) {
          size += key.length;
          if (!walk((value as Record<string, unknown>)[key], depth + 1)) return false;
        }
        return true;
      }
      default:
        return false;
    }
  };
  return walk(data, 0) ? size : undefined;
}

/**
 * What `${value}` gives in the sandbox, where value is what JSON made of it (checked by jsonSize):
 * undefined when that conversion would throw there (an object with an own `toString` key, which
 * is no function after JSON).
 */
function toText(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (typeof value === "number") return Number.isFinite(value) ? String(value) : "null";
  if (typeof value === "boolean") return String(value);
  if (value === null) return "null";
  if (Array.isArray(value)) {
    // Array.prototype.join: null (and NaN or Infinity, which JSON made null) are empty.
    const parts: string[] = [];
    for (const element of value as unknown[]) {
      if (element === null || (typeof element === "number" && !Number.isFinite(element))) {
        parts.push("");
        continue;
      }
      const text = toText(element);
      if (text === undefined) return undefined;
      parts.push(text);
    }
    return parts.join(",");
  }
  if (typeof value === "object" && !Object.prototype.hasOwnProperty.call(value, "toString")) {
    return "[object Object]";
  }
  return undefined;
}
