// Regenerates proto/gen and fails when the committed code differs (or files appear or vanish).
import { execFileSync } from "node:child_process";

const run = (cmd, args) =>
  execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });

run("npx", ["buf", "generate"]);
const changed = run("git", ["status", "--porcelain", "--", "proto/gen"]).trim();
if (changed) {
  console.error("proto/gen is stale: run `npm run generate` and commit the result.\n" + changed);
  process.exit(1);
}
console.log("proto/gen is current");
