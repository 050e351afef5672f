/**
 * A host process for scripts/soak.ts: runs a range of runs, some at once,
 * each making about `--hooks` hook calls with the watchdog on, and prints
 * JSON lines: its figures before and after, and its progress.
 *
 *   deno run -A --v8-flags=--expose-gc scripts/_soak_host.ts --home H (--ids FILE | --count N)
 *     [--hooks 100] [--concurrency 25]
 *
 * FILE holds a JSON array of run numbers; run n's session id is `s<n>`.
 *
 * Each run appends lines of "agent text" to its own checkpoint file now and
 * then, as an agent does, and records each append that returned in
 * `<home>/appends/<pid>.log`, so the soak can check no line was lost.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { createAgentCheckpoint } from "../mod.ts";
import { blockFor, flag, openFds, sleep } from "./_bench_util.ts";

const args = process.argv.slice(2);
const home = flag(args, "--home") ?? "";
const idsFile = flag(args, "--ids");
const ids: number[] = idsFile
  ? JSON.parse(fs.readFileSync(idsFile, "utf8"))
  : Array.from({ length: Number(flag(args, "--count", "100")) }, (_, i) => i);
const hooks = Number(flag(args, "--hooks", "100"));
const concurrency = Number(flag(args, "--concurrency", "25"));
const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
const print = (value: unknown) => console.log(JSON.stringify(value));

const ac = createAgentCheckpoint({
  home,
  env: {},
  settings: {
    allow_tiny_tier1: true,
    stall_window_seconds: 0.4,
    watchdog_poll_seconds: 0.5,
    uncapped_interval_seconds: 0.7,
  },
  watchdogStatsEveryMs: 1000,
});
fs.mkdirSync(path.join(home, "appends"), { recursive: true });
const appends = fs.openSync(path.join(home, "appends", `${process.pid}.log`), "a");

async function figures(phase: string) {
  await sleep(1100); // a fresh report from the worker
  gc();
  const m = process.memoryUsage();
  return {
    phase,
    pid: process.pid,
    heap: m.heapUsed,
    rss: m.rss,
    fds: openFds(),
    slots: ac.sharedRuns.slots,
    workerHeap: ac.watchdogStats?.heapUsed ?? NaN,
    watched: ac.watchdogStats?.watched ?? NaN,
  };
}

const TOOLS = ["search", "read_file", "bash", "edit", "fetch"];

async function oneRun(i: number): Promise<void> {
  const capped = i % 5 !== 0; // one run in five has no cap: the uncapped interval applies
  const run = ac.startRun(
    capped
      ? { sessionId: `s${i}`, caps: { turns: 40, timeSeconds: 1 + (i % 3) } }
      : { sessionId: `s${i}` },
  );
  let calls = 0;
  let step = 0;
  while (calls < hooks) {
    step++;
    run.preLlmCall();
    const tool = TOOLS[step % TOOLS.length]!;
    const callId = `c${step}`;
    run.preToolCall(tool, { callId, input: { step } });
    calls += 2;
    if (step % 7 === 3) {
      // A long tool call; now and then one that blocks the main thread.
      if (i % 11 === 0) blockFor(30);
      else await sleep(450);
    } else await sleep(Math.random() * 20);
    run.postToolCall(
      tool,
      step % 9 === 0 ? { callId, error: new Error("exit 1") } : {
        ok: true,
        callId,
      },
    );
    run.activity();
    calls += 2;
    if (step % 4 === 0) {
      run.note(`step ${step} of run ${i}`);
      calls++;
    }
    if (step % 5 === 2 && fs.existsSync(run.checkpointFile)) {
      // The agent writes its own text into its checkpoint file.
      const line = `agent s${i} line ${step}\n`;
      fs.appendFileSync(run.checkpointFile, line);
      fs.writeSync(appends, `${path.basename(run.checkpointFile)}\t${line}`);
    }
    if (step % 10 === 0) {
      await run.checkpoint(`step ${step}`);
      calls++;
    }
  }
  await run.end({ status: i % 10 === 0 ? "failed" : "done" });
}

print(await figures("before"));
let next = 0;
let done = 0;
async function lane(): Promise<void> {
  while (next < ids.length) {
    const i = ids[next++]!;
    await oneRun(i);
    done++;
    print({ phase: "progress", done: i, count: done });
  }
}
await Promise.all(Array.from({ length: Math.min(concurrency, ids.length) }, lane));
print(await figures("after"));
await ac.close();
const closed = await figures("closed");
print(closed);
