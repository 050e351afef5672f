// Limits a long-lived host meets: very long run ids, many distinct tool names, a failed start.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { createAgentCheckpoint } from "../mod.ts";
import { parseRecord } from "../_record.ts";
import { blockUntil, captureLog, tempHome } from "./_helpers.ts";

const record = (file: string) =>
  fs.existsSync(file) ? parseRecord(fs.readFileSync(file)) : undefined;

test("a run id of 5,000 characters still gets the watchdog's checkpoints", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { allow_tiny_tier1: true },
  });
  const id = "session-" + "x".repeat(5000);
  const run = ac.startRun({ sessionId: id, caps: { timeSeconds: 1 } });
  // An id past the ledger's key size is kept as its head and a hash, the same at every start.
  assert.ok(id.startsWith(run.runId.split("…")[0]!), "the run id is the id's head");
  assert.ok(new TextEncoder().encode(run.runId).length <= 512);
  run.preToolCall("long");
  assert.ok(blockUntil(() => record(run.checkpointFile)?.tier === 2), "written in the block");
  const r = record(run.checkpointFile)!;
  assert.equal(r.source, "watchdog");
  assert.ok(id.startsWith(r.runId.split("…")[0]!), "the record shows the id's head");
  assert.deepEqual(log.records.filter((l) => l.level === "error"), []);
  await ac.close();
});

test("past 64 KiB of distinct tool names, every name still shows in the record", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: { watchdog: false } });
  const run = ac.startRun({ sessionId: "s" });
  for (let i = 0; i < 5000; i++) {
    const tool = `tool_${i}_${"n".repeat(40)}`; // 5,000 × ~50 bytes: 250 KB of names
    run.preToolCall(tool, { callId: `c${i}` });
    run.postToolCall(tool, { callId: `c${i}`, ok: true });
  }
  await run.checkpoint();
  const tools = record(run.checkpointFile)!.tools.map((t) => t.tool);
  assert.equal(tools.at(-1), `tool_4999_${"n".repeat(40)}`);
  assert.ok(!tools.includes("(unknown)"));
  await ac.close();
});

test("a start that fails never throws and gives its slot back", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { watchdog: false },
    maxRuns: 2,
  });
  // A session id whose toString throws: the start fails, with a log line.
  const hostile = {
    toString: () => {
      throw new Error("no string for you");
    },
  };
  for (let i = 0; i < 5; i++) ac.startRun({ sessionId: hostile as unknown as string });
  const a = ac.startRun({ sessionId: "a", caps: { turns: 3 } });
  const b = ac.startRun({ sessionId: "b", caps: { turns: 3 } });
  for (const run of [a, b]) {
    run.preLlmCall();
    assert.match(run.preLlmCall() ?? "", /^Final/);
  }
  assert.ok(!log.records.some((r) => /run table is full/.test(r.message)));
  assert.ok(log.records.some((r) => /session id cannot be read/.test(r.message)));
  await ac.close();
});
