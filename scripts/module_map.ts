/**
 * The library's module map: each module's imports (a `type` mark for one taken
 * as types only), the arrows from the core into a subsystem, the import cycles,
 * and the modules each thread's entry loads when it runs. Reads the sources of
 * a checkout (this one, or the one given).
 *
 *     deno run -A scripts/module_map.ts [checkout] [--list]
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
const root = path.resolve(
  args.find((a) => !a.startsWith("--")) ?? fileURLToPath(new URL("..", import.meta.url)),
);
const list = args.includes("--list");
const SUBSYSTEMS = ["cli", "supervise", "workspace", "serve", "adapters", "store", "otel"];
const roomOf = (file: string) => SUBSYSTEMS.find((s) => file.startsWith(`${s}/`));

function sources(dir = ""): string[] {
  return fs.readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = dir === "" ? e.name : `${dir}/${e.name}`;
    if (e.isDirectory()) {
      return /^(\.|npm$|node_modules$|tests$|scripts$|docs$)/.test(e.name) ? [] : sources(rel);
    }
    return e.name.endsWith(".ts") ? [rel] : [];
  });
}

/** A module's imports: [target, types only]. */
function importsOf(file: string): [string, boolean][] {
  const code = fs.readFileSync(path.join(root, file), "utf8").split("\n")
    .filter((line) => !/^\s*(\*|\/\/)/.test(line)).join("\n");
  const found = code.matchAll(
    /^(?:import|export)\s+(type\s+)?(?:[^";]*?\bfrom\s*)?"(\.{1,2}\/[^"]+)"|\bimport\s*\(\s*"(\.{1,2}\/[^"]+)"/gm,
  );
  return [...found].map((m) => [
    path.posix.normalize(path.posix.join(path.posix.dirname(file), (m[2] ?? m[3])!)),
    m[1] !== undefined,
  ]);
}

const files = sources().sort();
const graph = new Map(files.map((f) => [f, importsOf(f)]));

function cycles(): string[][] {
  let index = 0;
  const order = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    order.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const [w] of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!order.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, order.get(w)!));
    }
    if (low.get(v) === order.get(v)) {
      const c: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        c.push(w);
      } while (w !== v);
      if (c.length > 1) out.push(c.sort());
    }
  };
  for (const v of graph.keys()) if (!order.has(v)) visit(v);
  return out;
}

/** The modules loading `from` loads when it runs (type imports left out). */
function loads(from: string): string[] {
  const seen = new Set<string>();
  const walk = (f: string) => {
    if (seen.has(f) || !graph.has(f)) return;
    seen.add(f);
    for (const [to, types] of graph.get(f)!) if (!types) walk(to);
  };
  walk(from);
  return [...seen].sort();
}

const core = files.filter((f) => !f.includes("/"));
const arrows = core.flatMap((f) =>
  graph.get(f)!.filter(([to]) => roomOf(to) !== undefined).map(([to, t]) =>
    `${f} -> ${to}${t ? " (types)" : ""}`
  )
);
console.log(`${root}: ${files.length} library modules, ${core.length} in the core (the root)`);
if (list) {
  for (const f of files) {
    const to = graph.get(f)!.map(([t, types]) => types ? `${t} (type)` : t);
    console.log(`  ${f} -> ${to.join(", ") || "(none)"}`);
  }
}
console.log(`core -> subsystem arrows (${arrows.length}):`);
for (const a of arrows) console.log(`  ${a}`);
const found = cycles();
console.log(`import cycles (${found.length}):`);
for (const c of found) console.log(`  ${c.join(" <-> ")}`);
for (
  const entry of [
    "_watchdog_worker.ts",
    "watchdog.ts",
    "store/_bridge_entry.ts",
    "store/_bridge_worker.ts",
  ]
) {
  if (!graph.has(entry)) continue;
  const l = loads(entry);
  console.log(
    `${entry} loads ${l.length} modules (${l.filter((f) => roomOf(f)).length} of a subsystem)`,
  );
}
const main = loads("mod.ts");
console.log(`mod.ts loads ${main.length} modules`);
