// Working-tree snapshots through a run's own hooks: a file tool's input, a destructive shell
// command, a tier persist that names its snapshot, and a rollback that keeps a hand edit.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { createAgentCheckpoint } from "../../mod.ts";
import { parseRecord } from "../../_record.ts";
import { rollback } from "../../workspace/mod.ts";
import process from "node:process";
import { captureLog, tempHome } from "../_helpers.ts";

function project(): string {
  const dir = tempHome();
  fs.writeFileSync(path.join(dir, "a.txt"), "a, as the user left it\n");
  fs.writeFileSync(path.join(dir, "b.txt"), "b, as the user left it\n");
  return dir;
}

test("a run snapshots its tree before a file tool and a destructive command, and rolls back", async () => {
  const home = tempHome();
  const dir = project();
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: { PATH: process.env.PATH },
    logger: log.logger,
    settings: { watchdog: false, workspace_snapshots: true },
  });
  const run = ac.startRun({ sessionId: "ws", caps: { turns: 10 }, workspace: dir });
  run.preLlmCall();
  // A file tool: the snapshot is taken before preToolCall returns.
  run.preToolCall("write_file", { callId: "w1", input: { path: "a.txt", content: "x" } });
  fs.writeFileSync(path.join(dir, "a.txt"), "a, as the agent wrote it\n");
  run.postToolCall("write_file", { callId: "w1", ok: true });
  // A shell command that is not destructive takes no snapshot; one that is, does (next turn).
  run.preLlmCall();
  run.preToolCall("bash", { callId: "s1", input: { command: "ls -la 2>&1 > /dev/null" } });
  run.postToolCall("bash", { callId: "s1", ok: true });
  run.preToolCall("bash", { callId: "s2", input: { command: "cd . && rm b.txt" } });
  fs.rmSync(path.join(dir, "b.txt"));
  run.postToolCall("bash", { callId: "s2", ok: true });
  // Someone edits a.txt by hand after the agent: rollback must keep that edit.
  fs.writeFileSync(path.join(dir, "a.txt"), "a, edited by hand\n");
  // Tier 2 once 8 turns are used: the record names the newest snapshot.
  for (let t = 0; t < 7; t++) run.preLlmCall();
  const record = parseRecord(fs.readFileSync(run.checkpointFile))!;
  assert.equal(record.tier, 2);
  assert.match(record.workspace?.snapshot ?? "", /^[0-9a-f]{7,}$/);
  assert.equal(fs.realpathSync(record.workspace!.project), fs.realpathSync(dir));
  await run.end();
  await ac.close();
  assert.deepEqual(log.records.filter((r) => r.level !== "info"), []);

  // Back to before the agent's first write (the oldest of this project's snapshots).
  const result = rollback({ home, project: dir, target: 3, env: { PATH: process.env.PATH } });
  assert.deepEqual(result.restored, ["b.txt"], "the deleted file is back");
  assert.equal(fs.readFileSync(path.join(dir, "b.txt"), "utf8"), "b, as the user left it\n");
  assert.equal(fs.readFileSync(path.join(dir, "a.txt"), "utf8"), "a, edited by hand\n");
  assert.ok(result.skipped.some((s) => s.path === "a.txt"), "the hand edit is listed as kept");
});

test("with workspace_snapshots off, file tools take no snapshot", async () => {
  const home = tempHome();
  const dir = project();
  // The run ledger off too: it lives in the same <home>/checkpoints directory.
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false, ledger: false } });
  const run = ac.startRun({ sessionId: "off", workspace: dir });
  run.preToolCall("write_file", { input: { path: "a.txt" } });
  run.beforeWrite(["b.txt"]);
  await ac.close();
  assert.equal(fs.existsSync(path.join(home, "agent-checkpoint")), false);
});
