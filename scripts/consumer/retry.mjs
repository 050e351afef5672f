// (d) A run killed and retried, as a user's agent would be: `first` starts a run, sends an email
// through `run.once` (what an adapter's `replay` runs a tool through), says "sent" and waits to
// be SIGKILLed; `retry` starts the same run id again in a new process: the ledger has the
// killed attempt, the retry resumes it, and the email is not sent again.
// argv: home, first | retry.
import assert from "node:assert/strict";
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createAgentCheckpoint } from "agent-checkpoint";

const [home, phase] = process.argv.slice(2);
const outbox = join(home, "outbox.txt");
const send = () => {
  appendFileSync(outbox, "an email\n");
  return { id: "msg-1" };
};
const ac = createAgentCheckpoint({ home, env: {} });
const run = ac.startRun({ sessionId: "job", caps: { turns: 20 } });
run.preLlmCall();
if (phase === "first") {
  await run.effects.once("send_email", { to: "ops@example.com" }, send);
  console.log("sent");
  setInterval(() => {}, 1000); // working on, until killed
} else {
  assert.equal(run.attempt, 2, "the retry is the run's second attempt");
  assert.ok(run.previous, "the killed attempt is known");
  assert.equal(run.previous.attempt, 1);
  const result = await run.effects.once("send_email", { to: "ops@example.com" }, send);
  assert.deepEqual(result, { id: "msg-1" }, "the recorded result");
  assert.ok(existsSync(outbox));
  assert.equal(readFileSync(outbox, "utf8"), "an email\n", "sent once, not again");
  run.end({ status: "done" });
  await ac.close();
  console.log(
    `consumer (d): node ${process.version}: attempt 2 resumed the killed attempt 1 (${run.previous.status}); the email was not sent again`,
  );
}
