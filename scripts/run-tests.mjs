// Runs vitest (arguments are passed on) and ends with the plain summary line
// "N passed, N failed, N skipped" that CI reads, keeping vitest's exit code.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const dir = mkdtempSync(path.join(tmpdir(), "pies-vitest-"));
const report = path.join(dir, "report.json");
const result = spawnSync(
  "npx",
  [
    "vitest",
    "run",
    "--reporter=default",
    "--reporter=json",
    `--outputFile.json=${report}`,
    ...process.argv.slice(2),
  ],
  { stdio: "inherit" },
);
let code = result.status ?? 1;
try {
  const r = JSON.parse(readFileSync(report, "utf8"));
  const skipped = r.numPendingTests + r.numTodoTests;
  console.log(
    `\ntests: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`,
  );
  if (r.numTotalTests === 0) {
    console.error("no test ran");
    code = 1;
  }
} catch {
  process.stdout.write("\ntests: 0 passed, 1 failed\n");
  code = code || 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exitCode = code;
