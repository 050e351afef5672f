/**
 * Benchmarks of token and dollar budgets and tool deadlines, as a user sees
 * them; figures, never a pass/fail on a busy machine.
 *
 *   deno run -A --v8-flags=--expose-gc scripts/bench_budgets.ts [--quick]
 *
 * 1. The hooks with usage reported every turn: a turn of `preLlmCall()` and
 *    `run.postLlmCall()` (token and dollar caps armed) against the same turn's
 *    `preLlmCall()` without usage, in ns and as a ratio; and `postLlmCall()` alone.
 * 2. A tool call past its deadline, the main thread blocked throughout: from
 *    the deadline to its `tool_timeout` record appearing, seen by a file
 *    watcher in a process of its own (scripts/_bench_watcher.ts), p50 and
 *    p99, beside a bare write + fsync + rename seen by the same watcher.
 *
 * Mode `--host timeout --home H --report R --runs N` is the child that
 * blocks; the parent starts it and the watcher.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { createAgentCheckpoint } from "../mod.ts";
import {
  blockFor,
  clock,
  flag,
  fmtMs,
  lastJson,
  median,
  pct,
  ReportReader,
  runScript,
  type Sighting,
  sleep,
  startWatcher,
  tempDir,
} from "./_bench_util.ts";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const SELF = fileURLToPath(import.meta.url);
/** Each tool call's deadline, seconds. */
const TIMEOUT_SECONDS = 0.2;

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

function hooks(): void {
  const n = quick ? 200_000 : 1_000_000;
  console.log(
    `\n## A turn's hooks with usage reported: ns per turn, best of 7 × ${n.toLocaleString()}`,
  );
  const ac = createAgentCheckpoint({ home: tempDir(), env: {} });
  // Caps that no tier reaches within the benchmark: the figures are the hot path's.
  const plain = ac.startRun({ sessionId: "plain", caps: { turns: 1e12, timeSeconds: 1e9 } });
  const budgeted = ac.startRun({
    sessionId: "budgeted",
    caps: { turns: 1e12, timeSeconds: 1e9, tokens: 1e15, usd: 1e12 },
  });
  const priced = createAgentCheckpoint({
    home: tempDir(),
    env: {},
    settings: { prices: { "bench-model": { input: 3, output: 15 } } },
  }).startRun({
    sessionId: "priced",
    caps: { turns: 1e12, timeSeconds: 1e9, tokens: 1e15, usd: 1e12 },
    model: "bench-model",
  });
  plain.activity(); // the watchdog runs, as in a real host
  const use = { inputTokens: 1200, outputTokens: 300, usd: 0.0012 };
  const unpriced = { inputTokens: 1200, outputTokens: 300 };
  const turn = perCall(n, () => plain.preLlmCall());
  const withUsage = perCall(n, () => {
    budgeted.preLlmCall();
    budgeted.postLlmCall(use);
  });
  const withPrices = perCall(n, () => {
    priced.preLlmCall();
    priced.postLlmCall(unpriced);
  });
  const usageAlone = perCall(n, () => budgeted.postLlmCall(use));
  const rows: Array<[string, number]> = [
    ["preLlmCall(), no usage (the same hooks without it)", turn],
    [
      "preLlmCall() + postLlmCall({ inputTokens, outputTokens, usd }), token and dollar caps",
      withUsage,
    ],
    [
      "preLlmCall() + postLlmCall({ inputTokens, outputTokens }), priced by the prices setting",
      withPrices,
    ],
    ["postLlmCall() alone", usageAlone],
  ];
  for (const [what, ns] of rows) {
    console.log(
      `  ${what}: ${ns.toFixed(0)} ns (${(ns / turn).toFixed(2)}× the turn without usage)${
        ns <= 1000 ? "" : "  — over 1 µs"
      }`,
    );
  }
  console.log(
    `  target ≤ 1 µs per hook: ${Math.max(withUsage, withPrices) <= 1000 ? "met" : "NOT met"}`,
  );
}

/** The child: tool calls timing out one after another while the main thread is blocked. */
async function timeoutHost(home: string, report: string, runs: number): Promise<void> {
  const ac = createAgentCheckpoint({ home, env: {}, settings: { stall_window_seconds: 0 } });
  const dir = path.join(home, "agent-checkpoints");
  const reader = new ReportReader(report);
  const seen = new Map<string, Sighting>();
  const take = () => {
    for (const s of reader.next()) if (!seen.has(s.f)) seen.set(s.f, s);
  };
  // A warm worker: started by a run of its own, which is never due.
  ac.startRun({ sessionId: "warm", caps: { timeSeconds: 1e6 } }).activity();
  await sleep(500);
  const latencies: number[] = [];
  const floors: number[] = [];
  let missed = 0;
  for (let i = 0; i < runs; i++) {
    const run = ac.startRun({ sessionId: `t${i}` });
    const name = path.basename(run.checkpointFile);
    const before = clock();
    run.preToolCall("hang", { callId: `call_${i}`, timeoutSeconds: TIMEOUT_SECONDS });
    // The deadline is armed inside preToolCall, between these two reads of the clock.
    const deadline = (before + clock()) / 2 + TIMEOUT_SECONDS * 1000;
    // The main thread is blocked from here until the record is seen.
    while (!seen.has(name) && clock() < deadline + 5000) {
      take();
      blockFor(1);
    }
    take();
    const s = seen.get(name);
    if (s) latencies.push(s.t - deadline);
    else missed++;
    run.postToolCall("hang", { callId: `call_${i}`, ok: false });
    await run.end();
    // The floor: a bare write + fsync + rename at a set moment, seen by the same watcher.
    const floorName = `floor-${i}.md`;
    const at = clock() + 50;
    while (clock() < at) blockFor(1);
    const tmp = path.join(dir, `.floor-${i}.tmp`);
    const fd = fs.openSync(tmp, "w");
    fs.writeSync(fd, "floor\n");
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(tmp, path.join(dir, floorName));
    while (!seen.has(floorName) && clock() < at + 5000) {
      take();
      blockFor(1);
    }
    const f = seen.get(floorName);
    if (f) floors.push(f.t - at);
  }
  await ac.close();
  console.log(JSON.stringify({ latencies, floors, missed }));
}

async function timeouts(): Promise<void> {
  const sets = quick ? 2 : 3;
  const perSet = quick ? 15 : 20;
  console.log(
    `\n## Tool deadline → tool_timeout record visible, main thread blocked, seen from another process` +
      ` (${sets} processes × ${perSet} calls, each ${TIMEOUT_SECONDS}s deadline)`,
  );
  const latencies: number[] = [];
  const floors: number[] = [];
  let missed = 0;
  for (let s = 0; s < sets; s++) {
    const home = tempDir();
    const watcher = await startWatcher(path.join(home, "agent-checkpoints"));
    try {
      const result = await runScript(SELF, [
        "--host",
        "timeout",
        "--home",
        home,
        "--report",
        watcher.report,
        "--runs",
        String(perSet),
      ], { timeoutMs: 300_000 });
      const r = lastJson<{ latencies: number[]; floors: number[]; missed: number }>(
        result.stdout,
      );
      if (r) {
        latencies.push(...r.latencies);
        floors.push(...r.floors);
        missed += r.missed;
      } else {console.log(
          `  (child failed: ${result.stderr.trim().split("\n").slice(-3).join(" / ")})`,
        );}
    } finally {
      await watcher.stop();
      fs.rmSync(home, { recursive: true, force: true });
    }
  }
  console.log(`  latencies (ms): ${latencies.map((x) => x.toFixed(1)).join(" ")}`);
  console.log(`  floors (ms):    ${floors.map((x) => x.toFixed(1)).join(" ")}`);
  const p50 = median(latencies);
  const p99 = pct(latencies, 99);
  console.log(
    `  deadline → record visible (${latencies.length} calls${
      missed ? `, ${missed} not seen` : ""
    }): ` +
      `p50 ${fmtMs(p50)}, p99 ${fmtMs(p99)}  |  floor: bare write+fsync+rename p50 ${
        fmtMs(median(floors))
      }, p99 ${fmtMs(pct(floors, 99))}  |  target p99 ≤ 50 ms: ${p99 <= 50 ? "met" : "NOT met"}`,
  );
}

if (flag(args, "--host") === "timeout") {
  await timeoutHost(
    flag(args, "--home") ?? "",
    flag(args, "--report") ?? "",
    Number(flag(args, "--runs", "20")),
  );
  process.exit(0);
} else {
  hooks();
  await timeouts();
  process.exit(0);
}
