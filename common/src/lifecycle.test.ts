import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

// The policy is process-wide, so it is tried in a child process running the built module.
const lifecycle = pathToFileURL(
  path.resolve(fileURLToPath(import.meta.url), "../../dist/lifecycle.js"),
).href;
const logger = pathToFileURL(
  path.resolve(fileURLToPath(import.meta.url), "../../dist/logger.js"),
).href;

function runChild(body: string): Promise<{ code: number | null; lines: any[] }> {
  const script = `
    import { installProcessPolicy } from ${JSON.stringify(lifecycle)};
    import { createLogger } from ${JSON.stringify(logger)};
    installProcessPolicy(createLogger("policy-test"));
    ${body}`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
  return new Promise((resolve) =>
    child.on("exit", (code) =>
      resolve({
        code,
        lines: out
          .split("\n")
          .filter(Boolean)
          .map((l) => JSON.parse(l)),
      }),
    ),
  );
}

describe("the process policy", () => {
  it("logs an unhandled rejection at error level and keeps the process running", async () => {
    const { code, lines } = await runChild(`
      Promise.reject(new Error("nobody awaited this"));
      setTimeout(() => { console.log(JSON.stringify({ msg: "still running" })); }, 50);`);
    expect(code).toBe(0);
    expect(lines[0]).toMatchObject({
      level: 50,
      msg: "unhandled rejection (the process keeps running)",
      err: { message: "nobody awaited this" },
    });
    expect(lines[1]).toEqual({ msg: "still running" });
  });

  it("logs an uncaught exception as fatal and exits 1", async () => {
    const { code, lines } = await runChild(`
      setTimeout(() => { throw new Error("broken state"); }, 10);
      setTimeout(() => { console.log(JSON.stringify({ msg: "still running" })); }, 200);`);
    expect(code).toBe(1);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 60,
      msg: "uncaught exception: exiting",
      err: { message: "broken state" },
    });
  });
});
