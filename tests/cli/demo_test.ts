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

test("the README's demo command prints no note from Deno about an npm package's build script", async (t) => {
  const { underDeno } = await import("../_helpers.ts");
  if (!underDeno) return t.skip("runs the README's Deno command");
  const fs = await import("node:fs");
  const os = await import("node:os");
  const path = await import("node:path");
  const { execFileSync } = await import("node:child_process");
  const process = (await import("node:process")).default;
  const root = fileURLToPath(new URL("../../", import.meta.url));
  const readme = fs.readFileSync(path.join(root, "README.md"), "utf8");
  const line = readme.split("\n").find((l) => /^npx -y deno@\S+ task .*demo\b/.test(l));
  assert.ok(line, "the README's demo command");
  const words = line.split("#")[0]!.trim().split(/\s+/).slice(3); // after `npx -y deno@…`
  // A user's first run: Deno's cache has every package but protobufjs (whose build script Deno
  // ignores, and says so in a box, as it installs it). Hard links: no copy of the cache.
  const info = JSON.parse(execFileSync(process.execPath, ["info", "--json"], { encoding: "utf8" }));
  const fresh = fs.mkdtempSync(path.join(os.tmpdir(), "ac-deno-dir-"));
  execFileSync("cp", ["-al", info.npmCache, path.join(fresh, "npm")]);
  for (const dir of fs.readdirSync(path.join(fresh, "npm"))) {
    fs.rmSync(path.join(fresh, "npm", dir, "protobufjs"), { recursive: true, force: true });
  }
  try {
    const { spawnSync } = await import("node:child_process");
    const r = spawnSync(process.execPath, [...words, "--seconds", "5"], {
      cwd: root,
      env: { ...process.env, DENO_DIR: fresh, NO_COLOR: "1" },
      encoding: "utf8",
      timeout: 300_000,
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /the watchdog should write tier 1/);
    assert.doesNotMatch(r.stderr, /Ignored build scripts|protobufjs/, r.stderr);
    assert.ok(
      fs.existsSync(path.join(fresh, "npm", "registry.npmjs.org", "protobufjs")),
      "the package was installed by this run (so Deno had its say)",
    );
  } finally {
    fs.rmSync(fresh, { recursive: true, force: true });
  }
});
