import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { runScript } from "../_helpers.ts";

test("the demo shows the lines of the earlier file that mark it INCOMPLETE", async () => {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  const demo = fileURLToPath(new URL(`../../scripts/demo${ext}`, import.meta.url));
  const { code, stdout, stderr } = await runScript(demo, ["--seconds", "5"], {
    timeoutMs: 120_000,
  });
  assert.equal(code, 0, stderr);
  // The retry's summary says the file is marked; the lines that mark it follow, numbered.
  assert.match(stdout, /the earlier one: .*its file is marked INCOMPLETE\n/);
  assert.match(
    stdout,
    /The agent marked it INCOMPLETE in its own text, \S+demo-session\.md:\n\n {2}\d+ \| The date parser drops the time zone\. INCOMPLETE: next, fix parseDate\(\)\n\n/,
  );
});
