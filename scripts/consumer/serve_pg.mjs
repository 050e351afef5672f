// (d) The installed bin's web view over a PostgreSQL fleet store, as docs/serve.md shows it:
// `serve --store postgres://…` serves the store's runs (argv: the store's URL).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const url = process.argv[2];
const home = mkdtempSync(join(tmpdir(), "ac-serve-pg-"));
// The package's bin itself (not through npx, whose child would outlive a signal to npx).
const bin = join("node_modules", ".bin", "agent-checkpoint");
const child = spawn(bin, ["serve", "--port", "0", "--home", home, "--store", url], {
  stdio: ["ignore", "pipe", "pipe"],
});
let out = "";
child.stdout.on("data", (d) => out += d);
child.stderr.on("data", (d) => out += d);
const exited = new Promise((resolve) => child.once("exit", resolve));
let ended = false;
void exited.then(() => ended = true);
const until = Date.now() + 120_000;
while (!/http:\/\/\S+\//.test(out) && !ended && Date.now() < until) {
  await new Promise((r) => setTimeout(r, 100));
}
try {
  const page = /http:\/\/\S+\//.exec(out)?.[0];
  assert.ok(page, `serve --store printed no address: ${out}`);
  const body = await (await fetch(`${page}api/runs`)).json();
  assert.equal(body.store.engine, "postgres", JSON.stringify(body));
  console.log("consumer (d): serve --store postgres:// serves the fleet store's runs");
} finally {
  child.kill("SIGTERM");
  await exited;
}
