/**
 * A capped agent run whose main thread gets stuck inside one long tool call,
 * the checkpoint the watchdog writes anyway, and the retry that resumes from it.
 *
 *   deno task demo                 # a 90-second run: tier 1 at 45 s, tier 2 at 72 s
 *   deno task demo --seconds 20    # the same, shorter
 *   deno task demo --keep          # keep the throwaway home afterwards
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { Worker } from "node:worker_threads";
import { createAgentCheckpoint } from "../mod.ts";
import { formatDuration } from "../template.ts";
import { BLOCK_BEGIN, BLOCK_END } from "../_record.ts";

const args = process.argv.slice(2);
const usage = "usage: demo [--seconds N] [--keep]   (N ≥ 5, default 90)";
let seconds = 90;
let keep = false;
for (let i = 0; i < args.length; i++) {
  const arg = args[i];
  if (arg === "--keep") keep = true;
  else if (arg === "--seconds" || arg?.startsWith("--seconds=")) {
    const raw = arg.includes("=") ? arg.split("=")[1] : args[++i];
    seconds = Number(raw);
    if (!Number.isFinite(seconds) || seconds < 5) {
      console.error(
        `demo: --seconds needs a number of at least 5, got ${JSON.stringify(raw)}\n${usage}`,
      );
      process.exit(2);
    }
  } else if (arg === "--help" || arg === "-h") {
    console.log(usage);
    process.exit(0);
  } else {
    console.error(`demo: unknown argument ${JSON.stringify(arg)}\n${usage}`);
    process.exit(2);
  }
}

/**
 * The lines of the agent's own text (outside the library's block) that say
 * INCOMPLETE, with their line numbers: where the file is marked.
 */
function incompleteLines(file: string): Array<[number, string]> {
  const out: Array<[number, string]> = [];
  let inBlock = false;
  for (const [i, line] of fs.readFileSync(file, "utf8").split("\n").entries()) {
    if (line.trim() === BLOCK_BEGIN) inBlock = true;
    else if (line.trim() === BLOCK_END) inBlock = false;
    else if (!inBlock && /\bINCOMPLETE\b/.test(line)) out.push([i + 1, line]);
  }
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** One synchronous call that holds the main thread, as a stuck tool would. */
const blockFor = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";

const home = fs.mkdtempSync(path.join(os.tmpdir(), "agent-checkpoint-demo-"));
const ac = createAgentCheckpoint({
  home,
  env: {},
  // Caps under five minutes count as tiny and skip tier 1; the demo wants to show both.
  settings: { allow_tiny_tier1: true },
});
const run = ac.startRun({ sessionId: "demo-session", caps: { timeSeconds: seconds } });
const tier1 = seconds * 0.5;
const tier2 = seconds * 0.8;
const stuckUntil = tier2 + Math.max(2, seconds * 0.05);

console.log(`agent-checkpoint demo: a ${formatDuration(seconds)} capped run that gets stuck`);
console.log(`  throwaway home: ${home}`);
console.log(
  `  the watchdog should write tier 1 at ${formatDuration(tier1)} and tier 2 at ${
    formatDuration(tier2)
  }\n`,
);

const tools = ["search_code", "read_file", "run_tests"];
for (const [turn, tool] of tools.entries()) {
  run.preLlmCall();
  run.preToolCall(tool);
  await sleep(300);
  run.postToolCall(tool, { ok: true, durationMs: 300 });
  console.log(`  turn ${turn + 1}: ${tool} ✓`);
}
run.note("found the failing test; the cause looks like the date parser");
run.preLlmCall();
run.preToolCall("analyze_repository");
console.log(`  turn ${tools.length + 1}: analyze_repository … the main thread is now blocked\n`);

const progress = new Worker(new URL(`./demo_progress${ext}`, import.meta.url), {
  workerData: {
    file: run.checkpointFile,
    start: ac.sharedRuns.start(run.slot),
    cap: seconds,
    tier1,
    tier2,
    until: stuckUntil,
    tty: Boolean(process.stdout.isTTY),
  },
});
blockFor(
  Math.max(
    0,
    (ac.sharedRuns.start(run.slot) + stuckUntil * 1000) -
      (performance.timeOrigin + performance.now()),
  ),
);
await progress.terminate();

console.log(
  `\n\nThe main thread came back after ${formatDuration(stuckUntil)}. It never reached another`,
);
console.log("model call, so no prompt could have asked the agent to save its work. The watchdog");
console.log(`wrote the checkpoint by itself. This is ${run.checkpointFile}:\n`);
console.log(fs.readFileSync(run.checkpointFile, "utf8"));
// The run is at its cap: the host gives up on it. The agent wrote its own notes meanwhile.
fs.appendFileSync(
  run.checkpointFile,
  "\n## Agent notes\nThe date parser drops the time zone. INCOMPLETE: next, fix parseDate()\n",
);
await run.end({ status: "capped", summary: "stopped at its time cap inside analyze_repository" });
await ac.close();

// A retry, as a scheduler would start it: a new process (here a new keeper), the same session.
console.log("A retry of the same session starts. It is told where the first attempt stopped:\n");
const retry = createAgentCheckpoint({ home, env: {}, settings: { allow_tiny_tier1: true } });
const second = retry.startRun({ sessionId: "demo-session", caps: { timeSeconds: seconds } });
console.log(`  attempt ${second.attempt}; the earlier one: ${second.previous?.summary}\n`);
if (second.previous?.incomplete) {
  console.log(`  The agent marked it INCOMPLETE in its own text, ${second.checkpointFile}:\n`);
  for (const [n, line] of incompleteLines(second.checkpointFile)) console.log(`  ${n} | ${line}`);
  console.log("");
}
console.log("  The first model call of attempt 2 gets this before it:\n");
console.log(`  > ${second.preLlmCall()?.replaceAll("\n", "\n  > ")}\n`);
second.preToolCall("edit_file", { callId: "call_1" });
second.postToolCall("edit_file", { callId: "call_1", ok: true, durationMs: 40 });
await second.end();
await retry.close();
if (keep) console.log(`Kept: ${home}`);
else {
  fs.rmSync(home, { recursive: true, force: true });
  console.log(`(The throwaway home ${home} is removed now; --keep keeps it.)`);
}
