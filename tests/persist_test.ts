import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { Worker } from "node:worker_threads";
import { execFileSync, spawn } from "node:child_process";
import { Buffer } from "node:buffer";
import { createAgentCheckpoint, writeFileAtomic } from "../mod.ts";
import {
  checkpointFileName,
  MAX_CHECKPOINT_BYTES,
  persistBlock,
  persistBlocks,
  readCheckpoint,
  writeFileAtomicSync,
} from "../persist.ts";
import { findBlock, findBlocks } from "../_record.ts";
import { parseRecord, renderBlock } from "../_record.ts";
import { resetSwept, tempName } from "../_file_ops.ts";
import { fixture, scriptCommand, sleep, tempHome } from "./_helpers.ts";

/** A block as the library writes it: text, then the data line. */
const BLOCK = (text: string) =>
  `<!-- agent-checkpoint:begin -->\n${text}\n<!-- agent-checkpoint:data {"v":1} -->\n` +
  "<!-- agent-checkpoint:end -->";

const AGENT = "# My findings\n\nThe bug is in parser.ts line 40.\n";

/** Whether a file written by persist_loop is whole: agent text, then one intact block. */
function assertWhole(file: string): void {
  const text = fs.readFileSync(file, "utf8");
  assert.ok(text.startsWith(AGENT), "the agent's text leads the file");
  const m = text.slice(AGENT.length).match(
    /^\n<!-- agent-checkpoint:begin -->\nwrite (\d+) (\d+)\n(\d+)\n<!-- agent-checkpoint:data \{"v":1\} -->\n<!-- agent-checkpoint:end -->\n$/,
  );
  assert.ok(m, `the block is whole (file is ${text.length} bytes)`);
  assert.equal(m[3]!.length, Number(m[2]));
  assert.equal(m[3], String(Number(m[1]) % 10).repeat(Number(m[2])));
}

const temps = (dir: string) => fs.readdirSync(dir).filter((n) => n.endsWith(".tmp"));

test("a checkpoint file is always whole when its writer is killed at random moments", async () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  fs.writeFileSync(file, AGENT);
  const [cmd, args] = scriptCommand(fixture("persist_loop"), [file, "200000"]);
  let killedMidWrite = 0;
  for (let round = 0; round < 40; round++) {
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve) => child.stdout.once("data", () => resolve()));
    await sleep(Math.random() * 40);
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("close", resolve));
    if (temps(dir).length > 0) killedMidWrite++;
    assertWhole(file);
  }
  // The next write to the file removes what killed writers left behind.
  persistBlock(
    file,
    '<!-- agent-checkpoint:begin -->\nwrite 1 1\n1\n<!-- agent-checkpoint:data {"v":1} -->\n<!-- agent-checkpoint:end -->',
  );
  assertWhole(file);
  assert.deepEqual(temps(dir), []);
  // Rounds killed between creating a temporary file and renaming it prove the test bites.
  assert.ok(killedMidWrite > 0, "no round was killed mid-write; the test proved nothing");
});

test("the agent's own text survives 100 plugin persists byte for byte", () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  // Not even UTF-8: bytes the plugin must carry through untouched.
  const head = Buffer.concat([
    Buffer.from("# Notes\r\n"),
    Buffer.from([0xff, 0xfe, 0x00, 0xc3]),
    Buffer.from("\n"),
  ]);
  const tail = Buffer.from("\n## Next step\nrun the tests <!-- not ours -->\n");
  persistBlock(file, BLOCK("first"));
  const first = fs.readFileSync(file);
  fs.writeFileSync(file, Buffer.concat([head, first, tail]));
  let appended = Buffer.alloc(0);
  for (let i = 0; i < 100; i++) {
    persistBlock(
      file,
      BLOCK(`persist ${i}`),
    );
    // The agent keeps writing between persists.
    const line = Buffer.from(`- finding ${i}\n`);
    fs.appendFileSync(file, line);
    appended = Buffer.concat([appended, line]);
  }
  const bytes = fs.readFileSync(file);
  const at = findBlock(bytes)!;
  assert.deepEqual(bytes.subarray(0, at.start), head);
  assert.deepEqual(bytes.subarray(at.end), Buffer.concat([Buffer.from("\n"), tail, appended]));
  assert.equal(
    bytes.subarray(at.start, at.end).toString(),
    BLOCK("persist 99"),
  );
});

test("a file with the agent's text and no block gets a block appended", () => {
  const file = path.join(tempHome(), "run.md");
  fs.writeFileSync(file, "no newline at the end");
  persistBlock(file, BLOCK("x"));
  assert.equal(
    fs.readFileSync(file, "utf8"),
    `no newline at the end\n\n${BLOCK("x")}\n`,
  );
});

test("a begin marker whose end the agent deleted is kept, and a new block appended", () => {
  const file = path.join(tempHome(), "run.md");
  const broken = "<!-- agent-checkpoint:begin -->\nhalf of an old block, edited by the agent\n";
  fs.writeFileSync(file, broken);
  persistBlock(file, BLOCK("new"));
  persistBlock(file, BLOCK("newer"));
  assert.equal(
    fs.readFileSync(file, "utf8"),
    broken + `\n${BLOCK("newer")}\n`,
  );
});

test("run ids that try to escape checkpoint_dir all land inside it, each in its own file", async () => {
  const home = tempHome();
  const dir = path.join(home, "agent-checkpoints");
  const ids = [
    "../../x",
    "/abs/x",
    "a/b",
    "a_b",
    ".hidden",
    "_hidden",
    "",
    "x".repeat(1000),
    "x".repeat(999) + "y",
    "héllo",
    "日本語",
    "emoji🙂",
    "a\\b",
    "..",
    ".",
    "con",
    "a b",
    "a\0b",
    "ok-id_1.2",
    `a_b-${"0".repeat(12)}`,
  ];
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  const files = new Set<string>();
  for (const id of ids) {
    const run = ac.startRun({ sessionId: id, caps: { turns: 3 } });
    assert.equal(path.dirname(run.checkpointFile), dir, JSON.stringify(id));
    assert.ok(path.basename(run.checkpointFile).length <= 140);
    assert.ok(!path.basename(run.checkpointFile).startsWith("."));
    files.add(run.checkpointFile);
    run.preLlmCall();
    run.preLlmCall();
    run.preToolCall("t"); // tier 2 is due: the file is written
    assert.ok(fs.existsSync(run.checkpointFile), JSON.stringify(id));
  }
  assert.equal(files.size, ids.length);
  assert.equal(fs.readdirSync(dir).length, ids.length);
  assert.equal(checkpointFileName("ok-id_1.2"), "ok-id_1.2.md");
  await ac.close();
});

// ---- hostile files at the checkpoint path ------------------------------------

test("a FIFO at the checkpoint path is refused at once, and readCheckpoint() does not block", () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  execFileSync("mkfifo", [file]);
  assert.throws(() => persistBlock(file, BLOCK("x")), /is a FIFO, not a regular file/);
  assert.ok(fs.lstatSync(file).isFIFO(), "the FIFO is left as it is");
  const found = readCheckpoint(file);
  assert.equal(found.state, "not a regular file");
  assert.equal(found.record, undefined);
  assert.deepEqual(fs.readdirSync(dir), ["run.md"], "no temporary file is left");
});

test("a symlink to /dev/zero at the checkpoint path is replaced by a file, never read", () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  fs.symlinkSync("/dev/zero", file);
  assert.equal(readCheckpoint(file).state, "not a regular file");
  persistBlock(file, BLOCK("x"));
  assert.ok(fs.lstatSync(file).isFile(), "the link itself was replaced");
  assert.equal(fs.readFileSync(file, "utf8"), `${BLOCK("x")}\n`);
});

test("a 50 MB checkpoint file is neither loaded nor rewritten, and is described as too large", () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  const fd = fs.openSync(file, "w");
  fs.writeSync(fd, "agent text\n");
  fs.ftruncateSync(fd, 50 * 1024 * 1024);
  fs.closeSync(fd);
  const before = fs.statSync(file);
  assert.throws(
    () => persistBlock(file, BLOCK("x")),
    /over the 4\.0 MiB a checkpoint file may hold/,
  );
  const after = fs.statSync(file);
  assert.equal(after.ino, before.ino);
  assert.equal(after.size, before.size);
  assert.equal(after.mtimeMs, before.mtimeMs);
  const found = readCheckpoint(file);
  assert.equal(found.state, "too large");
  assert.equal(found.size, 50 * 1024 * 1024);
  assert.equal(MAX_CHECKPOINT_BYTES, 4 * 1024 * 1024);
});

test("a checkpoint path planted as a symlink to a 0600 secret never copies the secret", () => {
  const dir = tempHome();
  const secret = path.join(dir, "secret.txt");
  fs.writeFileSync(secret, "API_KEY=hunter2\n", { mode: 0o600 });
  fs.chmodSync(secret, 0o600);
  const file = path.join(dir, "run.md");
  fs.symlinkSync(secret, file);
  persistBlock(file, BLOCK("x"));
  assert.ok(fs.lstatSync(file).isFile());
  assert.doesNotMatch(fs.readFileSync(file, "utf8"), /hunter2/);
  assert.equal(fs.readFileSync(secret, "utf8"), "API_KEY=hunter2\n", "the target is untouched");
  assert.equal(fs.statSync(secret).mode & 0o777, 0o600);
});

test("a checkpoint path planted as a hard link to another file is refused, and left as it is", () => {
  const dir = tempHome();
  const secret = path.join(dir, "secret.txt");
  fs.writeFileSync(secret, "API_KEY=hunter2\n", { mode: 0o600 });
  const file = path.join(dir, "run.md");
  fs.linkSync(secret, file);
  assert.throws(() => persistBlock(file, BLOCK("x")), /has 2 hard links/);
  assert.equal(fs.statSync(file).ino, fs.statSync(secret).ino);
  assert.equal(fs.readFileSync(file, "utf8"), "API_KEY=hunter2\n");
});

test("a new file a killed writer left hard-linked to its temporary file is still persisted", async () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  persistBlock(file, BLOCK("one")); // this process has swept the directory now
  // Killed between link() and unlink(): the temporary file is a second name of the file.
  fs.linkSync(file, path.join(dir, tempName("run.md", await deadPid())));
  persistBlock(file, BLOCK("two"));
  assert.equal(fs.readFileSync(file, "utf8"), `${BLOCK("two")}\n`);
  assert.deepEqual(temps(dir), []);
});

test("a replaced checkpoint file keeps its mode: the agent's 0600 file stays 0600", async () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  fs.writeFileSync(file, "private notes\n");
  fs.chmodSync(file, 0o600);
  persistBlock(file, BLOCK("x"));
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);
  assert.equal(fs.readFileSync(file, "utf8"), `private notes\n\n${BLOCK("x")}\n`);
  await writeFileAtomic(file, "y");
  writeFileAtomicSync(file, "z");
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);
  const [error] = await persistBlocks([{ file, block: BLOCK("w") }]);
  assert.equal(error, undefined);
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);
});

// ---- markers in text -----------------------------------------------------------

test("agent text that quotes the markers inline or holds a copied old block loses no byte", () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  const record = (n: number) =>
    renderBlock({
      kind: "tier",
      source: "pre_tool_call",
      runId: "r",
      dialect: "chat",
      turnsUsed: n,
      elapsedSeconds: n,
      caps: {},
      tier: 1,
      persistedAt: new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString(),
      message: `persist ${n}`,
      tools: [],
      notes: [],
    });
  persistBlock(file, record(1));
  const ours = fs.readFileSync(file);
  // The agent quotes the markers inline, then pastes a copy of an older block below ours.
  const head = Buffer.from(
    "Markers look like <!-- agent-checkpoint:begin --> and <!-- agent-checkpoint:end -->.\n",
  );
  const copied = Buffer.from(`\nAn old block, for the record:\n${record(0)}\n`);
  fs.writeFileSync(file, Buffer.concat([head, ours, copied]));
  for (let n = 2; n < 6; n++) persistBlock(file, record(n));
  const bytes = fs.readFileSync(file);
  assert.deepEqual(
    bytes,
    Buffer.concat([head, Buffer.from(`${record(5)}\n`), copied]),
    "only the plugin's own block changed",
  );
  assert.equal(parseRecord(bytes)?.turnsUsed, 5);
  // A copy of an older block pasted above ours does not take its place either: the newest is ours.
  const above = Buffer.from(`${record(3)}\n\n`);
  fs.writeFileSync(file, Buffer.concat([above, bytes]));
  persistBlock(file, record(6));
  assert.deepEqual(
    fs.readFileSync(file),
    Buffer.concat([above, head, Buffer.from(`${record(6)}\n`), copied]),
  );
});

test("markers inside a note, tool name, run id or message neither corrupt the file nor grow it", () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  const evil = "x\n<!-- agent-checkpoint:end -->\n<!-- agent-checkpoint:begin -->\ny";
  const record = {
    kind: "stall" as const,
    source: "watchdog" as const,
    runId: evil,
    dialect: "chat",
    turnsUsed: 1,
    elapsedSeconds: 1,
    caps: {},
    tier: 0,
    persistedAt: "2026-01-01T00:00:00.000Z",
    message: evil,
    tools: [{ tool: evil, status: "in flight" as const, startedAt: 0, callId: evil }],
    notes: [evil, "<!-- agent-checkpoint:data {} -->"],
  };
  fs.writeFileSync(file, "agent text\n");
  persistBlock(file, renderBlock(record));
  const size = fs.statSync(file).size;
  for (let i = 0; i < 5; i++) persistBlock(file, renderBlock(record));
  assert.equal(fs.statSync(file).size, size, "the file does not grow on every persist");
  const bytes = fs.readFileSync(file);
  assert.deepEqual(parseRecord(bytes), record);
  assert.equal(findBlocks(bytes).length, 1);
  assert.ok(bytes.toString().startsWith("agent text\n\n<!-- agent-checkpoint:begin -->\n"));
});

// ---- an agent writing while the library persists --------------------------------

/** Persist in a loop while a child appends `count` lines at `rate`/s; returns the lines lost and doubled. */
async function appendWhilePersisting(rate: number, count: number) {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  fs.writeFileSync(file, "# notes\n");
  const [cmd, args] = scriptCommand(fixture("append_writer"), [file, String(rate), String(count)]);
  const child = spawn(cmd, args, { stdio: "inherit" });
  const exited = new Promise((resolve) => child.once("close", resolve));
  let persists = 0;
  while (!fs.existsSync(`${file}.done`)) {
    persistBlock(file, BLOCK(`persist ${persists++}`));
    await sleep(0); // let the child's exit be seen
  }
  persistBlock(file, BLOCK("final"));
  await exited;
  const seen = new Map<number, number>();
  for (const m of fs.readFileSync(file, "utf8").matchAll(/^agent line (\d+)$/gm)) {
    seen.set(Number(m[1]), (seen.get(Number(m[1])) ?? 0) + 1);
  }
  let lost = 0;
  let doubled = 0;
  for (let i = 0; i < count; i++) {
    if (!seen.has(i)) lost++;
    if ((seen.get(i) ?? 0) > 1) doubled++;
  }
  return { lost, doubled, persists };
}

test("an agent appending 50 lines a second while the library persists loses no line", async () => {
  const { lost, doubled, persists } = await appendWhilePersisting(50, 100);
  assert.ok(persists > 10, `only ${persists} persists overlapped the appends`);
  assert.equal(lost, 0);
  assert.equal(doubled, 0);
});

test("an agent appending 2,000 lines a second while the library persists loses no line", async () => {
  const { lost, doubled } = await appendWhilePersisting(2000, 4000);
  assert.equal(lost, 0);
  assert.equal(doubled, 0);
});

test("bytes written through a descriptor the agent keeps open reach the new file", () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  fs.writeFileSync(file, "# notes\n");
  const fd = fs.openSync(file, "a");
  const lines: string[] = [];
  for (let i = 0; i < 6; i++) {
    persistBlock(file, BLOCK(`persist ${i}`));
    const line = `kept-open line ${i}\n`;
    fs.writeSync(fd, line); // lands in the file that persist replaced
    lines.push(line);
  }
  fs.closeSync(fd);
  persistBlock(file, BLOCK("final"));
  const text = fs.readFileSync(file, "utf8");
  for (const line of lines) assert.ok(text.includes(line), `missing ${JSON.stringify(line)}`);
  assert.equal(text.match(/kept-open line/g)?.length, lines.length);
});

test("a file the agent replaces between persists is merged, never clobbered", () => {
  const dir = tempHome();
  const file = path.join(dir, "run.md");
  persistBlock(file, BLOCK("one"));
  // An editor's save: a new file renamed over the old one, block kept.
  const edited = path.join(dir, "edit.tmp");
  fs.writeFileSync(edited, `# rewritten by the agent\n${BLOCK("one")}\n`);
  fs.renameSync(edited, file);
  persistBlock(file, BLOCK("two"));
  assert.equal(fs.readFileSync(file, "utf8"), `# rewritten by the agent\n${BLOCK("two")}\n`);
});

// ---- sweeping temporary files ------------------------------------------------------

/** A process id that is no longer running. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ["--version"], { stdio: "ignore" });
  await new Promise((resolve) => child.once("close", resolve));
  return child.pid!;
}

test("stale temporary files are swept once per directory, not once per file", async () => {
  const dir = tempHome();
  const pid = await deadPid();
  const stale = (target: string) => path.join(dir, tempName(target, pid, "0badf00d0badf00d"));
  fs.writeFileSync(stale("a.md"), "left by a killed writer");
  fs.writeFileSync(stale("b.md"), "left by a killed writer");
  persistBlock(path.join(dir, "a.md"), BLOCK("a"));
  assert.deepEqual(temps(dir), [], "the first write sweeps the whole directory");
  fs.writeFileSync(stale("c.md"), "left later");
  persistBlock(path.join(dir, "c.md"), BLOCK("c"));
  persistBlock(path.join(dir, "d.md"), BLOCK("d"));
  assert.deepEqual(temps(dir), [path.basename(stale("c.md"))], "the directory is listed once");
  const live = path.join(dir, tempName("e.md"));
  fs.writeFileSync(live, "this process's own");
  resetSwept();
  persistBlock(path.join(dir, "e.md"), BLOCK("e"));
  assert.ok(fs.existsSync(live), "a live writer's temporary file is kept");
  assert.ok(!fs.existsSync(stale("c.md")));
});

test("a large directory is swept off the main thread, without a write waiting for the listing", async () => {
  const dir = tempHome();
  const pid = await deadPid();
  for (let i = 0; i < 5000; i++) fs.writeFileSync(path.join(dir, `old-${i}.md`), "");
  for (let i = 0; i < 20; i++) {
    fs.writeFileSync(path.join(dir, tempName(`t${i}.md`, pid)), "");
  }
  persistBlock(path.join(dir, "new.md"), BLOCK("x"));
  assert.equal(fs.readFileSync(path.join(dir, "new.md"), "utf8"), `${BLOCK("x")}\n`);
  assert.equal(temps(dir).length, 20, "the host's thread does not list a large directory");
  const worker = new Worker(fixture("persist_in_worker"), { workerData: path.join(dir, "w.md") });
  // The worker's thread sweeps after its write, in the background, and exits once that is done:
  // its exit, not a wall-clock deadline, says the sweep is over (bounded only against a hang).
  const ended = new Promise<string>((resolve) => {
    worker.once("exit", (code) => resolve(`exited with ${code}`));
    worker.once("error", (error) => resolve(`failed: ${error}`));
  });
  let hang: ReturnType<typeof setTimeout> | undefined;
  try {
    const how = await Promise.race([
      ended,
      new Promise<string>((resolve) => hang = setTimeout(() => resolve("still running"), 300_000)),
    ]);
    assert.equal(how, "exited with 0");
    assert.equal(temps(dir).length, 0, "the worker's thread swept the large directory");
  } finally {
    clearTimeout(hang);
    await worker.terminate();
  }
  assert.match(fs.readFileSync(path.join(dir, "w.md"), "utf8"), /from a worker/);
});

// ---- bursts ----------------------------------------------------------------------

test("persistBlocks() writes a burst concurrently with persistBlock()'s guarantees", async () => {
  const dir = tempHome();
  const files = Array.from({ length: 40 }, (_, i) => path.join(dir, "sub", `r${i}.md`));
  fs.mkdirSync(path.join(dir, "sub"));
  fs.writeFileSync(files[3]!, "agent text of run 3\n");
  const fifo = path.join(dir, "sub", "fifo.md");
  execFileSync("mkfifo", [fifo]);
  const items = [
    ...files.map((file, i) => ({ file, block: BLOCK(`run ${i}`) })),
    { file: fifo, block: BLOCK("x") },
    { file: files[0]!, block: BLOCK("run 0, again") },
  ];
  const errors = await persistBlocks(items, { concurrency: 8 });
  assert.equal(errors.length, items.length);
  assert.deepEqual(errors.slice(0, 40), Array(40).fill(undefined));
  assert.match(String(errors[40]), /FIFO/);
  assert.equal(errors[41], undefined);
  assert.equal(fs.readFileSync(files[0]!, "utf8"), `${BLOCK("run 0, again")}\n`);
  assert.equal(fs.readFileSync(files[3]!, "utf8"), `agent text of run 3\n\n${BLOCK("run 3")}\n`);
  assert.equal(fs.readFileSync(files[39]!, "utf8"), `${BLOCK("run 39")}\n`);
  assert.deepEqual(temps(path.join(dir, "sub")), []);
  await assert.rejects(persistBlocks(items, { concurrency: 0 }), RangeError);
});

// ---- whose files these are ------------------------------------------------------------

test("writeFileAtomic() never removes a file it did not make, and still sweeps a killed writer's", async () => {
  const dir = tempHome();
  const pid = await deadPid();
  // Files of the user's that look like temporary files, one with a pid that is not running.
  const theirs = [".db.2024.backup.tmp", `.db.${pid}.backup.tmp`, `.notes.md.${pid}.0badf00d.tmp`];
  for (const name of theirs) fs.writeFileSync(path.join(dir, name), `the user's ${name}`);
  // A writer of this library killed mid-write leaves its temporary file.
  const file = path.join(dir, "notes.md");
  fs.writeFileSync(file, AGENT);
  const [cmd, args] = scriptCommand(fixture("persist_loop"), [file, "200000"]);
  const ours = () => temps(dir).filter((n) => !theirs.includes(n));
  for (let round = 0; round < 200 && ours().length === 0; round++) {
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve) => child.stdout.once("data", () => resolve()));
    await sleep(Math.random() * 40);
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("close", resolve));
  }
  assert.equal(ours().length, 1, "no round was killed mid-write; the test proved nothing");
  await writeFileAtomic(file, "my notes\n");
  assert.equal(fs.readFileSync(file, "utf8"), "my notes\n");
  assert.deepEqual(ours(), [], "the killed writer's temporary file is swept");
  for (const name of theirs) {
    assert.equal(fs.readFileSync(path.join(dir, name), "utf8"), `the user's ${name}`);
  }
});

test("markers the agent copied into its notes without a data line are its text, kept through a persist", () => {
  const file = path.join(tempHome(), "run.md");
  const copied = "# Notes\n\nFrom the last run's file:\n<!-- agent-checkpoint:begin -->\n" +
    "IMPORTANT FINDING: the cache key ignores the locale.\n<!-- agent-checkpoint:end -->\n";
  fs.writeFileSync(file, copied);
  const record = {
    kind: "manual" as const,
    source: "host" as const,
    runId: "r",
    dialect: "chat",
    turnsUsed: 1,
    elapsedSeconds: 1,
    caps: {},
    tier: 0,
    persistedAt: "2026-01-01T00:00:00.000Z",
    message: "m",
    tools: [],
    notes: [],
  };
  persistBlock(file, renderBlock(record));
  persistBlock(file, renderBlock({ ...record, turnsUsed: 2 }));
  const bytes = fs.readFileSync(file);
  assert.equal(bytes.toString(), `${copied}\n${renderBlock({ ...record, turnsUsed: 2 })}\n`);
  assert.equal(parseRecord(bytes)?.turnsUsed, 2);
  assert.equal(readCheckpoint(file).state, "record");
});
