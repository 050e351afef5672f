/**
 * A host process for one benchmark measurement, started fresh by
 * scripts/bench.ts so that each figure comes from a clean process. It prints
 * one JSON line with its figures, last.
 *
 *   deno run -A --v8-flags=--expose-gc scripts/_bench_host.ts MODE [options]
 *
 * Modes:
 * - `crossing --home H --report R --runs N`: N runs one after the other, each
 *   crossing tier 1 on its time cap while the main thread is blocked, and
 *   after each a bare write + fsync + rename (the floor), both seen by the
 *   watcher that appends to R;
 * - `cold --home H --report R`: the first crossing of a cold watchdog;
 * - `burst --home H --report R --runs N`: N runs crossing tier 1 at once;
 * - `memory --runs N`: heap and table bytes with N live runs;
 * - `cpu --runs N --seconds S`: CPU over S idle seconds with N live runs;
 * - `first-write --home H`: a fresh run's `checkpoint()` in H's checkpoint
 *   directory, as it stands;
 * - `churn --runs N --seconds S`: the watchdog's CPU over S seconds with N
 *   live runs, each of which has a turn and a tool call every second (its
 *   ledger record changes every second);
 * - `first-hook --home H`: in a fresh process, how long `createAgentCheckpoint`,
 *   the first `startRun` and the first hook call each block the main thread,
 *   and when the watchdog first looks;
 * - `worker-floor --home H`: the floor of `first-hook`, `new Worker()` of an
 *   empty module (`node:worker_threads`, as the library starts its watchdog).
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { createAgentCheckpoint, type Run } from "../mod.ts";
import { SLOT_BYTES } from "../_run_table.ts";
import {
  blockFor,
  blockUntil,
  clock,
  flag,
  ReportReader,
  type Sighting,
  sleep,
  threadCpu,
} from "./_bench_util.ts";

const args = process.argv.slice(2);
const mode = args[0];
const home = flag(args, "--home") ?? "";
const report = flag(args, "--report") ?? "";
const runs = Number(flag(args, "--runs", "1"));
const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
const print = (value: unknown) => console.log(JSON.stringify(value));

/**
 * Block the main thread (never yielding to its event loop) until `done()`,
 * or until `until`, keeping each file's first sighting at its highest tier.
 */
function waitSeen(
  reader: ReportReader,
  seen: Map<string, Sighting>,
  done: () => boolean,
  until: number,
): void {
  for (;;) {
    for (const s of reader.next()) {
      const before = seen.get(s.f);
      if (!before || s.tier > before.tier) seen.set(s.f, s);
    }
    if (done() || clock() >= until) return;
    blockFor(1);
  }
}

/** Tier-1 crossings at 0.2 s of a 10 s cap (tier 2 at the cap itself). */
const CROSS_SETTINGS = {
  allow_tiny_tier1: true,
  tier_fractions: [0.02, 1],
  stall_window_seconds: 0,
};
const CROSS_CAP = 10;
const CROSS_AT_MS = 200;

async function crossing(): Promise<void> {
  const ac = createAgentCheckpoint({ home, env: {}, settings: CROSS_SETTINGS });
  const dir = path.join(home, "agent-checkpoints");
  const reader = new ReportReader(report);
  const seen = new Map<string, Sighting>();
  // A warm worker: started by a run of its own, which crosses nothing for a long while.
  ac.startRun({ sessionId: "warm", caps: { timeSeconds: 1e6 } }).activity();
  await sleep(500);
  const crossings: number[] = [];
  const floors: number[] = [];
  let missed = 0;
  for (let i = 0; i < runs; i++) {
    const id = `c${i}`;
    const run = ac.startRun({ sessionId: id, caps: { timeSeconds: CROSS_CAP } });
    const at = ac.sharedRuns.start(run.slot) + CROSS_AT_MS;
    const name = path.basename(run.checkpointFile);
    // The main thread is blocked from here until the file is seen.
    waitSeen(reader, seen, () => (seen.get(name)?.tier ?? 0) >= 1, at + 5000);
    const s = seen.get(name);
    if (s && s.tier >= 1) crossings.push(s.t - at);
    else missed++;
    await run.end();
    // The floor: a bare write + fsync + rename at a set moment, seen by the same watcher.
    const floorName = `floor-${i}.md`;
    const when = clock() + 20;
    blockUntil(when);
    const tmp = path.join(dir, `.${floorName}.tmp`);
    const fd = fs.openSync(tmp, "w");
    fs.writeSync(fd, "x".repeat(2048));
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(tmp, path.join(dir, floorName));
    waitSeen(reader, seen, () => seen.has(floorName), when + 5000);
    const f = seen.get(floorName);
    if (f) floors.push(f.t - when);
    await sleep(30 + Math.random() * 40); // the host's event loop runs between runs
  }
  await ac.close();
  print({ crossings, floors, missed });
}

async function cold(): Promise<void> {
  const startedAt = clock();
  const ac = createAgentCheckpoint({ home, env: {}, settings: CROSS_SETTINGS });
  const reader = new ReportReader(report);
  const seen = new Map<string, Sighting>();
  const run = ac.startRun({ sessionId: "cold", caps: { timeSeconds: CROSS_CAP } });
  run.activity(); // the worker started with the keeper (before: at this first hook call)
  const at = ac.sharedRuns.start(run.slot) + CROSS_AT_MS;
  const name = path.basename(run.checkpointFile);
  waitSeen(reader, seen, () => (seen.get(name)?.tier ?? 0) >= 1, at + 10_000);
  const s = seen.get(name);
  print({ latency: s ? s.t - at : null, sinceProcess: clock() - startedAt });
  await ac.close();
}

async function burst(): Promise<void> {
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { tier_fractions: [0.001, 1], stall_window_seconds: 0 },
  });
  const reader = new ReportReader(report);
  const seen = new Map<string, Sighting>();
  ac.startRun({ sessionId: "warm", caps: { timeSeconds: 1e7 } }).activity();
  await sleep(500);
  const handles: Run[] = [];
  const t0 = clock();
  for (let i = 0; i < runs; i++) {
    handles.push(ac.startRun({ sessionId: `b${i}`, caps: { timeSeconds: 1000 } }));
  }
  const startMs = clock() - t0;
  await sleep(200);
  // Every run's start moved to one moment (later than each real start, so the
  // watchdog is never late by a start it cached): all cross tier 1 at `at`.
  const common = clock() + 100;
  for (const run of handles) {
    ac.sharedRuns.rewind(run.slot, ac.sharedRuns.start(run.slot) - common);
  }
  const at = common + 1000;
  const names = new Set(handles.map((r) => path.basename(r.checkpointFile)));
  let count = 0;
  const counted = new Set<string>();
  const done = () => {
    for (const [name, s] of seen) {
      if (s.tier >= 1 && names.has(name) && !counted.has(name)) {
        counted.add(name);
        count++;
      }
    }
    return count >= names.size;
  };
  const limit = Math.max(30_000, runs * 10);
  waitSeen(reader, seen, done, at + limit); // the main thread stays blocked
  const latencies: number[] = [];
  for (const name of names) {
    const s = seen.get(name);
    if (s && s.tier >= 1) latencies.push(s.t - at);
  }
  // Files the watcher missed (its queue can overflow): their change time instead.
  const dir = path.join(home, "agent-checkpoints");
  const byCtime: number[] = [];
  for (const name of names) {
    if (seen.get(name)?.tier) continue;
    try {
      byCtime.push(fs.statSync(path.join(dir, name)).ctimeMs - at);
    } catch { /* never written */ }
  }
  latencies.sort((a, b) => a - b);
  await ac.close();
  const floorMs = await bareBurst(path.join(home, "floor"), runs);
  print({
    runs,
    startMs,
    seen: latencies.length,
    latencies: latencies.map((x) => Math.round(x * 10) / 10),
    byCtime: byCtime.map((x) => Math.round(x)),
    floorMs,
  });
}

/**
 * The floor of a burst: `n` bare files of a checkpoint's size, each written,
 * flushed and renamed into place, 16 at a time, then one directory flush; ms.
 */
async function bareBurst(dir: string, n: number): Promise<number> {
  fs.mkdirSync(dir, { recursive: true });
  const bytes = new TextEncoder().encode("x".repeat(2048));
  const t0 = clock();
  let next = 0;
  const lane = async () => {
    while (next < n) {
      const i = next++;
      const tmp = path.join(dir, `.f${i}.tmp`);
      const h = await fs.promises.open(tmp, "w");
      await h.write(bytes);
      await h.sync();
      await h.close();
      await fs.promises.rename(tmp, path.join(dir, `f${i}.md`));
    }
  };
  await Promise.all(Array.from({ length: Math.min(16, n) }, lane));
  const d = await fs.promises.open(dir, "r");
  await d.sync();
  await d.close();
  return clock() - t0;
}

async function memory(): Promise<void> {
  gc();
  const bare = process.memoryUsage();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { stall_window_seconds: 0 },
    watchdogStatsEveryMs: 200,
  });
  const handles: Run[] = [];
  const start = (i: number) => {
    const run = ac.startRun({ sessionId: `m${i}`, caps: { timeSeconds: 86400 } });
    run.activity();
    handles.push(run);
  };
  const figures = async () => {
    await sleep(1200); // the worker looks at every run and reports its heap afresh
    gc();
    const m = process.memoryUsage();
    const stats = ac.watchdogStats;
    return {
      mainHeap: m.heapUsed,
      workerHeap: stats?.heapUsed ?? NaN,
      watched: stats?.watched ?? 0,
      table: ac.sharedRuns.slots * SLOT_BYTES + ac.sharedRuns.buffers.infos.byteLength,
      slots: ac.sharedRuns.slots,
      rss: m.rss,
    };
  };
  start(0);
  const one = await figures();
  for (let i = 1; i < runs; i++) start(i);
  const all = await figures();
  print({ runs: handles.length, bareHeap: bare.heapUsed, bareRss: bare.rss, one, all });
  await ac.close();
}

async function cpu(): Promise<void> {
  const seconds = Number(flag(args, "--seconds", "20"));
  const ac = createAgentCheckpoint({ home, env: {}, settings: { stall_window_seconds: 0 } });
  const handles: Run[] = [];
  for (let i = 0; i < runs; i++) {
    const run = ac.startRun({ sessionId: `p${i}`, caps: { timeSeconds: 86400 } });
    run.activity();
    handles.push(run);
  }
  await sleep(8000); // past the startup: JIT and the memory reducer's GCs settle
  const before = threadCpu();
  const usage = process.cpuUsage();
  const t0 = performance.now();
  await sleep(seconds * 1000); // the main thread idles: a host waiting on its model
  const wall = performance.now() - t0;
  const after = threadCpu();
  const used = process.cpuUsage(usage);
  let worker = 0;
  let workerThreads = 0;
  for (const [key, ms] of after) {
    if (!/^worker/.test(key)) continue;
    worker += ms - (before.get(key) ?? 0);
    workerThreads++;
  }
  print({
    runs: handles.length,
    wall,
    processMs: (used.user + used.system) / 1000,
    workerMs: worker,
    workerThreads,
  });
  await ac.close();
}

async function churn(): Promise<void> {
  const seconds = Number(flag(args, "--seconds", "20"));
  const ac = createAgentCheckpoint({ home, env: {}, settings: { stall_window_seconds: 0 } });
  const handles: Run[] = [];
  for (let i = 0; i < runs; i++) {
    handles.push(ac.startRun({ sessionId: `p${i}`, caps: { timeSeconds: 86400 } }));
  }
  let mainMs = 0;
  // Every run moves once a second, spread over the second in slices of a few ms.
  const slices = 50;
  let stop = false;
  const loop = (async () => {
    for (let tick = 0; !stop; tick++) {
      const t = performance.now();
      const k = tick % slices;
      for (let i = k; i < handles.length; i += slices) {
        const run = handles[i]!;
        run.preLlmCall();
        run.preToolCall("search");
        run.postToolCall("search", { ok: true });
      }
      mainMs += performance.now() - t;
      await sleep(1000 / slices);
    }
  })();
  await sleep(8000); // past the startup: JIT and the memory reducer's GCs settle
  const before = threadCpu();
  const usage = process.cpuUsage();
  const main0 = mainMs;
  const t0 = performance.now();
  await sleep(seconds * 1000);
  const wall = performance.now() - t0;
  const after = threadCpu();
  const used = process.cpuUsage(usage);
  stop = true;
  await loop;
  let worker = 0;
  let workerThreads = 0;
  for (const [key, ms] of after) {
    if (!/^worker/.test(key)) continue;
    worker += ms - (before.get(key) ?? 0);
    workerThreads++;
  }
  print({
    runs: handles.length,
    wall,
    processMs: (used.user + used.system) / 1000,
    workerMs: worker,
    hooksMs: mainMs - main0,
    workerThreads,
    statements: ac.ledgerStatements,
  });
  await ac.close();
}

async function firstWrite(): Promise<void> {
  const ac = createAgentCheckpoint({ home, env: {}, settings: { stall_window_seconds: 0 } });
  // The worker is already running, as in a host that has had runs.
  ac.startRun({ sessionId: "warm" }).activity();
  await sleep(300);
  let t = performance.now();
  const run = ac.startRun({ sessionId: `fresh-${process.pid}` });
  const startRunMs = performance.now() - t;
  t = performance.now();
  const file = await run.checkpoint("first");
  const checkpointMs = performance.now() - t;
  print({ startRunMs, checkpointMs, written: file !== undefined });
  if (file) fs.rmSync(file, { force: true });
  await ac.close();
}

async function firstHook(): Promise<void> {
  let t = performance.now();
  const ac = createAgentCheckpoint({ home, env: {} });
  const createMs = performance.now() - t;
  t = performance.now();
  const run = ac.startRun({ sessionId: "first", caps: { timeSeconds: 3600 } });
  const startRunMs = performance.now() - t;
  t = performance.now();
  run.preLlmCall();
  const hookMs = performance.now() - t;
  // The first turn of the host's event loop after the hook: what runs there blocks it too.
  t = performance.now();
  await new Promise((resolve) => setTimeout(resolve, 0));
  const nextTurnMs = performance.now() - t;
  // When the watchdog first looks, from the hook's return.
  const deadline = performance.now() + 30_000;
  while (ac.sharedRuns.looks() === 0 && performance.now() < deadline) await sleep(1);
  const watchedMs = ac.sharedRuns.looks() > 0 ? performance.now() - t + nextTurnMs : null;
  await run.end();
  await ac.close();
  print({ createMs, startRunMs, hookMs, nextTurnMs, watchedMs });
}

async function workerFloor(): Promise<void> {
  const { Worker } = await import("node:worker_threads");
  const file = path.join(home, "empty.mjs");
  fs.writeFileSync(file, "");
  const url = new URL(`file://${file}`);
  const t = performance.now();
  const worker = new Worker(url);
  const workerMs = performance.now() - t;
  await worker.terminate();
  print({ workerMs });
}

const modes: Record<string, () => Promise<void>> = {
  crossing,
  cold,
  burst,
  memory,
  cpu,
  "first-write": firstWrite,
  "first-hook": firstHook,
  churn,
  "worker-floor": workerFloor,
};
const fn = mode ? modes[mode] : undefined;
if (!fn) {
  console.error(`unknown mode ${mode}; one of ${Object.keys(modes).join(", ")}`);
  process.exit(2);
}
if (!home) {
  console.error("--home is required");
  process.exit(2);
}
await fn();
