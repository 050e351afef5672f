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
 *    (d) on Node 20 (better-sqlite3) and Node 24 (`node:sqlite`): a run SIGKILLed and
 *    retried: the ledger has the killed attempt, the retry resumes it, and a call made through
 *    `run.once` (what `replay` uses) is not made again;
 * 3. the store, ledger, resume, effects and no-driver tests of the compiled suite again under
 *    Node 22 and 24 from the npm registry (`npx -y node@22`), which use `node:sqlite` and no
 *    native module: the whole suite on one Node (about 10 minutes) and these on the others
 *    keeps the test command well inside CI's time;
 * 4. the figures: test counts, and the import time against a bare `node`.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync, spawn, spawnSync } from "node:child_process";

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

/**
 * The compiled tests that the other Nodes run again: what depends on the SQLite driver (the run
 * ledger, its faults and leases, resuming, side effects) and the runtime without one.
 */
const DRIVER_TESTS = [
  "store/ledger_test.js",
  "store/ledger_faults_test.js",
  "store/leases_test.js",
  "store/sqlite_schema_test.js",
  "resume_test.js",
  "effects_test.js",
  "no_driver_test.js",
];

/** The binary of a Node from the npm registry (`npx -y node@24`), for spawning it directly. */
function registryNode(major: number): string {
  return run("npx", ["-y", `node@${major}`, "-p", "process.execPath"], npmDir, 600_000).trim();
}

function suite(node = "node", only?: string[]): number {
  const files = (fs.readdirSync(path.join(npmDir, "esm/tests"), { recursive: true }) as string[])
    .filter((f) => f.endsWith("_test.js") && (!only || only.includes(f)))
    .sort()
    .map((f) => `esm/tests/${f}`);
  if (only && files.length !== only.length) {
    throw new Error(`the compiled suite lacks some of ${only.join(", ")}`);
  }
  const version = run(node, ["--version"], npmDir).trim(); // not process.version: that is Deno's
  say(`node ${version} --test (${files.length} files)`);
  const result = spawnSync(node, ["--test", ...files], {
    cwd: npmDir,
    encoding: "utf8",
    // Well inside CI's 90 minutes; a busy machine takes a good deal longer than the ~10 it needs.
    timeout: 2_400_000,
    maxBuffer: 256 * 1024 * 1024,
  });
  const output = `${result.stdout}${result.stderr}`;
  // Node 20 reports "# pass 3"; Node 23 and later "ℹ pass 3".
  const count = (what: string) =>
    Number(output.match(new RegExp(`^(?:#|ℹ) ${what} (\\d+)`, "m"))?.[1]);
  if (result.status !== 0) {
    console.log(output);
    throw new Error(
      `the compiled suite failed under Node ${version} (exit ${result.status}${
        result.error ? `: ${result.error.message}` : ""
      })`,
    );
  }
  console.log(`node ${version}: ${count("pass")} passed, ${count("fail")} failed`);
  return count("pass");
}

/**
 * (d) A run SIGKILLed after its side effect, then retried in a new process on the same home,
 * under `node`: retry.mjs asserts the resume and that the effect is not made again.
 */
async function killAndRetry(node: string, dir: string): Promise<void> {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-retry-"));
  const child = spawn(node, ["retry.mjs", home, "first"], { cwd: dir, stdio: "pipe" });
  let out = "";
  child.stdout.on("data", (d) => out += d);
  child.stderr.on("data", (d) => out += d);
  const closed = new Promise((resolve) => child.on("close", resolve));
  const deadline = Date.now() + 120_000; // a busy machine's start of a Node, not a speed claim
  while (!/^sent$/m.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`the first attempt did not send: ${out}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill("SIGKILL");
  await closed;
  process.stdout.write(run(node, ["retry.mjs", home, "retry"], dir));
  fs.rmSync(home, { recursive: true, force: true });
}

async function consumer(node24: string): Promise<void> {
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
  // As the README installs it, but without install scripts: better-sqlite3 (an optional
  // dependency) is there unbuilt, as for a user whose npm runs no scripts, and counts as absent.
  // (Its build from source takes minutes where no prebuilt binary can be fetched.)
  npm("install", "--ignore-scripts", path.join(tools, tarball));
  const optional = JSON.parse(
    fs.readFileSync(path.join(dir, "node_modules/agent-checkpoint/package.json"), "utf8"),
  ).optionalDependencies;
  if (!/^\^12\./.test(optional?.["better-sqlite3"] ?? "")) {
    throw new Error(`better-sqlite3 12 is not an optional dependency: ${JSON.stringify(optional)}`);
  }
  console.log("consumer: better-sqlite3 12 comes with the package, as an optional dependency");

  // Before better-sqlite3 works: Node 20 has no node:sqlite, so the board is skipped.
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
  await killAndRetry("node", dir);
  await killAndRetry(node24, dir);
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
  // The fleet store's web view from the same install (its driver is an optional peer).
  const pg = process.env.AGENT_CHECKPOINT_TEST_PG ?? "postgres://postgres@127.0.0.1:5432/test";
  npm("install", "postgres@3");
  process.stdout.write(run("node", ["serve_pg.mjs", pg], dir, 180_000));

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
const node22 = registryNode(22);
const node24 = registryNode(24);
// The packed package as a user installs it first: it takes a minute or two, the suites twenty.
await consumer(node24);
const passed = suite();
const again = [node22, node24].map((node) => suite(node, DRIVER_TESTS));
// The consumer checks above throw on failure; reaching here means they all passed.
console.log(
  `node: ${passed} passed, 0 failed; the driver's tests on Node 22 and 24: ${
    again.join(" and ")
  } passed`,
);
