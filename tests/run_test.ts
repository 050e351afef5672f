import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { createAgentCheckpoint, type TaskComment } from "../mod.ts";
import { parseRecord } from "../_record.ts";
import { captureLog, tempHome, waitFor, writeConfig } from "./_helpers.ts";

// The watchdog is off here so that tool boundaries alone decide; it has tests of its own.
const make = (settings: Record<string, unknown> = {}, extra = {}) => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { watchdog: false, ...settings },
    logger: log.logger,
    ...extra,
  });
  return { ac, log };
};

/** The turns (0-based) on which preLlmCall() returned text, with the texts. */
function prologues(run: { preLlmCall(): string | undefined }, turns: number) {
  const out: Record<number, string> = {};
  for (let t = 0; t < turns; t++) {
    const text = run.preLlmCall();
    if (text !== undefined) out[t] = text;
  }
  return out;
}

test("snapshot mode puts the tier templates before turns 50 and 90 of 100", async () => {
  const { ac } = make();
  const run = ac.startRun({ sessionId: "s", caps: { turns: 100 } });
  const texts = prologues(run, 100);
  assert.deepEqual(Object.keys(texts).map(Number), [50, 90]);
  assert.match(texts[50]!, /^Budget checkpoint: you have used 50 of 100 turns \(50 left\)\./);
  assert.match(
    texts[50]!,
    new RegExp(`write everything .* into ${run.checkpointFile.replace(/[.]/g, "\\.")}`),
  );
  assert.match(texts[90]!, /^Final budget checkpoint: you have used 90 of 100 turns/);
  await ac.close();
});

test("notify mode gives the budget numbers only, without a directive", async () => {
  const { ac } = make({ mode: "notify" });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 100 } });
  const texts = prologues(run, 100);
  assert.deepEqual(texts, {
    50: "Budget checkpoint: you have used 50 of 100 turns (50 left).",
    90: "Budget checkpoint: you have used 90 of 100 turns (10 left).",
  });
  await ac.close();
});

test("log-only mode returns nothing, writes nothing and logs each due tier and surface", async () => {
  const { ac, log } = make({ mode: "log-only" });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 20 } });
  for (let t = 0; t < 20; t++) {
    assert.equal(run.preLlmCall(), undefined);
    run.preToolCall("t");
  }
  assert.ok(!fs.existsSync(run.checkpointFile));
  // The tool call after the 10th model call sees 10 turns used, a turn before the prologue does.
  assert.deepEqual(log.records.map((r) => r.message), [
    "tier 1 due on the mid-run surface (pre_tool_call)",
    "tier 1 due on the prologue surface (turn 10)",
    "tier 2 due on the mid-run surface (pre_tool_call)",
    "tier 2 due on the prologue surface (turn 18)",
  ]);
  await ac.close();
});

test("enabled: false makes every hook a no-op", async () => {
  const { ac, log } = make({ enabled: false });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 10 } });
  for (let t = 0; t < 10; t++) {
    assert.equal(run.preLlmCall(), undefined);
    run.preToolCall("t");
    run.postToolCall("t");
  }
  assert.ok(!fs.existsSync(run.checkpointFile));
  assert.deepEqual(log.records, []);
  await ac.close();
});

test("preToolCall() and postToolCall() persist each tier once, naming the source", async () => {
  const { ac } = make();
  const run = ac.startRun({ sessionId: "s", caps: { turns: 20 } });
  const seen: string[] = [];
  for (let t = 0; t < 20; t++) {
    run.preLlmCall();
    run.postToolCall("read", { ok: t % 2 === 0, durationMs: 5 });
    run.preToolCall("search");
    const r = fs.existsSync(run.checkpointFile)
      ? parseRecord(fs.readFileSync(run.checkpointFile))
      : undefined;
    if (r && seen.at(-1) !== `${r.tier} ${r.source}`) seen.push(`${r.tier} ${r.source}`);
  }
  // Turn 10 is first seen by postToolCall (after the 10th model call), turn 18 likewise.
  assert.deepEqual(seen, ["1 post_tool_call", "2 post_tool_call"]);
  const record = parseRecord(fs.readFileSync(run.checkpointFile))!;
  assert.equal(record.turnsUsed, 18);
  assert.deepEqual(record.caps, { turns: { value: 20, source: "host" } });
  // Persisted by the postToolCall after the 18th model call (t = 17, a failed read).
  assert.deepEqual(record.tools.at(-1), {
    tool: "read",
    status: "failed",
    startedAt: record.tools.at(-1)!.startedAt,
    durationMs: 5,
  });
  await ac.close();
});

test("the block names the run, its figures, recent tools and notes, in text and JSON", async () => {
  const { ac } = make();
  const run = ac.startRun({ sessionId: "sess", caps: { turns: 4, timeSeconds: 3600 } });
  run.note("cloned the repo");
  run.preLlmCall();
  run.preToolCall("bash");
  run.postToolCall("bash", { ok: false, durationMs: 1500 });
  run.preLlmCall();
  run.preToolCall("grep");
  const text = fs.readFileSync(run.checkpointFile, "utf8");
  assert.match(
    text,
    /^<!-- agent-checkpoint:begin -->\n## agent-checkpoint: budget tier 2 checkpoint persisted mid-run \(source: pre_tool_call\)/,
  );
  for (
    const line of [
      /- Run: sess/,
      /- Dialect: chat/,
      /- Turns so far: 2/,
      /- Elapsed: \d+s/,
      /- Turn cap: 4 \(host\)/,
      /- Time cap: 1h00m \(host\)/,
      /- Tier: 2/,
      /- Persisted at: \d{4}-/,
      /- bash \(failed, 1500 ms/,
      /- grep \(in flight/,
      /Notes:\n- cloned the repo/,
    ]
  ) assert.match(text, line);
  const record = parseRecord(fs.readFileSync(run.checkpointFile))!;
  assert.equal(record.kind, "tier");
  assert.deepEqual(record.notes, ["cloned the repo"]);
  assert.deepEqual(record.tools.map((t) => [t.tool, t.status]), [["bash", "failed"], [
    "grep",
    "in flight",
  ]]);
  await ac.close();
});

test("the prologue and mid-run surfaces keep their own latches", async () => {
  const { ac } = make();
  const run = ac.startRun({ sessionId: "s", caps: { turns: 100 } });
  for (let t = 0; t < 50; t++) run.preLlmCall();
  run.preToolCall("t"); // turns used is now 50: mid-run persists tier 1
  assert.equal(parseRecord(fs.readFileSync(run.checkpointFile))?.tier, 1);
  assert.match(run.preLlmCall() ?? "", /^Budget checkpoint/, "the prologue still fires tier 1");
  assert.equal(run.preLlmCall(), undefined);
  await ac.close();
});

test("tier 1 never fires after tier 2 on the same surface, even when settings change", async () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint: { tier2_turn_fraction: 0.3, watchdog_poll_seconds: 0.05 }");
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 100 } });
  const early = prologues(run, 40);
  assert.deepEqual(Object.keys(early).map(Number), [30]);
  assert.match(early[30]!, /^Final/);
  run.preToolCall("t");
  assert.equal(parseRecord(fs.readFileSync(run.checkpointFile))?.tier, 2);
  // Tier 2 is no longer due at turn 50 under the new settings; tier 1 is, and must stay silent.
  writeConfig(home, "agent_checkpoint: { tier2_turn_fraction: 0.95, watchdog_poll_seconds: 0.05 }");
  assert.ok(await waitFor(() => ac.settings.tier2_turn_fraction === 0.95), "the change was read");
  for (let t = 40; t < 60; t++) {
    assert.equal(run.preLlmCall(), undefined, `turn ${t}`);
    run.preToolCall("t");
  }
  assert.equal(parseRecord(fs.readFileSync(run.checkpointFile))?.tier, 2);
  await ac.close();
});

test("a kanban persist posts the comment, headed and cut to 4,000 characters", async () => {
  const comments: TaskComment[] = [];
  const { ac } = make({}, { postComment: (c: TaskComment) => void comments.push(c) });
  const run = ac.startRun({ sessionId: "s", taskId: "task-9", caps: { turns: 3 } });
  for (let i = 0; i < 10; i++) run.note("🙂".repeat(500) + ` note ${i}`);
  run.preLlmCall();
  run.preToolCall("t");
  assert.equal(comments.length, 1);
  const [c] = comments;
  assert.equal(c!.taskId, "task-9");
  assert.ok(c!.body.startsWith("# agent-checkpoint\n\n## agent-checkpoint: budget tier 2"));
  assert.equal(Array.from(c!.body).length, 4000);
  assert.ok(!/[\uD800-\uDBFF]$/.test(c!.body.slice(0, -1)), "no half of a surrogate pair");
  assert.ok(
    fs.readFileSync(run.checkpointFile, "utf8").includes("note 9"),
    "the file keeps it all",
  );
  await ac.close();
});

test("a chat run posts no comment", async () => {
  const comments: TaskComment[] = [];
  const { ac } = make({}, { postComment: (c: TaskComment) => void comments.push(c) });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 3 } });
  run.preLlmCall();
  run.preToolCall("t");
  assert.ok(fs.existsSync(run.checkpointFile));
  assert.equal(comments.length, 0);
  await ac.close();
});

test("the run table grows past 512 runs and evicts no one", async () => {
  const { ac, log } = make();
  const runs = Array.from(
    { length: 2000 },
    (_, i) => ac.startRun({ sessionId: `r${i}`, caps: { turns: 3 } }),
  );
  assert.deepEqual(log.records, []);
  for (const run of [runs[0]!, runs[777]!, runs[1999]!]) {
    run.preLlmCall();
    assert.match(run.preLlmCall() ?? "", /^Final/);
  }
  await ac.close();
});

test("at the table's bound the least recently active idle run is evicted, never a busy one", async () => {
  const { ac, log } = make({}, { maxRuns: 4 });
  const busy = ac.startRun({ sessionId: "busy", caps: { turns: 3 } });
  busy.preToolCall("stuck"); // a tool call in flight: never evicted
  const pending = ac.startRun({ sessionId: "pending", caps: { timeSeconds: 3600 } }); // a crossing to come
  const idle = ac.startRun({ sessionId: "idle" }); // capless: nothing to miss
  const done = ac.startRun({ sessionId: "done", caps: { turns: 3 } });
  done.preLlmCall();
  done.preLlmCall(); // tier 2 persisted: nothing left to come
  idle.activity(); // more recently active than done
  const newest = ac.startRun({ sessionId: "newest", caps: { turns: 3 } });
  assert.deepEqual(log.records.map((r) => [r.runId, r.message]), [[
    "done",
    "evicted: the run table is at its bound of 4 runs",
  ]]);
  assert.equal(done.preLlmCall(), undefined, "the evicted run's hooks are no-ops");
  for (const run of [busy, pending, idle, newest]) assert.equal(run.runId === "x", false);
  newest.preLlmCall();
  assert.match(newest.preLlmCall() ?? "", /^Final/);
  await ac.close();
});

test("when every run is busy at the bound, a new run keeps its prologue and the host is told", async () => {
  const { ac, log } = make({}, { maxRuns: 2 });
  for (const id of ["a", "b"]) ac.startRun({ sessionId: id, caps: { turns: 3 } }).preToolCall("t");
  const extra = ac.startRun({ sessionId: "extra", caps: { turns: 3 } });
  assert.ok(
    log.records.some((r) =>
      r.runId === "extra" && r.level === "warn" && /run table is full/.test(r.message)
    ),
  );
  extra.preLlmCall();
  assert.match(extra.preLlmCall() ?? "", /^Final/);
  assert.equal(parseRecord(fs.readFileSync(extra.checkpointFile))?.source, "pre_llm_call");
  await ac.close();
});

test("a run the table has no room for names its tools in its record", async () => {
  const { ac } = make({}, { maxRuns: 1 });
  ac.startRun({ sessionId: "busy", caps: { turns: 3 } }).preToolCall("busy_tool", { callId: "b" });
  const extra = ac.startRun({ sessionId: "extra", caps: { turns: 3 } });
  extra.preToolCall("fetch_page", { callId: "c1" });
  await extra.checkpoint();
  const tools = parseRecord(fs.readFileSync(extra.checkpointFile))?.tools ?? [];
  assert.deepEqual(tools.map((t) => [t.tool, t.callId]), [["fetch_page", "c1"]]);
  await ac.close();
});

test("mid_run_persist: false keeps the prologue but writes no file", async () => {
  const { ac } = make({ mid_run_persist: false });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 3 } });
  run.preLlmCall();
  assert.match(run.preLlmCall() ?? "", /^Final/);
  run.preToolCall("t");
  run.postToolCall("t");
  assert.ok(!fs.existsSync(run.checkpointFile));
  await ac.close();
});
