// A runtime with no SQLite driver (Node 20 without better-sqlite3): the run ledger is off, and
// the host is told so, a killed run still leaves its file, and what needs the ledger is refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { spawn } from "node:child_process";
import { fixture, runScript, scriptCommand, tempHome } from "./_helpers.ts";

const LINE = /run ledger is off/;

test("without a SQLite driver: one stderr line says what is lost and how to get it, and a killed run leaves its checkpoint file", async () => {
  const home = tempHome();
  const [cmd, argv] = scriptCommand(fixture("no_driver"), [home, "run"]);
  const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => stdout += d);
  child.stderr.on("data", (d) => stderr += d);
  const exited = new Promise((resolve) => child.on("close", resolve));
  // Bounded by the busiest machine's start of a runtime, not by speed.
  const started = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no start in 120 s: ${stderr}`)), 120_000);
    child.stdout.on("data", () => {
      const m = /^started (\S+) (\S+) attempt 1$/m.exec(stdout);
      if (m) {
        clearTimeout(timer);
        resolve(m[0]);
      }
    });
  });
  child.kill("SIGKILL");
  await exited;
  const files = started.split(" ").slice(1, 3);
  for (const file of files) {
    assert.ok(fs.existsSync(file), `${file}: a run killed before any tier leaves its file`);
    assert.match(fs.readFileSync(file, "utf8"), /- Run: (killed|other)/);
  }
  assert.equal(path.dirname(files[0]!), path.join(home, "agent-checkpoints"));
  const lines = stderr.split("\n").filter((line) => LINE.test(line));
  assert.equal(lines.length, 1, `once per process, for two keepers: ${stderr}`);
  const line = lines[0]!;
  for (const what of [/no SQLite driver/, /resume/, /replay/, /npm install better-sqlite3@12/]) {
    assert.match(line, what);
  }
});

for (const what of ["effect_tools", "enforce", "replay"]) {
  test(`without a SQLite driver, ${what} is an error at the start that names the driver`, async () => {
    const home = tempHome();
    const done = await runScript(fixture("no_driver"), [home, what], { timeoutMs: 120_000 });
    assert.equal(done.code, 0, done.stderr);
    assert.match(done.stdout, /^threw: agent-checkpoint: .* needs the run ledger, which is off/m);
    assert.match(done.stdout, /no SQLite driver/);
    assert.match(done.stdout, /npm install better-sqlite3@12/);
    assert.doesNotMatch(done.stdout, /^started/m);
  });
}
