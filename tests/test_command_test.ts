// The project's test command: every part runs and is reported, even after one fails.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { underDeno } from "./_helpers.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
// Not a literal: the npm build compiles the tests, and the script is Deno's, not shipped.
const script = new URL("../scripts/test_all.ts", import.meta.url).href;

test("the test command runs every part after one fails, reports each, and exits non-zero", {
  skip: !underDeno && "the test command is Deno's",
}, async () => {
  const tasks = JSON.parse(fs.readFileSync(`${root}/deno.json`, "utf8")).tasks;
  assert.match(tasks.test, /scripts\/test_all\.ts/, "deno task test runs the script");
  assert.doesNotMatch(tasks.test, /&&/, "no && chain that hides the parts after a failure");
  const { PARTS, runParts, summary } = await import(script);
  assert.deepEqual(
    PARTS.map((p: { name: string }) => p.name),
    ["deno test", "check", "build:npm", "test:node"],
  );
  const deno = process.execPath;
  const marks = fs.mkdtempSync(path.join(os.tmpdir(), "ac-test-command-"));
  try {
    const part = (name: string, code: number, needs?: string) => ({
      name,
      cmd: [deno, "eval", `Deno.writeTextFileSync("${marks}/${name}", ""); Deno.exit(${code})`],
      ...(needs ? { needs } : {}),
    });
    const outcomes = runParts(
      [part("first", 3), part("second", 0), part("build", 1), part("after-build", 0, "build")],
      root,
    );
    assert.deepEqual(fs.readdirSync(marks).sort(), ["build", "first", "second"]);
    assert.deepEqual(outcomes.map((o: { result: string }) => o.result), [
      "failed (exit 3)",
      "passed",
      "failed (exit 1)",
      "not run: build failed",
    ]);
    const text = summary(outcomes);
    for (const name of ["first", "second", "build", "after-build"]) {
      assert.match(text, new RegExp(name));
    }
    assert.match(text, /3 of 4 parts did not pass/);
  } finally {
    fs.rmSync(marks, { recursive: true, force: true });
  }
});
