// The npm registry this project's machines reach serves buf's Linux binaries only, so `npm install`
// leaves the macOS and Windows ones out of package-lock.json and `npm ci` then refuses the lock.
// This adds them back as optional entries for their platforms (never installed on Linux), so that
// `npm ci` works here and the lock stays usable elsewhere. Run it after `npm install` changes the lock.
import { readFileSync, writeFileSync } from "node:fs";

const lock = JSON.parse(readFileSync("package-lock.json", "utf8"));
const buf = lock.packages["node_modules/@bufbuild/buf"];
const platforms = {
  "darwin-arm64": ["darwin", "arm64"],
  "darwin-x64": ["darwin", "x64"],
  "linux-armv7": ["linux", "arm"],
  "win32-arm64": ["win32", "arm64"],
  "win32-x64": ["win32", "x64"],
};
let added = 0;
for (const [suffix, [os, cpu]] of Object.entries(platforms)) {
  const key = `node_modules/@bufbuild/buf-${suffix}`;
  if (lock.packages[key]) continue;
  lock.packages[key] = {
    version: buf.version,
    cpu: [cpu],
    dev: true,
    license: "Apache-2.0",
    optional: true,
    os: [os],
    engines: { node: ">=12" },
  };
  added++;
}
lock.packages = Object.fromEntries(Object.entries(lock.packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a.localeCompare(b))));
writeFileSync("package-lock.json", JSON.stringify(lock, null, 2) + "\n");
console.log(`added ${added} platform entries for @bufbuild/buf`);
