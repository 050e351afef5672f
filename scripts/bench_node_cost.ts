/**
 * What the npm build costs a Node host, measured from outside the process
 * (not part of the test suite; run `deno task build:npm` first):
 *
 * - import time: `node -e 0` against `node --input-type=module -e 'await
 *   import(".../npm/esm/mod.js")'`, interleaved, medians, and the RSS each
 *   holds (read from `/proc/<pid>/status` by this parent); beside them the
 *   same import of an empty module, the floor of any ES module host;
 * - RSS per live run: a Node process that starts N runs and keeps their
 *   handles, against the same process with 1 run, read from `/proc`; and the
 *   same pair after each process has first started and ended 1,000 runs. A
 *   fresh process's first thousand runs also pay what any busy process pays
 *   once (V8's young generation grown and filled, the optimizing compiler's
 *   memory and code pages); after that warm-up the difference is what the
 *   live runs hold.
 *
 * Run: `deno task bench --only node_cost`, or `deno run -A scripts/bench_node_cost.ts
 * [--quick] [--runs 1000,20000] [--pairs 41] [--rounds 5] [--mod
 * <another build's esm/mod.js>]`.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { flag, fmtBytes, fmtMs, median } from "./_bench_util.ts";

const args = process.argv.slice(2);
const MOD = path.resolve(
  flag(args, "--mod") ?? fileURLToPath(new URL("../npm/esm/mod.js", import.meta.url)),
);
const quick = args.includes("--quick");
const pairs = Number(flag(args, "--pairs", quick ? "9" : "41"));
const sizes = (flag(args, "--runs", "1000,20000") ?? "").split(",").map(Number);
const rounds = Number(flag(args, "--rounds", quick ? "1" : "5"));

/** Run `node argv`; at the child's first stdout line, read its VmRSS (KiB → bytes). */
function node(argv: string[]): Promise<{ ms: number; rss: number }> {
  return new Promise((resolve, reject) => {
    const t = performance.now();
    const child = spawn("node", argv, { stdio: ["pipe", "pipe", "inherit"], cwd: os.tmpdir() });
    let rss = NaN;
    child.stdout.once("data", () => {
      const status = fs.readFileSync(`/proc/${child.pid}/status`, "utf8");
      rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]) * 1024;
      child.stdin.end("\n");
    });
    child.on("error", reject);
    child.on("exit", (code) => {
      if (code !== 0) reject(new Error(`node exited with ${code}`));
      else resolve({ ms: performance.now() - t, rss });
    });
  });
}

const hold = `process.stdout.write("ready\\n"); process.stdin.once("data", () => process.exit(0));`;

async function importCost(): Promise<void> {
  const bare: number[] = [];
  const esm: number[] = [];
  const lib: number[] = [];
  // The peer of an ES module host: the same import of an empty module, which starts Node's
  // ES module loader as the library's import does (bare `node -e 0` never starts it).
  const empty = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-empty-")), "empty.mjs");
  fs.writeFileSync(empty, "");
  const importOf = (
    file: string,
  ) => ["--input-type=module", "-e", `await import(${JSON.stringify(file)})`];
  for (let i = 0; i < pairs; i++) {
    const a = () => node(["-e", "0"]).then((r) => bare.push(r.ms));
    const e = () => node(importOf(empty)).then((r) => esm.push(r.ms));
    const b = () => node(importOf(MOD)).then((r) => lib.push(r.ms));
    if (i % 2) await a().then(e).then(b);
    else await b().then(e).then(a);
  }
  fs.rmSync(path.dirname(empty), { recursive: true, force: true });
  const bareRss: number[] = [];
  const libRss: number[] = [];
  for (let i = 0; i < 5; i++) {
    bareRss.push((await node(["--input-type=module", "-e", hold])).rss);
    libRss.push(
      (await node([
        "--input-type=module",
        "-e",
        `await import(${JSON.stringify(MOD)}); ${hold}`,
      ])).rss,
    );
  }
  const b = median(bare), e = median(esm), l = median(lib);
  console.log(
    `import: node -e 0 ${fmtMs(b)}, importing mod.js ${fmtMs(l)}: +${fmtMs(l - b)} (${
      (l / b).toFixed(2)
    }×), RSS +${fmtBytes(median(libRss) - median(bareRss))}; importing an empty module ${
      fmtMs(e)
    }, so +${fmtMs(l - e)} over an ES module host (medians of ${pairs} interleaved runs)`,
  );
}

/** Runs each process of the warmed pair starts and ends before it starts its live ones. */
const WARM = 1000;

/** VmRSS of a Node process that starts `n` runs (after `warm` started and ended) and keeps their handles. */
async function perRun(n: number, warm = 0): Promise<number> {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-rss-"));
  const code = `
    const { createAgentCheckpoint } = await import(${JSON.stringify(MOD)});
    const ac = createAgentCheckpoint({ home: ${JSON.stringify(home)}, env: {} });
    const start = (id) => {
      const run = ac.startRun({ sessionId: id, caps: { turns: 50, seconds: 3600 } });
      run.preLlmCall(); run.preToolCall("search"); run.postToolCall("search", { ok: true });
      return run;
    };
    for (let i = 0; i < ${warm}; i++) await start("w-" + i).end();
    const runs = [];
    for (let i = 0; i < ${n}; i++) runs.push(start("s-" + i));
    await new Promise((r) => setTimeout(r, 1500)); // the watchdog's looks at every run
    globalThis.gc();
    // The handles stay reachable until the parent has read the RSS: a run whose handle is
    // collected gives its slot back.
    process.stdout.write("ready\\n");
    process.stdin.once("data", () => process.exit(runs.length === ${n} ? 0 : 1));`;
  try {
    return (await node(["--expose-gc", "--input-type=module", "-e", code])).rss;
  } finally {
    fs.rmSync(home, { recursive: true, force: true });
  }
}

if (!fs.existsSync(MOD)) {
  console.log("npm/esm/mod.js is missing: run deno task build:npm");
  process.exit(1);
}
await importCost();
for (const n of sizes) {
  const fresh: number[] = [];
  const warmed: number[] = [];
  for (let r = 0; r < rounds; r++) {
    fresh.push((await perRun(n) - await perRun(1)) / (n - 1));
    warmed.push((await perRun(n, WARM) - await perRun(1, WARM)) / (n - 1));
  }
  const line = (per: number[]) => `${fmtBytes(median(per))} (${per.map(fmtBytes).join(", ")})`;
  console.log(
    `RSS per live run at ${n.toLocaleString()}: ${line(fresh)} from a fresh process; ${
      line(warmed)
    } after ${WARM.toLocaleString()} runs started and ended (the process's VmRSS minus the same with 1 run)`,
  );
}
