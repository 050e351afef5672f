import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { createAgentCheckpoint, type Run } from "../mod.ts";
import { createLog, LOG_FILE_LIMIT, logFilePath, type LogRecord } from "../log.ts";
import { captureLog, sleep, tempHome } from "./_helpers.ts";

/** Drive a run across both tiers through every hook; returns the prologue texts. */
function drive(run: Run, turns: number): string[] {
  const texts: string[] = [];
  for (let t = 0; t < turns; t++) {
    const text = run.preLlmCall();
    if (text) texts.push(text);
    run.preToolCall("t");
    run.postToolCall("t", { ok: true });
    run.activity();
    run.note(`turn ${t}`);
  }
  return texts;
}

const errors = (records: LogRecord[]) => records.filter((r) => r.level !== "info");

test("an unreadable config.yaml costs a warning and the defaults", async () => {
  const home = tempHome();
  fs.mkdirSync(path.join(home, "config.yaml")); // a directory cannot be read as a file
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: log.logger,
    settings: { watchdog: false },
  });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 100 } });
  assert.equal(drive(run, 100).length, 2);
  assert.equal(errors(log.records).length, 1);
  assert.match(
    errors(log.records)[0]!.message,
    /cannot read .*config\.yaml .*using default settings/,
  );
  await ac.close();
});

/** A run whose persists fail for `why`; checks that the loop goes on and one line says so per tier. */
async function failingPersist(settings: Record<string, unknown>, prepare?: (run: Run) => void) {
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { watchdog: false, ...settings },
  });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 100 } });
  prepare?.(run);
  assert.equal(drive(run, 100).length, 2, "the prologue still works");
  const lines = errors(log.records);
  assert.equal(lines.length, 2, lines.map((l) => l.message).join("\n")); // one per tier
  for (const line of lines) {
    assert.equal(line.level, "error");
    assert.equal(line.runId, "s");
    assert.match(line.message, /^could not persist the checkpoint to .*s\.md: /);
  }
  await ac.close();
  return lines;
}

test("a checkpoint_dir that is a file costs one log line per tier", async () => {
  const file = path.join(tempHome(), "not-a-dir");
  fs.writeFileSync(file, "x");
  const lines = await failingPersist({ checkpoint_dir: file });
  assert.match(lines[0]!.message, /EEXIST|ENOTDIR/);
  assert.equal(fs.readFileSync(file, "utf8"), "x");
});

test("a directory without write permission costs one log line per tier", async () => {
  const dir = path.join(tempHome(), "locked");
  fs.mkdirSync(dir, { mode: 0o555 });
  // root ignores permission bits; /proc refuses new entries even to root.
  const root = process.getuid?.() === 0;
  const lines = await failingPersist({
    checkpoint_dir: root ? "/proc/agent-checkpoint-test" : dir,
  });
  assert.match(lines[0]!.message, /EACCES|ENOENT|EPERM/);
});

test("a failing write costs one log line per tier and leaves no temporary file", async () => {
  let dir = "";
  await failingPersist({}, (run) => {
    // A directory where the file should be: the read and the rename both fail.
    dir = path.dirname(run.checkpointFile);
    fs.mkdirSync(run.checkpointFile, { recursive: true });
  });
  assert.deepEqual(fs.readdirSync(dir), ["s.md"]);
});

test("a throwing logger falls back to the log file", async () => {
  const home = tempHome();
  const file = path.join(tempHome(), "not-a-dir");
  fs.writeFileSync(file, "x");
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { watchdog: false, checkpoint_dir: file },
    logger: () => {
      throw new Error("logger down");
    },
  });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 100 } });
  assert.equal(drive(run, 100).length, 2);
  const text = fs.readFileSync(logFilePath(home), "utf8");
  assert.match(text, /the host's logger threw \(logger down\)/);
  assert.match(text, /ERROR \[s\] could not persist the checkpoint/);
  await ac.close();
});

for (const kind of ["throws", "rejects"] as const) {
  test(`a comment sink that ${kind} costs a log line, never the file`, async () => {
    const log = captureLog();
    const ac = createAgentCheckpoint({
      home: tempHome(),
      env: {},
      logger: log.logger,
      settings: { watchdog: false },
      postComment: () => {
        if (kind === "throws") throw new Error("board down");
        return Promise.reject(new Error("board down"));
      },
    });
    const run = ac.startRun({ sessionId: "s", taskId: "task", caps: { turns: 100 } });
    assert.equal(drive(run, 100).length, 2);
    await sleep(10);
    assert.ok(fs.existsSync(run.checkpointFile));
    assert.deepEqual(
      // A kanban run with no board found says so once (its own line); the sink's are these.
      errors(log.records).map((r) => r.message).filter((m) => !/kanban board/.test(m)),
      [
        "posting the task comment failed: board down",
        "posting the task comment failed: board down",
      ],
    );
    await ac.close();
  });
}

test("hooks called out of order, after end() or after close() are harmless", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, logger: log.logger });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 3 } });
  run.postToolCall("never started", { ok: false });
  run.postToolCall("never started");
  run.note(undefined as unknown as string);
  run.preToolCall(null as unknown as string);
  await run.end();
  await run.end();
  assert.equal(run.preLlmCall(), undefined);
  run.preToolCall("t");
  run.postToolCall("t");
  run.activity();
  run.note("late");
  const other = ac.startRun({ sessionId: "o", caps: { turns: 3 } });
  await ac.close();
  await ac.close();
  assert.equal(other.preLlmCall(), undefined);
  other.preToolCall("t");
  const late = ac.startRun({ sessionId: "late", caps: { turns: 3 } });
  late.preLlmCall();
  assert.equal(late.preLlmCall(), undefined, "a run started after close() is inert");
  late.preToolCall("t");
  assert.equal(late.checkpointFile, "");
  assert.deepEqual(errors(log.records), []);
  assert.deepEqual(log.records.at(-1), {
    level: "info",
    message: "startRun() after close(): this run gets no checkpoints",
    runId: "late",
  });
});

test("startRun() with garbage input gives a run whose hooks are no-ops", async () => {
  const log = captureLog();
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, logger: log.logger });
  const run = ac.startRun(undefined as unknown as { sessionId: string });
  assert.equal(run.runId, "");
  run.preLlmCall();
  run.preToolCall("t");
  await run.end();
  await ac.close();
});

test("a note is cut at a character boundary", async () => {
  const ac = createAgentCheckpoint({ home: tempHome(), env: {}, settings: { watchdog: false } });
  const run = ac.startRun({ sessionId: "s", caps: { turns: 3 } });
  run.note("🙂".repeat(3000));
  run.preLlmCall();
  run.preToolCall("t");
  const text = fs.readFileSync(run.checkpointFile, "utf8");
  assert.ok(text.includes("🙂".repeat(2000)));
  assert.ok(!text.includes("🙂".repeat(2001)));
  assert.ok(!text.includes("\uFFFD"));
  await ac.close();
});

test("the default log file stays bounded: past 1 MiB it is rotated to .1", () => {
  const home = tempHome();
  const file = logFilePath(home);
  const log = createLog(home);
  log("info", "first");
  fs.appendFileSync(file, "x".repeat(LOG_FILE_LIMIT));
  log("warn", "after the limit");
  assert.ok(fs.statSync(`${file}.1`).size > LOG_FILE_LIMIT);
  assert.match(fs.readFileSync(file, "utf8"), /^\S+ WARN after the limit\n$/);
  log("info", "again");
  assert.ok(fs.statSync(file).size < 1024, "one rotation, not one per line");
});
