// (a) A plain Node consumer: a capped run, the main thread blocked across a crossing,
// the watchdog's file found the moment it unblocks. Never closes: the process must still exit.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createAgentCheckpoint } from "agent-checkpoint";

const home = mkdtempSync(join(tmpdir(), "ac-consumer-"));
const ac = createAgentCheckpoint({ home, env: {}, settings: { allow_tiny_tier1: true } });
const run = ac.startRun({ sessionId: "npm-consumer", caps: { timeSeconds: 1 } });
run.preLlmCall();
run.preToolCall("long_tool");
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1200);
const text = readFileSync(run.checkpointFile, "utf8");
assert.match(text, /budget tier 2 checkpoint persisted mid-run \(source: watchdog\)/);
assert.match(text, /- long_tool \(in flight/);
console.log(`consumer (a): the watchdog wrote ${run.checkpointFile} during the block`);
