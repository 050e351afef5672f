/**
 * `deno doc --lint` for the adapters: every finding fails, except a public
 * signature naming a framework's own type (`private-type-ref`), which an
 * adapter cannot make public without republishing the framework's API.
 *
 *   deno run -A scripts/doc_lint.ts adapters/*.ts
 */
import process from "node:process";
import { spawnSync } from "node:child_process";

const files = process.argv.slice(2);
const result = spawnSync(process.execPath, ["doc", "--lint", ...files], {
  encoding: "utf8",
  env: { ...process.env, NO_COLOR: "1" },
});
const output = `${result.stdout}${result.stderr}`;
const findings = output.split(/\n(?=error\[)/).filter((f) => f.startsWith("error["));
const counted = findings.filter((f) => !f.startsWith("error[private-type-ref]"));
for (const finding of counted) console.error(finding.trim() + "\n");
if (result.error) throw result.error;
console.log(
  `doc lint: ${files.length} files, ${counted.length} findings` +
    ` (${findings.length - counted.length} references to the frameworks' own types allowed)`,
);
process.exitCode = counted.length > 0 || (result.status !== 0 && findings.length === 0) ? 1 : 0;
