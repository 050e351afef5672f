/**
 * A process holding live runs, for the web view's tests: it starts each run
 * of its plan with the real library (watchdog and ledger on), makes its model
 * and tool calls, leaves one tool call in flight, appends the agent's own
 * text, prints `ready` and then waits to be killed (SIGKILL leaves its runs
 * cut off).
 */
import * as fs from "node:fs";
import process from "node:process";
import { createAgentCheckpoint } from "../../mod.ts";

const [home, spec] = process.argv.slice(2);
const plan = JSON.parse(spec as string) as {
  runs: { sessionId: string; turns: number; calls: number; inFlight?: string; append?: string }[];
};
const ac = createAgentCheckpoint({
  home: home as string,
  env: {},
  settings: { progress_interval_seconds: 0.1 },
});
for (const r of plan.runs) {
  const run = ac.startRun({ sessionId: r.sessionId, caps: { turns: r.turns } });
  for (let call = 0; call < r.calls; call++) {
    run.preLlmCall();
    run.preToolCall("work", { callId: `c${call}` });
    run.postToolCall("work", { callId: `c${call}`, ok: true });
  }
  if (r.inFlight !== undefined) run.preToolCall(r.inFlight, { callId: "held" });
  if (r.append !== undefined) fs.appendFileSync(run.checkpointFile, r.append);
}
process.stdout.write("ready\n");
setInterval(() => {}, 60_000);
