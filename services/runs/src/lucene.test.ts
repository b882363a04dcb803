import { describe, expect, it } from "vitest";
import { parseQuery, textPatterns, type Expr, type Test } from "./lucene.js";

const term = (string: string, path: string[] | null = null): Expr => ({
  kind: "match",
  path,
  test: { type: "equals", string },
});
const not = (item: Expr): Expr => ({ kind: "not", item });
const and = (...items: Expr[]): Expr => ({ kind: "and", items });
const or = (...items: Expr[]): Expr => ({ kind: "or", items });

/** The 400's message of a query that is refused. */
function refusal(query: string): string {
  try {
    parseQuery(query);
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error(`${query} was not refused`);
}

describe("operators touching a parenthesis", () => {
  it.each<[string, Expr]>([
    ["NOT(x:a)", not(term("a", ["x"]))],
    ["a OR(b)", or(term("a"), term("b"))],
    ["a AND(b)", and(term("a"), term("b"))],
    ["(a)AND(b)", and(term("a"), term("b"))],
    ["(a)&&(b)", and(term("a"), term("b"))],
    ["(a)||(b)", or(term("a"), term("b"))],
    ["(a)OR b", or(term("a"), term("b"))],
    ["a AND NOT(b)", and(term("a"), not(term("b")))],
    ["(a)AND NOT(b)", and(term("a"), not(term("b")))],
    ["x:(a OR(b))", or(term("a", ["x"]), term("b", ["x"]))],
    ["(NOT(a))", not(term("a"))],
  ])("reads %s as the operator", (query, expected) => {
    expect(parseQuery(query)).toEqual(expected);
  });

  it.each([
    // Positions are in the query as written (the grammar's text has spaces added).
    ["(a)AND", "AND with nothing after it at position 6"],
    ["(a)AND(b", "unexpected end of query at position 8"],
    ["(a)&&(b", "unexpected end of query at position 7"],
    ["(a)||(b", "unexpected end of query at position 7"],
    ["a || b AND (", "unexpected end of query at position 12"],
    ["(a)AND()", 'unexpected ")" at position 7'],
    ["(a)AND(AND b)", "AND with nothing before it at position 7"],
    ["(a)OR(b)OR OR c", "OR right after OR at position 11"],
  ])("answers %s with a 400 naming the position in the query", (query, message) => {
    expect(refusal(query)).toContain(message);
  });
});

describe("two signs in a row", () => {
  it.each([
    ["!!a", /"!" right after "!" .* at position 1$/],
    ["--a", /"-" right after "-" .* at position 1$/],
    ["!-a", /"-" right after "!" .* at position 1$/],
    ["+-a", /"-" right after "\+" .* at position 1$/],
    ["x:a --y:b", /"-" right after "-" .* at position 5$/],
    ["x:a -!y:(b)", /"!" right after "-" .* at position 5$/],
    ["(a)AND --b", /"-" right after "-" .* at position 8$/],
  ])("answers %s with a 400 naming the second sign", (query, message) => {
    expect(refusal(query)).toMatch(message);
  });

  it("reads an escaped or quoted second sign as part of the term", () => {
    expect(parseQuery("-\\-a")).toEqual(not(term("-a")));
    expect(parseQuery('-"-a"')).toEqual(not(term("-a")));
    expect(parseQuery("-a")).toEqual(not(term("a")));
  });
});

describe("textPatterns", () => {
  type Equals = Extract<Test, { type: "equals" }>;
  const equals = (string: string): Equals => ({ type: "equals", string });
  it.each<[string, string[] | null, Test, string[]]>([
    ["a bare string, quoted", null, equals("Globex"), ['%"Globex"%']],
    ["LIKE's % and _ escaped", null, equals("abc%_d"), ['%"abc\\%\\_d"%']],
    // jsonb writes a backslash as \\ and LIKE reads each written backslash from \\.
    ["a backslash, JSON's then LIKE's", null, equals("abc\\d"), ['%"abc\\\\\\\\d"%']],
    ["a quote, as JSON writes it", null, equals('q"xyz'), ['%"q\\\\"xyz"%']],
    ["a control character, as JSON writes it", null, equals("xyz\u0001"), ['%"xyz\\\\u0001"%']],
    // The boolean it also matches is not in the text (SEARCH_TEXT holds the strings only).
    ["none for true", null, { ...equals("true"), boolean: true }, []],
    ["none for a number", null, { ...equals("12345"), number: 12345 }, []],
    ["none with a path (the jsonpath index serves it)", ["a"], equals("Globex"), []],
    ["none for fewer than three letters in a row", null, equals("ab"), []],
  ])("%s", (_, path, test, expected) => {
    expect(textPatterns(path, test)).toEqual(expected);
  });

  it.each([
    ["xyz*", ['%"xyz%']],
    ["*zyx", ['%zyx"%']],
    ["*yzz*", ["%yzz%"]],
    ["abc%*", ['%"abc\\%%']],
    ["*c_d", []],
    ["xyz*_abc", ['%"xyz%', '%\\_abc"%']],
    ["ab?c*", []],
  ])("the literal runs of the wildcard term %s", (term, expected) => {
    const test = parseQuery(term);
    expect(test?.kind).toBe("match");
    const leaf = test as Extract<Expr, { kind: "match" }>;
    expect(textPatterns(leaf.path, leaf.test)).toEqual(expected);
  });

  it("the common prefix of a string range's bounds", () => {
    const range = (lo: string, hi: string): Test => ({
      type: "range",
      lower: { value: lo, inclusive: true },
      upper: { value: hi, inclusive: false },
    });
    expect(textPatterns(["a"], range("abc_%x", "abc_%z"))).toEqual(['%"abc\\_\\%%']);
    expect(textPatterns(["a"], range("abcd", "abce"))).toEqual(['%"abc%']);
    expect(textPatterns(["a"], range("ab", "ac"))).toEqual([]);
  });
});
