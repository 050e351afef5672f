// A run id started again after a done end is a fresh run (no resume, no replayed effects), and
// every earlier attempt's record (status, host, end, receipts) stays beside it: on the embedded
// store and on the fleet store, each start in a process of its own; `show` lists every attempt.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { main } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";
import { sqliteDriver } from "../../_sqlite.ts";
import { fixture, runScript, tempHome } from "../_helpers.ts";
import { freshSchema, skipFleet } from "./_pg.ts";

interface Saw {
  attempt: number;
  previous: { attempt: number; endStatus?: string } | null;
  ran: boolean;
  result: { id: string };
  key: string;
}

async function attempt(home: string, end: "done" | "failed", store?: string): Promise<Saw> {
  const got = await runScript(
    fixture("rerun_attempt"),
    [home, path.join(home, "sent.txt"), end],
    { env: store ? { AGENT_CHECKPOINT_STORE: store } : {}, timeoutMs: 120_000 },
  );
  assert.equal(got.code, 0, got.stderr);
  return JSON.parse(got.stdout.trim().split("\n").at(-1)!);
}

async function cli(args: string[], store?: string) {
  const m = memoryIo(store ? { env: { AGENT_CHECKPOINT_STORE: store } } : {});
  const code = await main(args, m.io);
  assert.equal(code, 0, m.stderr());
  return m.stdout();
}

async function startedAgainAfterDone(store?: string): Promise<void> {
  const home = tempHome();
  const one = await attempt(home, "failed", store);
  assert.equal(one.attempt, 1);
  assert.equal(one.ran, true);
  // Attempt 2 resumes attempt 1, and its email is not sent again.
  const two = await attempt(home, "done", store);
  assert.equal(two.attempt, 2);
  assert.equal(two.previous?.attempt, 1);
  assert.equal(two.ran, false);
  assert.deepEqual(two.result, { id: "msg-1" });
  // Started again after done: a fresh run. No resume, and its email is its own.
  const three = await attempt(home, "done", store);
  assert.equal(three.attempt, 3);
  assert.equal(three.previous, null);
  assert.equal(three.ran, true);
  assert.deepEqual(three.result, { id: "msg-3" });
  assert.notEqual(three.key, one.key);
  const sent = fs.readFileSync(path.join(home, "sent.txt"), "utf8").trim().split("\n");
  assert.deepEqual(sent, [one.key, three.key]);
  // Every attempt's record stays: status, host, end.
  const shown = JSON.parse(await cli(["show", "invoice-7", "--home", home, "--json"], store));
  assert.equal(shown.ledger.attempt, 3);
  assert.equal(shown.ledger.status, "done");
  const earlier = (shown.attempts as {
    attempt: number;
    status: string;
    host: { machine: string };
    end?: { status: string; summary?: string };
  }[]).sort((a, b) => a.attempt - b.attempt);
  assert.deepEqual(
    earlier.map((a) => [a.attempt, a.status, a.host.machine, a.end?.summary]),
    [[1, "failed", "host-failed", "ended failed"], [2, "done", "host-done", "ended done"]],
  );
  // The earlier run's receipt stays beside the new one's.
  const effects = shown.effects as { key: string; attempt: number; receipt?: unknown }[];
  assert.deepEqual(effects.map((e) => e.key).sort(), [one.key, three.key].sort());
  assert.ok(effects.every((e) => e.receipt !== undefined));
  // The text lists every attempt.
  const text = await cli(["show", "invoice-7", "--home", home], store);
  assert.match(text, /attempt 1\s+ended failed: ended failed; 1 turns on host-failed/);
  assert.match(text, /attempt 2\s+ended done: ended done; 1 turns on host-done/);
}

test("sqlite: a run id started again after a done end is a fresh run beside its kept history", {
  skip: sqliteDriver() === undefined,
}, async () => {
  await startedAgainAfterDone();
});

test("postgres: a run id started again after a done end is a fresh run beside its kept history", {
  skip: skipFleet,
}, async () => {
  const db = await freshSchema();
  try {
    await startedAgainAfterDone(db.url);
  } finally {
    await db.drop();
  }
});
