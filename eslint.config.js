import tseslint from "typescript-eslint";

/** The workspaces' own code, built by their tsconfig.json (tests excluded). */
const source = [
  "{proto,common,gateway,embedded,testkit,services/*}/src/**/*.ts",
  "console/src/**/*.{ts,tsx}",
];
/** Tests and integration test support, type-checked by tsconfig.test.json. */
const tests = ["**/*.test.ts", "**/test/**/*.ts"];

export default tseslint.config(
  { ignores: ["**/dist/**", "**/node_modules/**", "proto/gen/**", "deploy/**", ".pies/**"] },
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-non-null-assertion": "off",
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_" },
      ],
    },
  },
  // Rules that need the types: a promise nobody awaits or handles loses its rejection.
  {
    files: [...source, ...tests],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
    },
  },
  {
    files: tests,
    // The console's tests are type-checked with the console (console/tsconfig.json: the DOM).
    ignores: ["console/**"],
    languageOptions: {
      parserOptions: { projectService: false, project: "./tsconfig.test.json" },
    },
  },
  // Production code says why a value is there instead of asserting it (tests may assert).
  {
    files: source,
    ignores: [...tests, "testkit/src/**"],
    rules: { "@typescript-eslint/no-non-null-assertion": "error" },
  },
);
