import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import process from "node:process";
import { Buffer } from "node:buffer";
import { spawn } from "node:child_process";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  type AgentCheckpoint,
  createAgentCheckpoint,
  type LogRecord,
  type TaskComment,
} from "../mod.ts";
import { parseRecord } from "../_record.ts";
import {
  blockUntil,
  captureLog,
  fixture,
  runScript,
  sleep,
  tempHome,
  underDeno,
  waitFor,
  watchdogLooks,
  watchdogReloaded,
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
  const started = Date.now();
  const run = ac.startRun({ sessionId: "blocked", caps: { timeSeconds: 1.5 } });
  run.preLlmCall();
  run.preToolCall("long_tool");
  // One long synchronous tool call, lasting until tier 2 is on disk (at most 20 s).
  assert.ok(
    blockUntil(() => record(run.checkpointFile)?.tier === 2),
    "the watchdog wrote tier 2 during the block",
  );
  const blockEnded = Date.now();
  const r = record(run.checkpointFile)!;
  assert.equal(r.source, "watchdog");
  assert.ok(Date.parse(r.persistedAt) >= started + 1200 - 50, "not before the crossing");
  assert.ok(Date.parse(r.persistedAt) <= blockEnded, "persisted during the block");
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
  ac.startRun({ sessionId: "first" }).activity();
  assert.ok(await watchdogLooks(ac.sharedRuns, 1), "the watchdog is up and asleep");
  const run = ac.startRun({ sessionId: "second", caps: { timeSeconds: 1 } });
  run.preToolCall("compile");
  blockUntil(() => record(run.checkpointFile)?.tier === 2); // blocked until tier 2, at most 20 s
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
  // Both watchdogs running first: a thread started on a busy machine can take seconds, and
  // one that first looks past tier 2 writes tier 2 alone.
  for (const keeper of [withModule, withHost]) {
    const warm = keeper.startRun({ sessionId: "warm", caps: { timeSeconds: 0.2 } });
    warm.activity();
    assert.ok(await waitFor(() => fs.existsSync(warm.checkpointFile), 60_000), "a watchdog runs");
    await warm.end();
  }
  // Tier 1 at 5 s, tier 2 at 8 s: a look anywhere in those 3 s posts both.
  const a = withModule.startRun({ sessionId: "s", taskId: "task-a", caps: { timeSeconds: 10 } });
  const b = withHost.startRun({ sessionId: "s", taskId: "task-b", caps: { timeSeconds: 10 } });
  a.preLlmCall();
  b.preLlmCall();
  const blockedAt = Date.now();
  const posted = () =>
    fs.existsSync(sinkFile) ? fs.readFileSync(sinkFile, "utf8").trim().split("\n") : [];
  // Blocked until the module has posted tier 2 and the other keeper has written its file.
  assert.ok(
    blockUntil(() => posted().length >= 2 && record(b.checkpointFile)?.tier === 2, 60_000),
    `tier 2 posted and written during the block: ${posted().length} posted`,
  );
  const unblockedAt = Date.now();
  const lines = posted();
  const viaModule = lines.map((l) => JSON.parse(l));
  assert.deepEqual(viaModule.map((c) => c.taskId), ["task-a", "task-a"], "tier 1 and tier 2");
  assert.ok(
    viaModule.every((c) => c.at > blockedAt && c.at <= unblockedAt),
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
    settings: { uncapped_interval_seconds: 0.5 },
    postComment: (c) => void comments.push(c),
  });
  const run = ac.startRun({ sessionId: "s", taskId: "task-1" });
  run.note("exploring");
  const multiples: number[] = [];
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && (multiples.at(-1) ?? 0) < 3) {
    const r = record(run.checkpointFile);
    if (r && r.multiple !== multiples.at(-1)) multiples.push(r.multiple!);
    await sleep(20);
  }
  // On an idle machine every multiple is seen: 1, 2, 3. A watchdog held up past a multiple
  // writes the latest one only, so a busy machine may show fewer, never one out of order.
  assert.ok((multiples.at(-1) ?? 0) >= 3, `multiples written: ${multiples}`);
  assert.ok(multiples.every((m, i) => i === 0 || m > multiples[i - 1]!), `${multiples}`);
  const text = fs.readFileSync(run.checkpointFile, "utf8");
  const latest = record(run.checkpointFile)!.multiple;
  assert.equal(
    text.match(/agent-checkpoint:begin/g)?.length,
    1,
    "the block is rewritten, not repeated",
  );
  assert.match(
    text,
    new RegExp(`uncapped-run checkpoint ${latest} persisted \\(source: watchdog\\)`),
  );
  assert.match(text, new RegExp(`Uncapped interval: 0s \\(checkpoint ${latest}\\)`));
  assert.ok(await waitFor(() => comments.length >= 1));
  assert.equal(comments.length, 1, "a comment on the first fire only");
  const first = Number(/uncapped-run checkpoint (\d+)/.exec(comments[0]!.body)?.[1]);
  assert.ok(first >= 1 && first <= multiples[0]!, comments[0]!.body);
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
  assert.ok(await watchdogLooks(ac.sharedRuns, 3));
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
  const seen = ac.sharedRuns.settingsSeen();
  writeConfig(
    home,
    "agent_checkpoint: { uncapped_interval_seconds: 0.1, watchdog_poll_seconds: 0.05 }",
  );
  assert.ok(await watchdogReloaded(ac.sharedRuns, seen), "the watchdog read the new settings");
  await sleep(300); // three intervals of 0.1 s pass
  assert.ok(await watchdogLooks(ac.sharedRuns, 3));
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
  // The tool call is the run's first hook call, so the silence counts from it with the call in
  // flight. After a model call before it, a host thread slowed past the 0.3 s window between the
  // two (the first hook call starts the watchdog) met a stall with no call in flight yet.
  run.preToolCall("slow_fetch");
  assert.ok(await waitFor(() => record(run.checkpointFile)?.kind === "stall"));
  const first = record(run.checkpointFile)!;
  assert.match(first.message, /Tool call still in flight: slow_fetch/);
  await sleep(700); // more than two windows pass
  assert.ok(await watchdogLooks(ac.sharedRuns, 3));
  assert.equal(
    record(run.checkpointFile)?.persistedAt,
    first.persistedAt,
    "still one checkpoint for this silence",
  );
  run.postToolCall("slow_fetch", { ok: true }); // the next hook call re-arms it
  assert.ok(await waitFor(() => record(run.checkpointFile)?.persistedAt !== first.persistedAt));
  const second = record(run.checkpointFile)!;
  assert.equal(second.kind, "stall");
  assert.match(second.message, /No tool call is in flight/);
  await ac.close();
});

async function liveSettings(
  change: string,
  check: (ac: AgentCheckpoint, file: string, records: LogRecord[]) => Promise<void>,
) {
  const home = tempHome();
  const base = "watchdog_poll_seconds: 0.1, uncapped_interval_seconds: 0.2";
  writeConfig(home, `agent_checkpoint: { ${base} }`);
  const log = captureLog();
  const ac = createAgentCheckpoint({ home, env: {}, logger: log.logger });
  const run = ac.startRun({ sessionId: "s" });
  run.activity();
  assert.ok(await waitFor(() => (record(run.checkpointFile)?.multiple ?? 0) >= 1));
  const seen = ac.sharedRuns.settingsSeen();
  writeConfig(home, `agent_checkpoint: { ${base}, ${change} }`);
  assert.ok(await watchdogReloaded(ac.sharedRuns, seen), "the watchdog read the change");
  await check(ac, run.checkpointFile, log.records);
  await ac.close();
  return log.records;
}

test("enabled: false in config.yaml stops the watchdog's writes within one poll", async () => {
  await liveSettings("enabled: false", async (ac, file) => {
    const before = fs.readFileSync(file);
    await sleep(400); // two intervals of 0.2 s pass
    assert.ok(await watchdogLooks(ac.sharedRuns, 3));
    assert.deepEqual(fs.readFileSync(file), before);
  });
});

test("mode: log-only in config.yaml turns the watchdog's writes into log lines within one poll", async () => {
  const records = await liveSettings("mode: log-only", async (ac, file, lines) => {
    const before = fs.readFileSync(file);
    assert.ok(await waitFor(() => lines.some((r) => r.message === "uncapped due (watchdog)")));
    assert.ok(await watchdogLooks(ac.sharedRuns, 3));
    assert.deepEqual(fs.readFileSync(file), before);
  });
  assert.ok(records.some((r) => r.message === "uncapped due (watchdog)"));
});

test("a new poll interval in config.yaml takes effect within one poll", async () => {
  const home = tempHome();
  const config = (poll: number, tier1: number) =>
    writeConfig(
      home,
      `agent_checkpoint: { watchdog_poll_seconds: ${poll}, tier_fractions: [${tier1}] }`,
    );
  config(0.1, 0.9);
  const ac = createAgentCheckpoint({ home, env: {} });
  const table = ac.sharedRuns;
  // A tier made due by a settings change, with no hook call after it, is seen by the watchdog
  // only when it polls (and reloads the settings).
  const settled = async (sessionId: string) => {
    const run = ac.startRun({ sessionId, caps: { turns: 100 } });
    for (let t = 0; t < 30; t++) run.preLlmCall();
    assert.ok(await watchdogLooks(table, 1), "the watchdog took in the run");
    return run;
  };
  const fast = await settled("fast");
  config(0.1, 0.2);
  assert.ok(
    await waitFor(() => fs.existsSync(fast.checkpointFile), 30_000),
    "polled every 0.1 s: the crossing is written",
  );
  // The file is written before the look that wrote it is counted: until that look is done,
  // settingsSeen() still reads the version before the 0.2 fraction, and the wait below would
  // end on that look instead of a look with the 30 s interval.
  assert.ok(await watchdogLooks(table, 1), "the look that wrote the crossing is done");

  const seen = table.settingsSeen();
  config(30, 0.9);
  assert.ok(await watchdogReloaded(table, seen), "the watchdog read the 30 s interval");
  const slow = await settled("slow");
  const looks = table.looks();
  config(30, 0.2);
  await sleep(800); // eight polls at the old interval
  assert.equal(table.looks(), looks, "polled every 30 s: no look in 0.8 s");
  assert.ok(!fs.existsSync(slow.checkpointFile));
  await ac.close();
});

test("a host that never ends its runs exits when its own work is done", async () => {
  const home = tempHome();
  const result = await runScript(fixture("host_exit"), [home], { timeoutMs: 30_000 });
  assert.equal(result.stdout, "done\n");
  assert.equal(result.code, 0, result.stderr);
});

/**
 * Run `node argv` to its end (the compiled tests' runtime); resolves with its exit code and
 * output. Killed after `timeoutMs`.
 */
function runNode(
  argv: string[],
  env: Record<string, string>,
  timeoutMs: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, argv, {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => stdout += d);
    child.stderr.on("data", (d) => stderr += d);
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

test(
  "a host run by node --input-type=module -e has a watchdog: it writes while the host is blocked",
  { skip: underDeno && "the compiled library under Node's own -e" },
  async () => {
    const mod = pathToFileURL(fileURLToPath(new URL("../mod.js", import.meta.url))).href;
    // The host blocks its thread (no event loop) until the run's file is there, at most 60 s:
    // only the watchdog can write it. It prints the file, or the log's errors (the watchdog's
    // death among them) and exits 1.
    const host = (home: string) => `
      const { createAgentCheckpoint } = await import(${JSON.stringify(mod)});
      const fs = await import("node:fs");
      const errors = [];
      const ac = createAgentCheckpoint({
        home: ${JSON.stringify(home)},
        env: {},
        settings: { uncapped_interval_seconds: 0.2, watchdog_poll_seconds: 0.05 },
        logger: (r) => { if (r.level === "error") errors.push(r.message); },
      });
      const run = ac.startRun({ sessionId: "eval-host" });
      run.activity(); // starts the watchdog
      const cell = new Int32Array(new SharedArrayBuffer(4));
      const end = Date.now() + 60_000;
      while (!fs.existsSync(run.checkpointFile) && Date.now() < end) Atomics.wait(cell, 0, 0, 20);
      if (fs.existsSync(run.checkpointFile)) {
        process.stdout.write(fs.readFileSync(run.checkpointFile, "utf8"));
      } else {
        await new Promise((resolve) => setTimeout(resolve, 100)); // the worker's error lands
        process.stderr.write("no file within 60 s; errors: " + JSON.stringify(errors) + "\\n");
        process.exitCode = 1;
      }
      await ac.close();`;
    // The option on the command line, and the same in NODE_OPTIONS.
    for (
      const [argv, env] of [
        [["--input-type=module", "-e"], {}],
        [["-e"], { NODE_OPTIONS: "--input-type=module" }],
      ] as const
    ) {
      const home = tempHome();
      const result = await runNode([...argv, host(home)], env, 120_000);
      const what = `${argv.join(" ")} ${JSON.stringify(env)}`;
      assert.equal(result.code, 0, `${what}: ${result.stderr}`);
      assert.equal(parseRecord(Buffer.from(result.stdout))?.source, "watchdog", what);
    }
  },
);

test("20,000 live runs all get their checkpoint while the main thread is blocked", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { allow_tiny_tier1: true } });
  const runs = Array.from(
    { length: 20_000 },
    (_, i) => ac.startRun({ sessionId: `r${i}`, caps: { timeSeconds: 2 } }),
  );
  runs[0]!.activity(); // starts the watchdog
  const dir = ac.settings.checkpoint_dir;
  // Blocked until every run has its tier 2 file (1.6 s in), at most 5 minutes.
  // Checkpoint files only: a temporary file of a write in flight starts with a dot.
  const all = () =>
    fs.existsSync(dir) &&
    fs.readdirSync(dir).filter((f) => f.endsWith(".md") && !f.startsWith(".")).length >=
      runs.length;
  assert.ok(blockUntil(all, 300_000, 250), "every run's file was written during the block");
  for (const run of [runs[0]!, runs[12_345]!, runs[19_999]!]) {
    assert.equal(record(run.checkpointFile)?.source, "watchdog");
  }
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
  await sleep(500); // a stall window passes twice
  assert.ok(await watchdogLooks(ac.sharedRuns, 3));
  assert.ok(!fs.existsSync(run.checkpointFile), "nothing, since the run is no longer watched");
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

test("an override the worker cannot take costs only its own key: the stall file is written", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { stall_window_seconds: 0.3, odd_key: 10n },
  });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 1000 } });
  run.preToolCall("slow");
  assert.ok(await waitFor(() => record(run.checkpointFile)?.kind === "stall"));
  await ac.close();
});

test("after a stall, a capless run's first uncapped checkpoint still posts its comment", async () => {
  const comments: TaskComment[] = [];
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { stall_window_seconds: 0.2, uncapped_interval_seconds: 1.2 },
    postComment: (c) => void comments.push(c),
  });
  const run = ac.startRun({ sessionId: "s", taskId: "task-7" });
  run.preToolCall("slow"); // silent from here: a stall at 0.2 s, the first multiple at 1.2 s
  assert.ok(await waitFor(() => comments.some((c) => /stall checkpoint/.test(c.body))));
  assert.ok(await waitFor(() => comments.some((c) => /uncapped-run checkpoint 1/.test(c.body))));
  await ac.close();
});

test("close() waits for the watchdog's write in flight: no file appears after it", async () => {
  for (let round = 0; round < 10; round++) {
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      settings: { uncapped_interval_seconds: 0.05, watchdog_poll_seconds: 0.05 },
    });
    const runs = Array.from({ length: 50 }, (_, i) => ac.startRun({ sessionId: `r${i}` }));
    runs[0]!.activity();
    await sleep(60 + round * 7); // close somewhere in the middle of a burst of writes
    await ac.close();
    const dir = ac.settings.checkpoint_dir;
    const files = () => (fs.existsSync(dir) ? fs.readdirSync(dir).sort() : []);
    const atClose = files();
    await sleep(150);
    assert.deepEqual(files(), atClose, `round ${round}: the directory changed after close()`);
  }
});

test("a tool call past its deadline gets its tool_timeout record while the main thread is blocked", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
  const run = ac.startRun({ sessionId: "hung-tool", caps: { tokens: 1_000_000 } });
  run.preLlmCall();
  run.postLlmCall({ inputTokens: 1200, outputTokens: 300, usd: 0.01 });
  const signal = run.time.toolSignal("call_hang");
  const started = Date.now();
  run.preToolCall("shell", { callId: "call_hang", timeoutSeconds: 0.5 });
  // One long synchronous call, lasting until the record is on disk (at most 20 s).
  assert.ok(
    blockUntil(() => record(run.checkpointFile)?.kind === "tool_timeout"),
    "the watchdog wrote the tool_timeout record during the block",
  );
  const blockEnded = Date.now();
  const r = record(run.checkpointFile)!;
  assert.equal(r.source, "watchdog");
  assert.equal(r.timedOut?.tool, "shell");
  assert.equal(r.timedOut?.callId, "call_hang");
  assert.ok(Date.parse(r.persistedAt) >= started + 500 - 50, "not before the deadline");
  assert.ok(Date.parse(r.persistedAt) <= blockEnded, "persisted during the block");
  // The watchdog sees the usage the main thread reported.
  assert.deepEqual(r.usage, { inputTokens: 1200, outputTokens: 300, usd: 0.01 });
  // Once the main thread is free, the call's signal aborts; the record is not written twice.
  const alive = setInterval(() => {}, 50);
  await new Promise((resolve) => {
    if (signal.aborted) resolve(undefined);
    else signal.addEventListener("abort", resolve, { once: true });
  });
  clearInterval(alive);
  assert.equal((signal.reason as DOMException).name, "TimeoutError");
  assert.equal(record(run.checkpointFile)?.persistedAt, r.persistedAt);
  run.postToolCall("shell", { callId: "call_hang", error: signal.reason });
  await ac.close();
});

/**
 * This thread holds a run's file lock and the watchdog has claimed the record behind `signal`:
 * let the signal's own timer fire (it lost the claim), give the lock back, and return the record
 * a handler of the abort reads at the abort.
 */
async function recordAtAbort(
  table: AgentCheckpoint["sharedRuns"],
  slot: number,
  signal: AbortSignal,
  file: string,
): Promise<ReturnType<typeof record>> {
  const atAbort = new Promise<ReturnType<typeof record>>((resolve) =>
    signal.addEventListener("abort", () => resolve(record(file)), { once: true })
  );
  const alive = setInterval(() => {}, 50);
  // Due after the signal's own timer, whose deadline passed while this thread was blocked.
  setTimeout(() => table.unlockFile(slot), 0);
  try {
    return await atAbort;
  } finally {
    clearInterval(alive);
  }
}

test("a call's signal aborts only once the watchdog's tool_timeout record is in the file", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {} });
  const run = ac.startRun({ sessionId: "claimed-by-watchdog" });
  const table = ac.sharedRuns;
  const slot = run.slot;
  // The main thread holds the run's file: the watchdog can claim the record but not yet write it.
  assert.ok(table.lockFile(slot, 20_000));
  run.preToolCall("fetch_page", { callId: "c1", timeoutSeconds: 0.1 });
  const seq = table.toolCount(slot) - 1;
  const signal = run.time.toolSignal("c1");
  assert.ok(
    blockUntil(() => table.timedOut(slot, seq)),
    "the watchdog claimed the call's timeout record",
  );
  const r = await recordAtAbort(table, slot, signal, run.checkpointFile);
  assert.equal(r?.kind, "tool_timeout", "the record was written before the signal aborted");
  assert.equal(r?.source, "watchdog");
  assert.equal(r?.timedOut?.callId, "c1");
  run.postToolCall("fetch_page", { callId: "c1", error: signal.reason });
  await ac.close();
});

test("a run's deadline signal aborts only once the watchdog's deadline record is in the file", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    // Seconds between tier 2 and the deadline, so that this thread holds the file before either
    // thread can claim the deadline record, even on a busy machine.
    settings: { deadline_grace_seconds: 3 },
  });
  const run = ac.startRun({ sessionId: "deadline-by-watchdog", caps: { timeSeconds: 0.3 } });
  const table = ac.sharedRuns;
  const slot = run.slot;
  run.activity();
  const signal = run.time.stopAtDeadline(); // at the time cap + 3 s
  assert.ok(await waitFor(() => record(run.checkpointFile)?.kind === "tier"), "tier 2 is written");
  // The main thread holds the run's file: the watchdog can claim the record but not yet write it.
  assert.ok(table.lockFile(slot, 20_000));
  assert.ok(blockUntil(() => table.deadlineClaimed(slot)), "the watchdog claimed the record");
  const r = await recordAtAbort(table, slot, signal, run.checkpointFile);
  assert.equal(r?.kind, "deadline", "the record was written before the signal aborted");
  assert.equal(r?.source, "watchdog");
  assert.equal((signal.reason as DOMException).name, "TimeoutError");
  await ac.close();
});

test("a run the watchdog stopped watching for its budget still gets its tool_timeout record", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { uncapped_interval_seconds: 0, stall_window_seconds: 0 },
  });
  const run = ac.startRun({ sessionId: "capless-hang" });
  run.activity(); // the watchdog starts, looks once and stops watching this capless run
  assert.ok(await watchdogLooks(ac.sharedRuns, 1));
  run.preToolCall("fetch", { callId: "c9", timeoutSeconds: 0.3 });
  assert.ok(
    blockUntil(() => record(run.checkpointFile)?.kind === "tool_timeout"),
    "the watchdog wrote the tool_timeout record during the block",
  );
  assert.equal(record(run.checkpointFile)?.timedOut?.callId, "c9");
  await ac.close();
});

test("the stall record fires at its window, not before and not at twice it (on the run's clock)", async () => {
  // The run's clock is moved, not waited for: its start and last hook call are put back in the
  // shared table (a fake clock for the one run), and its description republished so the
  // watchdog weighs it at its next look. A window of 100 s is never waited in real time.
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { stall_window_seconds: 100 },
  });
  try {
    const run = ac.startRun({ sessionId: "s", caps: { turns: 1000 } });
    run.preLlmCall(); // starts the watchdog; the silence starts now
    const table = ac.sharedRuns;
    const silentFor = async (seconds: number) => {
      table.rewind(run.slot, seconds * 1000);
      const info = table.readInfo(run.slot)!;
      assert.ok(table.writeInfo(run.slot, new TextEncoder().encode(info.text)));
      assert.ok(await watchdogLooks(table, 2), "the watchdog looked again");
    };
    await silentFor(90); // 0.9 of the window
    assert.equal(record(run.checkpointFile), undefined, "no stall record before the window");
    await silentFor(20); // 1.1 of the window: due now, long before twice it
    const stall = record(run.checkpointFile);
    assert.equal(stall?.kind, "stall", "the stall record is written once the window has passed");
    assert.ok(
      stall!.silentSeconds! >= 100 && stall!.silentSeconds! < 200,
      `${stall!.silentSeconds}`,
    );
  } finally {
    await ac.close();
  }
});

test("a host that makes many keepers in one process is told once, in the log and on stderr", async () => {
  const home = tempHome();
  const many = await runScript(fixture("many_keepers"), [home, "6"]);
  assert.equal(many.code, 0, many.stderr);
  const said = many.stderr.split("\n").filter((l) => /keepers \(createAgentCheckpoint\)/.test(l));
  assert.equal(said.length, 1, many.stderr);
  assert.match(said[0]!, /^agent-checkpoint: 4 keepers .* make one keeper per process/);
  const logged = JSON.parse(many.stdout) as string[];
  assert.equal(logged.length, 1, many.stdout);
  assert.match(logged[0]!, /^warn: 4 keepers/);
  // A few keepers (each its own home, say) are fine: nothing is said.
  const few = await runScript(fixture("many_keepers"), [tempHome(), "3"]);
  assert.equal(few.code, 0, few.stderr);
  assert.doesNotMatch(few.stderr, /keepers/);
  assert.deepEqual(JSON.parse(few.stdout), []);
});

test("a hook that returns a tier's directive the watchdog claimed returns once its file is there", async () => {
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    settings: { allow_tiny_tier1: true, stall_window_seconds: 0 },
  });
  const table = ac.sharedRuns;
  for (let round = 0; round < 5; round++) {
    // Tier 1 at 0.5 s of a 1 s cap; this thread holds the run's file until the watchdog has
    // claimed it, so the watchdog's write is still to come when the hook returns the directive.
    const run = ac.startRun({ sessionId: `claimed-${round}`, caps: { timeSeconds: 1 } });
    assert.ok(table.lockFile(run.slot, 20_000));
    const claimed = blockUntil(() => table.tierClaimed(run.slot, 1));
    table.unlockFile(run.slot);
    assert.ok(claimed, `round ${round}: the watchdog claimed tier 1`);
    const directive = run.preLlmCall();
    const r = record(run.checkpointFile);
    assert.ok(directive !== undefined, `round ${round}: the hook returned the directive`);
    assert.ok(directive.includes(run.checkpointFile), `round ${round}: it names the file`);
    assert.equal(r?.source, "watchdog", `round ${round}: the file was there when it returned`);
    await run.end();
  }
  await ac.close();
});
