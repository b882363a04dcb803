// The container image's file tree, built the way the Dockerfile builds it, and proof that it is
// enough to run pies.
//
//   node scripts/image-tree.mjs assemble <dir>   what the Dockerfile's build stage runs: copies each
//                                                 runtime workspace's package.json and dist/, then
//                                                 installs production dependencies only (npm ci
//                                                 --omit=dev, no install scripts)
//   node scripts/image-tree.mjs check            assembles into a temporary directory outside the
//                                                 repository (so nothing resolves from its
//                                                 node_modules), checks what it holds, starts the
//                                                 four processes from it against PostgreSQL and
//                                                 NATS, executes blocking and streamed through the
//                                                 gateway, and removes it
//
// `npm run check:image` builds first, then runs `check` (CI runs it).
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = path.resolve(fileURLToPath(import.meta.url), "../..");

/** The workspaces the image runs (testkit is for tests and benches only). */
export const runtimeWorkspaces = [
  "proto",
  "common",
  "services/catalog",
  "services/runs",
  "services/executor",
  "gateway",
  // The web console: only its built files (dist/), which the gateway serves; its dependencies
  // are build-time ones (devDependencies), so none is installed here.
  "console",
  "embedded",
];

/** Packages that must never be in the image: the build and test tool chain. */
const devOnly = ["typescript", "vitest", "eslint", "prettier", "@bufbuild/buf", "@pies/testkit"];

function assemble(target) {
  mkdirSync(target, { recursive: true });
  for (const file of ["package.json", "package-lock.json"]) {
    cpSync(path.join(repoRoot, file), path.join(target, file));
  }
  for (const workspace of runtimeWorkspaces) {
    const from = path.join(repoRoot, workspace);
    if (!existsSync(path.join(from, "dist"))) {
      throw new Error(`${workspace}/dist is missing: run \`npm run build\` first`);
    }
    mkdirSync(path.join(target, workspace), { recursive: true });
    cpSync(path.join(from, "package.json"), path.join(target, workspace, "package.json"));
    cpSync(path.join(from, "dist"), path.join(target, workspace, "dist"), {
      recursive: true,
      // Build bookkeeping and compiled tests are not part of what runs.
      filter: (source) => !/\.tsbuildinfo$|\.test\.(js|d\.ts)(\.map)?$/.test(source),
    });
  }
  // npm ci with the lockfile: the exact versions tested; --ignore-scripts: nothing runs at install.
  execFileSync(
    "npm",
    ["ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
    { cwd: target, stdio: ["ignore", "ignore", "inherit"] },
  );
}

function sizeOf(dir) {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) total += sizeOf(full);
    else if (entry.isFile()) total += statSync(full).size;
  }
  return total;
}

async function check() {
  const tree = mkdtempSync(path.join(tmpdir(), "pies-image-"));
  const testkit = await import("@pies/testkit");
  let db;
  let stream;
  let stack;
  /** A blocking and a streamed execution through the stack started from the tree, then its stop. */
  async function exercise(name) {
    for (const p of stack.processes) {
      const script = p.child.spawnargs.at(-1);
      if (!script.startsWith(tree)) throw new Error(`${p.name} runs ${script}, not from the tree`);
    }
    const api = testkit.gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
    const json = (response, status) => testkit.expectJson(response, status, () => stack.output());
    const prompt = await json(
      await api("/prompts", {
        body: {
          name: name.toLowerCase(),
          role: "user",
          content_type: "jst",
          content: "return `Say ${word}`",
          inputSchema: { type: "object", properties: { word: { type: "string" } } },
        },
      }),
      201,
    );
    const interaction = await json(
      await api("/interactions", {
        body: {
          name,
          environment: stack.bootstrap.environment,
          prompts: [{ type: "template", template: prompt.id }],
        },
      }),
      201,
    );
    const blocking = await json(
      await api(`/interactions/${interaction.id}/execute`, { body: { data: { word: "hi" } } }),
      200,
    );
    if (blocking.status !== "completed") throw new Error(`blocking run: ${blocking.status}`);
    await json(await api(`/runs/${blocking.id}`), 200);
    const answer = await api("/runs", {
      body: { interaction: interaction.id, stream: true, data: { word: "yo" } },
    });
    const created = await json(answer, answer.ok ? answer.status : 201);
    const events = await testkit.readSse(await api(`/runs/${created.id}/stream`));
    const close = events.find((e) => e.event === "close");
    if (!close || JSON.parse(close.data).status !== "completed") {
      throw new Error(`streamed run did not complete: ${JSON.stringify(events).slice(0, 500)}`);
    }
    // The gateway serves the console from the tree: its page and the script that page loads.
    const page = await fetch(`${stack.gatewayUrl}/`);
    const html = await page.text();
    const script = /src="(\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    if (!page.ok || !page.headers.get("content-security-policy") || !script) {
      throw new Error(`the console is not served: ${page.status} ${html.slice(0, 200)}`);
    }
    const asset = await fetch(`${stack.gatewayUrl}${script}`);
    if (!asset.ok) throw new Error(`the console's ${script} is not served: ${asset.status}`);
    const codes = await stack.stop();
    stack = undefined;
    if (Object.values(codes).some((code) => code !== 0)) {
      throw new Error(`processes did not exit cleanly: ${JSON.stringify(codes)}`);
    }
  }
  try {
    const started = Date.now();
    assemble(tree);
    const present = devOnly.filter((name) => existsSync(path.join(tree, "node_modules", name)));
    if (present.length) throw new Error(`the image would hold dev packages: ${present.join(", ")}`);
    if (existsSync(path.join(tree, "testkit"))) throw new Error("the image would hold testkit");
    console.log(
      `image tree: ${(sizeOf(tree) / 1e6).toFixed(0)} MB in ${tree}, assembled in ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );

    db = await testkit.createTestDatabase("image");
    stream = testkit.createTestStream();
    // The four processes, then the edge (gateway.embedExecutor in the chart) with catalog and runs.
    for (const edge of [false, true]) {
      stack = await testkit.startStack({
        databaseUrl: db.url,
        natsEnv: stream.env,
        root: tree,
        edge,
      });
      await exercise(edge ? "EdgeCheck" : "ImageCheck");
    }
    console.log(
      "image tree: catalog, runs, executor and gateway, then the edge, started from it; blocking and streamed executions completed; clean shutdown",
    );
  } finally {
    await stack?.stop().catch(() => {});
    await stream?.remove().catch(() => {});
    await db?.drop().catch(() => {});
    rmSync(tree, { recursive: true, force: true });
  }
}

const [command, target] = process.argv.slice(2);
if (command === "assemble" && target) {
  assemble(path.resolve(target));
} else if (command === "check") {
  await check();
} else {
  console.error("usage: node scripts/image-tree.mjs assemble <dir> | check");
  process.exitCode = 2;
}
