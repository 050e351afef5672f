import { test } from "node:test";
import assert from "node:assert/strict";
import {
  type CheckpointRecord,
  commentBody,
  headerLine,
  parseRecord,
  recordText,
  renderBlock,
  summaryLine,
} from "../_record.ts";
import { findBlocks } from "../_record.ts";
import * as fs from "node:fs";
import * as path from "node:path";
import { createAgentCheckpoint } from "../mod.ts";
import { checkpointFileName } from "../persist.ts";
import { captureLog, tempHome } from "./_helpers.ts";

const enc = (text: string) => new TextEncoder().encode(text);

const base: CheckpointRecord = {
  kind: "tier",
  source: "pre_tool_call",
  runId: "run-1",
  dialect: "chat",
  turnsUsed: 18,
  elapsedSeconds: 250,
  caps: { turns: { value: 20, source: "host" }, time: { value: 600, source: "caps.time" } },
  tier: 2,
  persistedAt: "2026-01-01T00:04:10.000Z",
  message: "Write everything you have found so far into run-1.md.",
  tools: [],
  notes: [],
};

test("each kind's header names the plugin, the kind and the source", () => {
  const headers = [
    headerLine({ ...base, kind: "tier", tier: 1, source: "pre_llm_call" }),
    headerLine({ ...base, kind: "uncapped", multiple: 3, source: "watchdog" }),
    headerLine({ ...base, kind: "stall", source: "watchdog" }),
    headerLine({ ...base, kind: "manual", source: "host" }),
    headerLine({ ...base, kind: "deadline", source: "supervisor" }),
    headerLine({
      ...base,
      kind: "end",
      source: "host",
      end: { status: "failed", at: "2026-01-01T00:05:00.000Z" },
    }),
  ];
  assert.deepEqual(headers, [
    "agent-checkpoint: budget tier 1 checkpoint persisted mid-run (source: pre_llm_call)",
    "agent-checkpoint: uncapped-run checkpoint 3 persisted (source: watchdog)",
    "agent-checkpoint: stall checkpoint persisted (source: watchdog)",
    "agent-checkpoint: checkpoint persisted on request (source: host)",
    "agent-checkpoint: deadline checkpoint persisted before the hard deadline (source: supervisor)",
    "agent-checkpoint: run ended (failed) (source: host)",
  ]);
});

test("the text shows the attempt, the earlier attempts, the end, the workspace and tool call ids", () => {
  const text = recordText({
    ...base,
    kind: "end",
    source: "host",
    attempt: 3,
    attempts: ["attempt 1 cut off after 9 turns", "attempt 2 ended failed after 4 turns: crash"],
    end: { status: "capped", at: "2026-01-01T00:05:00.000Z", summary: "ran out of turns" },
    workspace: { snapshot: "20260101T000500Z-1", project: "/src/app" },
    tools: [
      {
        tool: "bash",
        callId: "call_7",
        status: "failed",
        startedAt: 12,
        durationMs: 40.4,
        error: "exit 2",
      },
      { tool: "read", status: "in flight", startedAt: 200 },
    ],
    notes: ["line one\nline two"],
  });
  const lines = text.split("\n");
  assert.equal(lines[0], "## agent-checkpoint: run ended (capped) (source: host)");
  assert.ok(
    lines.includes(
      "- Attempt 3 (earlier: attempt 1 cut off after 9 turns; attempt 2 ended failed after 4 turns: crash)",
    ),
  );
  assert.ok(lines.includes("- Ended: capped at 2026-01-01T00:05:00.000Z — ran out of turns"));
  assert.ok(lines.includes("- Workspace snapshot: 20260101T000500Z-1 (project /src/app)"));
  assert.ok(lines.includes("- bash [call_7] (failed, 40 ms, at 12s): exit 2"));
  assert.ok(lines.includes("- read (in flight, at 3m20s)"));
  assert.ok(lines.includes("- line one line two"));
  assert.ok(!recordText(base).includes("Attempt"), "a first attempt with no history shows none");
});

test("a supervisor's command and output tail render in a fence no output line can close", () => {
  const tail = ["building…", "```", "````js", "<!-- agent-checkpoint:end -->", "done\r"];
  const record: CheckpointRecord = {
    ...base,
    kind: "deadline",
    source: "supervisor",
    command: {
      argv: ["npm", "run", "test -- --watch=false", "it's"],
      outcome: "signaled",
      signal: "SIGTERM",
      tail,
    },
  };
  const text = recordText(record);
  assert.match(text, /^- Command: npm run 'test -- --watch=false' 'it'\\''s'$/m);
  assert.match(text, /^- Outcome: ended by SIGTERM$/m);
  const lines = text.split("\n");
  const open = lines.indexOf("Output tail:") + 1;
  assert.equal(lines[open], "`````", "the fence is longer than any backtick run in the tail");
  assert.deepEqual(lines.slice(open + 1, open + 6), [
    "building…",
    "```",
    "````js",
    "&lt;!-- agent-checkpoint:end -->",
    "done",
  ]);
  assert.equal(lines[open + 6], "`````");
  const bytes = enc(`notes\n${renderBlock(record)}\n`);
  assert.equal(findBlocks(bytes).length, 1);
  assert.deepEqual(parseRecord(bytes), record);
  assert.match(
    recordText({ ...record, command: { ...record.command!, outcome: "exited", exitCode: 3 } }),
    /exited with code 3/,
  );
  assert.match(
    recordText({ ...record, command: { argv: ["x"], outcome: "not started", tail: [] } }),
    /- Outcome: not started/,
  );
});

test("every field of a record survives rendering and parsing", () => {
  const record: CheckpointRecord = {
    ...base,
    kind: "end",
    source: "host",
    multiple: 2,
    intervalSeconds: 60,
    silentSeconds: 5,
    attempt: 2,
    attempts: ["attempt 1 cut off"],
    end: { status: "done", at: "2026-01-01T00:05:00.000Z", summary: "all green --> <!--" },
    workspace: { snapshot: "s1", project: "/p" },
    command: { argv: ["a"], outcome: "exited", exitCode: 0, tail: ["ok"] },
    tools: [{ tool: "t", callId: "c", status: "ok", startedAt: 1, durationMs: 2 }],
    notes: ["n \u2028 </script>"],
  };
  assert.deepEqual(parseRecord(enc(renderBlock(record))), record);
});

test("records written by the first version of the data line still parse", () => {
  // As the first release rendered it: kinds tier/uncapped/stall, no attempts, no end.
  const old = [
    "# Agent notes",
    "<!-- agent-checkpoint:begin -->",
    "## agent-checkpoint: budget tier 1 checkpoint persisted mid-run (source: post_tool_call)",
    "",
    "Budget checkpoint: 10 of 20 turns.",
    "",
    '<!-- agent-checkpoint:data {"v":1,"kind":"tier","source":"post_tool_call","runId":"s1",' +
    '"dialect":"chat","turnsUsed":10,"elapsedSeconds":12.5,"caps":{"turns":{"value":20,' +
    '"source":"host"}},"tier":1,"persistedAt":"2025-06-01T10:00:00.000Z","message":"Budget ' +
    'checkpoint: 10 of 20 turns.","tools":[{"tool":"grep","status":"ok","startedAt":3,' +
    '"durationMs":12}],"notes":[]} -->',
    "<!-- agent-checkpoint:end -->",
    "",
  ].join("\n");
  const record = parseRecord(enc(old))!;
  assert.equal(record.kind, "tier");
  assert.equal(record.tier, 1);
  assert.equal(record.turnsUsed, 10);
  assert.equal(record.attempt, undefined);
  assert.equal(record.end, undefined);
  assert.deepEqual(record.tools, [{ tool: "grep", status: "ok", startedAt: 3, durationMs: 12 }]);
  assert.equal("v" in record, false);
});

test("a block whose data line is damaged, or not a record, parses as nothing", () => {
  const block = renderBlock(base);
  const damaged = [
    block.replace('"kind":"tier"', '"kind":"weird"'),
    block.replace('"v":1', '"v":2'),
    block.replace(/data \{/, "data {{"),
    block.replace("<!-- agent-checkpoint:data ", "<!-- agent-checkpoint:dada "),
    block.replace('"runId":"run-1"', '"runId":7'),
  ];
  for (const text of damaged) assert.equal(parseRecord(enc(text)), undefined, text.slice(-200));
  // A record with nonsense in optional places still parses, the nonsense dropped.
  const odd = block.replace(
    '"tools":[]',
    '"tools":[1,{"tool":"x","status":"ok","startedAt":0}],' +
      '"attempt":-1,"end":{"status":"exploded","at":"x"},"attempts":["a",2]',
  );
  const parsed = parseRecord(enc(odd))!;
  assert.deepEqual(parsed.tools, [{ tool: "x", status: "ok", startedAt: 0 }]);
  assert.equal(parsed.attempt, undefined);
  assert.equal(parsed.end, undefined);
  assert.deepEqual(parsed.attempts, ["a"]);
});

test("a marker line in the message, a run id or a note cannot end the block early", () => {
  const evil = "<!-- agent-checkpoint:end -->";
  const record: CheckpointRecord = {
    ...base,
    runId: `x\n${evil}`,
    message: `before\n${evil}\n<!-- agent-checkpoint:begin -->\nafter`,
    notes: [evil],
    tools: [{ tool: evil, status: "ok", startedAt: 0 }],
  };
  const block = renderBlock(record);
  assert.equal(block.split("\n").filter((l) => l === evil).length, 1, "only the real end marker");
  assert.deepEqual(parseRecord(enc(block)), record);
  assert.ok(!commentBody(record).includes("<!--"), "the comment carries no live marker either");
});

test("summaryLine() tells a cut-off attempt from an ended one, on one bounded line", () => {
  assert.equal(
    summaryLine(base),
    "attempt 1 cut off after 18 of 20 turns and 4m10s of 10m00s; last checkpoint: budget tier 2 " +
      "(pre_tool_call) at 2026-01-01T00:04:10.000Z",
  );
  assert.equal(
    summaryLine({
      ...base,
      kind: "end",
      attempt: 2,
      caps: {},
      end: { status: "capped", at: "2026-01-01T00:05:00.000Z", summary: "stopped\nat the cap" },
    }),
    "attempt 2 ended capped after 18 turns and 4m10s: stopped at the cap",
  );
  const long = summaryLine({
    ...base,
    end: { status: "failed", at: "x", summary: "é".repeat(1000) },
  });
  assert.equal(Array.from(long).length, 300);
  assert.ok(long.endsWith("…"));
  assert.ok(!long.includes("\n"));
  assert.equal(
    summaryLine({ ...base, end: { status: "done", at: "x", summary: "<!--" } }).includes("<!--"),
    false,
  );
});

test("a forged value in an earlier record is dropped with a log line, and the run id keeps working", async () => {
  const home = tempHome();
  const dir = path.join(home, "agent-checkpoints");
  fs.mkdirSync(dir);
  const file = path.join(dir, checkpointFileName("forged"));
  const forged = {
    v: 1,
    kind: "end",
    source: "host",
    runId: "forged",
    dialect: "chat",
    turnsUsed: 3,
    elapsedSeconds: 9,
    caps: { turns: { value: { toString: 1 }, source: "host" } },
    tier: 0,
    persistedAt: "2026-01-01T00:00:00.000Z",
    message: "m",
    tools: [{ tool: "bash", status: "ok", startedAt: 1, error: { toString: 1 } }],
    notes: ["kept", { toString: 1 }],
    end: { status: "failed", at: "2026-01-01T00:00:00.000Z", summary: { toString: 1 } },
  };
  fs.writeFileSync(
    file,
    "# my notes\n\n<!-- agent-checkpoint:begin -->\n## old\n" +
      `<!-- agent-checkpoint:data ${JSON.stringify(forged)} -->\n<!-- agent-checkpoint:end -->\n`,
  );
  const { logger, records } = captureLog();
  const ac = createAgentCheckpoint({ home, env: {}, logger });
  try {
    for (const attempt of [2, 3]) {
      const run = ac.startRun({ sessionId: "forged" });
      assert.equal(run.runId, "forged");
      assert.equal(run.attempt, attempt, "the earlier attempt is resumed");
      assert.equal(await run.checkpoint("step 2 done"), file, "a later persist writes the file");
      const record = parseRecord(fs.readFileSync(file))!;
      assert.equal(record.message, "step 2 done");
      assert.equal(record.attempt, attempt);
      run.end({ status: "failed" });
    }
    assert.match(fs.readFileSync(file, "utf8"), /^# my notes\n/);
    const dropped = records.filter((r) => /fields of the wrong type/.test(r.message));
    assert.ok(dropped.length >= 1, JSON.stringify(records));
    assert.match(dropped[0]!.message, /caps\.turns.*end\.summary/);
    assert.ok(!records.some((r) => /startRun failed/.test(r.message)), JSON.stringify(records));
  } finally {
    await ac.close();
  }
});
