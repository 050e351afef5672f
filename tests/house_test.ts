// Rules of the house that a reviewer would otherwise have to remember.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { runScript, underDeno } from "./_helpers.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

/** Every TypeScript source of the repository, relative to its root. */
function sources(dir = ""): string[] {
  return fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = path.join(dir, e.name);
    if (e.isDirectory()) {
      return e.name.startsWith(".") || e.name === "npm" || e.name === "node_modules"
        ? []
        : sources(rel);
    }
    return e.name.endsWith(".ts") ? [rel] : [];
  });
}

test(
  "no source takes a file path from a URL's pathname: it breaks a checkout whose path has a space",
  {
    skip: !underDeno && "reads the sources",
  },
  () => {
    const offenders = sources().filter((file) =>
      /(?:import\.meta\.url|new URL\([^)]*\))\)?\s*\.pathname/.test(
        fs.readFileSync(path.join(root, file), "utf8"),
      )
    );
    assert.deepEqual(offenders, [], "use fileURLToPath() from node:url");
  },
);

/** The folders of the subsystems; everything else at the root is the core. */
const SUBSYSTEMS = ["cli", "supervise", "workspace", "serve", "adapters", "store", "otel"];

/** The library's sources (not tests/, scripts/, docs/), relative to the root, `/`-separated. */
function librarySources(): string[] {
  return sources().map((f) => f.split(path.sep).join("/")).filter((f) =>
    !/^(tests|scripts|docs)\//.test(f)
  );
}

/**
 * The modules a source imports (static, `export … from` and dynamic, code only: the
 * examples in its documentation are left out), each relative to the root.
 */
function importsOf(file: string): string[] {
  const code = fs.readFileSync(path.join(root, file), "utf8").split("\n")
    .filter((line) => !/^\s*(\*|\/\/)/.test(line)).join("\n");
  const found = code.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^import\s+)"(\.{1,2}\/[^"]+)"/gm);
  return [...found].map((m) =>
    path.posix.normalize(path.posix.join(path.posix.dirname(file), m[1]!))
  );
}

/** The subsystem a root-relative path lies in, or undefined for the core. */
const roomOf = (file: string) => SUBSYSTEMS.find((s) => file.startsWith(`${s}/`));

/** The core's folders: the parts of a run (run.ts is their thin handle). Core, not a subsystem. */
const CORE_FOLDERS = ["run"];

/** Whether a root-relative library path is the core's: a root module or one in a core folder. */
const isCore = (file: string) =>
  !file.includes("/") || CORE_FOLDERS.some((d) => file.startsWith(`${d}/`));

test(
  "the core never imports a subsystem (only the arrows on the allow-list, which are to go)",
  { skip: !underDeno && "reads the sources" },
  () => {
    // The only arrows from the core into a subsystem: the composition root's. The rest of the
    // core takes the run store, the snapshots and the tracer through interfaces it defines
    // (the store's records are the core's own types, in `_ledger.ts`), and the watchdog's
    // thread takes the store by the module name mod.ts gives it.
    const allowed = new Set([
      // The composition root: mod.ts plugs the run store and the snapshots into the keeper.
      "mod.ts -> store/mod.ts",
      "mod.ts -> workspace/mod.ts",
      "mod.ts -> otel/mod.ts",
    ]);
    const arrows = librarySources().filter(isCore).flatMap((file) =>
      importsOf(file).filter((to) => roomOf(to) !== undefined).map((to) => `${file} -> ${to}`)
    );
    assert.ok(arrows.length > 0 || allowed.size === 0, "the import scan found nothing");
    assert.deepEqual(arrows.filter((a) => !allowed.has(a)), [], "a new arrow from the core up");
  },
);

test(
  "a run's parts never import run.ts (nor mod.ts): the run notifies its parts, never the reverse",
  { skip: !underDeno && "reads the sources" },
  () => {
    const parts = librarySources().filter((f) => CORE_FOLDERS.some((d) => f.startsWith(`${d}/`)));
    assert.ok(parts.length > 0, "no parts found");
    const arrows = parts.flatMap((file) =>
      importsOf(file).filter((to) =>
        to === "run.ts" || to === "mod.ts" || to === "agent_checkpoint.ts"
      )
        .map((to) => `${file} -> ${to}`)
    );
    assert.deepEqual(arrows, [], "a part reaches back up into its run");
  },
);

/** The modules a source loads when it runs: `import type` and `export type` left out. */
function runtimeImportsOf(file: string): string[] {
  const code = fs.readFileSync(path.join(root, file), "utf8").split("\n")
    .filter((line) => !/^\s*(\*|\/\/)/.test(line)).join("\n");
  const found = code.matchAll(
    /^(import|export)\s+(type\s+)?(?:[^";]*?\bfrom\s*)?"(\.{1,2}\/[^"]+)"|\bimport\s*\(\s*"(\.{1,2}\/[^"]+)"/gm,
  );
  return [...found].filter((m) => m[2] === undefined).map((m) =>
    path.posix.normalize(path.posix.join(path.posix.dirname(file), (m[3] ?? m[4])!))
  );
}

test(
  "no root module but the composition root loads a subsystem when it runs",
  { skip: !underDeno && "reads the sources" },
  () => {
    const arrows = librarySources().filter((f) => isCore(f) && f !== "mod.ts").flatMap((
      file,
    ) =>
      runtimeImportsOf(file).filter((to) => roomOf(to) !== undefined).map((to) =>
        `${file} -> ${to}`
      )
    );
    assert.deepEqual(arrows, [], "hand the subsystem in from mod.ts, or its module's name");
    // The scan sees runtime imports (mod.ts has three).
    assert.ok(runtimeImportsOf("mod.ts").some((to) => roomOf(to) === "store"));
  },
);

/** The cycles of an import graph: its strongly connected components of two or more modules. */
function cycles(graph: Map<string, string[]>): string[][] {
  let index = 0;
  const order = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    order.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!order.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, order.get(w)!));
    }
    if (low.get(v) === order.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!order.has(v)) visit(v);
  return found;
}

test(
  "no import cycle in the library or its scripts (type imports counted: a reader follows them too)",
  { skip: !underDeno && "reads the sources" },
  () => {
    const files = sources().map((f) => f.split(path.sep).join("/"))
      .filter((f) => !/^(tests|docs)\//.test(f));
    const graph = new Map(files.map((f) => [f, importsOf(f)]));
    assert.ok(graph.get("mod.ts")!.length > 5, "the import scan found nothing");
    // The scan finds a cycle where there is one.
    assert.deepEqual(cycles(new Map([["a", ["b"]], ["b", ["a"]], ["c", ["a"]]])), [["a", "b"]]);
    assert.deepEqual(cycles(graph), [], "a cycle: move what both need to a module of its own");
  },
);

/** The statuses a run can end with, as the one table in `_record.ts` lists them. */
const END_STATUS_WORDS = ["done", "capped", "failed", "aborted", "deadline"];

/**
 * Where a source writes the whole list of end statuses (as a union, an array, in any order,
 * the browser script's text included): runs of quoted statuses with only `,` or `|` between.
 */
function endStatusLists(file: string): number {
  const code = fs.readFileSync(path.join(root, file), "utf8").split("\n")
    .filter((line) => !/^\s*(\*|\/\/)/.test(line)).join("\n");
  const word = `(["'])(?:${END_STATUS_WORDS.join("|")})\\1`;
  const runs = code.match(new RegExp(`${word}(?:\\s*[,|]\\s*${word})+`, "g")) ?? [];
  return runs.filter((run) => END_STATUS_WORDS.every((w) => run.includes(`"${w}"`))).length;
}

test(
  "the end statuses are written once (the table in _record.ts): types and scripts are made from it",
  { skip: !underDeno && "reads the sources" },
  () => {
    const written = sources().map((f) => f.split(path.sep).join("/"))
      .filter((f) => !/^(tests|docs)\//.test(f))
      .flatMap((file) => Array(endStatusLists(file)).fill(file));
    assert.deepEqual(written, ["_record.ts"], "import EndStatus or END_STATUSES instead");
  },
);

/**
 * The lines of a source's silent catches: a `catch` block, or a `.catch(() => …)` handler
 * returning a constant, that calls nothing (no log line, no fail-open handler), throws
 * nothing, and carries no comment saying why silence is right.
 */
function silentCatches(text: string): number[] {
  const lines = text.split("\n");
  const lineOf = (index: number) => text.slice(0, index).split("\n").length;
  const found: number[] = [];
  for (const m of text.matchAll(/\bcatch\s*(?:\([^)]*\))?\s*\{/g)) {
    const line = lineOf(m.index);
    if (/^\s*(\*|\/\/)/.test(lines[line - 1]!)) continue; // in documentation
    let depth = 1;
    let i = m.index + m[0].length;
    for (; i < text.length && depth > 0; i++) {
      if (text[i] === "{") depth++;
      else if (text[i] === "}") depth--;
    }
    const body = text.slice(m.index + m[0].length, i - 1);
    if (/\/\/|\/\*/.test(body) || /[\w\])]\s*\(|\bthrow\b|\bnew\b/.test(body)) continue;
    found.push(line);
  }
  const swallow = /\.catch\(\s*\(\)\s*=>\s*(?:\{\s*\}|undefined|null|false|true|\d+)\s*\)/g;
  for (const m of text.matchAll(swallow)) {
    const line = lineOf(m.index);
    if (/\/\/|\/\*/.test(lines[line - 1]!) || /^\s*\/\//.test(lines[line - 2] ?? "")) continue;
    found.push(line);
  }
  return found;
}

test(
  "every catch that returns a default logs through the fail-open mechanism or says why silence is right",
  { skip: !underDeno && "reads the sources" },
  () => {
    const silent = librarySources().flatMap((file) =>
      silentCatches(fs.readFileSync(path.join(root, file), "utf8")).map((line) => `${file}:${line}`)
    );
    assert.deepEqual(silent, [], "log it (log.ts failOpen), or say in a comment why not");
    // The scan finds one where there is one.
    const sample = "try {\n  f();\n} catch {\n  return 0;\n}\np.catch(() => {});\n";
    assert.deepEqual(silentCatches(sample), [3, 6]);
  },
);

/** The modules a thread is started with: the only ones that read `parentPort` or `workerData`. */
const ENTRIES = ["_watchdog_worker.ts", "store/_bridge_entry.ts"];

test(
  "nothing starts on import: only the threads' entry modules read parentPort or workerData",
  { skip: !underDeno && "reads the sources" },
  () => {
    const readers = librarySources().filter((file) =>
      /import\s*\{[^}]*\b(parentPort|workerData)\b[^}]*\}\s*from\s*"node:worker_threads"/.test(
        fs.readFileSync(path.join(root, file), "utf8"),
      )
    );
    assert.deepEqual(readers.sort(), [...ENTRIES].sort());
  },
);

test(
  "a subsystem never imports another subsystem's private `_` file",
  { skip: !underDeno && "reads the sources" },
  () => {
    const arrows = librarySources().flatMap((file) => {
      const from = roomOf(file);
      if (from === undefined) return [];
      return importsOf(file).filter((to) => {
        const into = roomOf(to);
        return into !== undefined && into !== from && path.posix.basename(to).startsWith("_");
      }).map((to) => `${file} -> ${to}`);
    });
    assert.deepEqual(
      arrows,
      [],
      "import the other subsystem's mod.ts, or move the helper to the core",
    );
  },
);

/**
 * The store's backends: each implements the store's port (`store/types.ts`), and only the
 * store opens them (its `mod.ts` and the bridge's thread, by the backend's module URL).
 */
const BACKEND_MODULES = ["store/sqlite.ts", "store/postgres.ts", "store/memory.ts"];

test(
  "nothing outside store/ imports a store backend's module: the rest sees the store's port",
  { skip: !underDeno && "reads the sources" },
  () => {
    // Every module of store/ that exports a `backend` is listed, so a new one is guarded too.
    const backends = librarySources().filter((file) =>
      file.startsWith("store/") &&
      /^export const backend\b/m.test(fs.readFileSync(path.join(root, file), "utf8"))
    );
    assert.deepEqual(
      backends.sort(),
      BACKEND_MODULES.filter((f) => f !== "store/sqlite.ts").sort(),
    );
    const arrows = librarySources().flatMap((file) =>
      file.startsWith("store/")
        ? []
        : importsOf(file).filter((to) => BACKEND_MODULES.includes(to)).map((to) =>
          `${file} -> ${to}`
        )
    );
    assert.deepEqual(arrows, [], "import store/mod.ts (or the port, store/types.ts)");
  },
);

/** The most `.ts` files the root holds: each private module there is one a reader must place. */
const ROOT_FILES = 26;

test(
  `the root holds at most ${ROOT_FILES} .ts files: a new one joins the module whose job it is`,
  { skip: !underDeno && "reads the sources" },
  () => {
    const files = fs.readdirSync(root).filter((f) => f.endsWith(".ts")).sort();
    assert.ok(files.length <= ROOT_FILES, `${files.length} files: ${files.join(", ")}`);
  },
);

/** The most modules one tier-crossing `preToolCall` may run code in. */
const HOOK_MODULES = 8;

test(
  `a tier-crossing preToolCall runs code in at most ${HOOK_MODULES} core modules, none of them the keeper`,
  { skip: !underDeno && "traces the sources with V8's precise coverage" },
  async () => {
    // A process of its own: the coverage counts then cover nothing but the traced call.
    const script = path.join(root, "scripts", "trace_hook.ts");
    const { code, stdout, stderr } = await runScript(script, ["--json"], { timeoutMs: 120_000 });
    assert.equal(code, 0, stderr);
    const modules = (JSON.parse(stdout.trim().split("\n").at(-1)!) as { module: string }[])
      .map((m) => m.module.split(path.sep).join("/"));
    const list = modules.join(", ");
    assert.ok(modules.length > 0, "the trace found nothing");
    assert.ok(modules.length <= HOOK_MODULES, `${modules.length} modules: ${list}`);
    assert.ok(!modules.includes("agent_checkpoint.ts"), `the hook calls back up: ${list}`);
    assert.deepEqual(modules.filter((m) => roomOf(m) !== undefined), [], "a subsystem ran");
  },
);
