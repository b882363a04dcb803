import type { QuickJSContext, QuickJSRuntime, QuickJSWASMModule } from "quickjs-emscripten";

export interface SandboxLimits {
  /** Wall-clock budget of one render. */
  timeoutMs: number;
  memoryBytes: number;
}

export type RenderOutcome = { ok: true; value: string } | { ok: false; message: string };

/**
 * A host failure inside QuickJS (not a template error): the WebAssembly instance can no longer be
 * trusted and the worker that holds it must be replaced.
 */
export class SandboxCorrupted extends Error {}

// Runs inside QuickJS. Data keys that are identifiers become the template's variables (an ASCII key
// is checked without the Unicode tables: compiling \p{ID_Start} costs more than the rest of a small
// render, so that regular expression is built only for a key that needs it). A template
// with a "return" in statement position (at the start of a line, or after ";", "{" or "}") is the
// body of a function; anything else is the inside of a template literal ("Summarise ${text}"), so
// prose that merely says "return" still renders as text. The output leaves as JSON: QuickJS hands
// strings to the host as C strings, which would end a string at its first NUL without a word.
const PRELUDE = `
let __unicodeName;
const __isName = (k) => {
  if (
    !/^[A-Za-z$_][\\w$]*$/.test(k) &&
    !(/[^\\x00-\\x7f]/.test(k) &&
      (__unicodeName ??= new RegExp("^[\\\\p{ID_Start}$_][\\\\p{ID_Continue}$\\\\u200C\\\\u200D]*$", "u")).test(k))
  ) return false;
  try { new Function(k, ""); return true; } catch { return false; }
};
const __names = Object.keys(__data).filter(__isName);
const __body = /(^|[;{}])\\s*return\\b/m.test(__content)
  ? __content
  : "return \`" + __content.replace(/\\\\?\`/g, (m) => m === "\`" ? "\\\\\`" : m) + "\`;";
const __fn = new Function(...__names, __body);
const __out = __fn(...__names.map((k) => __data[k]));
JSON.stringify(typeof __out === "string" ? __out : String(JSON.stringify(__out)));
`;

/**
 * A QuickJS runtime with one context, set up for one render before the render's template and data
 * are known: a worker prepares the next one while it waits for work, and disposes of the last one
 * after answering, so a render waits neither for QuickJS to build its built-ins nor to collect
 * them (most of a small template's cost). Renders once, then disposed.
 */
export interface PreparedSandbox {
  runtime: QuickJSRuntime;
  vm: QuickJSContext;
  limits: SandboxLimits;
  /** Read by the runtime's interrupt handler; set by the render that uses this sandbox. */
  clock: { deadline: number; interrupted: boolean };
  used: boolean;
}

/**
 * A fresh runtime (with a memory limit, a stack limit below the host's and an interrupt at the
 * deadline) and a fresh context in it, for one render. Nothing of an earlier render is in either:
 * globals, built-ins and their prototypes belong to the context, and pending promise jobs, memory
 * and garbage to the runtime.
 */
export function prepareSandbox(quickjs: QuickJSWASMModule, limits: SandboxLimits): PreparedSandbox {
  // QuickJS's interrupt cannot be caught by try/catch, but an async function or a Promise executor
  // turns it into a rejected promise and the template goes on to return. Once the interrupt has
  // fired, the render has failed, whatever the template makes of it.
  const clock = { deadline: Infinity, interrupted: false };
  const runtime = quickjs.newRuntime({
    memoryLimitBytes: limits.memoryBytes,
    // Below what the host stack leaves to WebAssembly, so QuickJS reports the overflow itself.
    maxStackSizeBytes: 256 * 1024,
    interruptHandler: () => (clock.interrupted ||= Date.now() > clock.deadline),
  });
  try {
    return { runtime, vm: runtime.newContext(), limits, clock, used: false };
  } catch (err) {
    runtime.dispose();
    throw err;
  }
}

/** Frees a sandbox's context and runtime (QuickJS collects what the render left there). */
export function disposeSandbox(sandbox: PreparedSandbox): void {
  sandbox.vm.dispose();
  sandbox.runtime.dispose();
}

/**
 * Renders one `jst` template in `sandbox` (see prepareSandbox), which the caller then disposes of
 * (disposeSandbox): a sandbox renders once. The template sees only its data and the JavaScript
 * built-ins.
 */
export function renderInQuickJS(
  sandbox: PreparedSandbox,
  content: string,
  data: unknown,
): RenderOutcome {
  const { vm, limits, clock } = sandbox;
  // Nothing of one render may reach the next: a context is never used twice.
  if (sandbox.used) throw new Error("a prepared QuickJS sandbox renders once");
  sandbox.used = true;
  // The clock starts now that the runtime is set up: that is the sandbox's cost, not the
  // template's (on a loaded machine a fresh worker's first runtime can take tens of milliseconds).
  clock.deadline = Date.now() + limits.timeoutMs;
  let result: ReturnType<typeof vm.evalCode>;
  try {
    result = vm.evalCode(
      `const __data = JSON.parse(${JSON.stringify(JSON.stringify(data))});\n` +
        `const __content = ${JSON.stringify(content)};\n` +
        PRELUDE,
      "template.js",
    );
  } catch (err) {
    throw new SandboxCorrupted(String(err));
  }
  if (clock.interrupted) {
    result.dispose();
    return { ok: false, message: timedOut(limits.timeoutMs) };
  }
  if (result.error) {
    const error = vm.dump(result.error) as { name?: string; message?: string } | string;
    result.error.dispose();
    return { ok: false, message: describe(error, limits.timeoutMs) };
  }
  const value = vm.dump(result.value);
  result.value.dispose();
  return {
    ok: true,
    value: typeof value === "string" ? (JSON.parse(value) as string) : String(value),
  };
}

function describe(error: { name?: string; message?: string } | string, timeoutMs: number): string {
  if (typeof error === "string") return error;
  if (error.name === "InternalError" && error.message === "interrupted") {
    return timedOut(timeoutMs);
  }
  if (error.message === "out of memory" || error.name === "out of memory") {
    return "template exceeded its memory limit";
  }
  return `${error.name ?? "Error"}: ${error.message ?? "template failed"}`;
}

/** The one error of a template stopped at its time limit, however it was stopped. */
const timedOut = (timeoutMs: number) => `template did not finish within ${timeoutMs} ms`;
