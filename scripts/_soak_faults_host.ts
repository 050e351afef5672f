/**
 * A host process for the fault soak (`deno task soak --faults`): RUNS live
 * runs of CAP turns each, each making a model call and a tool call at random
 * moments (about one turn every 1.5 s each) for SECONDS, so that their tiers
 * are crossed (and their checkpoint files written) while the faults come;
 * then it prints each run's exact turns and its checkpoint file
 * (`{"event":"final",...}`), keeps the runs live and quiet until its stdin
 * closes, ends them all (`done`), closes, and prints `{"event":"closed"}`.
 * Its log lines are printed as `{"event":"log",...}` lines.
 *
 *   deno run -A scripts/_soak_faults_host.ts HOME RUNS SECONDS CAP
 *
 * @module
 */
import process from "node:process";
import { createAgentCheckpoint } from "../mod.ts";
import { sleep } from "./_bench_util.ts";

const [home, runsText, secondsText, capText] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
];
const print = (value: unknown) => process.stdout.write(JSON.stringify(value) + "\n");
const ac = createAgentCheckpoint({
  home,
  env: {},
  // The ledger and the tiers' files are what the soak checks: no stall records.
  settings: { stall_window_seconds: 0, uncapped_interval_seconds: 0 },
  logger: (r) => print({ event: "log", level: r.level, message: r.message, at: Date.now() }),
});
const runs = Array.from(
  { length: Number(runsText) },
  (_, i) => ac.startRun({ sessionId: `f${i}`, caps: { turns: Number(capText) } }),
);
const turns = runs.map(() => 0);
const until = Date.now() + Number(secondsText) * 1000;
let seed = 12345;
const random = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};
print({ event: "started", runs: runs.length });
while (Date.now() < until) {
  for (const [i, run] of runs.entries()) {
    if (random() > 0.1 / 1.5) continue; // each run: a turn every ~1.5 s, at 100 ms steps
    run.preLlmCall();
    turns[i]!++;
    run.preToolCall("step", { callId: `c${turns[i]}` });
    run.postToolCall("step", { callId: `c${turns[i]}`, ok: true });
  }
  await sleep(100);
}
print({
  event: "final",
  turns: Object.fromEntries(runs.map((r, i) => [r.runId, turns[i]])),
  files: Object.fromEntries(runs.map((r) => [r.runId, r.checkpointFile])),
});
await new Promise<void>((resolve) => {
  process.stdin.on("end", () => resolve());
  process.stdin.on("close", () => resolve());
  process.stdin.resume();
});
for (const run of runs) await run.end({ status: "done" });
await ac.close();
print({ event: "closed" });
process.exit(0);
