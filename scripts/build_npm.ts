/**
 * Build the npm package into `npm/` from the Deno sources, then prove it in Node
 * before anything is published:
 *
 *   deno task build:npm
 *
 * 1. Tools (TypeScript, @types/node, better-sqlite3 for Node 20, publint,
 *    @arethetypeswrong/cli) go into `.build/`, installed only when their
 *    versions change.
 * 2. `npm/` is emptied; `tsc` compiles the library, its tests and the demo to
 *    ESM `.js` + `.d.ts` (relative `.ts` imports rewritten); package.json,
 *    README and LICENSE are written.
 * 3. `npm pack`, then publint and attw on the tarball.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { execFileSync } from "node:child_process";

const root = path.resolve(new URL("..", import.meta.url).pathname);
const tools = path.join(root, ".build");
const out = path.join(root, "npm");
const deno = JSON.parse(fs.readFileSync(path.join(root, "deno.json"), "utf8"));
const jsYaml = String(deno.imports["js-yaml"]).replace(/^npm:js-yaml@/, "");

/** What the build and the Node test run need, pinned. */
export const TOOLS: Record<string, string> = {
  typescript: "5.9.3",
  "@types/node": "~20.19.0",
  "better-sqlite3": "^12.6.2",
  "js-yaml": jsYaml,
  publint: "0.3.25",
  "@arethetypeswrong/cli": "0.18.5",
};

const run = (cmd: string, args: string[], cwd = root) =>
  execFileSync(cmd, args, { cwd, stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" });
const step = (what: string) => console.log(`build:npm: ${what}`);

function installTools(): void {
  const stampFile = path.join(tools, "stamp.json");
  const stamp = JSON.stringify({ tools: TOOLS, node: process.versions.node });
  if (fs.existsSync(stampFile) && fs.readFileSync(stampFile, "utf8") === stamp) return;
  step("installing build tools into .build/ (better-sqlite3 builds from source, about a minute)");
  fs.mkdirSync(tools, { recursive: true });
  fs.writeFileSync(
    path.join(tools, "package.json"),
    JSON.stringify({ name: "agent-checkpoint-build-tools", private: true }, null, 2),
  );
  run("npm", [
    "install",
    "--no-audit",
    "--no-fund",
    "--loglevel=error",
    ...Object.entries(TOOLS).map(([name, version]) => `${name}@${version}`),
  ], tools);
  fs.writeFileSync(stampFile, stamp);
}

/** The sources tsc compiles: the library, the worker, the tests and the demo. */
function sources(): string[] {
  const ts = (dir: string) =>
    fs.readdirSync(path.join(root, dir)).filter((f) => f.endsWith(".ts")).map((f) =>
      path.join(root, dir, f)
    );
  return [
    ...ts("."),
    ...ts("tests"),
    ...ts("tests/fixtures"),
    path.join(root, "scripts/demo.ts"),
    path.join(root, "scripts/demo_progress.ts"),
    ...(fs.existsSync(path.join(root, "scripts/cli.ts"))
      ? [path.join(root, "scripts/cli.ts")]
      : []),
  ];
}

function compile(): void {
  step("compiling with tsc");
  const tsconfig = {
    compilerOptions: {
      target: "ES2022",
      module: "ESNext",
      moduleResolution: "Bundler",
      lib: ["ES2024"],
      types: ["node"],
      typeRoots: [path.join(tools, "node_modules/@types")],
      paths: { "js-yaml": [path.join(tools, "node_modules/js-yaml")] },
      strict: true,
      noUncheckedIndexedAccess: true,
      exactOptionalPropertyTypes: true,
      declaration: true,
      stripInternal: true,
      rewriteRelativeImportExtensions: true,
      rootDir: root,
      outDir: path.join(out, "esm"),
      newLine: "lf",
    },
    files: sources(),
  };
  const config = path.join(tools, "tsconfig.json");
  fs.writeFileSync(config, JSON.stringify(tsconfig, null, 2));
  run(path.join(tools, "node_modules/.bin/tsc"), ["-p", config]);
  // Declarations keep the sources' `.ts` specifiers; consumers resolve `.js`.
  const walk = (dir: string): string[] =>
    fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]
    );
  for (const file of walk(path.join(out, "esm")).filter((f) => f.endsWith(".d.ts"))) {
    // Doc examples import the package by name, as an npm user would.
    const text = fs.readFileSync(file, "utf8").replaceAll(
      `from "./mod.ts"`,
      `from "agent-checkpoint"`,
    );
    fs.writeFileSync(
      file,
      text.replace(/((?:from|import)\s*\(?\s*["']\.{1,2}\/[^"']*)\.ts(["'])/g, "$1.js$2"),
    );
  }
}

function packageJson(): void {
  const hasCli = fs.existsSync(path.join(out, "esm/scripts/cli.js"));
  const pkg = {
    name: "agent-checkpoint",
    version: deno.version,
    description:
      "Durable progress checkpoints for long, budget-capped AI-agent runs: tier prompts, tool-boundary persists and a watchdog worker that writes while your main thread is stuck.",
    license: "MIT",
    keywords: ["agent", "llm", "checkpoint", "budget", "watchdog", "deno"],
    type: "module",
    sideEffects: false,
    exports: {
      ".": { types: "./esm/mod.d.ts", default: "./esm/mod.js" },
      "./package.json": "./package.json",
    },
    ...(hasCli ? { bin: { "agent-checkpoint": "./esm/scripts/cli.js" } } : {}),
    files: [
      "esm/*.js",
      "esm/*.d.ts",
      "esm/scripts/*.js",
      "esm/scripts/*.d.ts",
      "README.md",
      "LICENSE",
    ],
    engines: { node: ">=20" },
    dependencies: { "js-yaml": jsYaml },
    peerDependencies: { "better-sqlite3": "^12.0.0" },
    peerDependenciesMeta: { "better-sqlite3": { optional: true } },
  };
  fs.writeFileSync(path.join(out, "package.json"), JSON.stringify(pkg, null, 2) + "\n");
  for (const file of ["README.md", "LICENSE"]) {
    fs.copyFileSync(path.join(root, file), path.join(out, file));
  }
  // The compiled tests resolve js-yaml and better-sqlite3 from the tools' node_modules.
  fs.symlinkSync(path.join(tools, "node_modules"), path.join(out, "node_modules"), "dir");
}

/** Pack the package; returns the tarball's path and its sizes. */
export function pack(): { tarball: string; size: number; unpackedSize: number; files: number } {
  const [info] = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", tools], out));
  return {
    tarball: path.join(tools, info.filename),
    size: info.size,
    unpackedSize: info.unpackedSize,
    files: info.entryCount,
  };
}

function lint(tarball: string): void {
  step("publint");
  console.log(run(path.join(tools, "node_modules/.bin/publint"), ["--strict", out]).trim());
  step("attw");
  console.log(
    run(path.join(tools, "node_modules/.bin/attw"), [
      tarball,
      "--profile",
      "esm-only",
      "--format",
      "table-flipped",
    ]).trim(),
  );
}

if (import.meta.main) {
  installTools();
  fs.rmSync(out, { recursive: true, force: true });
  fs.mkdirSync(out);
  compile();
  packageJson();
  const packed = pack();
  step(
    `packed ${path.basename(packed.tarball)}: ${(packed.size / 1024).toFixed(1)} KiB packed, ${
      (packed.unpackedSize / 1024).toFixed(1)
    } KiB unpacked, ${packed.files} files`,
  );
  lint(packed.tarball);
}
