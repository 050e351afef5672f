import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http from "node:http";
import * as path from "node:path";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { README, runScript, tempHome, underDeno } from "./_helpers.ts";

const root = path.resolve(fileURLToPath(new URL("..", import.meta.url)));

/** The repository, served on loopback as a user would import it from a host; its base URL. */
async function serveRepository(): Promise<{ url: string; close(): void }> {
  const server = http.createServer((req, res) => {
    const file = path.join(root, path.normalize(decodeURIComponent(req.url ?? "/")));
    if (!file.startsWith(root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": "application/typescript" }).end(fs.readFileSync(file));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => server.close() };
}

test(
  "imported by URL in Deno, the watchdog still writes while the main thread is blocked",
  { skip: !underDeno && "importing a module by URL is Deno's" },
  async () => {
    const server = await serveRepository();
    try {
      // A user's own project, with no deno.json and no import map.
      const dir = tempHome();
      fs.writeFileSync(
        path.join(dir, "main.ts"),
        `import { createAgentCheckpoint } from "${server.url}/mod.ts";
import { existsSync, readFileSync } from "node:fs";
const ac = createAgentCheckpoint({ home: ${
          JSON.stringify(dir)
        }, env: {}, settings: { allow_tiny_tier1: true } });
const run = ac.startRun({ sessionId: "by-url", caps: { timeSeconds: 1 } });
run.preLlmCall();
// Blocked until the watchdog's tier 2 is on disk, at most 20 s.
const end = Date.now() + 20_000;
const tier2 = () => existsSync(run.checkpointFile) && readFileSync(run.checkpointFile, "utf8").includes("budget tier 2");
while (!tier2() && Date.now() < end) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
console.log(readFileSync(run.checkpointFile, "utf8").split("\\n")[1]);
await ac.close();
`,
      );
      const result = await runScript(path.join(dir, "main.ts"), [], {
        env: { DENO_NO_UPDATE_CHECK: "1" },
        timeoutMs: 60_000,
        cwd: dir,
        denoFlags: ["--no-lock", "--no-config"],
      });
      assert.equal(result.code, 0, result.stderr);
      assert.equal(
        result.stdout,
        "## agent-checkpoint: budget tier 2 checkpoint persisted mid-run (source: watchdog)\n",
      );
    } finally {
      server.close();
    }
  },
);

test(
  "the command line by URL, as the README tells a Deno user outside the repository",
  { skip: !underDeno && "running a module by URL is Deno's" },
  async () => {
    // The documented command, with <url> where mod.ts is imported from.
    const readme = fs.readFileSync(README, "utf8");
    const documented = /^deno run -A <url>\/scripts\/cli\.ts ([a-z]+)/m.exec(readme);
    assert.ok(documented, "the README gives the command line by URL");
    const server = await serveRepository();
    try {
      // A home with one ended run, made by this repository's library.
      const home = tempHome();
      const { createAgentCheckpoint } = await import("../mod.ts");
      const ac = createAgentCheckpoint({ home, env: {} });
      const run = ac.startRun({ sessionId: "from-url" });
      await run.checkpoint("done by hand");
      await run.end({ status: "done" });
      await ac.close();
      const dir = tempHome(); // the user's own directory: no deno.json, no import map
      const cli = (args: string[]) =>
        runScript(`${server.url}/scripts/cli.ts`, args, {
          env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
          timeoutMs: 120_000,
          cwd: dir,
          denoFlags: ["--no-lock", "--no-config"],
        });
      const ls = await cli(["ls", "--home", home]);
      assert.equal(ls.code, 0, ls.stderr);
      assert.match(ls.stdout, /^from-url +ended done /m);
      const help = await cli([documented[1]!, "--help"]);
      assert.equal(help.code, 0, help.stderr);
      assert.match(help.stdout, /^Usage: agent-checkpoint /);
    } finally {
      server.close();
    }
  },
);
