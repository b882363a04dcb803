import { sql, type RawBuilder } from "kysely";
import * as lucene from "lucene";
import type { Node, RangeNode, TermNode } from "lucene";
import { invalid } from "@pies/common";

/**
 * Lucene queries over a run's input data (`parameters`), DESIGN.md §3. The `lucene` package parses
 * the query; its syntax tree becomes a small expression (`Expr`, whose meaning is stated here and
 * evaluated in memory by the tests), and each leaf becomes one `parameters @? <jsonpath>` test with
 * the JSON path as a bound parameter, which the GIN (jsonb_path_ops) index on the project's
 * `parameters` serves for equality at a path. What that index cannot serve (wildcards, bare
 * terms, string ranges) also gets `<SEARCH_TEXT> like <pattern>` conditions (textPatterns) that
 * every match meets, which the trigram index on the input data's strings serves; the jsonpath
 * test keeps the answer exact.
 *
 * Meaning, exact and case-sensitive (keyword semantics):
 * - `path:value` matches when the value at the dotted path, or an element of the array there,
 *   is the string `value`, or the number it spells, or the boolean `true`/`false` it spells.
 * - `path:"a phrase"` matches the string exactly (no wildcards, no number).
 * - `*` and `?` in an unquoted term match any run of characters and one character, anchored on
 *   the whole string; `path:*` matches when the path has a value.
 * - `path:[a TO b]` (inclusive) and `path:{a TO b}` (exclusive), mixed and `*` bounds allowed: a
 *   numeric range when every bound is a number, else a range of strings (jsonpath string order).
 * - A bare term matches `defaultQueryPath`, or any value anywhere in the input data without one;
 *   `*:term` any value, and `*:*` every run (Lucene's match-all).
 * - `AND`/`&&`, `OR`/`||`, `NOT`/`!`/`-`, `+`, grouping, `path:(a OR b)`; NOT binds tightest, then
 *   AND (and terms side by side, ANDed), then OR. An operator follows a term or a group, except
 *   NOT after AND/OR: `NOT NOT a` and two signs (`--a`, `!-a`) are errors (`NOT (NOT a)` is not).
 *   `path:-5` is the number.
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
  | {
      type: "wildcard";
      regex: string;
      /** The literal runs between the wildcards, and whether the term starts and ends with one. */
      literals: string[];
      open: { start: boolean; end: boolean };
    }
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

/** A term with wildcards: a regular expression anchored on the whole string, and the literal
 * runs between the wildcards; null if it has none. */
export function wildcardTerm(
  term: string,
): Omit<Extract<Test, { type: "wildcard" }>, "type"> | null {
  let regex = "";
  let wild = false;
  const literals: string[] = [""];
  const open = { start: false, end: false };
  const chars = [...term];
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i] ?? "";
    const isWildcard = c === "*" || c === "?";
    if (c === "\\" && i + 1 < chars.length) {
      const next = chars[++i] ?? "";
      regex += escapeRegex(next);
      literals[literals.length - 1] += next;
    } else if (isWildcard) {
      regex += c === "*" ? ".*" : ".";
      wild = true;
      if (literals.at(-1) !== "") literals.push("");
    } else {
      regex += escapeRegex(c);
      literals[literals.length - 1] += c;
    }
    if (i === 0) open.start = isWildcard;
    open.end = isWildcard;
  }
  if (!wild) return null;
  return { regex: `^${regex}$`, literals: literals.filter((l) => l !== ""), open };
}

const escapeRegex = (c: string) => (/[.^$*+?()[\]{}|\\/-]/.test(c) ? `\\${c}` : c);

function termTest(node: TermNode, at: Position): Test {
  const offset = at(node.termLocation?.start.offset);
  if (node.regex) queryError("regular expressions are not supported", offset);
  if (node.similarity != null) queryError("fuzzy terms (~) are not supported", offset);
  if (node.proximity != null) queryError("proximity searches (~) are not supported", offset);
  // A phrase's escapes are read as a term's are (`"say \\"hi\\""`), as Lucene does.
  if (node.quoted) return { type: "equals", string: unescape(node.term) };
  if (node.term === "*") return { type: "exists" };
  const wildcard = wildcardTerm(node.term);
  if (wildcard) return { type: "wildcard", ...wildcard };
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
  /** Where an offset of the text the grammar parsed is in the query. */
  at: Position;
}

type Position = (offset: number | undefined) => number | undefined;

/**
 * The grammar reads `-field:…`, `+field:…` and `!field:…` (a term or a `field:( … )` group) as a
 * field named with the sign: the sign is a prohibition (`-`, `!`) or a requirement (`+`).
 */
function signed(field: string, offset: number | undefined): { field: string; negate: boolean } {
  if (field !== IMPLICIT && /^[-+!]/.test(field)) {
    doubleSign(field, offset);
    return { field: field.slice(1), negate: !field.startsWith("+") };
  }
  return { field, negate: false };
}

/** Two signs in a row (`--a`, `!-x:a`, `+-a`): the grammar reads the second as part of the word.
 * As `NOT NOT`, a 400 naming the second sign (a double negation is written `NOT (NOT a)`). */
function doubleSign(word: string, offset: number | undefined) {
  if (/^[-+!][-+!]/.test(word)) {
    queryError(
      `syntax error: "${word[1]}" right after "${word[0]}" (escape it to search for it: \\${word[1]})`,
      offset === undefined ? undefined : offset + 1,
    );
  }
}

function leaf(node: TermNode | RangeNode, ctx: Context): Expr {
  if (++ctx.count.leaves > QUERY_LIMITS.leaves) {
    queryError(`more than ${QUERY_LIMITS.leaves} terms`);
  }
  const { field, negate: prohibited } = signed(
    node.field,
    ctx.at(node.fieldLocation?.start.offset),
  );
  let negate = prohibited;
  // `*:` names every path, as Lucene's `*:*` (match all) does.
  const path =
    field === IMPLICIT
      ? ctx.implicit
      : field === "*"
        ? null
        : parsePath(unescape(field), "query", ctx.at(node.fieldLocation?.start.offset));
  let prefix = "term" in node ? node.prefix : null;
  if (prefix && field !== IMPLICIT && "term" in node) {
    // The grammar reads `field:-1` as `-field:1`. Lucene refuses a sign there; a minus before a
    // number is that negative number, any other sign belongs before the field.
    if (prefix === "-" && !node.quoted && NUMBER.test(`-${node.term}`)) {
      node = { ...node, term: `-${node.term}` };
      prefix = null;
    } else {
      queryError(
        `syntax error: "${prefix}" after "${field}:" (write ${prefix}${field}:… to negate or require, or escape it: \\${prefix})`,
        ctx.at(node.termLocation?.start.offset),
      );
    }
  }
  if (prefix && field === IMPLICIT && "term" in node && !node.quoted) {
    doubleSign(`${prefix}${node.term}`, ctx.at(node.termLocation?.start.offset));
  }
  const test = "term_min" in node ? rangeTest(node) : termTest(node, ctx.at);
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
    ? signed(node.field, ctx.at(node.fieldLocation?.start.offset))
    : { field: node.field, negate: false };
  const inner: Context =
    groupField && groupField !== IMPLICIT
      ? {
          ...ctx,
          implicit:
            groupField === "*"
              ? null
              : parsePath(unescape(groupField), "query", ctx.at(node.fieldLocation?.start.offset)),
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

const OPERATORS = new Set(["AND", "OR", "NOT", "&&", "||"]);

/** The query's words (split at white space and parentheses, outside quotes, ranges and escapes)
 * and parentheses, with their offsets. */
function tokens(query: string): { text: string; offset: number }[] {
  const out: { text: string; offset: number }[] = [];
  let word = "";
  let start = 0;
  let quoted = false;
  let range = 0;
  const flush = (end: number) => {
    if (word !== "") out.push({ text: word, offset: start });
    word = "";
    start = end;
  };
  for (let i = 0; i < query.length; i++) {
    const c = query[i] ?? "";
    if (word === "") start = i;
    if (c === "\\") {
      word += query.slice(i, i + 2);
      i++;
    } else if (quoted) {
      word += c;
      if (c === '"') quoted = false;
    } else if (range > 0) {
      word += c;
      if (c === "]" || c === "}") range--;
    } else if (/\s/.test(c)) {
      flush(i + 1);
    } else if (c === "(" || c === ")") {
      flush(i);
      out.push({ text: c, offset: i });
    } else {
      word += c;
      if (c === '"') quoted = true;
      else if (c === "[" || c === "{") range++;
    }
  }
  flush(query.length);
  return out;
}

/**
 * Operators the grammar would misread, as a 400 naming the position: it reads `NOT NOT a` as the
 * term "NOT" and `a`, drops a repeated operator (`a AND AND b`, `a OR NOT NOT b`) or a NOT after
 * `&&`/`||`, and ignores an operator that starts a query or a group. As in Lucene, an operator
 * follows a term or a group, except NOT, which may follow AND or OR; a double negation is written
 * `NOT (NOT a)`. Returns the text for the grammar, `&&` and `||` written AND and OR (which it
 * reads with a NOT after them), a space between an operator and a parenthesis it touches (the
 * grammar reads `NOT(a)` as the word "NOT" and `a`), and where each of its offsets was in the
 * query.
 */
function checkOperators(query: string): { text: string; at: Position } {
  const words = tokens(query);
  let text = "";
  let copied = 0;
  /** Offsets of the text after which it is one character longer than the query. */
  const shifts: number[] = [];
  words.forEach((w, i) => {
    const before = words[i - 1];
    if (OPERATORS.has(w.text)) {
      const follows = before && OPERATORS.has(before.text) ? before.text : null;
      if (follows && !(w.text === "NOT" && follows !== "NOT")) {
        queryError(`syntax error: ${w.text} right after ${follows}`, w.offset);
      }
      if (w.text !== "NOT" && (!before || before.text === "(")) {
        queryError(`syntax error: ${w.text} with nothing before it`, w.offset);
      }
      const next = words[i + 1];
      if (!next)
        queryError(`syntax error: ${w.text} with nothing after it`, query.trimEnd().length);
      if (next.text === ")")
        queryError(`syntax error: ${w.text} with nothing after it`, next.offset);
      // The grammar reads an operator only between spaces: one touching a parenthesis
      // (`NOT(a)`, `(a)AND(b)`) would be a search word. Lucene reads it as the operator.
      const end = w.offset + w.text.length;
      const spaceBefore = before?.text === ")" && before.offset + 1 === w.offset;
      const spaceAfter = next.text === "(" && next.offset === end;
      if (spaceBefore || spaceAfter || w.text === "&&" || w.text === "||") {
        text += query.slice(copied, w.offset);
        if (spaceBefore) {
          text += " ";
          shifts.push(text.length);
        }
        text += w.text === "&&" ? "AND" : w.text === "||" ? "OR" : w.text;
        if (w.text === "&&") shifts.push(text.length); // AND is one longer; OR is as long
        copied = end;
        if (spaceAfter) {
          text += " ";
          shifts.push(text.length);
        }
      }
    }
  });
  text += query.slice(copied);
  const at: Position = (offset) =>
    offset === undefined ? undefined : offset - shifts.filter((s) => s <= offset).length;
  return { text, at };
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
  const { text, at } = checkOperators(query);
  let tree: Node;
  try {
    tree = lucene.parse(text);
  } catch (err) {
    const e = err as { message?: string; location?: { start?: { offset?: number } } };
    const offset = at(e.location?.start?.offset);
    if (offset === undefined) queryError("it does not parse");
    const found = offset < query.length ? `"${query[offset]}"` : "end of query";
    return queryError(`syntax error: unexpected ${found}`, offset);
  }
  // The library's tree cannot be trusted to be deep-recursion safe on hostile input: its depth
  // is bounded by the query's length, which is bounded above.
  return expr(tree, { implicit, count: { leaves: 0 }, at });
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
      // The node itself of the bounds' type: a node that is an array (at any depth under `$.**`,
      // or an array of arrays at a path) would pass each comparison on some element of its own,
      // lax mode's `@ > x` and `@ < y` each true for another element, with none between them.
      const numeric = [test.lower, test.upper].some((b) => typeof b?.value === "number");
      const conditions = [`@.type() == "${numeric ? "number" : "string"}"`];
      if (test.lower)
        conditions.push(`@ ${test.lower.inclusive ? ">=" : ">"} ${lit(test.lower.value)}`);
      if (test.upper)
        conditions.push(`@ ${test.upper.inclusive ? "<=" : "<"} ${lit(test.upper.value)}`);
      return `${base} ? (${conditions.join(" && ")})`;
    }
  }
}

/**
 * The text of a run's input data that the trigram index holds (migrations/index-builds.ts) and
 * that LIKE patterns are matched against: its strings, every one at any depth (in arrays too), as
 * a JSON array in jsonb's output (`["Acme", "pro"]`), each quoted and escaped as
 * `parameters::text` writes it. textPatterns' patterns only ever look for a string's text (what
 * the leaf's jsonpath test matches), so each is in it. Keys, numbers, booleans and JSON's syntax
 * are left out: no pattern needs them, and every trigram of the text is an entry the record
 * writer adds to the index with each row it writes (the input data's whole text had about 1.6
 * times as many, for the bench's runs). The filter is the one type test, not two: a search's
 * recheck computes this text again for each candidate row. The index's expression and the
 * search's are this one text, so the planner matches them.
 */
export const SEARCH_TEXT = `jsonb_path_query_array(parameters, 'strict $.** ? (@.type() == "string")')::text`;

/** A string's characters as jsonb's text writes them inside quotes (JSON.stringify's escapes:
 * `\"`, `\\`, `\n`…, `\u00xx` for other control characters; anything else as is). */
const jsonText = (s: string) => JSON.stringify(s).slice(1, -1);
/** Text that LIKE reads literally (its escape character is the backslash). */
const likeLiteral = (s: string) => s.replace(/[\\%_]/g, "\\$&");
/** Whether a trigram index can narrow a search for these literals: one has three letters or
 * digits in a row (a shorter one yields trigrams that most rows have). */
const narrows = (literals: string[]) => literals.some((l) => /[\p{L}\p{N}]{3}/u.test(l));

/** The longest common prefix of two strings, by code points. */
function commonPrefix(a: string, b: string): string {
  const x = [...a];
  const y = [...b];
  let i = 0;
  while (i < x.length && i < y.length && x[i] === y[i]) i++;
  return x.slice(0, i).join("");
}

/**
 * LIKE patterns over the input data's strings (SEARCH_TEXT, jsonb's output) that the text of
 * every run the leaf matches has, none when a trigram index would not narrow by them. They only
 * narrow, never decide: the jsonpath test stays beside them. Each looks for a string's quoted
 * text, or a part of it.
 * - a bare term (any value) equal to a string: the string, quoted, is in the text (`"Globex"`);
 *   a term with a path has the jsonpath index, and one that also matches a number or a boolean
 *   (`50`, `true`) may match a value the text does not hold, so none of them gets one;
 * - a wildcard term: each literal run between its wildcards, the first after the opening quote
 *   unless the term starts with a wildcard, the last before the closing quote unless it ends with
 *   one. One pattern per run rather than one for the whole term: the planner estimates how many
 *   rows each matches far better than a pattern of several runs, and the index serves both alike;
 * - a range of strings with both bounds: every string between them starts with their common
 *   prefix (jsonpath compares strings by code point).
 */
export function textPatterns(path: string[] | null, test: Test): string[] {
  const like = (s: string) => likeLiteral(jsonText(s));
  switch (test.type) {
    case "equals":
      if (path !== null || test.number !== undefined || test.boolean !== undefined) return [];
      return narrows([test.string]) ? [`%"${like(test.string)}"%`] : [];
    case "wildcard": {
      const last = test.literals.length - 1;
      return test.literals.flatMap((literal, i) =>
        narrows([literal])
          ? [
              `%${i === 0 && !test.open.start ? '"' : ""}${like(literal)}${
                i === last && !test.open.end ? '"' : ""
              }%`,
            ]
          : [],
      );
    }
    case "range": {
      const { lower, upper } = test;
      if (typeof lower?.value !== "string" || typeof upper?.value !== "string") return [];
      const prefix = commonPrefix(lower.value, upper.value);
      return narrows([prefix]) ? [`%"${like(prefix)}%`] : [];
    }
    case "exists":
      return [];
  }
}

/** Whether exprToSql with patterns on gives the expression a trigram pattern (textPatterns). */
export function usesPatterns(e: Expr): boolean {
  switch (e.kind) {
    case "all":
      return false;
    case "match":
      return textPatterns(e.path, e.test).length > 0;
    case "not":
      return usesPatterns(e.item);
    case "and":
    case "or":
      return e.items.some(usesPatterns);
  }
}

/** An expression as a SQL condition on `parameters`; each jsonpath and pattern is a bound
 * parameter. */
export function exprToSql(e: Expr, options: { patterns: boolean }): RawBuilder<boolean> {
  switch (e.kind) {
    case "all":
      return sql<boolean>`true`;
    case "match": {
      const exact = sql<boolean>`parameters @? ${leafPath(e.path, e.test)}::jsonpath`;
      // Without the trigram index they only cost (and the planner, which cannot estimate them
      // well without its statistics, takes them for rare and scans the table).
      const patterns = options.patterns ? textPatterns(e.path, e.test) : [];
      if (patterns.length === 0) return sql<boolean>`(${exact})`;
      // SEARCH_TEXT is the trigram index's expression, written the same way. The planner
      // would multiply the patterns' selectivity by the jsonpath test's, as if independent, and
      // think a common term rare (then sort every match rather than walk the project's index in
      // order, stopping at the page): in coalesce (the same truth, as the test is never null
      // on a jsonb value) it counts the test as it counts any function, by half.
      return sql<boolean>`(${sql.join(
        patterns.map((p) => sql`${sql.raw(SEARCH_TEXT)} like ${p}`),
        sql` and `,
      )} and coalesce(${exact}, false))`;
    }
    case "not":
      return sql<boolean>`(not ${exprToSql(e.item, options)})`;
    case "and":
    case "or":
      return sql<boolean>`(${sql.join(
        e.items.map((item) => exprToSql(item, options)),
        sql.raw(e.kind === "and" ? " and " : " or "),
      )})`;
  }
}
