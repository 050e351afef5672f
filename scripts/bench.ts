/**
 * Benchmarks, measured as a user sees them. Every figure is set against a
 * floor taken in the same run (or is a count); none is a pass/fail: the
 * targets are printed beside the figures, for a reader to judge on a machine
 * that may be busy.
 *
 *   deno task bench                    # the core benchmarks, then each scripts/bench_*.ts
 *   deno task bench --quick            # shorter samples
 *   deno task bench --only crossing    # one part (or several: --only burst,memory)
 *   deno task bench --only first --before /tmp/main   # also measure another checkout (before)
 *
 * Parts: first, hooks, crossing, burst, memory, cpu, churn, dir, import (the core), then
 * the other benchmark scripts by name (deadline, workspace, ai_sdk,
 * frameworks, writes, …: scripts/bench_NAME.ts), each run as a subprocess.
 * `--only core` runs the core parts, `--only others` the scripts.
 *
 * Each core part that needs a clean process runs scripts/_bench_host.ts in a
 * fresh child; crossings are seen by scripts/_bench_watcher.ts, a file
 * watcher in a process of its own. With `--before DIR` (a checkout of another
 * revision, e.g. `git worktree add --detach DIR main`), the parts that can
 * also run this host script against DIR's library, in the same run.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { createAgentCheckpoint } from "../mod.ts";
import { SLOT_BYTES } from "../_run_table.ts";
import {
  type ChildResult,
  flag,
  fmtBytes,
  fmtMs,
  lastJson,
  median,
  pct,
  runCommand,
  runScript,
  startWatcher,
  tempDir,
} from "./_bench_util.ts";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const only = new Set((flag(args, "--only") ?? "").split(",").filter((s) => s !== ""));
const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
const HOST = fileURLToPath(new URL("./_bench_host.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../", import.meta.url));
const BEFORE = flag(args, "--before");

/** One line of the summary table. */
interface Row {
  what: string;
  figure: string;
  floor: string;
  target: string;
  means: string;
}
const summary: Row[] = [];
function row(r: Row): void {
  summary.push(r);
  console.log(`  ${r.what}: ${r.figure}  |  floor: ${r.floor}  |  target: ${r.target}`);
}

/** Run the host script in `mode` in a fresh process; its JSON line, or undefined. */
async function host<T>(
  mode: string,
  hostArgs: string[],
  timeoutMs = 300_000,
  script = HOST,
): Promise<T | undefined> {
  const result: ChildResult = await runScript(script, [mode, ...hostArgs], {
    v8Flags: "--expose-gc",
    timeoutMs,
  });
  const value = lastJson<T>(result.stdout);
  if (value === undefined) {
    console.log(
      `  (${mode} ${hostArgs.join(" ")} failed: exit ${result.code ?? result.signal}; ${
        result.stderr.trim().split("\n").slice(-3).join(" / ")
      })`,
    );
  }
  return value;
}

/** This host script in the `--before` checkout, run against its library; undefined without. */
function beforeHost(): string | undefined {
  if (BEFORE === undefined) return undefined;
  const dir = path.join(BEFORE, "scripts");
  for (const name of ["_bench_host.ts", "_bench_util.ts"]) {
    fs.copyFileSync(path.join(ROOT, "scripts", name), path.join(dir, `_now${name}`));
  }
  const copy = path.join(dir, "_now_bench_host.ts");
  const text = fs.readFileSync(copy, "utf8").replace(
    '"./_bench_util.ts"',
    '"./_now_bench_util.ts"',
  );
  fs.writeFileSync(copy, text);
  return copy;
}

/** "min / median / max" of `xs`, in ms. */
const spread = (xs: number[]) =>
  xs.length === 0
    ? "n/a"
    : `${fmtMs(Math.min(...xs))} / ${fmtMs(median(xs))} / ${fmtMs(Math.max(...xs))}`;

// ---- 0. the first hook of a process ----------------------------------------------

interface FirstFigures {
  createMs: number;
  startRunMs: number;
  hookMs: number;
  nextTurnMs: number;
  watchedMs: number | null;
}

async function first(): Promise<void> {
  const rounds = quick ? 3 : 7;
  console.log(
    `\n## The first hook of a fresh process: how long each step blocks the main thread` +
      ` (${rounds} fresh processes${BEFORE ? " each, this checkout and --before" : ""})`,
  );
  const before = beforeHost();
  const builds: Array<[string, string]> = before
    ? [["before", before], ["now", HOST]]
    : [["now", HOST]];
  const figures = new Map<string, FirstFigures[]>(builds.map(([name]) => [name, []]));
  const floors: number[] = [];
  for (let r = 0; r < rounds; r++) {
    // Alternated, so that each build and the floor see the same weather.
    for (const [name, script] of builds) {
      const home = tempDir();
      const out = await host<FirstFigures>("first-hook", ["--home", home], 120_000, script);
      fs.rmSync(home, { recursive: true, force: true });
      if (out) figures.get(name)!.push(out);
    }
    const home = tempDir();
    const out = await host<{ workerMs: number }>("worker-floor", ["--home", home], 120_000);
    fs.rmSync(home, { recursive: true, force: true });
    if (out) floors.push(out.workerMs);
  }
  const floor = median(floors);
  for (const [name] of builds) {
    const got = figures.get(name)!;
    const of = (k: keyof FirstFigures) => got.map((f) => f[k]).filter((x) => x !== null);
    const ratio = (xs: number[]) =>
      xs.length === 0 ? "n/a" : `${(median(xs) / floor).toFixed(2)}× the floor`;
    const hook = of("hookMs") as number[];
    const pairs: Array<[string, keyof FirstFigures, string]> = [
      ["the first hook (preLlmCall)", "hookMs", "≤ 1 ms"],
      ["the first startRun", "startRunMs", "-"],
      ["createAgentCheckpoint", "createMs", "-"],
      ["the event loop's next turn after the hook", "nextTurnMs", "-"],
      ["the watchdog's first look, after the hook", "watchedMs", "-"],
    ];
    for (const [what, key, target] of pairs) {
      const xs = of(key) as number[];
      row({
        what: `${what}, ${name} (${xs.length} processes)`,
        figure: `min / median / max ${spread(xs)} (${ratio(xs)})`,
        floor: `new Worker() of an empty module: ${spread(floors)}`,
        target: key === "hookMs"
          ? (Math.max(...hook) <= 1 ? "≤ 1 ms: met" : "≤ 1 ms: NOT met")
          : target,
        means: "how long the host's main thread is blocked there, in a fresh process",
      });
    }
  }
}

// ---- 6. the hooks' hot path -------------------------------------------------

/** Best of `rounds` timings of `n` calls of `fn`, in ns per call. */
function perCall(n: number, fn: (i: number) => void, rounds = 7): number {
  let best = Infinity;
  for (let r = 0; r < rounds; r++) {
    const t = performance.now();
    for (let i = 0; i < n; i++) fn(i);
    best = Math.min(best, ((performance.now() - t) * 1e6) / n);
  }
  return best;
}

async function hooks(): Promise<void> {
  const n = quick ? 200_000 : 1_000_000;
  console.log(`\n## Hooks when nothing is due: ns per call, best of 7 × ${n.toLocaleString()}`);
  const home = tempDir();
  const ac = createAgentCheckpoint({ home, env: {} });
  const run = ac.startRun({ sessionId: "bench", caps: { turns: 1e12, timeSeconds: 1e9 } });
  run.activity(); // the watchdog runs, as in a real host
  let sink = 0;
  // Every hook reads the clock once; nothing a hook does can be cheaper than that.
  const clockNs = perCall(n, () => {
    sink += performance.now();
  });
  const ids = Array.from({ length: 1024 }, (_, i) => `call_${i.toString(36)}`);
  const pre = perCall(n, (i) => run.preToolCall("search", { callId: ids[i & 1023]! }));
  const pair = perCall(n, (i) => {
    const callId = ids[i & 1023]!;
    run.preToolCall("search", { callId });
    run.postToolCall("search", { ok: true, callId });
  });
  const figures: Array<[string, number]> = [
    ["preLlmCall()", perCall(n, () => run.preLlmCall())],
    ["preToolCall(tool) without a call id", perCall(n, () => run.preToolCall("search"))],
    ["preToolCall(tool, { callId })", pre],
    ["postToolCall(tool, { ok, callId }) (a pair less the preToolCall)", pair - pre],
    ["activity()", perCall(n, () => run.activity())],
  ];
  for (const [name, ns] of figures) {
    row({
      what: `hook ${name}, nothing due`,
      figure: `${ns.toFixed(0)} ns per call (${(ns / clockNs).toFixed(1)}× the clock read)`,
      floor: `performance.now() ${clockNs.toFixed(0)} ns`,
      target: ns <= 1000 ? "≤ 1 µs: met" : "≤ 1 µs: NOT met",
      means: "the cost a host pays per hook call when no checkpoint is due",
    });
  }
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < n / 4; i++) {
    run.preLlmCall();
    run.preToolCall("search", { callId: ids[i & 1023]! });
    run.postToolCall("search", { ok: true, callId: ids[i & 1023]! });
    run.activity();
  }
  gc();
  const after = process.memoryUsage().heapUsed;
  row({
    what: `heap change over ${n.toLocaleString()} hook calls`,
    figure: fmtBytes(after - before),
    floor: `heap ${fmtBytes(before)}`,
    target: "flat",
    means: "whether the hooks leak",
  });
  if (sink === 0) console.log("");
  await ac.close();
  fs.rmSync(home, { recursive: true, force: true });
}

// ---- 1. one crossing, seen from another process ------------------------------

async function crossing(): Promise<void> {
  const sets = quick ? 2 : 3;
  const perSet = quick ? 15 : 20;
  const colds = quick ? 3 : 6;
  console.log(
    `\n## Crossing → file visible, seen by a watcher in another process, main thread blocked` +
      ` (${sets} processes × ${perSet} runs; ${colds} cold workers)`,
  );
  const crossings: number[] = [];
  const floors: number[] = [];
  const coldLatencies: number[] = [];
  let missed = 0;
  for (let s = 0; s < sets; s++) {
    const home = tempDir();
    const watcher = await startWatcher(path.join(home, "agent-checkpoints"));
    try {
      const r = await host<{ crossings: number[]; floors: number[]; missed: number }>(
        "crossing",
        ["--home", home, "--report", watcher.report, "--runs", String(perSet)],
      );
      if (r) {
        crossings.push(...r.crossings);
        floors.push(...r.floors);
        missed += r.missed;
      }
    } finally {
      await watcher.stop();
      fs.rmSync(home, { recursive: true, force: true });
    }
    // Cold workers between the sets, so that they see the same weather.
    const coldsNow = Math.floor(colds / sets) + (s < colds % sets ? 1 : 0);
    for (let c = 0; c < coldsNow; c++) {
      const coldHome = tempDir();
      const w = await startWatcher(path.join(coldHome, "agent-checkpoints"));
      try {
        const r = await host<{ latency: number | null }>("cold", [
          "--home",
          coldHome,
          "--report",
          w.report,
        ]);
        if (r?.latency != null) coldLatencies.push(r.latency);
        else missed++;
      } finally {
        await w.stop();
        fs.rmSync(coldHome, { recursive: true, force: true });
      }
    }
  }
  const p50 = median(crossings);
  const p99 = pct(crossings, 99);
  const f50 = median(floors);
  const f99 = pct(floors, 99);
  console.log(`  crossings (ms): ${crossings.map((x) => x.toFixed(1)).join(" ")}`);
  console.log(`  floors (ms):    ${floors.map((x) => x.toFixed(1)).join(" ")}`);
  row({
    what: `one crossing → file visible (${crossings.length} independent crossings${
      missed ? `, ${missed} not seen` : ""
    })`,
    figure: `p50 ${fmtMs(p50)}, p99 ${fmtMs(p99)} (${(p50 / f50).toFixed(1)}× / ${
      (p99 / f99).toFixed(1)
    }× the floor)`,
    floor: `bare write+fsync+rename p50 ${fmtMs(f50)}, p99 ${fmtMs(f99)}`,
    target: p99 <= 50 ? "p99 ≤ 50 ms: met" : "p99 ≤ 50 ms: NOT met",
    means:
      "from the moment a run's time cap crosses tier 1 to its checkpoint file appearing, with the host's main thread blocked throughout",
  });
  row({
    what: `first crossing of a cold worker (${coldLatencies.length} fresh processes)`,
    figure: `median ${fmtMs(median(coldLatencies))}, worst ${fmtMs(Math.max(...coldLatencies))} (${
      coldLatencies.map((x) => x.toFixed(0)).join(", ")
    } ms)`,
    floor: `bare write p50 ${fmtMs(f50)}`,
    target: "reported apart",
    means:
      "a crossing 200 ms after a process's first hook call: includes starting the watchdog worker",
  });
}

// ---- 2. many runs crossing at once -------------------------------------------

async function burst(): Promise<void> {
  const sizes = [1, 512, 4096, 16_384];
  const rounds = quick ? 1 : 2;
  console.log(
    `\n## Runs crossing tier 1 at the same moment, main thread blocked (${rounds} round(s) per size)`,
  );
  for (const n of sizes) {
    const p50s: number[] = [];
    const lasts: number[] = [];
    const floors: number[] = [];
    const notes: string[] = [];
    for (let r = 0; r < rounds; r++) {
      const home = tempDir();
      const watcher = await startWatcher(path.join(home, "agent-checkpoints"));
      try {
        const out = await host<{
          seen: number;
          latencies: number[];
          byCtime: number[];
          startMs: number;
          floorMs?: number;
        }>("burst", ["--home", home, "--report", watcher.report, "--runs", String(n)], 600_000);
        if (!out) continue;
        const all = [...out.latencies, ...out.byCtime];
        p50s.push(median(all));
        lasts.push(Math.max(...all));
        if (out.floorMs !== undefined) floors.push(out.floorMs);
        notes.push(
          `${all.length}/${n} files` + (out.byCtime.length
            ? ` (${out.byCtime.length} timed by their ctime: the watcher's queue overflowed)`
            : "") +
            `, startRun ×${n} took ${fmtMs(out.startMs)}`,
        );
      } finally {
        await watcher.stop();
        fs.rmSync(home, { recursive: true, force: true });
      }
    }
    console.log(`  ${n} runs: ${notes.join("; ")}`);
    const last = median(lasts);
    const floor = median(floors);
    row({
      what: `${n.toLocaleString()} run${n === 1 ? "" : "s"} crossing at once`,
      figure: `p50 ${fmtMs(median(p50s))}, last file ${fmtMs(last)}${
        rounds > 1 ? ` (median of ${rounds}; lasts ${lasts.map(fmtMs).join(", ")})` : ""
      }${Number.isFinite(floor) ? `; last file ${(last / floor).toFixed(1)}× the floor` : ""}`,
      floor: `${n.toLocaleString()} bare write+fsync+rename, 16 in flight, one directory fsync: ${
        fmtMs(floor)
      }`,
      target: n === 4096 ? (last <= 1000 ? "last ≤ 1 s: met" : "last ≤ 1 s: NOT met") : "-",
      means:
        "time from the common crossing to each run's file appearing, seen by the watcher; the last one is the burst's length",
    });
  }
}

// ---- 3. memory per run and worker CPU ------------------------------------------

interface MemFigures {
  mainHeap: number;
  workerHeap: number;
  watched: number;
  table: number;
  slots: number;
  rss: number;
}

async function memory(): Promise<void> {
  const sizes = [512, 4096, 16_384];
  console.log(
    `\n## Memory per live run, a handle kept for each (fresh process per size; table slots are ${SLOT_BYTES} B)`,
  );
  const rounds = quick ? 1 : 2;
  const one: Array<MemFigures & { bareHeap: number }> = [];
  for (const n of sizes) {
    const per: number[] = [];
    const parts: string[] = [];
    const rss: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const home = tempDir();
      const out = await host<
        { one: MemFigures; all: MemFigures; runs: number; bareHeap: number }
      >("memory", [
        "--home",
        home,
        "--runs",
        String(n),
      ]);
      fs.rmSync(home, { recursive: true, force: true });
      if (!out) continue;
      one.push({ ...out.one, bareHeap: out.bareHeap });
      const d = (k: "mainHeap" | "workerHeap" | "table" | "rss") =>
        (out.all[k] - out.one[k]) / (n - 1);
      per.push(d("mainHeap") + d("workerHeap") + d("table"));
      rss.push(d("rss"));
      parts.push(
        `main heap ${fmtBytes(d("mainHeap"))} + worker heap ${fmtBytes(d("workerHeap"))} + table ${
          fmtBytes(d("table"))
        } (worker watched ${out.all.watched}, ${out.all.slots} slots)`,
      );
    }
    const total = median(per);
    console.log(`  ${n}: ${parts.join("; ")}`);
    row({
      what: `memory per run, ${n.toLocaleString()} live`,
      figure: `${fmtBytes(total)} retained (${parts[0] ?? "n/a"}); RSS ${fmtBytes(median(rss))}`,
      floor: "the same process with 1 live run",
      target: total <= 4096 ? "≤ 4 KB: met" : "≤ 4 KB: NOT met",
      means:
        "main + worker heap after GC, plus the run table's bytes, divided by the runs added; RSS growth per run beside it",
    });
  }
  const o = one[0];
  if (o) {
    row({
      what: "fixed cost with 1 live run",
      figure: `main heap ${fmtBytes(o.mainHeap - o.bareHeap)}, worker heap ${
        fmtBytes(o.workerHeap)
      }, table ${fmtBytes(o.table)} (${o.slots} slots)`,
      floor: "-",
      target: "-",
      means:
        "what the first run costs: the main heap added since before createAgentCheckpoint, the worker's heap and the first chunk of the run table",
    });
  }
}

async function cpu(): Promise<void> {
  const sizes = [0, 1, 512, 4096, 16_384];
  const seconds = quick ? 6 : 20;
  console.log(`\n## Worker CPU over ${seconds} idle seconds (fresh process per size)`);
  let floor = NaN;
  for (const n of sizes) {
    const home = tempDir();
    const out = await host<
      { wall: number; processMs: number; workerMs: number; workerThreads: number }
    >("cpu", [
      "--home",
      home,
      "--runs",
      String(n),
      "--seconds",
      String(seconds),
    ]);
    fs.rmSync(home, { recursive: true, force: true });
    if (!out) continue;
    const share = (ms: number) => `${((ms / out.wall) * 100).toFixed(3)} %`;
    if (n === 0) {
      floor = out.processMs;
      row({
        what: "an idle host process, library loaded, no run",
        figure: `${share(out.processMs)} of a core`,
        floor: "-",
        target: "-",
        means: "the floor: what an idle Deno process costs",
      });
      continue;
    }
    row({
      what: `worker CPU, ${n.toLocaleString()} idle runs`,
      figure: `${share(out.workerMs)} of a core (whole process ${share(out.processMs)}${
        out.workerThreads === 1 ? "" : `; ${out.workerThreads} worker threads found`
      })`,
      floor: `idle process ${share(floor)}`,
      target: "flat",
      means: "CPU of the watchdog thread while the runs' hosts wait (default 10 s poll)",
    });
  }
}

/** The watchdog's CPU with 20,000 runs that all change every second, against the same runs idle. */
async function churn(): Promise<void> {
  const n = 20_000;
  const seconds = quick ? 6 : 10;
  const rounds = quick ? 1 : 3;
  console.log(
    `\n## Watchdog CPU, ${n.toLocaleString()} runs each taking a turn and a tool call every second` +
      ` (${rounds} round(s) of ${seconds} s, fresh process each${
        BEFORE ? ", this checkout and --before" : ""
      })`,
  );
  const before = beforeHost();
  const builds: Array<[string, string]> = before
    ? [["before", before], ["now", HOST]]
    : [["now", HOST]];
  const busy = new Map<string, number[]>(builds.map(([name]) => [name, []]));
  const idle: number[] = [];
  for (let r = 0; r < rounds; r++) {
    for (const [name, script] of builds) {
      const home = tempDir();
      const out = await host<{ wall: number; workerMs: number }>(
        "churn",
        ["--home", home, "--runs", String(n), "--seconds", String(seconds)],
        300_000,
        script,
      );
      fs.rmSync(home, { recursive: true, force: true });
      if (out) busy.get(name)!.push((out.workerMs / out.wall) * 100);
    }
    const home = tempDir();
    const out = await host<{ wall: number; workerMs: number }>("cpu", [
      "--home",
      home,
      "--runs",
      String(n),
      "--seconds",
      String(seconds),
    ]);
    fs.rmSync(home, { recursive: true, force: true });
    if (out) idle.push((out.workerMs / out.wall) * 100);
  }
  const pcts = (xs: number[]) =>
    xs.length === 0
      ? "n/a"
      : `${Math.min(...xs).toFixed(1)} / ${median(xs).toFixed(1)} / ${
        Math.max(...xs).toFixed(1)
      } %`;
  for (const [name] of builds) {
    const xs = busy.get(name)!;
    row({
      what: `watchdog CPU, ${n.toLocaleString()} runs all changing every second, ${name}`,
      figure: `min / median / max ${pcts(xs)} of a core`,
      floor: `the same runs idle: ${pcts(idle)}`,
      target: median(xs) <= 15 ? "≤ 15 %: met" : "≤ 15 %: NOT met",
      means: "the watchdog thread's CPU keeping every run's ledger record at most a second old",
    });
  }
}

// ---- 4. first write in a full directory ---------------------------------------

async function dir(): Promise<void> {
  const counts = quick ? [0, 10_000] : [0, 10_000, 100_000];
  const reps = quick ? 3 : 5;
  console.log(
    `\n## A fresh run's first checkpoint() with N files in the directory (${reps} fresh processes each)`,
  );
  const homes = new Map<number, string>();
  for (const count of counts) {
    const home = tempDir();
    const d = path.join(home, "agent-checkpoints");
    fs.mkdirSync(d, { recursive: true });
    for (let i = 0; i < count; i++) fs.writeFileSync(path.join(d, `old-${i}.md`), "");
    homes.set(count, home);
  }
  const times = new Map<number, number[]>(counts.map((c) => [c, []]));
  const starts = new Map<number, number[]>(counts.map((c) => [c, []]));
  for (let r = 0; r < reps; r++) {
    for (const count of counts) {
      const out = await host<{ startRunMs: number; checkpointMs: number }>("first-write", [
        "--home",
        homes.get(count)!,
      ]);
      if (!out) continue;
      times.get(count)!.push(out.checkpointMs);
      starts.get(count)!.push(out.startRunMs);
    }
  }
  const empty = median(times.get(0)!);
  for (const count of counts) {
    const m = median(times.get(count)!);
    row({
      what: `first checkpoint() of a fresh run, ${count.toLocaleString()} files in the directory`,
      figure: `median ${fmtMs(m)} (${(m / empty).toFixed(2)}× empty); its startRun ${
        fmtMs(median(starts.get(count)!))
      }`,
      floor: `empty directory ${fmtMs(empty)}`,
      target: count === 0 ? "-" : m <= 2 * empty ? "≤ 2× empty: met" : "≤ 2× empty: NOT met",
      means: "the host's main thread, in a new process, writing its first checkpoint file",
    });
  }
  for (const home of homes.values()) fs.rmSync(home, { recursive: true, force: true });
}

// ---- 5. import time ------------------------------------------------------------

/**
 * A copy of the built package (its code and its dependencies), so that a
 * rebuild of npm/ meanwhile cannot change what is measured. With
 * BENCH_NPM_LOCK set, the copy is made under `flock $BENCH_NPM_LOCK`.
 */
async function copyPackage(): Promise<string | undefined> {
  const npm = path.join(ROOT, "npm");
  const to = tempDir("ac-bench-npm-");
  const deps = (() => {
    try {
      return Object.keys(
        JSON.parse(fs.readFileSync(path.join(npm, "package.json"), "utf8")).dependencies ?? {},
      );
    } catch {
      return [];
    }
  })();
  const script = [
    `cp -a ${JSON.stringify(path.join(npm, "package.json"))} ${
      JSON.stringify(path.join(npm, "esm"))
    } ${JSON.stringify(to)}`,
    `mkdir -p ${JSON.stringify(path.join(to, "node_modules"))}`,
    ...deps.map((d) =>
      `cp -a ${JSON.stringify(path.join(npm, "node_modules", d))} ${
        JSON.stringify(path.join(to, "node_modules", d))
      } 2>/dev/null || true`
    ),
  ].join(" && ");
  const lock = process.env.BENCH_NPM_LOCK;
  let r = lock
    ? await runCommand("flock", ["-w", "180", lock, "sh", "-c", script])
    : await runCommand("sh", ["-c", script]);
  if (r.code !== 0 && lock) r = await runCommand("sh", ["-c", script]); // the lock stayed busy
  return r.code === 0 && fs.existsSync(path.join(to, "esm", "mod.js"))
    ? path.join(to, "esm", "mod.js")
    : undefined;
}

async function importTime(): Promise<void> {
  const mod = await copyPackage();
  console.log(
    `\n## Import time under Node: node -e '' against importing the built package, paired`,
  );
  const node = "node";
  const withLib = `import(${JSON.stringify(`file://${mod}`)}).then(() => {})`;
  const check = mod ? await runCommand(node, ["-e", withLib]) : undefined;
  if (!mod || check?.code !== 0) {
    row({
      what: "import time",
      figure: "not measured",
      floor: "-",
      target: "-",
      means: `the npm build is missing or does not load (${
        check?.stderr.trim().split("\n").find((l) => /Error/.test(l)) ?? "no npm/esm/mod.js"
      }); run deno task build:npm`,
    });
    return;
  }
  const pairs = quick ? 10 : 25;
  const bare: number[] = [];
  const lib: number[] = [];
  const diffs: number[] = [];
  const time = async (argv: string[]) => {
    const t = performance.now();
    await runCommand(node, argv);
    return performance.now() - t;
  };
  for (let i = 0; i < pairs; i++) {
    // Interleaved, the order alternating, so both see the same weather.
    let a: number, b: number;
    if (i % 2 === 0) {
      a = await time(["-e", ""]);
      b = await time(["-e", withLib]);
    } else {
      b = await time(["-e", withLib]);
      a = await time(["-e", ""]);
    }
    bare.push(a);
    lib.push(b);
    diffs.push(b - a);
  }
  const rss = async (code: string) => {
    const out: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await runCommand(node, ["-e", code]);
      out.push(Number(r.stdout.trim()));
    }
    return median(out);
  };
  const bareRss = await rss("console.log(process.memoryUsage().rss)");
  const libRss = await rss(
    `import(${JSON.stringify(`file://${mod}`)}).then(() => console.log(process.memoryUsage().rss))`,
  );
  const built = fs.statSync(path.join(ROOT, "npm", "package.json")).mtime.toISOString();
  row({
    what: `import("agent-checkpoint") under Node (${pairs} pairs)`,
    figure: `adds ${fmtMs(median(diffs))} (median of paired differences; ${
      (median(lib) / median(bare)).toFixed(2)
    }× the bare start) and ${fmtBytes(libRss - bareRss)} RSS`,
    floor: `node -e '' ${fmtMs(median(bare))}, ${fmtBytes(bareRss)} RSS`,
    target: "-",
    means:
      `a Node process that imports the package against one that does not (npm/ built ${built})`,
  });
  fs.rmSync(path.dirname(path.dirname(mod)), { recursive: true, force: true });
}

// ---- the other benchmark scripts -------------------------------------------------

const CORE: Record<string, () => Promise<void>> = {
  first,
  hooks,
  crossing,
  burst,
  memory,
  cpu,
  churn,
  dir,
  import: importTime,
};
const LISTED = ["deadline", "workspace", "ai_sdk", "frameworks", "writes"];

function otherScripts(): string[] {
  const found = fs.readdirSync(path.join(ROOT, "scripts"))
    .filter((f) => /^bench_.+\.ts$/.test(f))
    .map((f) => f.slice("bench_".length, -3));
  return [...LISTED, ...found.filter((n) => !LISTED.includes(n)).sort()];
}

async function others(names: string[]): Promise<void> {
  for (const name of names) {
    const file = path.join(ROOT, "scripts", `bench_${name}.ts`);
    console.log(`\n## scripts/bench_${name}.ts`);
    if (!fs.existsSync(file)) {
      console.log(`  (not there: skipped)`);
      continue;
    }
    const started = performance.now();
    const r = await runScript(file, quick ? ["--quick"] : [], { echo: true, timeoutMs: 900_000 });
    const took = fmtMs(performance.now() - started);
    if (r.code !== 0) {
      console.log(`  (bench_${name}.ts failed: exit ${r.code ?? r.signal} after ${took})`);
    } else console.log(`  (${took})`);
  }
}

const wanted = (name: string, group: "core" | "others") =>
  only.size === 0 || only.has(name) || only.has(group);

console.log(
  `agent-checkpoint benchmarks, ${new Date().toISOString()}, ${os.cpus().length} cores, ` +
    `load ${os.loadavg().map((x) => x.toFixed(1)).join(" ")}, ${
      typeof Deno === "undefined" ? `Node ${process.version}` : `Deno ${Deno.version.deno}`
    }${quick ? ", --quick" : ""}`,
);
const known = new Set([...Object.keys(CORE), ...otherScripts(), "core", "others"]);
for (const name of only) {
  if (!known.has(name)) {
    console.error(`unknown part ${name}; one of ${[...known].join(", ")}`);
    process.exit(2);
  }
}
for (const [name, part] of Object.entries(CORE)) {
  if (!wanted(name, "core")) continue;
  try {
    await part();
  } catch (error) {
    console.log(`  (${name} failed: ${error instanceof Error ? error.stack : String(error)})`);
  }
}
if (summary.length > 0) {
  console.log(`\n## Summary (load now ${os.loadavg().map((x) => x.toFixed(1)).join(" ")})\n`);
  console.log("| what | figure | floor (same run) | target | what it measures |");
  console.log("| --- | --- | --- | --- | --- |");
  for (const r of summary) {
    console.log(`| ${r.what} | ${r.figure} | ${r.floor} | ${r.target} | ${r.means} |`);
  }
}
const rest = otherScripts().filter((n) => wanted(n, "others"));
if (rest.length > 0) await others(rest);
