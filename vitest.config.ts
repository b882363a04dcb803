import { availableParallelism } from "node:os";
import { configDefaults, defineConfig } from "vitest/config";

/**
 * unit: each service in memory (createRouterTransport, PGlite: a real PostgreSQL engine, in-process).
 * integration: the real PostgreSQL and NATS servers, the four processes, the embedded mode.
 * steady-state: test/steady-state.test.ts, a mixed load held for two minutes whose throughput is
 * compared between two windows; it runs after the others (groupOrder), alone, so that no other test
 * file takes the machine's CPU in one window and not in the other.
 * All run against the built workspaces (`npm test` builds first).
 * One test file per core at a time (vitest's default leaves a core free: one file at a time on a
 * 2-core machine), as most of a file's time is spent waiting on the processes and servers it
 * started, and four at most: each file's processes hold connections of the one PostgreSQL server
 * (docs/decisions/0072-test-files-one-per-core.md).
 */
export default defineConfig({
  test: {
    maxWorkers: Math.min(availableParallelism(), 4),
    projects: [
      {
        test: {
          name: "unit",
          sequence: { groupOrder: 0 },
          include: [
            "{common,gateway,embedded,testkit,services/*}/src/**/*.test.ts",
            "console/src/**/*.test.ts",
          ],
          testTimeout: 20_000,
          // Starting PGlite (a whole PostgreSQL in WebAssembly) takes seconds, more on a busy CI.
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: "integration",
          sequence: { groupOrder: 0 },
          include: [
            "{common,gateway,embedded,testkit,services/*}/test/**/*.test.ts",
            "test/**/*.test.ts",
          ],
          exclude: [...configDefaults.exclude, "test/steady-state.test.ts"],
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
      {
        test: {
          name: "steady-state",
          sequence: { groupOrder: 1 },
          include: ["test/steady-state.test.ts"],
          fileParallelism: false,
          testTimeout: 200_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
