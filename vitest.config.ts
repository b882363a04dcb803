import { defineConfig } from "vitest/config";

/**
 * unit: each service in memory (createRouterTransport, PGlite: a real PostgreSQL engine, in-process).
 * integration: the real PostgreSQL and NATS servers, the four processes, the embedded mode.
 * Both run against the built workspaces (`npm test` builds first).
 */
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          include: ["{common,gateway,embedded,testkit,services/*}/src/**/*.test.ts"],
          testTimeout: 20_000,
          // Starting PGlite (a whole PostgreSQL in WebAssembly) takes seconds, more on a busy CI.
          hookTimeout: 60_000,
        },
      },
      {
        test: {
          name: "integration",
          include: [
            "{common,gateway,embedded,testkit,services/*}/test/**/*.test.ts",
            "test/**/*.test.ts",
          ],
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
