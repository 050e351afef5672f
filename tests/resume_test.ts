// Resuming a cut-off run: each attempt is a process of its own, as a retried task's is.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { parseRecord } from "../_record.ts";
import { createAgentCheckpoint } from "../mod.ts";
import { fixture, runScript, tempHome } from "./_helpers.ts";

interface Seen {
  runId: string;
  file: string;
  attempt: number;
  previous?: {
    attempt: number;
    kind: string;
    tier: number;
    turnsUsed: number;
    endStatus?: string;
    incomplete: boolean;
    summary: string;
  };
  prologues: [number, string][];
}

async function attempt(home: string, plan: Record<string, unknown>): Promise<Seen> {
  const result = await runScript(fixture("attempt"), [home, JSON.stringify(plan)], {
    timeoutMs: 60_000,
  });
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout);
}

const AGENT_TEXT = "\n## Findings\n- the bug is in parse()\nINCOMPLETE: next, write the fix\n";

test("a cut-off run resumes in the next process: attempt, previous, the resume text once", async () => {
  const home = tempHome();
  // The checkpoint file alone: with the run ledger on, a resume starts from where the run died
  // (tests/store/), not from its last file write.
  const settings = { ledger: false };
  const first = await attempt(home, {
    sessionId: "job",
    turns: 10,
    calls: 9,
    append: AGENT_TEXT,
    settings,
  });
  assert.equal(first.attempt, 1);
  assert.equal(first.previous, undefined);
  // Tier 1 at turn 5 of 10, tier 2 on the penultimate turn.
  assert.deepEqual(first.prologues.map(([call]) => call), [5, 8]);

  const second = await attempt(home, {
    sessionId: "job",
    turns: 10,
    calls: 3,
    end: "capped",
    settings,
  });
  assert.equal(second.attempt, 2);
  const previous = second.previous!;
  assert.equal(previous.attempt, 1);
  assert.equal(previous.kind, "tier");
  assert.equal(previous.tier, 2);
  assert.equal(previous.turnsUsed, 8); // persisted at the tool call after the 8th model call
  assert.equal(previous.endStatus, undefined, "it was cut off");
  assert.equal(previous.incomplete, true);
  // The resume text reaches the first model call only, naming the file and where it stopped.
  assert.deepEqual(second.prologues.map(([call]) => call), [0]);
  const resume = second.prologues[0]![1];
  assert.ok(resume.includes(second.file), resume);
  assert.ok(resume.includes(previous.summary), resume);
  assert.match(resume, /attempt 2/i);
  assert.match(resume, /do not redo/);
  // The agent's text is kept; the block keeps the earlier attempt's summary.
  const bytes = fs.readFileSync(second.file);
  assert.ok(bytes.toString().includes(AGENT_TEXT));
  const record = parseRecord(bytes)!;
  assert.equal(record.attempt, 2);
  assert.deepEqual(record.attempts, [previous.summary]);
  assert.equal(record.end?.status, "capped");

  // It ended capped, not done: a third attempt resumes from it and carries both summaries.
  const third = await attempt(home, {
    sessionId: "job",
    turns: 10,
    calls: 1,
    end: "done",
    settings,
  });
  assert.equal(third.attempt, 3);
  assert.equal(third.previous?.endStatus, "capped");
  assert.equal(parseRecord(fs.readFileSync(third.file))?.attempts?.length, 2);

  // It ended done: the next run with this id starts fresh.
  const fourth = await attempt(home, { sessionId: "job", turns: 10, calls: 1, settings });
  assert.equal(fourth.attempt, 1);
  assert.equal(fourth.previous, undefined);
  assert.deepEqual(fourth.prologues, []);
});

test("a retry of an attempt killed after one model call and an email is told 1 turn and the time it took", async () => {
  for (const waitMs of [1200, 0]) {
    const home = tempHome();
    const killed = await runScript(fixture("killed_after_email"), [home, String(waitMs)]);
    assert.equal(killed.code, null, killed.stderr); // SIGKILLed, not exited
    const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
    try {
      const run = ac.startRun({ sessionId: "mail", caps: { turns: 5 } });
      assert.equal(run.attempt, 2);
      const previous = run.previous!;
      assert.equal(previous.turnsUsed, 1);
      assert.equal(previous.usage?.inputTokens, 1200);
      // Its receipt came at least waitMs after its start: whole seconds, or "under 1s", never 0s.
      const time = waitMs >= 1000 ? "[1-9]\\d*s" : "under 1s";
      assert.match(previous.summary, new RegExp(`after 1 of 5 turns and ${time}, 1280 tokens`));
      const text = run.preLlmCall()!;
      assert.ok(text.includes(previous.summary), text);
      assert.match(text, /send_email .*: ok/);
    } finally {
      await ac.close();
    }
  }
});

test("resume: false starts every run fresh", async () => {
  const home = tempHome();
  await attempt(home, { sessionId: "job", turns: 10, calls: 9 });
  const second = await attempt(home, {
    sessionId: "job",
    turns: 10,
    calls: 2,
    settings: { resume: false },
  });
  assert.equal(second.attempt, 1);
  assert.equal(second.previous, undefined);
  assert.deepEqual(second.prologues, []);
});

test("a retried kanban task resumes from its own file, and is told of the task's comments", async () => {
  const home = tempHome();
  const first = await attempt(home, { sessionId: "s1", taskId: "T-42", turns: 10, calls: 9 });
  const retry = await attempt(home, { sessionId: "s2", taskId: "T-42", turns: 10, calls: 1 });
  assert.equal(retry.runId, "T-42");
  assert.equal(retry.file, first.file);
  assert.equal(retry.attempt, 2);
  assert.match(retry.prologues[0]![1], /comments/);
});

test("a resumed run due a tier at its first call gets both texts, resume first", async () => {
  const home = tempHome();
  await attempt(home, { sessionId: "job", turns: 100, calls: 60 });
  // Turns restart at 0 in a new attempt; a cap of 2 makes tier 2 due at the first call.
  const second = await attempt(home, { sessionId: "job", turns: 2, calls: 1 });
  const [call, text] = second.prologues[0]!;
  assert.equal(call, 0);
  assert.ok(text.indexOf("attempt 2") < text.indexOf("INCOMPLETE"), text);
});
