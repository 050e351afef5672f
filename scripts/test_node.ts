/**
 * The Node half of `deno task test`, on what `deno task build:npm` built:
 *
 * 1. the whole compiled test suite under Node's own test runner;
 * 2. consumer checks on the packed tarball, installed into a fresh project:
 *    (a) a plain .mjs whose blocked main thread still gets the watchdog's file,
 *    (b) a .ts consumer type-checked with module NodeNext and skipLibCheck false,
 *    (c) the kanban board through better-sqlite3 (also on a Node that cannot
 *    require an ES module, which imports the run store with the library), and
 *    failing open without it,
 *    and the demo run from the installed package;
 * 3. the figures: test counts, and the import time against a bare `node`.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync, spawnSync } from "node:child_process";

const root = fileURLToPath(new URL("..", import.meta.url));
const tools = path.join(root, ".build");
const npmDir = path.join(root, "npm");
const say = (what: string) => console.log(`test:node: ${what}`);
const run = (cmd: string, args: string[], cwd: string, timeout = 120_000) => {
  try {
    return execFileSync(cmd, args, {
      cwd,
      encoding: "utf8",
      timeout,
      stdio: ["ignore", "pipe", "pipe"],
    });
  } catch (error) {
    // The command's own output says what failed (a type error, a failed install): show it.
    const e = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${e.message}\n${e.stdout ?? ""}${e.stderr ?? ""}`.trimEnd());
  }
};

function suite(): number {
  const files = (fs.readdirSync(path.join(npmDir, "esm/tests"), { recursive: true }) as string[])
    .filter((f) => f.endsWith("_test.js"))
    .sort()
    .map((f) => `esm/tests/${f}`);
  const version = run("node", ["--version"], npmDir).trim(); // not process.version: that is Deno's
  say(`node ${version} --test (${files.length} files)`);
  const result = spawnSync("node", ["--test", ...files], {
    cwd: npmDir,
    encoding: "utf8",
    // Well inside CI's 90 minutes; a busy machine takes a good deal longer than the ~10 it needs.
    timeout: 2_400_000,
    maxBuffer: 256 * 1024 * 1024,
  });
  const output = `${result.stdout}${result.stderr}`;
  const count = (what: string) => Number(output.match(new RegExp(`^# ${what} (\\d+)`, "m"))?.[1]);
  if (result.status !== 0) {
    console.log(output);
    throw new Error(
      `the compiled suite failed under Node (exit ${result.status}${
        result.error ? `: ${result.error.message}` : ""
      })`,
    );
  }
  console.log(`${count("pass")} passed, ${count("fail")} failed`);
  return count("pass");
}

function consumer(): void {
  const tarball = fs.readdirSync(tools).find((f) => /^agent-checkpoint-.*\.tgz$/.test(f));
  if (!tarball) throw new Error("no tarball in .build/: run deno task build:npm first");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ac-consumer-"));
  say(`installing ${tarball} into a fresh project at ${dir}`);
  fs.writeFileSync(
    path.join(dir, "package.json"),
    JSON.stringify({ name: "consumer", private: true, type: "module" }),
  );
  for (const f of fs.readdirSync(path.join(root, "scripts/consumer"))) {
    fs.copyFileSync(path.join(root, "scripts/consumer", f), path.join(dir, f));
  }
  // npm resolves the package's optional peers against the registry: slow on a busy machine.
  const npm = (...args: string[]) =>
    run("npm", ["--no-audit", "--no-fund", "--loglevel=error", ...args], dir, 600_000);
  npm("install", path.join(tools, tarball));

  // Before better-sqlite3 is there: Node 20 has no node:sqlite, so the board is skipped.
  process.stdout.write(run("node", ["kanban.mjs", "absent"], dir));
  process.stdout.write(run("node", ["basic.mjs"], dir, 30_000));

  fs.writeFileSync(
    path.join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        module: "NodeNext",
        moduleResolution: "NodeNext",
        target: "ES2022",
        strict: true,
        exactOptionalPropertyTypes: true,
        skipLibCheck: false,
        noEmit: true,
        types: ["node"],
        typeRoots: [path.join(tools, "node_modules/@types")],
      },
      files: ["types.ts"],
    }),
  );
  run(path.join(tools, "node_modules/.bin/tsc"), ["-p", "tsconfig.json"], dir);
  console.log("consumer (b): types.ts type-checks with module NodeNext and skipLibCheck false");

  // The better-sqlite3 the build tools compiled for this Node, linked rather than rebuilt.
  npm("install", "--install-links=false", path.join(tools, "node_modules/better-sqlite3"));
  process.stdout.write(run("node", ["kanban.mjs"], dir));
  // The run store is required on first use where Node can require an ES module; elsewhere
  // package.json's `#subsystems` imports it with the library: the same board and ledger so.
  if (run("node", ["-p", "process.features.require_module === true"], dir).trim() === "true") {
    process.stdout.write(run("node", ["--no-experimental-require-module", "kanban.mjs"], dir));
    console.log("consumer (c): the same where Node cannot require an ES module");
  }

  say("the agent-checkpoint bin from the installed package");
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bin-"));
  const explained = JSON.parse(
    run("npx", ["agent-checkpoint", "explain", "--home", home, "--json"], dir),
  );
  if (explained.home !== home || explained.problems.length !== 0) {
    throw new Error(`the bin's explain said ${JSON.stringify(explained)}`);
  }
  const usage = spawnSync("npx", ["agent-checkpoint", "frob"], { cwd: dir, encoding: "utf8" });
  if (usage.status !== 2 || !/unknown command "frob"/.test(usage.stderr)) {
    throw new Error(`the bin's usage error was ${usage.status}: ${usage.stderr}`);
  }
  console.log("bin: explain --json answers, and an unknown command exits 2");

  say("the demo from the installed package, under Node");
  const demo = run(
    "node",
    ["node_modules/agent-checkpoint/esm/scripts/demo.js", "--seconds", "5"],
    dir,
  );
  if (!/budget tier 2 checkpoint persisted mid-run \(source: watchdog\)/.test(demo)) {
    console.log(demo);
    throw new Error("the Node demo did not show the watchdog's tier 2 checkpoint");
  }
  console.log("demo: the watchdog's tier 2 checkpoint was printed");

  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const time = (code: string) => {
    const t = performance.now();
    spawnSync("node", ["--input-type=module", "-e", code], { cwd: dir });
    return performance.now() - t;
  };
  const bare: number[] = [];
  const loaded: number[] = [];
  for (let i = 0; i < 15; i++) {
    bare.push(time(""));
    loaded.push(time(`await import("agent-checkpoint")`));
  }
  const [b, l] = [median(bare), median(loaded)];
  console.log(
    `import time: node -e '' ${b.toFixed(0)} ms, with import("agent-checkpoint") ${
      l.toFixed(0)
    } ms: ratio ${(l / b).toFixed(2)} (medians of 15, interleaved)`,
  );
  fs.rmSync(dir, { recursive: true, force: true });
}

/** What package.json promises: no `sideEffects: false` (the worker's module is loaded for its effect). */
function packageClaims(): void {
  const pkg = JSON.parse(fs.readFileSync(path.join(npmDir, "package.json"), "utf8"));
  if (pkg.sideEffects === false) throw new Error("package.json claims sideEffects: false");
  for (const sub of ["./ai-sdk", "./openai-agents", "./langchain", "./claude-agent-sdk"]) {
    if (!pkg.exports[sub]) throw new Error(`package.json exports no ${sub}`);
  }
  console.log("package.json: no sideEffects claim; the four adapter subpaths are exported");
}

packageClaims();
const passed = suite();
consumer();
// The consumer checks above throw on failure; reaching here means they all passed.
console.log(`node: ${passed} passed, 0 failed`);
