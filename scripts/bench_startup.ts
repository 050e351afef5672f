/**
 * What a host pays to start: importing the package, and the fleet store's
 * starts and intents. Each figure beside a floor taken in the same run, each
 * measured from outside the process where that is what a user sees:
 *
 * - Deno: `deno run` of a script that imports `mod.ts` against one that
 *   imports nothing (wall time, interleaved, medians);
 * - Node: `node -e ''` against importing the built package (`npm/esm/mod.js`,
 *   made by `deno task build:npm`): wall time and RSS;
 * - PostgreSQL (`AGENT_CHECKPOINT_TEST_PG`, else
 *   `postgres://postgres@127.0.0.1:5432/test`), in a fresh process each round:
 *   the first `startRun` of a process (its keeper made a second before, as
 *   a host sets up: `--pause-ms`), `startRun` back to back, `startRun` right after the
 *   previous run's `end()`, and `await run.effects.intent()`, each against a bare
 *   INSERT of one row on a connection of the same process.
 *
 * With `--base <dir>` (another checkout, e.g. `git worktree add /tmp/base
 * main`, with its own `npm/` build for the Node row) the same figures of that
 * code are taken in the same run, interleaved with this checkout's: before
 * and after, side by side.
 *
 *   deno run -A scripts/bench_startup.ts [--quick] [--base <dir>] [--only deno,node,pg] [--pause-ms 1000]
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath, pathToFileURL } from "node:url";
import { flag, fmtBytes, fmtMs, lastJson, median, pct, runCommand } from "./_bench_util.ts";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const ROOT = fileURLToPath(new URL("../", import.meta.url));
/** How long after making its keeper a child starts its first run, ms. */
const pauseMs = Number(flag(args, "--pause-ms", "1000"));
const PG = process.env.AGENT_CHECKPOINT_TEST_PG ?? "postgres://postgres@127.0.0.1:5432/test";

/** One process's fleet-store figures, ms. */
interface PgFigures {
  bare: number[];
  keeperMs: number;
  firstMs: number;
  /** Whether the store thread had connected when the first start came. */
  connected: boolean;
  backToBack: number[];
  afterEnd: number[];
  intents: number[];
}

/** In a child: the fleet store's figures of the checkout at `root`, in a schema of its own. */
async function pgChild(root: string): Promise<void> {
  const mod = await import(pathToFileURL(path.join(root, "mod.ts")).href);
  const { loadDriver } = await import(pathToFileURL(path.join(root, "store/postgres.ts")).href);
  const n = quick ? 100 : 300;
  const schema = `ac_bench_start_${process.pid}`;
  const sql = (await loadDriver())(PG, { max: 1, onnotice: () => {}, connect_timeout: 3 });
  await sql.unsafe(`CREATE SCHEMA ${schema}`);
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-start-"));
  try {
    await sql.unsafe(`CREATE TABLE ${schema}.t (k text PRIMARY KEY, v text)`);
    const bare: number[] = [];
    const insert = async (k: string) => {
      const t = performance.now();
      await sql.unsafe(`INSERT INTO ${schema}.t (k, v) VALUES ($1, $2)`, [k, "x"]);
      bare.push(performance.now() - t);
    };
    for (let i = 0; i < 20; i++) await insert(`w${i}`);
    bare.length = 0;
    const url = new URL(PG);
    url.searchParams.set("schema", schema);
    let t = performance.now();
    const ac = mod.createAgentCheckpoint({
      home,
      env: {},
      logger: () => {},
      settings: { store: url.href, stall_window_seconds: 0 },
    });
    const keeperMs = performance.now() - t;
    await new Promise((r) => setTimeout(r, pauseMs)); // a host sets up between the two
    // Whether the store thread's connection is there before the first start.
    const connected = (await sql.unsafe(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`,
      [`agent-checkpoint ${schema}`],
    ))[0]?.n > 0;
    t = performance.now();
    const first = ac.startRun({ sessionId: "first" });
    const firstMs = performance.now() - t;
    await first.end({ status: "done" });
    const backToBack: number[] = [];
    const afterEnd: number[] = [];
    const intents: number[] = [];
    const live = [];
    // Interleaved with the floor's INSERTs, so that both see the same weather.
    for (let i = 0; i < n; i++) {
      await insert(`b${i}`);
      t = performance.now();
      live.push(ac.startRun({ sessionId: `b-${i}` }));
      backToBack.push(performance.now() - t);
    }
    for (const run of live) await run.end({ status: "done" });
    let previous = ac.startRun({ sessionId: "e-0" });
    for (let i = 1; i <= n; i++) {
      await insert(`e${i}`);
      await previous.end({ status: "done" });
      t = performance.now();
      previous = ac.startRun({ sessionId: `e-${i}` });
      afterEnd.push(performance.now() - t);
    }
    await previous.effects.intent("warm", {});
    for (let i = 0; i < n; i++) {
      await insert(`i${i}`);
      t = performance.now();
      await previous.effects.intent("pay", { i });
      intents.push(performance.now() - t);
    }
    await previous.end({ status: "done" });
    await ac.close();
    const out: PgFigures = {
      bare,
      keeperMs,
      firstMs,
      connected,
      backToBack,
      afterEnd,
      intents,
    };
    console.log(JSON.stringify(out));
  } finally {
    await sql.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await sql.end({ timeout: 1 });
    fs.rmSync(home, { recursive: true, force: true });
  }
}

if (args[0] === "--pg-child") {
  await pgChild(args[1]!);
  process.exit(0);
}

const base = flag(args, "--base");
const only = new Set((flag(args, "--only") ?? "deno,node,pg").split(","));
/** The checkouts measured: this one, and the base when given. */
const roots: [string, string][] = [["this", ROOT]];
if (base) roots.unshift(["base", path.resolve(base)]);
/** `/usr/bin/time`, when there is one: each child's CPU time beside its wall time. */
const TIME = fs.existsSync("/usr/bin/time") ? "/usr/bin/time" : undefined;
/** One run of a command: wall and CPU (user + system) time, ms (CPU NaN without TIME). */
const wall = async (cmd: string, argv: string[]): Promise<{ ms: number; cpu: number }> => {
  const t = performance.now();
  const r = TIME
    ? await runCommand(TIME, ["-f", "cpu %U %S", cmd, ...argv], { cwd: os.tmpdir() })
    : await runCommand(cmd, argv, { cwd: os.tmpdir() });
  const ms = performance.now() - t;
  if (r.code !== 0) throw new Error(`${cmd} ${argv.join(" ")}: ${r.stderr.trim().slice(-400)}`);
  const m = /cpu (\d+\.\d+) (\d+\.\d+)\s*$/.exec(r.stderr);
  return { ms, cpu: m ? (Number(m[1]) + Number(m[2])) * 1000 : NaN };
};
/** Medians of wall and CPU times. */
const medians = (xs: { ms: number; cpu: number }[]) => ({
  ms: median(xs.map((x) => x.ms)),
  cpu: median(xs.map((x) => x.cpu)),
});
const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;

async function denoImport(): Promise<void> {
  const pairs = quick ? 8 : 20;
  console.log(
    `\n## Deno: deno run of a script importing mod.ts, against an empty one (${pairs} rounds)`,
  );
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-deno-"));
  const empty = path.join(dir, "empty.ts");
  fs.writeFileSync(empty, "");
  const scripts = roots.map(([name, root]) => {
    const file = path.join(dir, `${name}.ts`);
    fs.writeFileSync(
      file,
      `import ${JSON.stringify(pathToFileURL(path.join(root, "mod.ts")).href)};\n`,
    );
    return file;
  });
  const run = (file: string) => wall(process.execPath, ["run", "-A", "--quiet", file]);
  for (const file of [empty, ...scripts]) await run(file); // compiled and cached once
  const floor: { ms: number; cpu: number }[] = [];
  const times: { ms: number; cpu: number }[][] = scripts.map(() => []);
  for (let i = 0; i < pairs; i++) {
    const order = [-1, ...scripts.map((_, j) => j)];
    if (i % 2) order.reverse();
    for (const j of order) {
      if (j < 0) floor.push(await run(empty));
      else times[j]!.push(await run(scripts[j]!));
    }
  }
  fs.rmSync(dir, { recursive: true, force: true });
  const f = medians(floor);
  roots.forEach(([name], j) => {
    const m = medians(times[j]!);
    console.log(
      `  ${name}: import mod.ts ${fmtMs(m.ms)} wall (${ratio(m.ms, f.ms)} the empty script, +${
        fmtMs(m.ms - f.ms)
      }), ${fmtMs(m.cpu)} CPU (${ratio(m.cpu, f.cpu)}) | floor: an empty script ${
        fmtMs(f.ms)
      } wall, ${fmtMs(f.cpu)} CPU | goal ≤ 1.5×`,
    );
  });
}

async function nodeImport(): Promise<void> {
  const built = roots.map(([name, root]) =>
    [name, path.join(root, "npm", "esm", "mod.js")] as const
  )
    .filter(([name, mod]) => {
      if (fs.existsSync(mod)) return true;
      console.log(`  (${name}: no npm/esm/mod.js: run deno task build:npm there)`);
      return false;
    });
  if (built.length === 0) return;
  const pairs = quick ? 10 : 25;
  console.log(`\n## Node: node -e '' against importing the built package (${pairs} rounds)`);
  const code = (mod: string) => `import(${JSON.stringify(pathToFileURL(mod).href)}).then(() => {})`;
  const floor: { ms: number; cpu: number }[] = [];
  const times: { ms: number; cpu: number }[][] = built.map(() => []);
  for (let i = 0; i < pairs; i++) {
    const order = [-1, ...built.map((_, j) => j)];
    if (i % 2) order.reverse();
    for (const j of order) {
      if (j < 0) floor.push(await wall("node", ["-e", ""]));
      else times[j]!.push(await wall("node", ["-e", code(built[j]![1])]));
    }
  }
  const rss = async (before: string) => {
    const out: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await runCommand("node", [
        "-e",
        `${before}.then(() => console.log(JSON.stringify({ rss: process.memoryUsage().rss, ` +
        `builtins: process.moduleLoadList.filter((m) => m.startsWith("NativeModule")).length })))`,
      ], { cwd: os.tmpdir() });
      out.push(lastJson<{ rss: number }>(r.stdout)?.rss ?? NaN);
    }
    return median(out);
  };
  const builtins = async (before: string) => {
    const r = await runCommand("node", [
      "-e",
      `${before}.then(() => console.log(JSON.stringify(process.moduleLoadList.filter((m) => ` +
      `m.startsWith("NativeModule")).length)))`,
    ], { cwd: os.tmpdir() });
    return Number(r.stdout.trim());
  };
  const f = medians(floor);
  const fRss = await rss("Promise.resolve()");
  const fMods = await builtins("Promise.resolve()");
  for (const [j, [name, mod]] of built.entries()) {
    const m = medians(times[j]!);
    const mRss = await rss(code(mod).replace(/\.then\(\(\) => \{\}\)$/, ""));
    const mMods = await builtins(code(mod).replace(/\.then\(\(\) => \{\}\)$/, ""));
    console.log(
      `  ${name}: import ${fmtMs(m.ms)} wall (+${fmtMs(m.ms - f.ms)}, ${ratio(m.ms, f.ms)}), ${
        fmtMs(m.cpu)
      } CPU (+${fmtMs(m.cpu - f.cpu)}), RSS +${fmtBytes(mRss - fRss)}, ${
        mMods - fMods
      } more of Node's internal modules | floor: node -e '' ${fmtMs(f.ms)} wall, ${
        fmtMs(f.cpu)
      } CPU, ${fmtBytes(fRss)} | goal ≤ +20 ms, ≤ +5 MiB`,
    );
  }
}

async function pg(): Promise<void> {
  const rounds = quick ? 2 : 4;
  console.log(
    `\n## PostgreSQL: the host's time in startRun and intent, against a bare INSERT (${rounds} processes each)`,
  );
  const self = fileURLToPath(import.meta.url);
  const all = new Map<string, PgFigures[]>(roots.map(([name]) => [name, []]));
  for (let i = 0; i < rounds; i++) {
    const order = i % 2 ? [...roots].reverse() : roots;
    for (const [name, root] of order) {
      const r = await runCommand(process.execPath, [
        "run",
        "-A",
        "--quiet",
        self,
        "--pg-child",
        root,
        ...(quick ? ["--quick"] : []),
        "--pause-ms",
        String(pauseMs),
      ], { timeoutMs: 300_000 });
      const figures = lastJson<PgFigures>(r.stdout);
      if (!figures) {
        console.log(`  (${name}: ${r.stderr.trim().split("\n").slice(-3).join(" / ")})`);
        if (/ECONNREFUSED|connect/i.test(r.stderr)) return;
        continue;
      }
      all.get(name)!.push(figures);
    }
  }
  for (const [name, list] of all) {
    if (list.length === 0) continue;
    const flat = (k: "bare" | "backToBack" | "afterEnd" | "intents") => list.flatMap((f) => f[k]);
    const bare = pct(flat("bare"), 50);
    const fig = (xs: number[]) =>
      `p50 ${fmtMs(pct(xs, 50))} (${ratio(pct(xs, 50), bare)}), p99 ${fmtMs(pct(xs, 99))}`;
    console.log(
      `  ${name}: floor: a bare INSERT p50 ${fmtMs(bare)}, p99 ${fmtMs(pct(flat("bare"), 99))}`,
    );
    console.log(`    startRun back to back: ${fig(flat("backToBack"))} | goal ≤ 1.5×`);
    console.log(
      `    startRun right after the previous end(): ${fig(flat("afterEnd"))} | goal ≤ 2×`,
    );
    console.log(`    await run.effects.intent(): ${fig(flat("intents"))} | goal ≤ 1.5×`);
    console.log(
      `    the first startRun, ${pauseMs} ms after the keeper was made: ${
        list.map((f) => `${fmtMs(f.firstMs)}${f.connected ? "" : " (not yet connected)"}`).join(
          ", ",
        )
      } (making the keeper: ${
        list.map((f) => fmtMs(f.keeperMs)).join(", ")
      }) | goal: one round trip`,
    );
  }
}

if (only.has("deno")) await denoImport();
if (only.has("node")) await nodeImport();
if (only.has("pg")) await pg();
