import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { repoRoot } from "@pies/testkit";

// Issue 27's budget: the console's first load (its scripts and styles, gzipped as the gateway
// serves them) stays within 250 KB; bench/console-size.mjs measures it and exits 1 past it.
describe("the console's first load", () => {
  it("is within its compressed size budget", () => {
    const run = spawnSync(process.execPath, ["bench/console-size.mjs"], {
      cwd: repoRoot,
      encoding: "utf8",
    });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/first load [\d.]+ KB gzipped, budget 250\.0 KB: within/);
  });
});
