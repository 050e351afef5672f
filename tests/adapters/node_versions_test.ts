/**
 * The table of Node versions (docs/adapters.md) per adapter, checked against the
 * `engines.node` of each framework it names and of everything that framework
 * installs, as installed here: Deno's npm cache (its versions from
 * `deno.lock`) under Deno, `node_modules` under Node. A framework release that
 * raises its Node floor, or a table edit that lowers one, fails here.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { fileURLToPath } from "node:url";
import * as path from "node:path";
import process from "node:process";
import { execFileSync } from "node:child_process";
import { underDeno } from "../_helpers.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
/** The repository: two levels up in Deno, four from the compiled tests in npm/esm/tests/adapters. */
const root = path.resolve(here, underDeno ? "../.." : "../../../..");

interface Row {
  adapter: string;
  frameworks: { name: string; version: string }[];
  node: number;
}

/** The rows of the Node table, under the "## Node versions" heading of docs/adapters.md. */
function readmeRows(): Row[] {
  const readme = fs.readFileSync(path.join(root, "docs", "adapters.md"), "utf8");
  const section = readme.split(/^## Node versions$/m)[1]?.split(/^#/m)[0];
  assert.ok(section, "docs/adapters.md has a ## Node versions section");
  const rows: Row[] = [];
  for (const line of section.split("\n")) {
    const cells = line.split("|").slice(1, -1).map((c) => c.trim());
    const adapter = cells[0]?.match(/^`(agent-checkpoint(?:\/[a-z-]+)?)`$/)?.[1];
    if (!adapter) continue;
    const frameworks = [...(cells[1] ?? "").matchAll(/`([^`]+)` ([\d.]+(?:, [\d.]+)*)/g)]
      .flatMap(([, name, versions]) =>
        versions!.split(", ").map((version) => ({ name: name!, version }))
      );
    const node = Number(cells[2]?.match(/^≥ (\d+)$/)?.[1]);
    const core = adapter === "agent-checkpoint";
    assert.ok((core || frameworks.length > 0) && node > 0, `a readable row: ${line}`);
    rows.push({ adapter, frameworks, node });
  }
  return rows;
}

/** The lowest Node major an `engines.node` range allows (forms `>=x`, `^x`, `x`, joined by `||`). */
function floorOf(range: string): number {
  return Math.min(
    ...range.split("||").map((alternative) => {
      const m = alternative.trim().match(/^(?:>=|\^|~)?\s*v?(\d+)(?:\.\d+)*(?:\.x)?$/);
      assert.ok(m, `an engines.node form this test reads: ${JSON.stringify(range)}`);
      return Number(m[1]);
    }),
  );
}

interface Pkg {
  name: string;
  version: string;
  engines?: { node?: string };
  dependencies?: Record<string, string>;
}

const readPkg = (file: string): Pkg => JSON.parse(fs.readFileSync(file, "utf8"));

/**
 * Each package a framework installs, with its `engines.node`: from Deno's npm
 * cache, following the versions `deno.lock` resolved.
 */
function closureInDeno(name: string, version: string): Pkg[] {
  const info = JSON.parse(execFileSync(process.execPath, ["info", "--json"], { encoding: "utf8" }));
  const registry = path.join(info.npmCache, "registry.npmjs.org");
  const lock = JSON.parse(fs.readFileSync(path.join(root, "deno.lock"), "utf8"));
  const npm = lock.npm as Record<string, { dependencies?: string[] }>;
  const nameVersion = (key: string) => {
    const base = key.split("_")[0]!;
    const at = base.lastIndexOf("@");
    return { name: base.slice(0, at), version: base.slice(at + 1) };
  };
  /** A lock entry: `name@version_peers`, named in dependencies as `name` when only one is locked. */
  const keyOf = (dep: string) =>
    dep in npm ? dep : Object.keys(npm).find((k) => k.startsWith(`${dep}@`));
  const start = Object.keys(npm).find((k) => k.split("_")[0] === `${name}@${version}`);
  assert.ok(start, `deno.lock resolves ${name}@${version}`);
  const seen = new Map<string, Pkg>();
  const todo = [start];
  while (todo.length > 0) {
    const key = todo.pop()!;
    if (seen.has(key)) continue;
    const { name: n, version: v } = nameVersion(key);
    seen.set(key, readPkg(path.join(registry, n, v, "package.json")));
    for (const dep of npm[key]?.dependencies ?? []) {
      const next = keyOf(dep);
      assert.ok(next, `deno.lock has ${dep}`);
      todo.push(next);
    }
  }
  return [...seen.values()];
}

/** The same from `node_modules`, resolving each dependency as Node does. */
function closureInNode(name: string, version: string): Pkg[] {
  const modules = (dir: string) => path.join(dir, "node_modules");
  let top = here;
  while (!fs.existsSync(modules(top)) && path.dirname(top) !== top) top = path.dirname(top);
  // The framework itself may sit under an alias (ai-v5 for ai@5).
  const entries = fs.readdirSync(modules(top)).flatMap((e) =>
    e.startsWith("@") ? fs.readdirSync(path.join(modules(top), e)).map((s) => `${e}/${s}`) : [e]
  );
  const start = entries.map((e) => path.join(modules(top), e)).find((dir) => {
    const file = path.join(dir, "package.json");
    if (!fs.existsSync(file)) return false;
    const pkg = readPkg(file);
    return pkg.name === name && pkg.version === version;
  });
  assert.ok(start, `node_modules has ${name}@${version}`);
  const seen = new Map<string, Pkg>();
  const todo = [fs.realpathSync(start)];
  while (todo.length > 0) {
    const dir = todo.pop()!;
    if (seen.has(dir)) continue;
    const pkg = readPkg(path.join(dir, "package.json"));
    seen.set(dir, pkg);
    for (const dep of Object.keys(pkg.dependencies ?? {})) {
      for (let from = dir;; from = path.dirname(from)) {
        const candidate = path.join(modules(from), dep);
        if (fs.existsSync(path.join(candidate, "package.json"))) {
          todo.push(fs.realpathSync(candidate));
          break;
        }
        assert.ok(path.dirname(from) !== from, `${pkg.name} finds its dependency ${dep}`);
      }
    }
  }
  return [...seen.values()];
}

test("README: the Node version of each adapter is the highest engines.node floor of what its framework installs", () => {
  const rows = readmeRows();
  const exports = JSON.parse(fs.readFileSync(path.join(root, "deno.json"), "utf8")).exports;
  const entries = Object.keys(exports).map((k) => `agent-checkpoint${k.slice(1)}`);
  assert.deepEqual([...new Set(rows.map((r) => r.adapter))].sort(), entries.sort());
  // The package's own floor, as the npm build declares it.
  const build = fs.readFileSync(path.join(root, "scripts/build_npm.ts"), "utf8");
  const own = Number(build.match(/engines: \{ node: ">=(\d+)" \}/)?.[1]);
  assert.ok(own > 0, "the npm build declares engines.node");
  for (const row of rows) {
    let floor = own;
    let because = `agent-checkpoint itself (engines.node >=${own})`;
    for (const { name, version } of row.frameworks) {
      const installed = underDeno ? closureInDeno(name, version) : closureInNode(name, version);
      for (const pkg of installed) {
        const range = pkg.engines?.node;
        if (range === undefined) continue;
        const f = floorOf(range);
        if (f > floor) [floor, because] = [f, `${pkg.name}@${pkg.version} (engines.node ${range})`];
      }
    }
    assert.equal(
      row.node,
      floor,
      `${row.adapter} with ${
        row.frameworks.map((f) => `${f.name}@${f.version}`).join(", ")
      }: ${because}`,
    );
  }
});
