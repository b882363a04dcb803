// Runs vitest (arguments are passed on) and ends with the plain summary line
// "N passed, N failed, N skipped" that CI reads, keeping vitest's exit code.
//
// Every process the tests start (testkit's startProcess) also writes its whole output into a
// directory of this run; afterwards every log line in it (pino's JSON lines) is searched for
// secrets: a pies API key (`sk-` + 43 base62), a provider key the tests use (`sk-upstream…`,
// `sk-leak-canary…`, …) or an internal credential. One found fails the run, naming the file.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const dir = mkdtempSync(path.join(tmpdir(), "pies-vitest-"));
const report = path.join(dir, "report.json");
const logs = path.join(dir, "logs");
mkdirSync(logs);
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
  { stdio: "inherit", env: { ...process.env, PIES_TEST_LOG_DIR: logs } },
);
let code = result.status ?? 1;

/** What must never be in a log line. */
const SECRETS = [
  [/\bsk-[0-9A-Za-z]{43}\b/, "a pies API key"],
  [/\bsk-(upstream|leak-canary|bench-upstream|stored-secret|new-key)[\w-]*/, "a provider key"],
  [/\bBearer\s+[A-Za-z0-9._~+/=-]{20,}/, "a bearer credential"],
];
try {
  let lines = 0;
  const found = [];
  for (const file of readdirSync(logs)) {
    for (const line of readFileSync(path.join(logs, file), "utf8").split("\n")) {
      // Log lines only (pino writes JSON); the embedded mode's banner prints the user's own key.
      if (!line.startsWith("{")) continue;
      lines++;
      for (const [pattern, what] of SECRETS) {
        if (pattern.test(line)) found.push(`${file}: ${what}: ${line.slice(0, 300)}`);
      }
    }
  }
  if (found.length > 0) {
    console.error(`\nsecrets in the processes' logs:\n${found.slice(0, 20).join("\n")}`);
    code = code || 1;
  } else {
    console.log(
      `\nlogs: ${lines} log lines of the started processes, no key or credential in them`,
    );
  }
} catch (err) {
  console.error(`the processes' logs could not be searched: ${err.message}`);
  code = code || 1;
}
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
