/**
 * Which modules one tier-crossing `preToolCall` runs code in, read from V8's
 * precise coverage (function call counts, reset by each take): the counts
 * are taken just before the call and just after it, so everything listed ran
 * inside that one call, and nothing else did.
 *
 * The run has a 2-second time cap; a warm-up run crosses its tier first, so
 * the traced call is a steady-state one (directories made, names interned).
 * The traced run is past its tier-1 time fraction when the call comes, and no
 * model call came in between: the tool boundary is the surface that persists.
 *
 * Every function counts, anonymous ones too (`(anonymous)`): a closure a
 * module handed down is still that module's code running.
 *
 * Run: `deno run -A scripts/trace_hook.ts` (or, after `deno task build:npm`,
 * `node npm/esm/scripts/trace_hook.js` for the compiled build); with `--json`,
 * the modules are printed as one JSON line (tests/house_test.ts reads it).
 *
 * @module
 */
import { Session } from "node:inspector";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { createAgentCheckpoint } from "../mod.ts";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const session = new Session();
session.connect();
const post = <T>(method: string, params: object = {}): Promise<T> =>
  new Promise((resolve, reject) =>
    session.post(method, params, (error, result) => error ? reject(error) : resolve(result as T))
  );

interface Coverage {
  result: {
    url: string;
    functions: { functionName: string; ranges: { count: number }[] }[];
  }[];
}

const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-trace-"));
let written = 0;
const checkpoints = createAgentCheckpoint({
  home,
  env: {},
  // A 2-second cap is tiny: its tier 1 fires only when asked to.
  settings: { watchdog: false, allow_tiny_tier1: true },
  onCheckpoint: () => written++,
});
const CAP_SECONDS = 2;
/** The checkpoints written so far (a function: the listener changes the count meanwhile). */
const writes = () => written;

/** Wait, without a fixed sleep deciding anything, until a run is past its tier-1 time fraction. */
async function pastTier1(started: number): Promise<void> {
  while (performance.now() - started < CAP_SECONDS * 1000 * 0.55) {
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Warm-up: the same steps on another run.
let t = performance.now();
const warm = checkpoints.startRun({ sessionId: "warm", caps: { timeSeconds: CAP_SECONDS } });
warm.preLlmCall();
warm.preToolCall("search", { callId: "w0" });
warm.postToolCall("search", { ok: true, callId: "w0" });
await pastTier1(t);
warm.preToolCall("search", { callId: "w1" });
if (writes() !== 1) throw new Error(`the warm-up run wrote ${writes()} checkpoints, not 1`);

t = performance.now();
const run = checkpoints.startRun({ sessionId: "traced", caps: { timeSeconds: CAP_SECONDS } });
run.preLlmCall();
run.preToolCall("search", { callId: "c0" });
run.postToolCall("search", { ok: true, callId: "c0" });
await pastTier1(t);

await post("Profiler.enable");
await post("Profiler.startPreciseCoverage", { callCount: true, detailed: false });
await post<Coverage>("Profiler.takePreciseCoverage"); // resets the counts
run.preToolCall("search", { callId: "c1" });
const { result } = await post<Coverage>("Profiler.takePreciseCoverage");
await post("Profiler.stopPreciseCoverage");
if (writes() !== 2) throw new Error(`the traced call wrote ${writes() - 1} checkpoints, not 1`);

const modules: { module: string; calls: number; functions: string[] }[] = [];
for (const script of result) {
  if (!script.url.startsWith("file:")) continue;
  const file = path.relative(root, fileURLToPath(script.url));
  if (file.startsWith("..") || file.startsWith("scripts")) continue;
  const ran = script.functions.filter((f) => f.ranges[0]!.count > 0);
  if (ran.length === 0) continue;
  modules.push({
    module: file,
    calls: ran.reduce((n, f) => n + f.ranges[0]!.count, 0),
    functions: ran.map((f) => `${f.functionName || "(anonymous)"}×${f.ranges[0]!.count}`),
  });
}
if (process.argv.includes("--json")) console.log(JSON.stringify(modules));
else {
  console.log(`one tier-crossing preToolCall ran code in ${modules.length} modules:`);
  for (const m of modules) {
    console.log(`  ${m.module} (${m.calls} calls): ${m.functions.join(", ")}`);
  }
}
await checkpoints.close();
fs.rmSync(home, { recursive: true, force: true });
