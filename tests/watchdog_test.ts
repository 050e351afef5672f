import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import process from "node:process";
import { type AgentCheckpoint, createAgentCheckpoint, type TaskComment } from "../mod.ts";
import { parseRecord } from "../record.ts";
import { MAX_RUNS } from "../shared.ts";
import {
  blockFor,
  captureLog,
  fixture,
  runScript,
  sleep,
  tempHome,
  waitFor,
  writeConfig,
} from "./_helpers.ts";

const record = (file: string) =>
  fs.existsSync(file) ? parseRecord(fs.readFileSync(file)) : undefined;

test("the watchdog writes the file while the main thread is blocked across a crossing", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { allow_tiny_tier1: true },
  });
  // Tier 1 at 0.75 s, tier 2 at 1.2 s; the poll interval stays at its default of 10 s.
  const run = ac.startRun({ sessionId: "blocked", caps: { timeSeconds: 1.5 } });
  run.preLlmCall();
  run.preToolCall("long_tool");
  const blockedAt = Date.now();
  blockFor(1500); // one long synchronous tool call
  const r = record(run.checkpointFile); // read the moment the main thread is free
  assert.ok(r, "the watchdog wrote the file during the block");
  assert.equal(r.source, "watchdog");
  assert.equal(r.tier, 2);
  assert.ok(Date.parse(r.persistedAt) < blockedAt + 1500, "persisted during the block");
  assert.deepEqual(r.tools, [{
    tool: "long_tool",
    status: "in flight",
    startedAt: r.tools[0]!.startedAt,
  }]);
  await ac.close();
});

test("a run started while the watchdog runs is watched even if the main thread blocks at once", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { allow_tiny_tier1: true },
  });
  ac.startRun({ sessionId: "first" }).activity(); // the watchdog is up and asleep
  await sleep(300);
  const run = ac.startRun({ sessionId: "second", caps: { timeSeconds: 1 } });
  run.preToolCall("compile");
  blockFor(1000);
  const r = record(run.checkpointFile);
  assert.equal(r?.source, "watchdog");
  assert.equal(r?.tools[0]?.tool, "compile");
  await ac.close();
});

test("kanban comments go out through commentModule during a block, and postComment after it", async () => {
  const home = tempHome();
  const sinkFile = `${home}/comments.jsonl`;
  process.env.AC_COMMENT_FILE = sinkFile;
  const hostComments: Array<TaskComment & { at: number }> = [];
  const withModule = createAgentCheckpoint({
    home,
    env: {},
    settings: { allow_tiny_tier1: true },
    commentModule: new URL(`file://${fixture("comment_sink")}`),
  });
  const withHost = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { allow_tiny_tier1: true },
    postComment: (c) => void hostComments.push({ ...c, at: Date.now() }),
  });
  const a = withModule.startRun({ sessionId: "s", taskId: "task-a", caps: { timeSeconds: 1 } });
  const b = withHost.startRun({ sessionId: "s", taskId: "task-b", caps: { timeSeconds: 1 } });
  a.preLlmCall();
  b.preLlmCall();
  const blockedAt = Date.now();
  blockFor(1500);
  const unblockedAt = Date.now();
  const lines = fs.existsSync(sinkFile) ? fs.readFileSync(sinkFile, "utf8").trim().split("\n") : [];
  const viaModule = lines.map((l) => JSON.parse(l));
  assert.deepEqual(viaModule.map((c) => c.taskId), ["task-a", "task-a"], "tier 1 and tier 2");
  assert.ok(
    viaModule.every((c) => c.at > blockedAt && c.at < unblockedAt),
    "posted during the block",
  );
  assert.match(viaModule[1].body, /^# agent-checkpoint\n\n## agent-checkpoint: budget tier 2/);
  assert.equal(hostComments.length, 0, "the host's sink waits for the main thread");
  assert.ok(await waitFor(() => hostComments.length === 2));
  assert.ok(hostComments.every((c) => c.taskId === "task-b" && c.at >= unblockedAt));
  await withModule.close();
  await withHost.close();
});

test("capless runs get a file at each multiple of the interval and one kanban comment", async () => {
  const comments: TaskComment[] = [];
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { uncapped_interval_seconds: 0.25 },
    postComment: (c) => void comments.push(c),
  });
  const run = ac.startRun({ sessionId: "s", taskId: "task-1" });
  run.note("exploring");
  const multiples: number[] = [];
  const deadline = Date.now() + 3000;
  while (Date.now() < deadline && (multiples.at(-1) ?? 0) < 3) {
    const r = record(run.checkpointFile);
    if (r && r.multiple !== multiples.at(-1)) multiples.push(r.multiple!);
    await sleep(20);
  }
  assert.deepEqual(multiples.slice(0, 3), [1, 2, 3]);
  const text = fs.readFileSync(run.checkpointFile, "utf8");
  assert.equal(
    text.match(/agent-checkpoint:begin/g)?.length,
    1,
    "the block is rewritten, not repeated",
  );
  assert.match(text, /uncapped-run checkpoint 3 persisted \(source: watchdog\)/);
  assert.match(text, /Uncapped interval: 0s \(checkpoint 3\)/);
  assert.equal(comments.length, 1);
  assert.match(comments[0]!.body, /uncapped-run checkpoint 1/);
  await ac.close();
});

test("after a pause a capless run gets one checkpoint for the latest multiple, not a burst", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { uncapped_interval_seconds: 60 },
  });
  const run = ac.startRun({ sessionId: "s" });
  run.activity();
  ac.sharedRuns.rewind(run.slot, 10 * 60_000 + 500); // ten intervals pass at once
  run.note("wake"); // a message wakes the watchdog
  assert.ok(await waitFor(() => record(run.checkpointFile) !== undefined));
  await sleep(200);
  assert.equal(record(run.checkpointFile)?.multiple, 10);
  await ac.close();
});

test("with the interval at 0 a capless run is dropped on the first poll", async () => {
  const home = tempHome();
  writeConfig(
    home,
    "agent_checkpoint: { uncapped_interval_seconds: 0, watchdog_poll_seconds: 0.05 }",
  );
  const log = captureLog();
  const ac = createAgentCheckpoint({ home, env: {}, logger: log.logger });
  const run = ac.startRun({ sessionId: "s" });
  run.activity();
  assert.ok(await waitFor(() => log.records.some((r) => /stops watching/.test(r.message))));
  assert.deepEqual(log.records.map((r) => [r.runId, r.message]), [
    ["s", "no cap and uncapped_interval_seconds is 0; the watchdog stops watching"],
  ]);
  // Dropped for good: turning the interval on again does not bring it back.
  writeConfig(
    home,
    "agent_checkpoint: { uncapped_interval_seconds: 0.1, watchdog_poll_seconds: 0.05 }",
  );
  await sleep(400);
  assert.ok(!fs.existsSync(run.checkpointFile));
  await ac.close();
});

test("a stall gets one checkpoint per silence, naming the tool in flight, and re-arms", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { stall_window_seconds: 0.3 },
  });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 1000 } });
  run.preLlmCall();
  run.preToolCall("slow_fetch");
  assert.ok(await waitFor(() => record(run.checkpointFile)?.kind === "stall"));
  const first = record(run.checkpointFile)!;
  assert.match(first.message, /Tool call still in flight: slow_fetch/);
  await sleep(700); // more than two windows: still one checkpoint for this silence
  assert.equal(record(run.checkpointFile)?.persistedAt, first.persistedAt);
  run.postToolCall("slow_fetch", { ok: true }); // the next hook call re-arms it
  assert.ok(await waitFor(() => record(run.checkpointFile)?.persistedAt !== first.persistedAt));
  const second = record(run.checkpointFile)!;
  assert.equal(second.kind, "stall");
  assert.match(second.message, /No tool call is in flight/);
  await ac.close();
});

async function liveSettings(
  change: string,
  check: (ac: AgentCheckpoint, file: string) => Promise<void>,
) {
  const home = tempHome();
  const base = "watchdog_poll_seconds: 0.1, uncapped_interval_seconds: 0.2";
  writeConfig(home, `agent_checkpoint: { ${base} }`);
  const log = captureLog();
  const ac = createAgentCheckpoint({ home, env: {}, logger: log.logger });
  const run = ac.startRun({ sessionId: "s" });
  run.activity();
  assert.ok(await waitFor(() => (record(run.checkpointFile)?.multiple ?? 0) >= 1));
  writeConfig(home, `agent_checkpoint: { ${base}, ${change} }`);
  await sleep(400); // one poll of 0.1 s, with room for a loaded machine
  await check(ac, run.checkpointFile);
  await ac.close();
  return log.records;
}

test("enabled: false in config.yaml stops the watchdog's writes within one poll", async () => {
  await liveSettings("enabled: false", async (_ac, file) => {
    const before = fs.readFileSync(file);
    await sleep(600);
    assert.deepEqual(fs.readFileSync(file), before);
  });
});

test("mode: log-only in config.yaml turns the watchdog's writes into log lines within one poll", async () => {
  const records = await liveSettings("mode: log-only", async (_ac, file) => {
    const before = fs.readFileSync(file);
    await sleep(600);
    assert.deepEqual(fs.readFileSync(file), before);
  });
  assert.ok(records.some((r) => r.message === "uncapped due (watchdog)"));
});

test("a new poll interval in config.yaml takes effect within one poll", async () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint: { watchdog_poll_seconds: 0.1 }");
  const ac = createAgentCheckpoint({ home, env: {} });
  // A turn crossing reached through preLlmCall() alone is seen by the watchdog only when it polls.
  const crossing = async (sessionId: string) => {
    const run = ac.startRun({ sessionId, caps: { turns: 100 } });
    run.activity();
    await sleep(150); // let the watchdog take in the new run before the crossing
    for (let t = 0; t < 51; t++) run.preLlmCall();
    await sleep(800);
    return fs.existsSync(run.checkpointFile);
  };
  assert.equal(await crossing("fast"), true, "polled every 0.1 s");
  writeConfig(home, "agent_checkpoint: { watchdog_poll_seconds: 30 }");
  await sleep(250);
  assert.equal(await crossing("slow"), false, "polled every 30 s");
  await ac.close();
});

test("a host that never ends its runs exits when its own work is done", async () => {
  const home = tempHome();
  const result = await runScript(fixture("host_exit"), [home], { timeoutMs: 30_000 });
  assert.equal(result.stdout, "done\n");
  assert.equal(result.code, 0, result.stderr);
});

test("the 513th run evicts the least recently active one, which the watchdog then drops", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { allow_tiny_tier1: true },
  });
  // The doomed run's tier 1 falls at 1 s; it is evicted long before that.
  const doomed = ac.startRun({ sessionId: "doomed", caps: { timeSeconds: 2 } });
  const startedAt = Date.now();
  doomed.activity(); // starts the watchdog, which now sleeps until the crossing
  for (let i = 1; i < MAX_RUNS; i++) {
    ac.startRun({ sessionId: `r${i}`, caps: { timeSeconds: 3600 } }).activity();
  }
  const newest = ac.startRun({ sessionId: "newest", caps: { timeSeconds: 0.6 } });
  newest.activity();
  assert.ok(Date.now() - startedAt < 900, "the eviction happened before the doomed run's crossing");
  assert.ok(await waitFor(() => fs.existsSync(newest.checkpointFile)), "the newest run is watched");
  await sleep(Math.max(0, startedAt + 1500 - Date.now()));
  assert.ok(!fs.existsSync(doomed.checkpointFile), "the evicted run is not");
  await ac.close();
});

test("the watchdog stops watching a run at its time cap + 180 s", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { stall_window_seconds: 0.2, watchdog_poll_seconds: 0.05 },
  });
  const run = ac.startRun({ sessionId: "s", caps: { timeSeconds: 10 } });
  run.preLlmCall();
  ac.sharedRuns.rewind(run.slot, 190_000); // as if the run had started 190 s ago
  assert.ok(await waitFor(() => log.records.length > 0));
  assert.deepEqual(log.records.map((r) => r.message), [
    "time cap + 180s passed; the watchdog stops watching",
  ]);
  fs.rmSync(run.checkpointFile, { force: true });
  await sleep(500); // a stall window passes twice: nothing, since the run is no longer watched
  assert.ok(!fs.existsSync(run.checkpointFile));
  await ac.close();
});

test("close() stops the watchdog", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { uncapped_interval_seconds: 0.1 },
  });
  const run = ac.startRun({ sessionId: "s" });
  run.activity();
  assert.ok(await waitFor(() => fs.existsSync(run.checkpointFile)));
  await ac.close();
  fs.rmSync(run.checkpointFile);
  await sleep(400);
  assert.ok(!fs.existsSync(run.checkpointFile));
});
