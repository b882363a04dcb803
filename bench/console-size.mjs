// The console's first load: what index.html makes the browser fetch (its scripts, module
// preloads and stylesheets), gzipped as the gateway serves them (level 9), against the budget of
// issue 27 (250 KB of JS and CSS, compressed). Chunks loaded later (the charts) are listed apart.
//
//   npm run build && node bench/console-size.mjs     exits 1 over the budget
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const dist = path.resolve(fileURLToPath(import.meta.url), "../../console/dist");
const BUDGET = 250 * 1024;

const html = readFileSync(path.join(dist, "index.html"), "utf8");
const first = [...html.matchAll(/(?:src|href)="\/(assets\/[^"]+\.(?:js|css))"/g)].map(
  (m) => m[1] ?? "",
);
const all = readdirSync(path.join(dist, "assets")).map((file) => `assets/${file}`);

/** @param {string} file */
function sizes(file) {
  const body = readFileSync(path.join(dist, file));
  return {
    file,
    raw: body.length,
    gzip: gzipSync(body, { level: 9 }).length,
  };
}

const kb = (/** @type {number} */ n) => `${(n / 1024).toFixed(1)} KB`;
/** @param {string} title @param {ReturnType<typeof sizes>[]} rows */
function table(title, rows) {
  console.log(title);
  for (const r of rows) {
    console.log(
      `  ${r.file.padEnd(40)} ${kb(r.raw).padStart(10)} raw ${kb(r.gzip).padStart(9)} gzip`,
    );
  }
  const gzip = rows.reduce((sum, r) => sum + r.gzip, 0);
  const raw = rows.reduce((sum, r) => sum + r.raw, 0);
  console.log(`  ${"total".padEnd(40)} ${kb(raw).padStart(10)} raw ${kb(gzip).padStart(9)} gzip`);
  return gzip;
}

const firstLoad = table("first load (index.html's scripts and styles):", first.map(sizes));
table("loaded later:", all.filter((file) => !first.includes(file)).map(sizes));
console.log(
  `\nfirst load ${kb(firstLoad)} gzipped, budget ${kb(BUDGET)}: ${firstLoad <= BUDGET ? "within" : "OVER"}`,
);
if (firstLoad > BUDGET) process.exitCode = 1;
