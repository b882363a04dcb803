import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { renderFast } from "./jst-fast.js";
import { JstSandbox } from "./jst.js";

// A generous time limit: the sandbox side of the comparison must not time out on a busy machine.
const LIMITS = { timeoutMs: 2000, memoryBytes: 16 * 1024 * 1024 };

let sandbox: JstSandbox;
beforeAll(async () => {
  sandbox = await JstSandbox.create(LIMITS, 2);
});
afterAll(() => sandbox.close());

type Outcome = { ok: true; value: string } | { ok: false; error: string };

/** What the real QuickJS sandbox makes of a template, however it ends. */
const inSandbox = (content: string, data: Record<string, unknown>): Promise<Outcome> =>
  sandbox.renderInSandbox(content, data).then(
    (value) => ({ ok: true, value }),
    (err: unknown) => ({ ok: false, error: String(err) }),
  );

/** What render() gives (the fast path when it applies, else the sandbox). */
const rendered = (content: string, data: Record<string, unknown>): Promise<Outcome> =>
  sandbox.render(content, data).then(
    (value) => ({ ok: true, value }),
    (err: unknown) => ({ ok: false, error: String(err) }),
  );

/** Templates the fast path renders (with data that has their variables as plain JSON). */
const FAST = [
  "return `Summarise ${text}`",
  "return `Summarise ${text}`;",
  "  \n\treturn \t`Summarise ${text}` ;  \n\n",
  "return`${text}`",
  "Summarise ${text}",
  "Summarise ${text} in ${count} words",
  "Just text.",
  "",
  "${text}${text}${count}",
  "Say `hi` to ${name}, `twice`",
  "Read ${doc} and return a list of ${count} items",
  "Escapes: \\n \\t \\r \\b \\f \\v \\0 \\' \\\" \\\\ \\a \\$ \\{ \\} \\x41 \\u00e9 \\u{1F600} \\u{000041} \\u{10FFFF} ${text}",
  "return `\\` \\${text} \\u{1F600}`",
  "line\\\ncontinued\\\r\ncrlf\\\rcr\\\u2028ls\\\u2029ps ${text}",
  "crlf\r\nand cr\rand lf\n${text}",
  "return `crlf\r\nin a body`",
  "raw ls \u2028 ps \u2029 bom \ufeff nbsp \u00a0 ${text}",
  "é ✓ 😀 \ud83d\ude00 ${text}",
  "${ text } ${\ttext\n} ${\r\ntext\r\n}",
  "a\\`${text}\\`",
  "price: \\${text} and $ {text} and $text and $${text} and ${text}$",
  "${obj} ${arr} ${nested} ${emptyArr}|${emptyObj} ${objInArr}",
  "${n} ${f} ${b} ${z} ${big} ${neg0} ${tiny} ${huge} ${small} ${negExp} ${int}",
  "${nan} ${inf} ${numbers}",
  "${__proto__} ${constructor} ${toString} ${hasOwnProperty} ${valueOf}",
  "${undefined} ${NaN} ${Infinity}",
  "${_$} ${$} ${_} ${__data} ${__content} ${__fn}",
  "${lone} ${pair}",
  "${nul}",
  "${quotes}",
  "${objWithValueOf}",
];

/** Templates the fast path leaves to the sandbox, whatever the data. */
const SANDBOX = [
  "return `${text.toUpperCase()}`",
  "Name: ${user.name}",
  "${obj['a']}",
  "${count + 1}",
  "${count * 2} items",
  "${text, text}",
  "${(text)}",
  "return tag`${text}`",
  "return `${`${text}`}`",
  "return `a` + `b`",
  "return `${text}`.length",
  "return `${text}` + text",
  "// a comment\nreturn `${text}`",
  "return /* c */ `${text}`",
  "return\n`${text}`",
  "return `${text}`\n;`more`",
  "return `${text}`;;",
  "return `x` `${text}`",
  "return `${text}`; return 'other'",
  "const x = 1; return `${text}`",
  "${missing}",
  "${process}",
  "${globalThis}",
  "${arguments}",
  "${eval}",
  "${let}",
  "${yield}",
  "${class}",
  "${é}",
  "${\u00e9t\u00e9}",
  "${text",
  "cost ${}",
  "${ text /* c */ }",
  "Value: ${typeof text}",
  "${text}\nreturn 1",
  "a\\\\`${text}",
  "\\1 ${text}",
  "\\08 ${text}",
  "\\8 ${text}",
  "bad \\x4 ${text}",
  "bad \\u12 ${text}",
  "bad \\u{110000} ${text}",
  "bad \\u{} ${text}",
  "\\u{1F600",
  "${text}\u2028return `${text}`",
];

const lone = "x\ud800y\udc00z";
/** Plain JSON data with the variables of FAST, and tricky values. */
const PLAIN: Record<string, unknown> = {
  ...(JSON.parse('{"__proto__": "own proto key"}') as Record<string, unknown>),
  text: "the news",
  count: 3,
  name: "Ada",
  doc: "it",
  obj: { a: 1 },
  arr: [1, "b", null, [2, [3, null]], {}, true, -0, 1e21],
  nested: [[1, 2], [3, [4, [5]]], [], [[]]],
  emptyArr: [],
  emptyObj: {},
  objInArr: [{ a: 1 }, [{ b: 2 }]],
  n: 1e21,
  f: 0.1 + 0.2,
  b: false,
  z: null,
  big: 123456789012345680000,
  neg0: -0,
  tiny: 5e-324,
  huge: Number.MAX_VALUE,
  small: 1e-7,
  negExp: -1.5e-10,
  int: 9007199254740993,
  nan: NaN,
  inf: -Infinity,
  numbers: [NaN, Infinity, 0.000001, 1e-6, 123e20, 2 ** 53],
  constructor: "own constructor",
  toString: "own toString",
  hasOwnProperty: "own hasOwnProperty",
  valueOf: 7,
  undefined: "own undefined",
  NaN: "own NaN",
  Infinity: "own Infinity",
  _$: "u$",
  $: "dollar",
  _: "underscore",
  __data: "own __data",
  __content: "own __content",
  __fn: "own __fn",
  lone,
  pair: "\ud83d\ude00",
  nul: "a\0b",
  quotes: "`${injected}` \\ \" ' </script> \n\r\t \u2028 \u0001",
  objWithValueOf: { valueOf: 1 },
  withToString: { toString: "x" },
  arrWithObjWithToString: [1, { toString: 1 }],
  let: "let",
  yield: "yield",
  eval: "eval",
  arguments: "arguments",
  "first-name": "not an identifier",
  é: "accented",
  été: "summer",
  user: { name: "Grace" },
};

/** The same keys with values of other types. */
const OTHER_TYPES: Record<string, unknown> = {
  ...Object.fromEntries(Object.keys(PLAIN).map((k, i) => [k, [i, `${k}`, [null, i / 7]]])),
  text: { k: [1, { a: null }] },
  count: [[[[]]]],
  name: [null, null],
  obj: [{}],
};

const sameKeysAsStrings = Object.fromEntries(Object.keys(PLAIN).map((k) => [k, `<${k}>`]));

/** Random doubles, every exponent: their text must be QuickJS's, after a JSON round trip. */
function randomNumbers(count: number, seed: number): number[] {
  let state = seed;
  const next = () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0);
  const view = new DataView(new ArrayBuffer(8));
  return Array.from({ length: count }, (_, i) => {
    view.setUint32(0, next());
    view.setUint32(4, next());
    const bits = view.getFloat64(0);
    // Every third a "round" number, the others anything a double can be.
    return i % 3 === 0 ? Math.round(bits % 1e6) / 10 ** (i % 9) : bits;
  });
}

const DATA: [string, Record<string, unknown>][] = [
  ["plain", PLAIN],
  ["empty", {}],
  ["other types", OTHER_TYPES],
  ["strings", sameKeysAsStrings],
  ["non-ASCII", { text: "é ✓ 😀 \u{10FFFF} ﻿", count: "٣", name: lone, doc: "\u0000" }],
];

describe("jst fast path", () => {
  it("gives the sandbox's output for a corpus of templates and data (or leaves it to the sandbox)", async () => {
    let fast = 0;
    for (const content of [...FAST, ...SANDBOX]) {
      for (const [label, data] of DATA) {
        const viaSandbox = await inSandbox(content, data);
        const out = renderFast(content, data, LIMITS);
        if (out !== undefined) {
          fast++;
          expect({ content, label, out: { ok: true, value: out } }).toEqual({
            content,
            label,
            out: viaSandbox,
          });
        }
        expect({ content, label, out: await rendered(content, data) }).toEqual({
          content,
          label,
          out: viaSandbox,
        });
      }
    }
    // Every FAST template took the fast path with the plain data (and others where they could).
    expect(fast).toBeGreaterThanOrEqual(FAST.length * 2);
  });

  it("takes the fast path for every FAST template with plain data, and never for SANDBOX ones", () => {
    expect(FAST.filter((content) => renderFast(content, PLAIN, LIMITS) === undefined)).toEqual([]);
    for (const [, data] of DATA) {
      expect(SANDBOX.filter((content) => renderFast(content, data, LIMITS) !== undefined)).toEqual(
        [],
      );
    }
  });

  it("turns numbers into the sandbox's text, whatever their exponent", async () => {
    const numbers = randomNumbers(600, 7);
    for (let start = 0; start < numbers.length; start += 200) {
      const slice = numbers.slice(start, start + 200);
      const data: Record<string, unknown> = {
        ...Object.fromEntries(slice.map((n, i) => [`n${i}`, n])),
        all: slice,
      };
      const content = slice.map((_, i) => `\${n${i}}`).join(" ") + " | ${all}";
      const out = renderFast(content, data, LIMITS);
      expect(out).toBeDefined();
      expect({ ok: true, value: out }).toEqual(await inSandbox(content, data));
    }
  });

  it("leaves data that is not plain JSON to the sandbox, which sees it through JSON", async () => {
    const template = "Value: ${text}";
    const sparse: number[] = [];
    sparse[0] = 1;
    sparse[2] = 3;
    const cases: Record<string, unknown>[] = [
      { text: undefined },
      { text: new Date(0) },
      { text: new Map([[1, 2]]) },
      { text: sparse },
      { text: "x", other: [undefined] },
      { text: "x", other: { toJSON: "not a function", k: 1 } },
      { text: { toJSON: "not a function" } },
      { text: Object.create({ inherited: 1 }) as unknown },
      { text: "x".repeat(LIMITS.memoryBytes / 32) },
    ];
    for (const data of cases) {
      expect(renderFast(template, data, LIMITS)).toBeUndefined();
      expect(await rendered(template, data)).toEqual(await inSandbox(template, data));
    }
    // An object with an own toString key cannot be made text in the sandbox (TypeError).
    for (const content of ["${withToString}", "${arrWithObjWithToString}"]) {
      expect(renderFast(content, PLAIN, LIMITS)).toBeUndefined();
      const viaSandbox = await inSandbox(content, PLAIN);
      expect(viaSandbox).toMatchObject({ ok: false, error: expect.stringMatching(/TypeError/) });
      expect(await rendered(content, PLAIN)).toEqual(viaSandbox);
    }
    // A key that JSON (and the worker's copy) leaves out is no variable.
    const hidden = Object.defineProperty({ text: "x" }, "hidden", {
      value: "h",
      enumerable: false,
    });
    expect(renderFast("${hidden}", hidden, LIMITS)).toBeUndefined();
    expect(await rendered("${hidden}", hidden)).toEqual(await inSandbox("${hidden}", hidden));
    // Inherited keys are not variables: none of these is a data key here.
    for (const content of ["${toString}", "${constructor}", "${__proto__}", "${hasOwnProperty}"]) {
      expect(renderFast(content, { text: "x" }, LIMITS)).toBeUndefined();
      expect(await rendered(content, { text: "x" })).toEqual(
        await inSandbox(content, { text: "x" }),
      );
    }
  });

  it("renders large plain data below its size bound the same way (the sandbox has memory to spare)", async () => {
    // The worst case for the sandbox's copies: two-byte characters and JSON escapes.
    const text = '✓"\\\n'.repeat(LIMITS.memoryBytes / 32 / 4 - 64);
    const content = "return `${text}|${text}`";
    const out = renderFast(content, { text }, LIMITS);
    expect(out).toBe(`${text}|${text}`);
    expect(await inSandbox(content, { text })).toEqual({ ok: true, value: out });
  });

  it("sends only what it cannot prove to a worker", async () => {
    const spy = vi.spyOn(sandbox, "renderInSandbox");
    try {
      for (const content of FAST) await sandbox.render(content, PLAIN);
      expect(spy).not.toHaveBeenCalled();
      for (const content of SANDBOX) await sandbox.render(content, PLAIN).catch(() => undefined);
      expect(spy).toHaveBeenCalledTimes(SANDBOX.length);
      expect(spy.mock.calls.map(([content]) => content)).toEqual(SANDBOX);
    } finally {
      spy.mockRestore();
    }
  });
});
