import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { createAgentCheckpoint } from "../mod.ts";
import { recordUse } from "../_tree.ts";
import { NO_MODEL } from "../_record.ts";
import process from "node:process";
import { captureLog, locker, tempHome, watchdogLooks } from "./_helpers.ts";
import { openSqliteStore, storeFile } from "../store/sqlite.ts";
import {
  assertAbortedWithin1s,
  assertUnknownCostStopped,
  costlessAt,
  PER_CALL,
  runTree,
} from "./_tree_procs.ts";

/** One model call of `usd` dollars, as a host reports it. */
const call = (usd: number) => ({ inputTokens: 100, outputTokens: 50, usd });

test("a child's spend counts toward its parent's cap: the parent's tiers fire on the tree's total", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: { watchdog: false } });
  const parent = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  const child = ac.startRun({ sessionId: "helper", parent });
  assert.equal(parent.preLlmCall(), undefined);
  parent.postLlmCall(call(0.1));
  for (let i = 0; i < 4; i++) {
    child.preLlmCall();
    child.postLlmCall(call(0.1));
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
    run.signal.addEventListener("abort", () => {
      seenAtAbort.set(run.runId, fs.readFileSync(run.checkpointFile, "utf8"));
    });
  }
  let spent = 0;
  let calls = 0;
  for (let round = 0; round < 20 && !parent.signal.aborted; round++) {
    for (const run of children) {
      if (run.signal.aborted) continue;
      run.preLlmCall();
      run.postLlmCall(call(0.07));
      spent += 0.07;
      calls++;
    }
  }
  assert.ok(spent >= 1 && spent < 1 + 0.07 + 1e-9, `spent $${spent} in ${calls} calls`);
  for (const run of [parent, ...children]) {
    assert.equal(run.signal.aborted, true, `${run.runId} was stopped`);
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
  while (!run.signal.aborted && calls < 50) {
    run.preLlmCall();
    if (run.signal.aborted) break;
    calls++;
  }
  assert.equal(calls, 5);
  const free = createAgentCheckpoint({ home: tempHome(), env: {}, settings: { watchdog: false } });
  const other = free.startRun({ sessionId: "free", caps: { turns: 5 } });
  for (let i = 0; i < 10; i++) other.preLlmCall();
  assert.equal(other.signal.aborted, false);
  await ac.close();
  await free.close();
});

test("a call of unknown cost stops an enforced dollar cap: no cost, a negative, NaN or infinite one, or a model with no price; the budget record names the model and the run ends capped", async () => {
  const reports = [
    { report: {}, says: /no cost was reported and no model was named/ },
    { report: { usd: -1 }, says: /no cost was reported and no model was named/ },
    { report: { usd: NaN }, says: /no cost was reported and no model was named/ },
    { report: { usd: Infinity }, says: /no cost was reported and no model was named/ },
    { report: { model: "mystery-model" }, says: /unknown price for mystery-model/ },
  ];
  for (const { report, says } of reports) {
    const log = captureLog();
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      logger: log.logger,
      settings: { watchdog: false, enforce: ["usd"] },
    });
    const run = ac.startRun({ sessionId: "unpriced", caps: { usd: 1 } });
    let atAbort = "";
    run.signal.addEventListener("abort", () => {
      atAbort = fs.readFileSync(run.checkpointFile, "utf8");
    });
    run.preLlmCall();
    run.postLlmCall({ inputTokens: 10, outputTokens: 10, ...report });
    // Then $5 calls, as long as the run is let go on: none is.
    let spent = 0;
    for (let i = 0; i < 5 && !run.signal.aborted; i++) {
      run.preLlmCall();
      if (run.signal.aborted) break;
      run.postLlmCall({ inputTokens: 10, outputTokens: 10, usd: 5 });
      spent += 5;
    }
    const what = JSON.stringify(report);
    assert.equal(run.signal.aborted, true, `${what}: the enforced cap stops the run`);
    assert.equal(spent, 0, `${what}: $${spent} spent after the call of unknown cost`);
    assert.match(atAbort, /enforced budget cap passed; checkpoint persisted before the stop/);
    assert.match(atAbort, says, `${what}: the budget record names the model`);
    assert.match(atAbort, /- Cost so far: unknown \(no cost reported, no price\)/, what);
    assert.equal(
      log.records.filter((r) => /usd axis is off/.test(r.message)).length,
      0,
      `${what}: the axis is never switched off`,
    );
    await run.end();
    assert.match(fs.readFileSync(run.checkpointFile, "utf8"), /run ended \(capped\)/, what);
    await ac.close();
  }
});

test("without enforcement a call of unknown cost is one warning: the known costs go on counting toward the dollar tiers, and the total is shown as at least $X", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { watchdog: false },
  });
  const run = ac.startRun({ sessionId: "unpriced", caps: { usd: 1 } });
  for (let i = 0; i < 3; i++) {
    run.preLlmCall();
    run.postLlmCall({ inputTokens: 1000, outputTokens: 1000, model: "mystery-model" });
  }
  run.preLlmCall();
  run.postLlmCall(call(0.3));
  run.preLlmCall();
  run.postLlmCall(call(0.3));
  // $0.60 known: tier 1 (at half the cap) is due, on the known dollars alone.
  assert.match(run.preLlmCall() ?? "", /write everything you have found so far/);
  assert.equal(run.signal.aborted, false, "nothing is enforced");
  const lines = log.records.filter((r) => /unknown price for mystery-model/.test(r.message));
  assert.equal(lines.length, 1);
  assert.equal(lines[0]!.level, "warn");
  assert.match(lines[0]!.message, /lower bound/);
  await run.checkpoint();
  const text = fs.readFileSync(run.checkpointFile, "utf8");
  assert.match(text, /- Cost so far: at least \$0\.60 \(some calls' cost is unknown\)/);
  assert.match(text, /- Cost unknown: unknown price for mystery-model/);
  // A framework's own total of every call's cost (the Claude Agent SDK's) leaves nothing unknown.
  run.postLlmCall({ inputTokens: 0, outputTokens: 0, totalUsd: 0.75 });
  await run.checkpoint();
  const after = fs.readFileSync(run.checkpointFile, "utf8");
  assert.match(after, /- Cost so far: \$0\.75\n/);
  assert.doesNotMatch(after, /Cost unknown/);
  await ac.close();
});

test("in a tree, a child's call of unknown cost stops every run when the root enforces usd, a forged 1e308 cost passes the cap, and the root's stored totals keep the known dollars", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { enforce: ["usd"] } });
  const lead = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  const [a, b] = [1, 2].map((n) => ac.startRun({ sessionId: `helper-${n}`, parent: lead }));
  b!.preLlmCall();
  b!.postLlmCall(call(0.25));
  a!.preLlmCall();
  a!.postLlmCall({ inputTokens: 10, outputTokens: 10 });
  for (const run of [lead, a!, b!]) {
    assert.equal(run.signal.aborted, true, `${run.runId} is stopped by a's call`);
  }
  assert.match(
    fs.readFileSync(lead.checkpointFile, "utf8"),
    /- Stopped by: the enforced usd cap \$1\.00 \(used at least \$0\.25; a call of unknown cost: no cost was reported and no model was named\)/,
  );
  for (const run of [a!, b!, lead]) await run.end();
  // Two forged 1e308 costs: a cap passed, never a total of Infinity that a record cannot hold.
  const lead2 = ac.startRun({ sessionId: "lead-2", caps: { usd: 1 } });
  const forger = ac.startRun({ sessionId: "forger", parent: lead2 });
  forger.preLlmCall();
  forger.postLlmCall(call(1e308));
  assert.equal(lead2.signal.aborted, true, "a forged huge cost passes the cap");
  forger.postLlmCall(call(1e308));
  for (const run of [forger, lead2]) await run.end();
  await ac.close();
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  const rows = store.treeSync("lead");
  const forged = store.treeSync("lead-2");
  const root = store.latestSync("lead")?.record;
  await store.close();
  assert.deepEqual(rows.find((r) => r.runId === "helper-1")?.use.unpriced, ["(no model named)"]);
  assert.equal(rows.find((r) => r.runId === "helper-2")?.use.usd, 0.25);
  assert.equal(root?.tree?.totals?.usd, 0.25, "the root's stored totals keep the known dollars");
  assert.deepEqual(root?.tree?.totals?.unpriced, ["(no model named)"]);
  assert.equal(forged.find((r) => r.runId === "forger")?.use.usd, Number.MAX_VALUE);
});

test("a parent and 8 children in 3 processes share a $1.00 cap: spend stops within one call, every run, the idle parent included, aborts within 1 s of the cap, and the store's tree total is the runs' own sum", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { enforce: ["usd"], progress_interval_seconds: 0.2 },
  });
  const parent = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  parent.preLlmCall();
  parent.postLlmCall(call(0.05));
  const tree = await runTree(parent, parent.budget.childEnv(), () => home);
  const { children, spent } = tree;
  // A call starts only while what the tree spent and its calls in flight leave room.
  assert.ok(spent >= 1, `the tree spent $${spent.toFixed(2)}`);
  assert.ok(spent <= 1 + PER_CALL + 1e-9, `the tree spent $${spent.toFixed(2)}`);
  console.log(`tree of 9 runs in 3 processes: $${spent.toFixed(2)} spent against a $1.00 cap`);
  for (const c of children) {
    assert.equal(c.stopped, true, `${c.runId} was stopped`);
    assert.equal(c.tree, true, `${c.runId}'s file names the tree's totals`);
  }
  // The parent made no call since its children began: it learns of their spend by itself.
  assert.ok(tree.parentAbortedAt !== undefined, "the parent is stopped by its children's spend");
  assert.match(tree.parentBudget, /- Stopped by: the enforced usd cap \$1\.00/);
  assertAbortedWithin1s("SQLite", tree, Math.min(...children.map((c) => c.abortedAt!)));
  await parent.end();
  await ac.close();
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  const rows = store.treeSync("lead");
  assert.equal(rows.length, 9);
  const total = rows.reduce((sum, r) => sum + r.use.usd, 0);
  assert.ok(Math.abs(total - spent) < 1e-9, `store $${total} vs runs' own $${spent}`);
  await store.close();
});

test("a child's call of unknown cost midway stops the whole tree of 3 processes under an enforced dollar cap: never counted as $0, every run aborted within 1 s, each record saying why", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { enforce: ["usd"], progress_interval_seconds: 0.2 },
  });
  const parent = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  parent.preLlmCall();
  parent.postLlmCall(call(0.05));
  const tree = await runTree(parent, parent.budget.childEnv(), () => home, "child-0-1");
  assertUnknownCostStopped(tree);
  assertAbortedWithin1s("SQLite, a call of unknown cost", tree, costlessAt(tree));
  await parent.end();
  await ac.close();
  // The store keeps the known dollars and says which calls' cost is unknown: never dropped.
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  const rows = store.treeSync("lead");
  await store.close();
  assert.equal(rows.length, 9);
  const total = rows.reduce((sum, r) => sum + r.use.usd, 0);
  assert.ok(Math.abs(total - tree.spent) < 1e-9, `store $${total} vs runs' own $${tree.spent}`);
  assert.deepEqual(rows.find((r) => r.runId === "child-0-1")?.use.unpriced, ["(no model named)"]);
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
  child.postLlmCall(call(0.2));
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
  spender.postLlmCall(call(1.2));
  spender.preLlmCall();
  assert.equal(
    quiet.signal.aborted,
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

test("the stop's log line says passed only once it is, with no float noise, and a refused call as taken by calls in flight", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { watchdog: false, enforce: ["usd"] },
  });
  const stops = () =>
    log.records.filter((r) => /enforced usd cap/.test(r.message)).map((r) => r.message);
  // Alone: $0.33 + $0.56 + $0.11 sum to 1.0000000000000002 in floating point.
  const solo = ac.startRun({ sessionId: "solo", caps: { usd: 1 } });
  for (const usd of [0.33, 0.56, 0.11]) {
    solo.preLlmCall();
    solo.postLlmCall(call(usd));
  }
  solo.preLlmCall();
  assert.equal(solo.signal.aborted, true);
  assert.deepEqual(stops(), [
    "the enforced usd cap is passed (1 of 1); the run's signal aborts it",
  ]);
  // A tree: $0.96 spent and a call of $0.50 in flight: the next call is refused, the cap not passed.
  const parent = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
  const [a, b] = ["a", "b"].map((n) => ac.startRun({ sessionId: n, parent }));
  a!.preLlmCall();
  a!.postLlmCall(call(0.5));
  b!.preLlmCall();
  b!.postLlmCall(call(0.46));
  a!.preLlmCall(); // in flight, reserving its last call's $0.50
  b!.preLlmCall();
  assert.equal(b!.signal.aborted, true);
  const refused = stops().find((m) => m.includes("of lead"));
  assert.ok(refused, stops().join("\n"));
  assert.doesNotMatch(refused, /is passed/);
  assert.match(
    refused,
    /cap of lead is taken: 0\.96 of 1 spent and 0\.5 reserved by other calls in flight/,
  );
  await ac.close();
});

test("a stored record with no dollar figure adds to its tree as unknown dollars, never as $0 known", () => {
  // Records of versions that left the figure out when a cost was unknown.
  assert.deepEqual(recordUse({ turnsUsed: 3, usage: { inputTokens: 10, outputTokens: 5 } }), {
    turns: 3,
    tokens: 15,
    usd: 0,
    unpriced: [NO_MODEL],
  });
  // A negative or infinite figure is no figure either.
  for (const usd of [-1, Infinity, NaN]) {
    assert.deepEqual(recordUse({ usage: { inputTokens: 1, outputTokens: 0, usd } }).unpriced, [
      NO_MODEL,
    ]);
  }
  assert.equal(
    recordUse({ usage: { inputTokens: 1, outputTokens: 0, usd: 0.5 } }).unpriced,
    undefined,
  );
});
