import {
  getQuickJS,
  shouldInterruptAfterDeadline,
  type QuickJSWASMModule,
} from "quickjs-emscripten";

export interface SandboxLimits {
  /** Wall-clock budget of one render. */
  timeoutMs: number;
  memoryBytes: number;
}

export class TemplateError extends Error {}

// Runs inside QuickJS. The data's keys that can be parameter names become variables of the
// template; the template is the body of a function, or, when it has no `return`, the inside of a
// template literal (`Summarise ${text}`).
const PRELUDE = `
const __names = Object.keys(__data).filter((k) => {
  try { new Function(k, ""); return true; } catch { return false; }
});
const __fn = new Function(...__names, __body);
const __out = __fn(...__names.map((k) => __data[k]));
typeof __out === "string" ? __out : JSON.stringify(__out);
`;

const asTemplateLiteral = (content: string) =>
  "return `" + content.replace(/\\?`/g, (m) => (m === "`" ? "\\`" : m)) + "`;";

/**
 * Renders `jst` templates in QuickJS compiled to WebAssembly: a template sees only its input data
 * and the standard JavaScript built-ins (no `process`, `require`, file system, network or host
 * globals), within a memory limit and a time limit, in a runtime of its own that is discarded after
 * each render.
 */
export class JstSandbox {
  private constructor(
    private readonly quickjs: QuickJSWASMModule,
    private readonly limits: SandboxLimits,
  ) {}

  static async create(limits: SandboxLimits): Promise<JstSandbox> {
    return new JstSandbox(await getQuickJS(), limits);
  }

  render(content: string, data: Record<string, unknown>): string {
    const body = /\breturn\b/.test(content) ? content : asTemplateLiteral(content);
    const runtime = this.quickjs.newRuntime({
      memoryLimitBytes: this.limits.memoryBytes,
      maxStackSizeBytes: 512 * 1024,
      interruptHandler: shouldInterruptAfterDeadline(Date.now() + this.limits.timeoutMs),
    });
    const vm = runtime.newContext();
    try {
      const code =
        `const __data = JSON.parse(${JSON.stringify(JSON.stringify(data))});\n` +
        `const __body = ${JSON.stringify(body)};\n` +
        PRELUDE;
      const result = vm.evalCode(code, "template.js");
      if (result.error) {
        const error = vm.dump(result.error) as { name?: string; message?: string } | string;
        result.error.dispose();
        throw new TemplateError(describe(error, this.limits.timeoutMs));
      }
      const value = vm.dump(result.value);
      result.value.dispose();
      return typeof value === "string" ? value : String(value);
    } finally {
      vm.dispose();
      runtime.dispose();
    }
  }
}

function describe(error: { name?: string; message?: string } | string, timeoutMs: number): string {
  if (typeof error === "string") return error;
  if (error.name === "InternalError" && error.message === "interrupted") {
    return `template did not finish within ${timeoutMs} ms`;
  }
  if (error.message === "out of memory" || error.name === "out of memory") {
    return "template exceeded its memory limit";
  }
  return `${error.name ?? "Error"}: ${error.message ?? "template failed"}`;
}
