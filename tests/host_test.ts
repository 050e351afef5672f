// What a host sees and tells: call ids, the pre-model-call persist, onCheckpoint,
// run.checkpoint(), end statuses, one file per live run, request timeouts and deadlines.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { type CheckpointEvent, createAgentCheckpoint } from "../mod.ts";
import { parseRecord } from "../_record.ts";
import { Worker } from "node:worker_threads";
import { blockUntil, captureLog, fixture, tempHome, waitFor, watchdogLooks } from "./_helpers.ts";

const record = (file: string) =>
  fs.existsSync(file) ? parseRecord(fs.readFileSync(file)) : undefined;

const make = (settings: Record<string, unknown> = {}, extra = {}) => {
  const log = captureLog();
  const events: CheckpointEvent[] = [];
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { watchdog: false, ...settings },
    logger: log.logger,
    onCheckpoint: (e) => void events.push(e),
    ...extra,
  });
  return { ac, log, events };
};

test("parallel calls of one tool are told apart by call id", async () => {
  const { ac } = make();
  const run = ac.startRun({ sessionId: "s" });
  run.preToolCall("bash", { callId: "call_a", input: { command: "sleep 5" } });
  run.preToolCall("bash", { callId: "call_b", input: { command: "false" } });
  run.postToolCall("bash", { callId: "call_b", error: new Error("exit status 1"), durationMs: 20 });
  await run.checkpoint();
  let tools = record(run.checkpointFile)!.tools;
  assert.deepEqual(tools.map((t) => [t.callId, t.status]), [
    ["call_a", "in flight"],
    ["call_b", "failed"],
  ]);
  assert.equal(tools[1]!.error, "exit status 1");
  assert.equal(tools[1]!.durationMs, 20);
  run.postToolCall("bash", { callId: "call_a", ok: true });
  await run.checkpoint();
  tools = record(run.checkpointFile)!.tools;
  assert.deepEqual(tools.map((t) => [t.callId, t.status]), [["call_a", "ok"], [
    "call_b",
    "failed",
  ]]);
  await ac.close();
});

test("without a call id, an end is matched to the oldest call of that tool in flight", async () => {
  const { ac } = make();
  const run = ac.startRun({ sessionId: "s" });
  run.preToolCall("fetch");
  run.preToolCall("fetch");
  run.postToolCall("fetch", { ok: true, durationMs: 5 });
  await run.checkpoint();
  const tools = record(run.checkpointFile)!.tools;
  assert.deepEqual(tools.map((t) => t.status), ["ok", "in flight"]);
  await ac.close();
});

test("preLlmCall() persists a due tier before it returns, with the watchdog off", async () => {
  const { ac, events } = make();
  const run = ac.startRun({ sessionId: "s", caps: { turns: 9 } }); // tiny: no tier 1
  for (let t = 0; t < 7; t++) assert.equal(run.preLlmCall(), undefined);
  assert.equal(fs.existsSync(run.checkpointFile), false);
  assert.match(run.preLlmCall() ?? "", /INCOMPLETE/); // turn 7 of 9: tier 2
  const r = record(run.checkpointFile)!;
  assert.equal(r.kind, "tier");
  assert.equal(r.tier, 2);
  assert.equal(r.source, "pre_llm_call");
  assert.deepEqual(events.map((e) => [e.kind, e.tier, e.source]), [["tier", 2, "pre_llm_call"]]);
  // The mid-run surface has it: the next tool boundary writes nothing more.
  run.preToolCall("t");
  assert.equal(events.length, 1);
  await ac.close();
});

test("onCheckpoint hears the watchdog's writes once the main thread is free", async () => {
  const { ac, events } = make({ watchdog: true, allow_tiny_tier1: true });
  const run = ac.startRun({ sessionId: "s", caps: { timeSeconds: 1 } });
  run.preToolCall("long");
  assert.ok(blockUntil(() => record(run.checkpointFile)?.tier === 2), "tier 2 during the block");
  assert.equal(events.length, 0, "the listener runs on the main thread, which was blocked");
  assert.ok(await waitFor(() => events.some((e) => e.tier === 2)));
  const e = events.find((e) => e.tier === 2)!;
  assert.equal(e.source, "watchdog");
  assert.equal(e.runId, "s");
  assert.equal(e.file, run.checkpointFile);
  assert.ok(!Number.isNaN(Date.parse(e.persistedAt)));
  await ac.close();
});

test("a throwing onCheckpoint listener costs a log line, and the file is written", async () => {
  const { ac, log } = make({}, {
    onCheckpoint: () => {
      throw new Error("listener bug");
    },
  });
  const run = ac.startRun({ sessionId: "s" });
  assert.equal(await run.checkpoint("by hand"), run.checkpointFile);
  assert.equal(record(run.checkpointFile)?.message, "by hand");
  assert.ok(log.records.some((r) => /onCheckpoint threw: listener bug/.test(r.message)));
  await ac.close();
});

test("run.checkpoint() writes a manual record, and nothing once the run ended", async () => {
  const { ac, events } = make();
  const run = ac.startRun({ sessionId: "s", caps: { turns: 50 } });
  run.note("read the spec");
  const file = await run.checkpoint();
  assert.equal(file, run.checkpointFile);
  const r = record(file!)!;
  assert.equal(r.kind, "manual");
  assert.equal(r.source, "host");
  assert.deepEqual(r.notes, ["read the spec"]);
  assert.deepEqual(events.map((e) => [e.kind, e.source]), [["manual", "host"]]);
  await run.end();
  assert.equal(await run.checkpoint(), undefined);
});

test("end() records its status and summary in a run's file, once", async () => {
  for (const status of ["done", "capped", "failed", "aborted", "deadline"] as const) {
    const { ac } = make();
    const run = ac.startRun({ sessionId: status });
    fs.mkdirSync(ac.settings.checkpoint_dir, { recursive: true });
    fs.writeFileSync(run.checkpointFile, "# my notes\n");
    await run.end({ status, summary: `ended ${status}` });
    const text = fs.readFileSync(run.checkpointFile, "utf8");
    assert.ok(text.startsWith("# my notes\n"), "the agent's text is kept");
    const r = record(run.checkpointFile)!;
    assert.equal(r.kind, "end");
    assert.equal(r.end?.status, status);
    assert.equal(r.end?.summary, `ended ${status}`);
    await run.end({ status: "failed" }); // a no-op
    assert.equal(record(run.checkpointFile)?.end?.status, status);
    await ac.close();
  }
});

test("end() writes no file for a run that has none, and defaults to done", async () => {
  const { ac } = make();
  const quiet = ac.startRun({ sessionId: "quiet" });
  await quiet.end();
  assert.equal(fs.existsSync(quiet.checkpointFile), false);
  const busy = ac.startRun({ sessionId: "busy" });
  await busy.checkpoint();
  await busy.end();
  assert.equal(record(busy.checkpointFile)?.end?.status, "done");
  await ac.close();
});

test("two live runs with one id get files of their own, and the id is free again after end", async () => {
  const { ac, log } = make();
  const first = ac.startRun({ sessionId: "same" });
  const second = ac.startRun({ sessionId: "same" });
  const third = ac.startRun({ sessionId: "same" });
  assert.deepEqual([first.runId, second.runId, third.runId], ["same", "same.2", "same.3"]);
  assert.equal(new Set([first, second, third].map((r) => r.checkpointFile)).size, 3);
  assert.ok(log.records.some((r) => r.level === "warn" && /already live/.test(r.message)));
  await first.checkpoint("first");
  await second.checkpoint("second");
  assert.equal(record(first.checkpointFile)?.message, "first");
  await first.end();
  assert.equal(ac.startRun({ sessionId: "same" }).runId, "same");
  await ac.close();
});

test("requestTimeout() keeps a request within half the time left, never under 60 s", async () => {
  const { ac } = make();
  const capped = ac.startRun({ sessionId: "capped", caps: { timeSeconds: 1000 } });
  assert.equal(capped.time.requestTimeout(600), 500);
  assert.equal(capped.time.requestTimeout(100), 100, "never longer than asked");
  assert.equal(capped.time.requestTimeout(600, { explicit: true }), 600, "a user's timeout stands");
  ac.sharedRuns.rewind(capped.slot, 990_000); // 10 s left
  assert.equal(capped.time.requestTimeout(600), 60, "the 60 s floor");
  assert.equal(capped.time.requestTimeout(30), 30);
  const uncapped = ac.startRun({ sessionId: "uncapped", caps: { turns: 20 } });
  assert.equal(uncapped.time.requestTimeout(600), 600);
  await ac.close();
});

test("budget values that do not arm leave no time cap and a deadline that never fires", async () => {
  for (const timeSeconds of [0, -5, Number.NaN, true, "soon", undefined]) {
    const { ac } = make();
    const run = ac.startRun({
      sessionId: "s",
      caps: { timeSeconds: timeSeconds as number },
    });
    assert.equal(run.caps.time, undefined, `timeSeconds ${String(timeSeconds)}`);
    assert.equal(run.time.requestTimeout(600), 600);
    assert.equal(run.time.stopAtDeadline().aborted, false);
    await ac.close();
  }
});

test("run.signal is one signal for every stop: the deadline only once asked for, and stopReason says which", async () => {
  // A time cap alone is a nudge: past it, run.signal does not abort until the deadline is armed.
  const { ac } = make();
  const nudged = ac.startRun({ sessionId: "nudged", caps: { timeSeconds: 0.05 } });
  const signal = nudged.signal;
  const started = Date.now();
  // Past the cap (twice over), as the run's own clock and the wall clock both say.
  assert.ok(await waitFor(() => Date.now() - started > 100 && nudged.preLlmCall() !== undefined));
  assert.equal(signal.aborted, false);
  const why = () => nudged.stopReason; // read afresh: an assertion narrows a property read
  assert.equal(why(), undefined);
  // Armed: the same signal aborts, as the deadline.
  const work = setInterval(() => {}, 50);
  assert.equal(nudged.time.stopAtDeadline(), signal);
  await waitFor(() => signal.aborted, 10_000);
  clearInterval(work);
  assert.equal(why()?.kind, "deadline");
  assert.equal((signal.reason as DOMException).name, "TimeoutError");
  assert.equal(nudged.budget.stopped, false);
  // An enforced cap: the same signal, as the budget, with the error an adapter throws.
  const { ac: enforced } = make({ enforce: ["turns"] });
  const capped = enforced.startRun({ sessionId: "capped", caps: { turns: 2 } });
  while (!capped.signal.aborted) capped.preLlmCall();
  const reason = capped.stopReason;
  assert.equal(reason?.kind, "budget");
  assert.equal(reason?.kind === "budget" && reason.error.axis, "turns");
  assert.equal(capped.budget.error()?.capRunId, "capped");
  await capped.end();
  await enforced.close();
  await ac.close();
});

test("the deadline aborts at the time cap plus grace, after a deadline checkpoint", async () => {
  const { ac, events } = make({ deadline_grace_seconds: 0.2 });
  const run = ac.startRun({ sessionId: "s", caps: { timeSeconds: 0.3 } });
  const started = Date.now();
  // The deadline's timer never keeps a process alive; this host has work of its own.
  const work = setInterval(() => {}, 50);
  const aborted = new Promise<number>((resolve) =>
    run.time.stopAtDeadline().addEventListener("abort", () => resolve(Date.now()))
  );
  const at = await aborted;
  clearInterval(work);
  assert.ok(at - started >= 450, `aborted after ${at - started} ms, not before cap + grace`);
  assert.equal((run.time.stopAtDeadline().reason as DOMException).name, "TimeoutError");
  const r = record(run.checkpointFile)!;
  assert.equal(r.kind, "deadline");
  assert.equal(r.source, "host");
  assert.ok(events.some((e) => e.kind === "deadline"));
  await run.end({ status: "deadline" });
  assert.equal(record(run.checkpointFile)?.end?.status, "deadline");
  await ac.close();
});

test("with the main thread blocked, the watchdog writes the deadline checkpoint", async () => {
  const { ac } = make({ watchdog: true });
  const run = ac.startRun({ sessionId: "s", caps: { timeSeconds: 0.5 } });
  const signal = run.time.stopAtDeadline();
  run.preToolCall("stuck");
  assert.ok(
    blockUntil(() => record(run.checkpointFile)?.kind === "deadline"),
    "written in the block",
  );
  assert.equal(record(run.checkpointFile)?.source, "watchdog");
  // Once the main thread is free, the signal aborts, and nothing is written twice.
  assert.ok(await waitFor(() => signal.aborted));
  const persistedAt = record(run.checkpointFile)?.persistedAt;
  assert.ok(await watchdogLooks(ac.sharedRuns, 2));
  assert.equal(record(run.checkpointFile)?.persistedAt, persistedAt);
  await ac.close();
});

test("a time cap past 24.8 days does not abort the deadline early, nor write a record", async () => {
  const { ac, events } = make();
  const run = ac.startRun({ sessionId: "s", caps: { timeSeconds: 30 * 86400 } });
  const signal = run.time.stopAtDeadline();
  // A timer asked for more than 2^31-1 ms fires after 1 ms; these fire in order after it.
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(signal.aborted, false);
  assert.equal(record(run.checkpointFile), undefined);
  assert.ok(!events.some((e) => e.kind === "deadline"));
  await run.end();
  await ac.close();
});

test("mid_run_persist: false: the deadline aborts but its timer writes no file", async () => {
  const { ac, events } = make({ mid_run_persist: false });
  const run = ac.startRun({ sessionId: "s", caps: { timeSeconds: 0.2 } });
  const work = setInterval(() => {}, 50);
  await new Promise((resolve) => run.time.stopAtDeadline().addEventListener("abort", resolve));
  clearInterval(work);
  assert.equal((run.time.stopAtDeadline().reason as DOMException).name, "TimeoutError");
  assert.equal(fs.existsSync(run.checkpointFile), false);
  assert.ok(!events.some((e) => e.kind === "deadline"));
  await ac.close();
});

/** What the host's own worker saw (tests/fixtures/host_worker.ts). */
interface HostWorkerResult {
  byWatchdog: boolean;
  watched: string;
  capped: string;
  lines: string[];
}

/** Run the host-in-a-worker fixture with these worker options; its result, or why it failed. */
function hostWorker(options: { workerData?: unknown }): Promise<HostWorkerResult | string> {
  const home = tempHome();
  const worker = new Worker(fixture("host_worker"), options);
  worker.postMessage({ home });
  return new Promise((resolve) => {
    // Bounded only against a hang; the fixture's own waits are bounded too.
    const hang = setTimeout(() => resolve("no answer in 120 s"), 120_000);
    const done = (result: HostWorkerResult | string) => {
      clearTimeout(hang);
      resolve(result); // first: under Deno, terminate() says "exit" at once
      void worker.terminate();
    };
    worker.once("message", (result: HostWorkerResult) => done(result));
    worker.once("error", (error) => done(`the host's worker failed: ${error}`));
    worker.once("exit", (code) => done(`the host's worker exited with ${code}`));
  });
}

for (
  const [what, options] of [
    ["without workerData", {}],
    ["with workerData of its own", { workerData: { task: "crawl", jobs: [1, 2] } }],
  ] as const
) {
  test(`a host that imports the library in its own worker thread ${what} gets its checkpoints`, async () => {
    const result = await hostWorker(options);
    assert.equal(typeof result, "object", String(result));
    const seen = result as HostWorkerResult;
    assert.equal(seen.byWatchdog, true, `no watchdog file while blocked: ${seen.lines.join("; ")}`);
    const parsed = (text: string) => parseRecord(new TextEncoder().encode(text));
    assert.equal(parsed(seen.watched)?.kind, "end", seen.watched);
    assert.equal(parsed(seen.capped)?.kind, "end", seen.capped);
    assert.equal(parsed(seen.capped)?.tier, 2, "the capped run crossed its tiers");
    assert.deepEqual(seen.lines.filter((l) => l.startsWith("error")), []);
  });
}
