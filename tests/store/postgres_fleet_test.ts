// The fleet store end to end: processes as machines of a fleet (each its own home), one
// PostgreSQL database between them.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { fixture, runScript, tempHome } from "../_helpers.ts";
import { freshSchema, skipFleet } from "./_pg.ts";
import { openPgStore } from "../../store/postgres.ts";

interface Seen {
  pid: number;
  runId: string;
  file: string;
  attempt: number;
  previous?: {
    attempt: number;
    status?: string;
    host?: { machine: string; pid: number };
    summary: string;
  };
  before?: string;
  prologues: [number, string][];
  logs: string[];
}

async function attempt(
  home: string,
  url: string,
  plan: Record<string, unknown>,
): Promise<Seen> {
  const result = await runScript(fixture("pg_attempt"), [home, JSON.stringify(plan)], {
    env: { AGENT_CHECKPOINT_STORE: url },
    timeoutMs: 90_000,
  });
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout.trim().split("\n").at(-1)!);
}

test("a retry on another machine recreates the checkpoint file from the store, agent text included", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  try {
    const first = tempHome();
    const second = tempHome();
    const text = "\n## Agent notes\nMigrated 3 of 7 tables; next: orders.\n";
    const one = await attempt(first, db.url, {
      sessionId: "task-42",
      turns: 6,
      calls: 5,
      append: text,
      end: "failed",
    });
    assert.equal(one.attempt, 1);
    assert.ok(fs.readFileSync(one.file, "utf8").includes(text));
    // The second machine has never seen this run.
    const two = await attempt(second, db.url, { sessionId: "task-42", turns: 6, calls: 1 });
    assert.ok(!two.file.startsWith(first));
    assert.equal(two.attempt, 2);
    assert.equal(two.previous?.attempt, 1);
    assert.equal(two.previous?.status, "failed");
    assert.equal(two.previous?.host?.pid, one.pid);
    // Its file was there before its first prologue, with the agent's own text.
    assert.ok(two.before?.includes(text), two.before);
    assert.ok(two.logs.some((l) => /recreated the checkpoint file from the fleet store/.test(l)));
    assert.ok(two.prologues.length > 0 && /attempt 1/i.test(two.prologues[0]![1]));
    assert.ok(fs.readFileSync(two.file, "utf8").includes("Migrated 3 of 7 tables"));
  } finally {
    await db.drop();
  }
});
