import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { execFileSync } from "node:child_process";
import { listCheckpoints, runStanding, tallyEnds } from "../../cli/_inspect.ts";
import { persistBlock, readCheckpoint } from "../../persist.ts";
import { type CheckpointRecord, renderBlock } from "../../_record.ts";
import { tempHome } from "../_helpers.ts";

const record = (runId: string, extra: Partial<CheckpointRecord> = {}): CheckpointRecord => ({
  kind: "tier",
  source: "watchdog",
  runId,
  dialect: "chat",
  turnsUsed: 5,
  elapsedSeconds: 60,
  caps: {},
  tier: 1,
  persistedAt: new Date().toISOString(),
  message: "m",
  tools: [],
  notes: [],
  ...extra,
});

test("ls tells runs that were cut off from runs that ended, with their status", () => {
  const dir = tempHome();
  persistBlock(path.join(dir, "cut.md"), renderBlock(record("cut")));
  persistBlock(
    path.join(dir, "done.md"),
    renderBlock(record("done", {
      kind: "end",
      source: "host",
      end: { status: "done", at: new Date().toISOString() },
    })),
  );
  persistBlock(
    path.join(dir, "capped.md"),
    renderBlock(record("capped", {
      kind: "end",
      source: "host",
      end: { status: "capped", at: new Date().toISOString(), summary: "out of turns" },
    })),
  );
  fs.writeFileSync(path.join(dir, "notes.md"), "only the agent's text");
  const files = listCheckpoints(dir);
  const by = Object.fromEntries(files.map((f) => [f.runId, f]));
  assert.equal(by.cut!.cutOff, true);
  assert.equal(by.cut!.ended, undefined);
  assert.equal(runStanding(by.cut!), "cut off");
  assert.equal(by.done!.cutOff, false);
  assert.equal(runStanding(by.done!), "ended done");
  assert.equal(runStanding(by.capped!), "ended capped");
  assert.equal(runStanding(by.notes!), "agent text only");
  assert.deepEqual(tallyEnds(files), { cutOff: 1, ended: { done: 1, capped: 1 } });
});

test("ls describes links, FIFOs and oversized files without following, blocking or loading them", () => {
  const dir = tempHome();
  const secret = path.join(tempHome(), "secret.md");
  fs.writeFileSync(secret, renderBlock(record("secret")));
  fs.symlinkSync(secret, path.join(dir, "link.md"));
  fs.symlinkSync("/dev/zero", path.join(dir, "zero.md"));
  execFileSync("mkfifo", [path.join(dir, "pipe.md")]);
  const big = fs.openSync(path.join(dir, "big.md"), "w");
  fs.ftruncateSync(big, 5 * 1024 * 1024);
  fs.closeSync(big);
  persistBlock(path.join(dir, "fine.md"), renderBlock(record("fine")));
  const by = Object.fromEntries(listCheckpoints(dir).map((f) => [path.basename(f.file), f]));
  assert.equal(by["link.md"]!.state, "not a regular file");
  assert.equal(by["link.md"]!.record, undefined, "a link is never followed");
  assert.match(by["link.md"]!.error ?? "", /symbolic link/);
  assert.equal(by["zero.md"]!.state, "not a regular file");
  assert.equal(by["pipe.md"]!.state, "not a regular file");
  assert.match(by["pipe.md"]!.error ?? "", /FIFO/);
  assert.equal(by["big.md"]!.state, "too large");
  assert.equal(by["fine.md"]!.state, "record");
});

test("readCheckpoint() finds the agent's INCOMPLETE mark and text outside the block only", () => {
  const dir = tempHome();
  const file = path.join(dir, "r.md");
  persistBlock(file, renderBlock(record("r", { message: "INCOMPLETE is a word in our message" })));
  let found = readCheckpoint(file);
  assert.equal(found.agentText, false);
  assert.equal(found.incomplete, false, "the plugin's own text does not count");
  fs.appendFileSync(file, "\nStep 2 of 4. INCOMPLETE\n");
  found = readCheckpoint(file);
  assert.equal(found.agentText, true);
  assert.equal(found.incomplete, true);
  assert.equal(found.record?.runId, "r");
  assert.equal(readCheckpoint(path.join(dir, "nothing.md")).state, "missing");
});
