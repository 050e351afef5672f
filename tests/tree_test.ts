import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { createAgentCheckpoint } from "../mod.ts";
import process from "node:process";
import { captureLog, fixture, locker, runScript, tempHome, watchdogLooks } from "./_helpers.ts";
import { openSqliteStore, storeFile } from "../store/sqlite.ts";

/** One model call of `usd` dollars, as a host reports it. */
const call = (usd: number) => ({ inputTokens: 100, outputTokens: 50, usd });

test("a child's spend counts toward its parent's cap: the parent's tiers fire on the tree's total", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: { watchdog: false } });
  const parent = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  const child = ac.startRun({ sessionId: "helper", parent });
  assert.equal(parent.preLlmCall(), undefined);
  parent.usage(call(0.1));
  for (let i = 0; i < 4; i++) {
    child.preLlmCall();
    child.usage(call(0.1));
  }
  // $0.50 spent by the tree: the parent's next call gets tier 1 though it spent only $0.10.
  assert.match(parent.preLlmCall() ?? "", /write everything you have found so far/);
  // The child has no cap of its own, but counts toward its parent's: tier 1 reaches it too.
  assert.match(child.preLlmCall() ?? "", /write everything you have found so far/);
  const text = fs.readFileSync(child.checkpointFile, "utf8");
  assert.match(
    text,
    /- Tree: root lead, parent lead; the tree has used \d+ turns, 750 tokens and \$0\.50/,
  );
  await ac.close();
});

test("with enforce: [usd] every run of the tree stops once the tree passes the cap, after its budget record", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { watchdog: false, enforce: ["usd"] },
  });
  const parent = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  const children = [1, 2, 3].map((n) => ac.startRun({ sessionId: `helper-${n}`, parent }));
  const seenAtAbort = new Map<string, string>();
  for (const run of [parent, ...children]) {
    run.budgetSignal.addEventListener("abort", () => {
      seenAtAbort.set(run.runId, fs.readFileSync(run.checkpointFile, "utf8"));
    });
  }
  let spent = 0;
  let calls = 0;
  for (let round = 0; round < 20 && !parent.budgetSignal.aborted; round++) {
    for (const run of children) {
      if (run.budgetSignal.aborted) continue;
      run.preLlmCall();
      run.usage(call(0.07));
      spent += 0.07;
      calls++;
    }
  }
  assert.ok(spent >= 1 && spent < 1 + 0.07 + 1e-9, `spent $${spent} in ${calls} calls`);
  for (const run of [parent, ...children]) {
    assert.equal(run.budgetSignal.aborted, true, `${run.runId} was stopped`);
    assert.match(
      seenAtAbort.get(run.runId) ?? "",
      /enforced budget cap passed; checkpoint persisted before the stop/,
      `${run.runId}'s budget record was in its file when its signal aborted`,
    );
  }
  assert.match(seenAtAbort.get("helper-2")!, /- Stopped by: the enforced usd cap \$1\.00 of lead/);
  await children[0]!.end();
  assert.match(fs.readFileSync(children[0]!.checkpointFile, "utf8"), /run ended \(capped\)/);
  await ac.close();
});

test("enforce: [turns] allows exactly the cap's model calls; a run with nothing enforced is never stopped", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { watchdog: false, enforce: ["turns"] },
  });
  const run = ac.startRun({ sessionId: "turns", caps: { turns: 5 } });
  let calls = 0;
  while (!run.budgetSignal.aborted && calls < 50) {
    run.preLlmCall();
    if (run.budgetSignal.aborted) break;
    calls++;
  }
  assert.equal(calls, 5);
  const free = createAgentCheckpoint({ home: tempHome(), env: {}, settings: { watchdog: false } });
  const other = free.startRun({ sessionId: "free", caps: { turns: 5 } });
  for (let i = 0; i < 10; i++) other.preLlmCall();
  assert.equal(other.budgetSignal.aborted, false);
  await ac.close();
  await free.close();
});

test("a model with no price is never counted as $0: the record and one log line say so", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { watchdog: false, enforce: ["usd"] },
  });
  const run = ac.startRun({ sessionId: "unpriced", caps: { usd: 0.01, turns: 40 } });
  for (let i = 0; i < 5; i++) {
    run.preLlmCall();
    run.usage({ inputTokens: 1000, outputTokens: 1000, model: "mystery-model" });
  }
  await run.checkpoint();
  assert.equal(run.budgetSignal.aborted, false, "an unknown cost never passes a dollar cap");
  const lines = log.records.filter((r) => /unknown price for mystery-model/.test(r.message));
  assert.equal(lines.length, 1);
  assert.match(
    fs.readFileSync(run.checkpointFile, "utf8"),
    /- Cost unknown: unknown price for mystery-model/,
  );
  await ac.close();
});

test("a parent and 8 children in 3 processes share a $1.00 cap: spend stops within one call, and the store's tree total is the runs' own sum", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { enforce: ["usd"], progress_interval_seconds: 0.2 },
  });
  const parent = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  parent.preLlmCall();
  parent.usage(call(0.05));
  const env = parent.childEnv();
  const perCall = 0.03;
  const results = await Promise.all([0, 1].map((p) =>
    runScript(
      fixture("tree_children"),
      [
        home,
        JSON.stringify({ children: [0, 1, 2, 3].map((c) => `child-${p}-${c}`), usd: perCall }),
      ],
      { env, timeoutMs: 120_000 },
    )
  ));
  for (const r of results) assert.equal(r.code, 0, r.stderr);
  const children = results.flatMap((r) =>
    JSON.parse(r.stdout) as { runId: string; spent: number; stopped: boolean; tree: boolean }[]
  );
  assert.equal(children.length, 8);
  const spent = 0.05 + children.reduce((sum, c) => sum + c.spent, 0);
  // A call starts only while what the tree spent and its calls in flight leave room.
  assert.ok(spent >= 1, `the tree spent $${spent.toFixed(2)}`);
  assert.ok(spent <= 1 + perCall + 1e-9, `the tree spent $${spent.toFixed(2)}`);
  console.log(`tree of 9 runs in 3 processes: $${spent.toFixed(2)} spent against a $1.00 cap`);
  for (const c of children) {
    assert.equal(c.stopped, true, `${c.runId} was stopped`);
    assert.equal(c.tree, true, `${c.runId}'s file names the tree's totals`);
  }
  parent.preLlmCall();
  assert.equal(parent.budgetSignal.aborted, true, "the parent is stopped by its children's spend");
  await parent.end();
  await ac.close();
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  const rows = store.treeSync("lead");
  assert.equal(rows.length, 9);
  const total = rows.reduce((sum, r) => sum + r.use.usd, 0);
  assert.ok(Math.abs(total - spent) < 1e-9, `store $${total} vs runs' own $${spent}`);
  await store.close();
});

test("a child started while another process holds the ledger locked joins its tree in the store once the lock is gone", async () => {
  const log = captureLog();
  const home = tempHome();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: log.logger,
    settings: { watchdog: false, enforce: ["usd"] },
  });
  const parent = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  parent.preLlmCall();
  // Writers wait while it holds the lock: the child's start and its place in the tree cannot land.
  const lock = locker(storeFile(home), "write");
  await lock.locked;
  const child = ac.startRun({ sessionId: "helper", parent });
  assert.ok(
    log.records.some((r) => /in the tree lead failed: database is locked/.test(r.message)),
    "the failed join is logged",
  );
  await lock.release();
  child.preLlmCall();
  child.usage(call(0.2));
  await child.end();
  await parent.end();
  await ac.close();
  // Another process of the tree reads it from the store: the child's spend is there.
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  const rows = store.treeSync("lead");
  await store.close();
  assert.deepEqual(rows.map((r) => r.runId).sort(), ["helper", "lead"]);
  assert.equal(rows.find((r) => r.runId === "helper")?.use.usd, 0.2);
});

test("a host that passes process.env itself still gets its watchdog", async () => {
  const log = captureLog();
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: process.env, logger: log.logger });
  const run = ac.startRun({ sessionId: "env", caps: { timeSeconds: 3600 } });
  run.preLlmCall();
  assert.ok(await watchdogLooks(ac.sharedRuns, 2), "the watchdog looks at the runs");
  assert.deepEqual(log.records.filter((r) => /watchdog could not start/.test(r.message)), []);
  await ac.close();
});

test("every run of a tree names the tree's totals in its file, also one stopped by a relative before a call of its own, and the root", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { enforce: ["usd"] } });
  const lead = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  const quiet = ac.startRun({ sessionId: "quiet", parent: lead });
  const spender = ac.startRun({ sessionId: "spender", parent: lead });
  spender.preLlmCall();
  spender.usage(call(1.2));
  spender.preLlmCall();
  assert.equal(
    quiet.budgetSignal.aborted,
    true,
    "the quiet child is stopped by its sibling's spend",
  );
  const budget = fs.readFileSync(quiet.checkpointFile, "utf8");
  assert.match(
    budget,
    /- Tree: root lead, parent lead; the tree has used \d+ turns, 150 tokens and \$1\.20/,
  );
  for (const run of [quiet, spender, lead]) await run.end();
  await ac.close();
  for (const run of [quiet, spender, lead]) {
    assert.match(
      fs.readFileSync(run.checkpointFile, "utf8"),
      /the tree has used \d+ turns, 150 tokens and \$1\.20/,
      `${run.runId}'s file names the tree's totals`,
    );
  }
});
