/**
 * Build the npm package into `npm/` from the Deno sources, then prove it in Node
 * before anything is published:
 *
 *   deno task build:npm
 *
 * 1. Tools (TypeScript, @types/node, better-sqlite3 for Node 20, publint,
 *    @arethetypeswrong/cli) and every package of `NPM_DEPS` (the frameworks
 *    the adapters' tests drive) go into `.build/`, installed only when their
 *    versions change.
 * 2. The sources are staged in `.build/src/` with their `npm:` specifiers
 *    rewritten to Node package names; `npm/` is emptied; `tsc` compiles the
 *    library, its adapters, its tests and the demo to ESM `.js` (without
 *    comments) + `.d.ts` (with the documentation; relative `.ts` imports
 *    rewritten); package.json (one subpath export per `deno.json` export),
 *    README and LICENSE are written.
 * 3. esbuild joins the core (every module mod.js's static graph reaches)
 *    into `_core_code.js`, which mod.js imports; each core file becomes a
 *    line re-exporting its names from it, through `_core.js` (bundleCore()).
 * 4. `npm pack`, then publint and attw on the tarball.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { execFileSync } from "node:child_process";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const tools = path.join(root, ".build");
const staged = path.join(tools, "src");
const out = path.join(root, "npm");
const deno = JSON.parse(fs.readFileSync(path.join(root, "deno.json"), "utf8"));

/**
 * Every `npm:` specifier the sources use, and what it becomes in Node. The
 * sources name npm packages by full `npm:` specifiers, so Deno imports them by
 * URL with no import map; the build rewrites each to `node` (a subpath
 * `npm:x@1/sub` becomes `node/sub`), and installs `install` for the compiled
 * tests. `dependency` makes it a dependency of the package, `peer` an optional
 * peer dependency (a framework an adapter wraps). Aliases (`ai-v5@npm:ai@5…`)
 * let the tests run several majors of one framework side by side.
 */
export interface NpmDep {
  spec: string;
  node: string;
  install: string;
  dependency?: string;
  peer?: { name: string; range: string };
}

/** The table of `npm:` specifiers; add a row for each new one. */
export const NPM_DEPS: NpmDep[] = [
  { spec: "npm:js-yaml@^5.5.0", node: "js-yaml", install: "js-yaml@5.5.0", dependency: "^5.5.0" },
  // The shell tokenizer of workspace snapshots (destructive-command detection), and its types for
  // tsc. One exact version for both runtimes' test suites: Deno's import pins what Node installs.
  {
    spec: "npm:shell-quote@1.8.3",
    node: "shell-quote",
    install: "shell-quote@1.8.3",
    dependency: "^1.8.3",
  },
  {
    spec: "npm:@types/shell-quote@1.7.5",
    node: "@types/shell-quote",
    install: "@types/shell-quote@1.7.5",
  },
  // Its CLI is a native binary in an optional dependency (about 400 MB): never --omit=optional.
  // PostToolBatch and duration_ms, which the adapter needs, arrived in 0.2.128.
  {
    spec: "npm:@anthropic-ai/claude-agent-sdk@0.x",
    node: "@anthropic-ai/claude-agent-sdk",
    install: "@anthropic-ai/claude-agent-sdk@0.3.332",
    peer: { name: "@anthropic-ai/claude-agent-sdk", range: ">=0.2.128 <1" },
  },
  // The OpenAI Agents and LangChain adapters; tested with these versions.
  {
    spec: "npm:@openai/agents@0.x",
    node: "@openai/agents",
    install: "@openai/agents@0.20.0",
    peer: { name: "@openai/agents", range: ">=0.20.0 <1" },
  },
  {
    spec: "npm:langchain@1",
    node: "langchain",
    install: "langchain@1.5.14",
    peer: { name: "langchain", range: "^1.0.0" },
  },
  {
    spec: "npm:@langchain/langgraph@1",
    node: "@langchain/langgraph",
    install: "@langchain/langgraph@1.7.3",
    peer: { name: "@langchain/langgraph", range: "^1.0.0" },
  },
  // The LangGraph checkpointer's base class; `writesSortKey` (the order of pending writes) is 1.2's.
  {
    spec: "npm:@langchain/langgraph-checkpoint@1",
    node: "@langchain/langgraph-checkpoint",
    install: "@langchain/langgraph-checkpoint@1.2.2",
    peer: { name: "@langchain/langgraph-checkpoint", range: "^1.2.0" },
  },
  // LangGraph's conformance suite for checkpointers, and the `expect` it runs with (tests only).
  {
    spec: "npm:@langchain/langgraph-checkpoint-validation@1.1.1",
    node: "@langchain/langgraph-checkpoint-validation",
    install: "@langchain/langgraph-checkpoint-validation@1.1.1",
  },
  { spec: "npm:expect@30", node: "expect", install: "expect@30.5.2" },
  {
    spec: "npm:@langchain/core@1",
    node: "@langchain/core",
    install: "@langchain/core@1.4.0",
    peer: { name: "@langchain/core", range: "^1.0.0" },
  },
  {
    spec: "npm:zod@^4",
    node: "zod",
    install: "zod@4.6.7",
    peer: { name: "zod", range: "^3.25.0 || ^4.0.0" },
  },
  // The fleet store's driver (postgres.js): loaded only when the store setting names PostgreSQL.
  {
    spec: "npm:postgres@^3.4.9",
    node: "postgres",
    install: "postgres@3.4.9",
    peer: { name: "postgres", range: "^3.4.0" },
  },
  // The AI SDK adapter: `ai` as the user has it (v5–v7), and each major its tests drive.
  {
    spec: "npm:ai@^7.0.0",
    node: "ai",
    install: "ai@7.0.173",
    peer: { name: "ai", range: ">=5 <8" },
  },
  { spec: "npm:ai@5.0.277", node: "ai-v5", install: "ai-v5@npm:ai@5.0.277" },
  { spec: "npm:ai@6.0.326", node: "ai-v6", install: "ai-v6@npm:ai@6.0.326" },
  { spec: "npm:ai@7.0.173", node: "ai-v7", install: "ai-v7@npm:ai@7.0.173" },
  // Runs as OpenTelemetry traces: the API as the host has it (loaded only once a tracer provider
  // is registered), and the SDK and OTLP/HTTP exporter its tests and benchmark use (tests only).
  {
    spec: "npm:@opentelemetry/api@^1.9.0",
    node: "@opentelemetry/api",
    install: "@opentelemetry/api@1.9.0",
    peer: { name: "@opentelemetry/api", range: "^1.0.0" },
  },
  {
    spec: "npm:@opentelemetry/sdk-trace-base@^2.2.0",
    node: "@opentelemetry/sdk-trace-base",
    install: "@opentelemetry/sdk-trace-base@2.2.0",
  },
  {
    spec: "npm:@opentelemetry/exporter-trace-otlp-http@^0.208.0",
    node: "@opentelemetry/exporter-trace-otlp-http",
    install: "@opentelemetry/exporter-trace-otlp-http@0.208.0",
  },
  // The web view's browser tests and benchmark drive the system's Chromium with it (tests only).
  { spec: "npm:playwright-core@1", node: "playwright-core", install: "playwright-core@1.65.1" },
];

/** What the build and the Node test run need, pinned, besides NPM_DEPS. */
export const TOOLS: Record<string, string> = {
  typescript: "5.9.3",
  "@types/node": "~20.19.0",
  "better-sqlite3": "^12.6.2",
  publint: "0.3.25",
  "@arethetypeswrong/cli": "0.18.5",
  esbuild: "0.25.12",
};

const run = (cmd: string, args: string[], cwd = root) =>
  execFileSync(cmd, args, { cwd, stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" });
const step = (what: string) => console.log(`build:npm: ${what}`);

function installTools(): void {
  const stampFile = path.join(tools, "stamp.json");
  const installs = [
    ...Object.entries(TOOLS).map(([name, version]) => `${name}@${version}`),
    ...[...new Set(NPM_DEPS.map((d) => d.install))],
  ];
  const stamp = JSON.stringify({ installs, node: process.versions.node });
  if (fs.existsSync(stampFile) && fs.readFileSync(stampFile, "utf8") === stamp) return;
  step("installing build tools and test dependencies into .build/ (a few minutes the first time)");
  fs.mkdirSync(tools, { recursive: true });
  fs.writeFileSync(
    path.join(tools, "package.json"),
    JSON.stringify({ name: "agent-checkpoint-build-tools", private: true }, null, 2),
  );
  run("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", ...installs], tools);
  fs.writeFileSync(stampFile, stamp);
}

const walk = (dir: string): string[] =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]
  );

/**
 * Node twins: each source on the left ships as the file on the right, which
 * `require`s its npm package on first use (`createRequire`) where Deno can only
 * import it statically, so a host that never needs it never loads it.
 */
const NODE_TWINS: Record<string, string> = {
  "_yaml.ts": "_yaml_node.ts",
  "workspace/_shell_quote.ts": "workspace/_shell_quote_node.ts",
};

/**
 * Imports that put a worker's module into the static graph only so that Deno,
 * importing the library by URL, fetches it with the library. Node reads a
 * worker's file from disk when the worker starts, so the npm build drops them
 * and a host loads the module only in the worker that runs it.
 */
const DENO_ONLY_IMPORTS: Record<string, string> = {
  "_watchdog_host.ts": `import "./_watchdog_worker.ts";`,
  "store/_bridge.ts": `import "./_bridge_entry.ts";`,
};

/**
 * `process` is Node's global, the same object as `node:process`'s default export; but
 * importing `node:process` makes Node build the module's ESM face, which reads every
 * property of `process`, `stdout` and `stderr` among them (their streams are made then).
 * The npm build drops this line from each source, and the code uses the global.
 */
const NODE_GLOBALS = [`import process from "node:process";`];

/**
 * The composition root (`mod.ts`) plugs the run store and the workspace snapshots into the
 * keeper, which calls them only once a host uses them: the run store at a run's start (the
 * ledger), the snapshots once they are turned on. In the npm build these imports become one
 * of `#subsystems`, which package.json maps by Node's `module-sync` condition: where Node
 * can `require` an ES module (20.19+, 22.12+), to `_subsystems_lazy.js`, which requires each
 * subsystem's module when it is first called, so importing the library does not load them;
 * elsewhere (an older Node, a bundler) to `_subsystems.js`, which imports them with the
 * library, as the sources do. Both are staged next to mod.ts and type-checked with it.
 */
const SUBSYSTEMS = {
  file: "mod.ts",
  imports: [
    `import { openRunStore, thisHost } from "./store/mod.ts";`,
    `import { Workspaces } from "./workspace/mod.ts";`,
    `import { openTelemetry } from "./otel/mod.ts";`,
  ],
  eager: "_subsystems.ts",
  lazy: "_subsystems_lazy.ts",
  specifier: "#subsystems",
};

const SUBSYSTEMS_EAGER = [
  "// The subsystems mod.js plugs into the keeper, imported with it (scripts/build_npm.ts).",
  ...SUBSYSTEMS.imports.map((line) => line.replace(/^import /, "export ")),
  "",
].join("\n");

const SUBSYSTEMS_LAZY =
  `// The subsystems mod.js plugs into the keeper, each module required (an ES module, loaded
// synchronously) the first time it is called (scripts/build_npm.ts).
import { createRequire } from "node:module";
import type * as Store from "./store/mod.ts";
import type * as Workspace from "./workspace/mod.ts";
import type * as Otel from "./otel/mod.ts";
import type * as Eager from "./_subsystems.ts";

// Made on first use too: a process's first createRequire costs most of a millisecond.
let require: ReturnType<typeof createRequire> | undefined;
const load = (file: string) => (require ??= createRequire(import.meta.url))(file);
let store: typeof Store | undefined;
let workspace: typeof Workspace | undefined;
const storeModule = () => store ??= load("./store/mod.js") as typeof Store;

export const openRunStore: typeof Eager.openRunStore = (options) =>
  storeModule().openRunStore(options);
export const thisHost: typeof Eager.thisHost = () => storeModule().thisHost();

/** Makes the real Workspaces (a constructor may return another object). */
class LazyWorkspaces {
  constructor(...args: ConstructorParameters<typeof Eager.Workspaces>) {
    workspace ??= load("./workspace/mod.js") as typeof Workspace;
    return new workspace.Workspaces(...args);
  }
}
export const Workspaces = LazyWorkspaces as unknown as typeof Eager.Workspaces;

let otel: typeof Otel | undefined;
export const openTelemetry: typeof Eager.openTelemetry = (options) =>
  (otel ??= load("./otel/mod.js") as typeof Otel).openTelemetry(options);
`;

/** The library's subsystems, each a folder with its own `mod.ts`, compiled and shipped. */
export const ROOMS = ["adapters", "cli", "supervise", "workspace", "store", "serve", "otel"];

/** The sources tsc compiles: the library, the worker, its subsystems, the tests and the demo. */
function sources(): string[] {
  const tree = (dir: string) =>
    fs.existsSync(path.join(root, dir))
      ? walk(path.join(root, dir)).filter((f) => f.endsWith(".ts"))
      : [];
  // A Node twin is staged in place of its source (see stage()), not as a file of its own.
  const twins = new Set(Object.values(NODE_TWINS).map((f) => path.join(root, f)));
  const top = fs.readdirSync(root).filter((f) => f.endsWith(".ts"))
    .map((f) => path.join(root, f));
  const scripts = ["demo.ts", "demo_progress.ts", "cli.ts"].map((f) =>
    path.join(root, "scripts", f)
  )
    .filter((f) => fs.existsSync(f));
  // run/: the core's parts of a run (not a subsystem).
  return [
    ...top,
    ...CORE_FOLDERS.flatMap(tree),
    ...ROOMS.flatMap(tree),
    ...tree("tests"),
    ...scripts,
  ].filter((
    f,
  ) => !twins.has(f));
}

/** Rewrite a source's `npm:` specifiers to Node package names; unknown ones are an error. */
export function rewriteSpecifiers(text: string, file = "<source>"): string {
  return text.replace(/(["'])npm:([^"']+)\1/g, (_whole, quote: string, rest: string) => {
    const spec = `npm:${rest}`;
    const dep = NPM_DEPS.filter((d) => spec === d.spec || spec.startsWith(`${d.spec}/`))
      .sort((a, b) => b.spec.length - a.spec.length)[0];
    if (!dep) {
      throw new Error(`${path.relative(root, file)} imports ${spec}, which NPM_DEPS does not list`);
    }
    return `${quote}${dep.node}${spec.slice(dep.spec.length)}${quote}`;
  });
}

/** Copy the sources into .build/src with Node specifiers, so tsc resolves them from .build/node_modules. */
function stage(): string[] {
  fs.rmSync(staged, { recursive: true, force: true });
  const files = sources().map((file) => {
    const to = path.join(staged, path.relative(root, file));
    fs.mkdirSync(path.dirname(to), { recursive: true });
    const rel = path.relative(root, file).split(path.sep).join("/");
    const twin = NODE_TWINS[rel];
    const from = twin ? path.join(root, twin) : file;
    let lines = fs.readFileSync(from, "utf8").split("\n");
    const denoOnly = DENO_ONLY_IMPORTS[rel];
    if (denoOnly) {
      const at = lines.indexOf(denoOnly);
      if (at < 0) {
        throw new Error(`${rel} no longer has the line ${denoOnly}; update DENO_ONLY_IMPORTS`);
      }
      lines.splice(at, 1);
    }
    if (rel === SUBSYSTEMS.file) {
      const at = SUBSYSTEMS.imports.map((line) => lines.indexOf(line));
      if (at.some((i) => i < 0)) {
        throw new Error(`${rel} no longer imports the subsystems as SUBSYSTEMS says; update it`);
      }
      const names = SUBSYSTEMS.imports
        .flatMap((line) => /\{(.*)\}/.exec(line)![1]!.split(",").map((name) => name.trim()));
      lines[at[0]!] = `import { ${names.join(", ")} } from "${SUBSYSTEMS.specifier}";`;
      lines = lines.filter((_, i) => !at.slice(1).includes(i));
    }
    lines = lines.filter((line) => !NODE_GLOBALS.includes(line));
    fs.writeFileSync(to, rewriteSpecifiers(lines.join("\n"), from));
    return to;
  });
  for (
    const [name, text] of [[SUBSYSTEMS.eager, SUBSYSTEMS_EAGER], [SUBSYSTEMS.lazy, SUBSYSTEMS_LAZY]]
  ) {
    fs.writeFileSync(path.join(staged, name!), text!);
    files.push(path.join(staged, name!));
  }
  return files;
}

/** Each `deno.json` export as [subpath, source file]: `.` is mod.ts, `./ai-sdk` an adapter … */
function entryPoints(): [string, string][] {
  const exports = typeof deno.exports === "string" ? { ".": deno.exports } : deno.exports;
  return Object.entries(exports as Record<string, string>);
}

function compile(): void {
  step("compiling with tsc");
  const files = stage();
  const tsconfig = {
    compilerOptions: {
      target: "ES2022",
      module: "ESNext",
      moduleResolution: "Bundler",
      lib: ["ES2024"],
      types: ["node"],
      typeRoots: [path.join(tools, "node_modules/@types")],
      strict: true,
      noUncheckedIndexedAccess: true,
      exactOptionalPropertyTypes: true,
      skipLibCheck: true,
      stripInternal: true,
      rewriteRelativeImportExtensions: true,
      rootDir: staged,
      outDir: path.join(out, "esm"),
      newLine: "lf",
      // As package.json's `imports` maps it where Node cannot require an ES module.
      paths: { [SUBSYSTEMS.specifier]: [path.join(staged, SUBSYSTEMS.eager)] },
    },
    files,
  };
  const config = path.join(tools, "tsconfig.json");
  fs.writeFileSync(config, JSON.stringify(tsconfig, null, 2));
  const tsc = path.join(tools, "node_modules/.bin/tsc");
  // Two passes. The declarations keep the sources' documentation (editors show it); this
  // pass also type-checks. The `.js` files go without comments: a Node host parses every
  // byte of the library's module graph when it imports it, and about a third were comments.
  run(tsc, ["-p", config, "--declaration", "--emitDeclarationOnly"]);
  run(tsc, ["-p", config, "--removeComments", "--noCheck"]);
  // Doc examples import the package by name, as an npm user would.
  const byName: [string, string][] = entryPoints().map(([sub, src]) => [
    path.normalize(src),
    sub === "." ? "agent-checkpoint" : `agent-checkpoint/${sub.slice(2)}`,
  ]);
  for (const file of walk(path.join(out, "esm")).filter((f) => f.endsWith(".d.ts"))) {
    const dir = path.dirname(path.relative(path.join(out, "esm"), file));
    // Declarations keep the sources' `.ts` specifiers; consumers resolve `.js`.
    const text = fs.readFileSync(file, "utf8").replace(
      /((?:from|import)\s*\(?\s*)(["'])(\.{1,2}\/[^"']*)\.ts\2/g,
      (_whole, lead: string, quote: string, spec: string) => {
        const named = byName.find(([src]) => src === path.normalize(path.join(dir, `${spec}.ts`)));
        return named ? `${lead}${quote}${named[1]}${quote}` : `${lead}${quote}${spec}.js${quote}`;
      },
    );
    fs.writeFileSync(file, text);
  }
}

/** The relative modules `file` imports statically (`import … from`, `export … from`, `import "…"`). */
function staticImports(file: string): string[] {
  const text = fs.readFileSync(file, "utf8");
  return [
    ...text.matchAll(
      /^\s*(?:import|export)\s[^;]*?from\s*["'](\.{1,2}\/[^"']+)["']|^\s*import\s*["'](\.{1,2}\/[^"']+)["']/gm,
    ),
  ]
    .map((m) => path.resolve(path.dirname(file), (m[1] ?? m[2])!));
}

/** The core's folders: their modules join the core as the root's do. */
const CORE_FOLDERS = ["run"];

/** The joined core's files: its code, and the module re-exporting each core module's names. */
const CORE = "_core.js";
const CORE_CODE = "_core_code.js";
const alias = (index: number, name: string) => `m${index}$${name}`;
/** The first line of a core file once it only re-exports. */
const STUB = `// Joined into ${CORE} (scripts/build_npm.ts).`;

/**
 * Join the core into one module. A Node host pays for each module of a graph
 * it imports (resolving, reading, compiling and linking it): importing the 23
 * files of mod.js's graph cost about 17 ms more than importing the same code
 * as two (37 against 20 ms over a bare `node -e 0`, medians of 61 starts).
 * esbuild joins the modules mod.js's static graph reaches into
 * `_core_code.js`, which mod.js imports; `_core.js` re-exports every core
 * module's names, each under an alias, and each core file is rewritten to
 * re-export its own names from there, so whatever imports a core file (a
 * subsystem, an adapter, the worker, a test) gets the same bindings: one
 * instance of each module, as before. mod.js stays a module of its own: it is
 * the one that imports the subsystems, which import core files in turn. Every
 * core module sits next to mod.js, so `import.meta.url` means what it did.
 */
function bundleCore(): void {
  step("joining the core into one module with esbuild");
  const esm = path.join(out, "esm");
  const mod = path.join(esm, "mod.js");
  const core: string[] = [];
  const todo = staticImports(mod);
  while (todo.length > 0) {
    const file = todo.pop()!;
    if (core.includes(file) || file === mod) continue;
    // Next to mod.js, or in a core folder (run/: the parts of a run, which never read import.meta.url).
    const dir = path.dirname(file);
    if (dir !== esm && !CORE_FOLDERS.some((d) => dir === path.join(esm, d))) {
      throw new Error(`${path.relative(esm, file)} is in mod.js's graph but not next to it`);
    }
    core.push(file);
    todo.push(...staticImports(file));
  }
  // Each module's export names, as Node sees them (the graph has no side effects at import).
  const names: string[][] = JSON.parse(run("node", [
    "--input-type=module",
    "-e",
    `const out = []; for (const f of ${JSON.stringify(core.map((f) => pathToFileURL(f).href))}) ` +
    `out.push(Object.keys(await import(f))); console.log(JSON.stringify(out));`,
  ]));
  fs.writeFileSync(
    path.join(esm, CORE),
    core.map((file, i) =>
      `export { ${names[i]!.map((n) => `${n} as ${alias(i, n)}`).join(", ")} } from "./${
        path.relative(esm, file).split(path.sep).join("/")
      }";\n`
    ).join(""),
  );
  const joined = path.join(tools, "joined");
  fs.rmSync(joined, { recursive: true, force: true });
  run(path.join(tools, "node_modules/.bin/esbuild"), [
    mod,
    path.join(esm, CORE),
    "--bundle",
    "--splitting",
    "--format=esm",
    "--platform=node",
    "--target=es2022",
    "--packages=external",
    "--external:#*",
    "--log-level=warning",
    `--outdir=${joined}`,
    "--entry-names=[name]",
    // One shared chunk, or esbuild fails on the clash: a second would mean mod.js reaches
    // code _core.js does not.
    `--chunk-names=${CORE_CODE.replace(/\.js$/, "")}`,
  ], esm);
  const made = fs.readdirSync(joined).sort();
  if (made.join() !== [CORE, CORE_CODE, "mod.js"].sort().join()) {
    throw new Error(`esbuild made ${made.join(", ")}, not ${CORE}, ${CORE_CODE} and mod.js`);
  }
  for (const file of made) fs.copyFileSync(path.join(joined, file), path.join(esm, file));
  const code = path.join(esm, CORE_CODE);
  fs.writeFileSync(code, builtinsAsValues(fs.readFileSync(code, "utf8")));
  core.forEach((file, i) => {
    const list = names[i]!.map((n) => `${alias(i, n)} as ${n}`).join(", ");
    const to = path.relative(path.dirname(file), path.join(esm, CORE)).split(path.sep).join("/");
    const from = to.startsWith(".") ? to : `./${to}`;
    fs.writeFileSync(
      file,
      `${STUB}\n` +
        (list ? `export { ${list} } from "${from}";\n` : `import "${from}";\nexport {};\n`),
    );
  });
}

/** The Node built-ins the joined core takes as values, not by `import` (see builtinsAsValues). */
const BUILTINS_AS_VALUES = ["fs", "os", "path", "buffer", "timers", "url"];

/**
 * Replace the joined core's imports of some Node built-ins with the modules
 * themselves (`process.getBuiltinModule`, Node 20.16+ and 22.3+; `require`
 * before). An `import` of a built-in makes Node build its ES module face,
 * which reads every export: `node:fs`'s stream classes load Node's 19 stream
 * modules, `node:timers` its promises, `node:buffer` its File; a host
 * importing the library paid for them. The built-ins are the same objects
 * either way; the lines go first, ahead of any code that runs at import.
 */
function builtinsAsValues(code: string): string {
  const values: string[] = [];
  const rest = code.replace(
    /^import (?:\* as (\w+)|\{([^}]*)\}) from "node:(\w+)";\n/gm,
    (whole, ns: string | undefined, named: string | undefined, name: string) => {
      if (!BUILTINS_AS_VALUES.includes(name)) return whole;
      const from = `__builtin("node:${name}")`;
      values.push(
        ns !== undefined
          ? `const ${ns} = ${from};`
          : `const { ${named!.trim().replace(/\s+as\s+/g, ": ")} } = ${from};`,
      );
      return "";
    },
  );
  const left = BUILTINS_AS_VALUES.filter((name) => rest.includes(`from "node:${name}"`));
  if (left.length > 0) throw new Error(`${CORE_CODE} still imports node:${left.join(", node:")}`);
  return [
    `import { createRequire as __createRequire } from "node:module";`,
    `const __builtin = (id) => globalThis.process.getBuiltinModule?.(id) ??`,
    `  __createRequire(import.meta.url)(id);`,
    ...values,
    rest,
  ].join("\n");
}

/**
 * Library modules only the tests load: the in-memory store backend (the store's contract runs
 * on it; no setting names it). Compiled for the tests, left out of the package.
 */
const TESTS_ONLY = ["esm/store/memory.js", "esm/store/memory.d.ts"];

/**
 * The core files that only re-export from the joined core and that nothing
 * shipped imports (only the tests do): left out of the package, their
 * declarations kept.
 */
function leaveOutStubs(): void {
  const esm = path.join(out, "esm");
  const files = walk(esm).map((f) => path.relative(out, f).split(path.sep).join("/"))
    .filter((f) => !f.startsWith("esm/tests/"));
  const stubs = unreached(out, files).filter((f) =>
    fs.readFileSync(path.join(out, f), "utf8").startsWith(STUB)
  );
  const file = path.join(out, "package.json");
  const pkg = JSON.parse(fs.readFileSync(file, "utf8"));
  pkg.files.push(...stubs.map((f) => `!${f}`), ...TESTS_ONLY.map((f) => `!${f}`));
  fs.writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
}

function packageJson(): void {
  const hasCli = fs.existsSync(path.join(out, "esm/scripts/cli.js"));
  const exports: Record<string, unknown> = {};
  for (const [sub, src] of entryPoints()) {
    const js = `./esm/${src.replace(/^\.\//, "").replace(/\.ts$/, "")}`;
    exports[sub] = { types: `${js}.d.ts`, default: `${js}.js` };
  }
  exports["./package.json"] = "./package.json";
  const dependencies = Object.fromEntries(
    NPM_DEPS.filter((d) => d.dependency).map((d) => [d.node, d.dependency]),
  );
  const peers = NPM_DEPS.flatMap((d) => d.peer ? [d.peer] : []);
  const pkg = {
    name: "agent-checkpoint",
    version: deno.version,
    description:
      "Durable progress checkpoints for long, budget-capped AI-agent runs: tier prompts, tool-boundary persists and a watchdog worker that writes while your main thread is stuck.",
    license: "MIT",
    keywords: ["agent", "llm", "checkpoint", "budget", "watchdog", "deno"],
    type: "module",
    // Not `sideEffects: false`: the library's graph includes the watchdog worker's module.
    exports,
    imports: {
      [SUBSYSTEMS.specifier]: {
        "module-sync": `./esm/${SUBSYSTEMS.lazy.replace(/\.ts$/, ".js")}`,
        default: `./esm/${SUBSYSTEMS.eager.replace(/\.ts$/, ".js")}`,
      },
    },
    ...(hasCli ? { bin: { "agent-checkpoint": "./esm/scripts/cli.js" } } : {}),
    files: [
      "esm/*.js",
      "esm/*.d.ts",
      ...[...CORE_FOLDERS, ...ROOMS].flatMap((room) => [`esm/${room}/*.js`, `esm/${room}/*.d.ts`]),
      "esm/scripts/*.js",
      "esm/scripts/*.d.ts",
      "README.md",
      "docs/*.md",
      "LICENSE",
    ],
    engines: { node: ">=20" },
    dependencies,
    // The run ledger's driver on Node 20 (22.5+ has node:sqlite): installed by default, and a
    // failed native build does not fail the install (the library then says the ledger is off).
    // 12, not 13: 13 needs Node 22.
    optionalDependencies: { "better-sqlite3": TOOLS["better-sqlite3"] },
    peerDependencies: Object.fromEntries(peers.map((p) => [p.name, p.range])),
    peerDependenciesMeta: Object.fromEntries(peers.map((p) => [p.name, { optional: true }])),
  };
  fs.writeFileSync(path.join(out, "package.json"), JSON.stringify(pkg, null, 2) + "\n");
  for (const file of ["README.md", "LICENSE"]) {
    fs.copyFileSync(path.join(root, file), path.join(out, file));
  }
  // The reference the README links to, which the tests check as they check the README.
  fs.mkdirSync(path.join(out, "docs"), { recursive: true });
  for (const file of fs.readdirSync(path.join(root, "docs")).filter((f) => f.endsWith(".md"))) {
    fs.copyFileSync(path.join(root, "docs", file), path.join(out, "docs", file));
  }
  // The compiled tests resolve their dependencies from the tools' node_modules.
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

/**
 * Packages whose version in `deno.lock` is not one the Node suite installs:
 * each runtime's tests must run the same code. One line per mismatch.
 */
export function lockMismatches(lock: { specifiers?: Record<string, string> }): string[] {
  const installed = new Map<string, Set<string>>();
  for (const { install } of NPM_DEPS) {
    const m = /^(?:[^@]+@npm:)?(@?[^@]+)@(.+)$/.exec(install);
    if (!m) continue;
    if (!installed.has(m[1]!)) installed.set(m[1]!, new Set());
    installed.get(m[1]!)!.add(m[2]!);
  }
  const out: string[] = [];
  for (const [spec, resolved] of Object.entries(lock.specifiers ?? {})) {
    const m = /^npm:(@?[^@]+)@/.exec(spec);
    const versions = m && installed.get(m[1]!);
    const version = resolved.split("_")[0]!;
    if (versions && !versions.has(version)) {
      out.push(`${spec} resolves to ${version} under Deno, but Node installs ${[...versions]}`);
    }
  }
  return out;
}

/**
 * The shipped modules that nothing shipped loads: not reached from an export,
 * the command line or a script by a relative import or a `new URL("./x.js",
 * import.meta.url)` (the watchdog's worker). Type-only modules (`export {};`)
 * are left out: their declarations are what counts.
 */
export function unreached(dir: string, shipped: string[]): string[] {
  const js = shipped.filter((f) => f.endsWith(".js"));
  const entries = js.filter((f) => /^esm\/scripts\/[^/]+\.js$/.test(f));
  const pkg = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8"));
  for (const e of Object.values(pkg.exports as Record<string, unknown>)) {
    if (typeof e === "object" && e !== null) {
      entries.push(path.normalize((e as { default: string }).default));
    }
  }
  // A `#name` import is each file package.json's `imports` maps it to, under any condition.
  const targets = (value: unknown): string[] =>
    typeof value === "string"
      ? [value]
      : typeof value === "object" && value !== null
      ? Object.values(value).flatMap(targets)
      : [];
  const seen = new Set<string>();
  const todo = [...entries];
  while (todo.length > 0) {
    const file = todo.pop()!;
    if (seen.has(file) || !fs.existsSync(path.join(dir, file))) continue;
    seen.add(file);
    const text = fs.readFileSync(path.join(dir, file), "utf8");
    const specs = [
      ...text.matchAll(/(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+\.js)["']/g),
      ...text.matchAll(/["'](\.{1,2}\/[^"']+\.js)["']\s*,\s*import\.meta\.url/g),
      // A module required on first use (`load("./x.js")`, through `createRequire`).
      ...text.matchAll(/\b(?:require|load)\(\s*["'](\.{1,2}\/[^"']+\.js)["']\s*\)/g),
    ].map((m) => m[1]!);
    for (const spec of specs) todo.push(path.normalize(path.join(path.dirname(file), spec)));
    for (const m of text.matchAll(/(?:from|import)\s*\(?\s*["'](#[^"']+)["']/g)) {
      for (const target of targets(pkg.imports?.[m[1]!])) todo.push(path.normalize(target));
    }
  }
  return js.filter((f) =>
    !seen.has(path.normalize(f)) &&
    fs.readFileSync(path.join(dir, f), "utf8").replace(/\/\/.*$/gm, "").trim() !== "export {};"
  );
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
  const mismatched = lockMismatches(
    JSON.parse(fs.readFileSync(path.join(root, "deno.lock"), "utf8")),
  );
  if (mismatched.length > 0) {
    throw new Error(`two runtimes, two versions: ${mismatched.join("; ")}`);
  }
  installTools();
  fs.rmSync(out, { recursive: true, force: true });
  fs.mkdirSync(out);
  compile();
  packageJson();
  bundleCore();
  leaveOutStubs();
  const packed = pack();
  step(
    `packed ${path.relative(process.cwd(), packed.tarball)}: ${
      (packed.size / 1024).toFixed(1)
    } KiB packed, ${(packed.unpackedSize / 1024).toFixed(1)} KiB unpacked, ${packed.files} files`,
  );
  const listed = run("tar", ["tzf", packed.tarball], out).split("\n")
    .filter((l) => l.startsWith("package/")).map((l) => l.slice("package/".length));
  const dead = unreached(out, listed);
  if (dead.length > 0) {
    throw new Error(`the package ships modules nothing loads: ${dead.join(", ")}`);
  }
  lint(packed.tarball);
}
