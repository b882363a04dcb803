import { sql, type RawBuilder } from "kysely";
import * as lucene from "lucene";
import type { Node, RangeNode, TermNode } from "lucene";
import { invalid } from "@pies/common";

/**
 * Lucene queries over a run's input data (`parameters`), DESIGN.md §3. The `lucene` package parses
 * the query; its syntax tree becomes a small expression (`Expr`, whose meaning is stated here and
 * evaluated in memory by the tests), and each leaf becomes one `parameters @? <jsonpath>` test with
 * the JSON path as a bound parameter, which the GIN (jsonb_path_ops) index on `parameters` serves.
 *
 * Meaning, exact and case-sensitive (keyword semantics):
 * - `path:value` matches when the value at the dotted path, or an element of the array there,
 *   is the string `value`, or the number it spells, or the boolean `true`/`false` it spells.
 * - `path:"a phrase"` matches the string exactly (no wildcards, no number).
 * - `*` and `?` in an unquoted term match any run of characters and one character, anchored on
 *   the whole string; `path:*` matches when the path has a value.
 * - `path:[a TO b]` (inclusive) and `path:{a TO b}` (exclusive), mixed and `*` bounds allowed: a
 *   numeric range when every bound is a number, else a range of strings (jsonpath string order).
 * - A bare term matches `defaultQueryPath`, or any value anywhere in the input data without one.
 * - `AND`/`&&`, `OR`/`||`, `NOT`/`!`/`-`, `+`, grouping, `path:(a OR b)`; AND binds tighter than
 *   OR, and terms side by side are ANDed.
 */
export type Expr =
  | { kind: "and"; items: Expr[] }
  | { kind: "or"; items: Expr[] }
  | { kind: "not"; item: Expr }
  | { kind: "all" }
  | { kind: "match"; path: string[] | null; test: Test };

export type Bound = { value: string | number; inclusive: boolean };
export type Test =
  | { type: "equals"; string: string; number?: number; boolean?: boolean }
  | { type: "wildcard"; regex: string }
  | { type: "exists" }
  | { type: "range"; lower?: Bound; upper?: Bound };

/** Bounds on what one query may ask, so that a query's cost stays bounded. */
export const QUERY_LIMITS = { length: 4096, leaves: 64, pathDepth: 32 } as const;

const IMPLICIT = "<implicit>";
const NUMBER = /^-?(0|[1-9]\d{0,14})(\.\d{1,15})?$/;

/** A 400 naming the query and where in it the problem is (0-based character offset). */
function queryError(message: string, offset?: number): never {
  throw invalid(`query: ${message}${offset === undefined ? "" : ` at position ${offset}`}`);
}

/** A dotted path as its segments; empty segments are an error. */
export function parsePath(path: string, what: string, offset?: number): string[] {
  const segments = path.split(".");
  if (segments.some((s) => s === "")) {
    if (what === "query") queryError(`the field "${path}" has an empty path segment`, offset);
    throw invalid(`${what}: "${path}" is not a dotted path`);
  }
  if (segments.length > QUERY_LIMITS.pathDepth) {
    throw invalid(`${what}: "${path}" is deeper than ${QUERY_LIMITS.pathDepth} segments`);
  }
  return segments;
}

/** Removes Lucene's backslash escapes. */
const unescape = (s: string) => s.replace(/\\(.)/gs, "$1");

/** A term with wildcards as a regular expression anchored on the whole string; null if none. */
export function wildcardRegex(term: string): string | null {
  let regex = "";
  let wild = false;
  const chars = [...term];
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i] ?? "";
    if (c === "\\" && i + 1 < chars.length) {
      regex += escapeRegex(chars[++i] ?? "");
    } else if (c === "*") {
      regex += ".*";
      wild = true;
    } else if (c === "?") {
      regex += ".";
      wild = true;
    } else {
      regex += escapeRegex(c);
    }
  }
  return wild ? `^${regex}$` : null;
}

const escapeRegex = (c: string) => (/[.^$*+?()[\]{}|\\/-]/.test(c) ? `\\${c}` : c);

function termTest(node: TermNode): Test {
  const offset = node.termLocation?.start.offset;
  if (node.regex) queryError("regular expressions are not supported", offset);
  if (node.similarity != null) queryError("fuzzy terms (~) are not supported", offset);
  if (node.proximity != null) queryError("proximity searches (~) are not supported", offset);
  if (node.quoted) return { type: "equals", string: node.term };
  if (node.term === "*") return { type: "exists" };
  const regex = wildcardRegex(node.term);
  if (regex) return { type: "wildcard", regex };
  const value = unescape(node.term);
  const test: Test = { type: "equals", string: value };
  if (NUMBER.test(value)) test.number = Number(value);
  if (value === "true" || value === "false") test.boolean = value === "true";
  return test;
}

function rangeTest(node: RangeNode): Test {
  const min = node.term_min === "*" ? undefined : unescape(node.term_min);
  const max = node.term_max === "*" ? undefined : unescape(node.term_max);
  const numeric = [min, max].every((b) => b === undefined || NUMBER.test(b));
  const bound = (value: string | undefined, inclusive: boolean): Bound | undefined =>
    value === undefined ? undefined : { value: numeric ? Number(value) : value, inclusive };
  const lower = bound(min, node.inclusive === "both" || node.inclusive === "left");
  const upper = bound(max, node.inclusive === "both" || node.inclusive === "right");
  if (!lower && !upper) return { type: "exists" };
  return { type: "range", ...(lower && { lower }), ...(upper && { upper }) };
}

const isNode = (n: Node | TermNode | RangeNode): n is Node => "left" in n;

interface Context {
  /** The path of a bare term: the enclosing `field:( … )`, else defaultQueryPath, else any. */
  implicit: string[] | null;
  /** Leaves so far, over the whole query. */
  count: { leaves: number };
}

/**
 * The grammar reads `-field:…`, `+field:…` and `!field:…` (a term or a `field:( … )` group) as a
 * field named with the sign: the sign is a prohibition (`-`, `!`) or a requirement (`+`).
 */
function signed(field: string): { field: string; negate: boolean } {
  if (field !== IMPLICIT && /^[-+!]/.test(field)) {
    return { field: field.slice(1), negate: !field.startsWith("+") };
  }
  return { field, negate: false };
}

function leaf(node: TermNode | RangeNode, ctx: Context): Expr {
  if (++ctx.count.leaves > QUERY_LIMITS.leaves) {
    queryError(`more than ${QUERY_LIMITS.leaves} terms`);
  }
  const { field, negate: prohibited } = signed(node.field);
  let negate = prohibited;
  const path =
    field === IMPLICIT
      ? ctx.implicit
      : parsePath(unescape(field), "query", node.fieldLocation?.start.offset);
  const test = "term_min" in node ? rangeTest(node) : termTest(node);
  const prefix = "term" in node ? node.prefix : null;
  if (prefix === "-" || prefix === "!") negate = !negate;
  const expr: Expr =
    test.type === "exists" && path === null ? { kind: "all" } : { kind: "match", path, test };
  return negate ? { kind: "not", item: expr } : expr;
}

/** An expression of the tree; a chain `a OP b OP c` (which the grammar nests to the right) is
 * flattened so that AND binds tighter than OR. */
function expr(node: Node | TermNode | RangeNode, ctx: Context): Expr {
  if (!isNode(node)) return leaf(node, ctx);
  const { field: groupField, negate: prohibited } = node.field
    ? signed(node.field)
    : { field: node.field, negate: false };
  const inner: Context =
    groupField && groupField !== IMPLICIT
      ? {
          ...ctx,
          implicit: parsePath(unescape(groupField), "query", node.fieldLocation?.start.offset),
        }
      : ctx;
  const operands: Expr[] = [];
  const operators: string[] = [];
  let current: Node = node;
  for (;;) {
    // `field:( … )` is a group node carrying the field: it applies to its whole chain.
    let left = expr(current.left, inner);
    if (current.start === "NOT") left = { kind: "not", item: left };
    operands.push(left);
    if (!current.operator || !current.right) break;
    operators.push(current.operator);
    const right: Node | TermNode | RangeNode = current.right;
    if (isNode(right) && !right.parenthesized && !right.start && !right.field) {
      current = right;
      continue;
    }
    operands.push(expr(right, inner));
    break;
  }
  // Split the chain at each OR; a NOT after AND/OR negates the operand it precedes.
  const [first, ...rest] = operands as [Expr, ...Expr[]];
  let group: Expr[] = [first];
  const groups: Expr[][] = [group];
  rest.forEach((next, i) => {
    const op = operators[i];
    const negated = op === "AND NOT" || op === "OR NOT" || op === "NOT";
    const operand: Expr = negated ? { kind: "not", item: next } : next;
    if (op === "OR" || op === "||" || op === "OR NOT") groups.push((group = [operand]));
    else group.push(operand);
  });
  const ands = groups.map((g): Expr =>
    g.length === 1 ? (g[0] as Expr) : { kind: "and", items: g },
  );
  const whole: Expr = ands.length === 1 ? (ands[0] as Expr) : { kind: "or", items: ands };
  return prohibited ? { kind: "not", item: whole } : whole;
}

/**
 * A query as an expression; a query that does not parse, or asks for what is not supported, is
 * INVALID_ARGUMENT naming the position. An empty query is null (no condition).
 */
export function parseQuery(query: string, defaultQueryPath?: string): Expr | null {
  if (query.trim() === "") return null;
  if (query.length > QUERY_LIMITS.length) {
    throw invalid(`query: longer than ${QUERY_LIMITS.length} characters`);
  }
  const implicit = defaultQueryPath ? parsePath(defaultQueryPath, "defaultQueryPath") : null;
  // The grammar drops an operator that ends the query (`a AND`): that is a query cut short.
  const dangling = /(?:^|\s)(AND|OR|NOT|&&|\|\|)\s*$/.exec(query);
  if (dangling) {
    queryError(`syntax error: ${dangling[1]} with nothing after it`, query.trimEnd().length);
  }
  let tree: Node;
  try {
    tree = lucene.parse(query);
  } catch (err) {
    const e = err as { message?: string; location?: { start?: { offset?: number } } };
    const offset = e.location?.start?.offset;
    if (offset === undefined) queryError("it does not parse");
    const found = offset < query.length ? `"${query[offset]}"` : "end of query";
    return queryError(`syntax error: unexpected ${found}`, offset);
  }
  // The library's tree cannot be trusted to be deep-recursion safe on hostile input: its depth
  // is bounded by the query's length, which is bounded above.
  return expr(tree, { implicit, count: { leaves: 0 } });
}

/** A JSON string literal as jsonpath reads it (JSON's escapes are a subset of jsonpath's). */
const str = (s: string) => JSON.stringify(s);
/** A number literal of jsonpath (NUMBER's syntax, so never an exponent). */
const num = (n: number) => (Object.is(n, -0) ? "0" : String(n));
const lit = (v: string | number) => (typeof v === "number" ? num(v) : str(v));

/** The jsonpath of a leaf: every value and key is a quoted literal. */
export function leafPath(path: string[] | null, test: Test): string {
  const base = path ? `$${path.map((s) => `.${str(s)}`).join("")}` : "$.**";
  switch (test.type) {
    case "exists":
      return base;
    case "equals": {
      const alternatives = [`@ == ${str(test.string)}`];
      if (test.number !== undefined) alternatives.push(`@ == ${num(test.number)}`);
      if (test.boolean !== undefined) alternatives.push(`@ == ${test.boolean}`);
      return `${base} ? (${alternatives.join(" || ")})`;
    }
    case "wildcard":
      return `${base} ? (@ like_regex ${str(test.regex)} flag "s")`;
    case "range": {
      const conditions: string[] = [];
      if (test.lower)
        conditions.push(`@ ${test.lower.inclusive ? ">=" : ">"} ${lit(test.lower.value)}`);
      if (test.upper)
        conditions.push(`@ ${test.upper.inclusive ? "<=" : "<"} ${lit(test.upper.value)}`);
      return `${base} ? (${conditions.join(" && ")})`;
    }
  }
}

/** An expression as a SQL condition on `parameters`; each jsonpath is a bound parameter. */
export function exprToSql(e: Expr): RawBuilder<boolean> {
  switch (e.kind) {
    case "all":
      return sql<boolean>`true`;
    case "match":
      return sql<boolean>`(parameters @? ${leafPath(e.path, e.test)}::jsonpath)`;
    case "not":
      return sql<boolean>`(not ${exprToSql(e.item)})`;
    case "and":
    case "or":
      return sql<boolean>`(${sql.join(
        e.items.map(exprToSql),
        sql.raw(e.kind === "and" ? " and " : " or "),
      )})`;
  }
}
