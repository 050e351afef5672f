/**
 * A host for the ledger benchmark: N live runs, each crossing a tool boundary
 * (and making a model call) once a second, spread over the second in 100
 * slices. It prints a JSON line per slice with when it ran, and one a second
 * with the watchdog's ledger commits, backlog and thread CPU; then the
 * watchdog thread's CPU over 5 s with every run idle.
 * Usage: _ledger_host.ts HOME RUNS SECONDS
 */
import process from "node:process";
import { createAgentCheckpoint } from "../mod.ts";
import { sleep, threadCpu } from "./_bench_util.ts";

const [home, runsText, secondsText] = process.argv.slice(2);
const runs = Number(runsText);
const seconds = Number(secondsText);
const print = (value: unknown) => console.log(JSON.stringify(value));
const ac = createAgentCheckpoint({
  home: home as string,
  env: {},
  // No file writes: what is measured is the ledger.
  settings: { mid_run_persist: false, stall_window_seconds: 0, uncapped_interval_seconds: 0 },
  watchdogStatsEveryMs: 1000,
});
const started = performance.now();
const handles = Array.from({ length: runs }, (_, i) => ac.startRun({ sessionId: `r${i}` }));
print({ event: "started", runs, ms: performance.now() - started });
const SLICES = 100;
const t0 = Date.now() + 500;
await sleep(500);
const workerCpu = () => {
  let ms = 0;
  for (const [key, v] of threadCpu()) if (/^worker/.test(key)) ms += v;
  return ms;
};
let cpu = workerCpu();
let lastSecond = Date.now();
for (let tick = 0; tick < seconds * SLICES; tick++) {
  const due = t0 + tick * (1000 / SLICES);
  const wait = due - Date.now();
  if (wait > 0) await sleep(wait);
  const slice = tick % SLICES;
  const at = Date.now();
  for (let i = slice; i < runs; i += SLICES) {
    const run = handles[i]!;
    run.preLlmCall();
    run.preToolCall("step", { callId: `c${tick}` });
    run.postToolCall("step", { callId: `c${tick}`, ok: true });
  }
  print({ event: "tick", tick, at });
  if (Date.now() - lastSecond >= 1000) {
    const now = Date.now();
    const c = workerCpu();
    print({
      event: "stats",
      at: now,
      commits: ac.watchdogStats?.ledgerCommits ?? 0,
      backlog: ac.watchdogStats?.ledgerBacklog ?? 0,
      workerCpuPct: (100 * (c - cpu)) / (now - lastSecond),
    });
    cpu = c;
    lastSecond = now;
  }
}
// Idle: the runs wait (on their model, say); the worker only looks for changes and beats.
const idleFrom = Date.now();
const idleCpu = workerCpu();
await sleep(5000);
print({ event: "idle", workerCpuPct: (100 * (workerCpu() - idleCpu)) / (Date.now() - idleFrom) });
for (const run of handles) await run.end();
await ac.close();
print({ event: "done" });
