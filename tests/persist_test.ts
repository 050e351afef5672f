import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { spawn } from "node:child_process";
import { Buffer } from "node:buffer";
import { createAgentCheckpoint, writeFileAtomic } from "../mod.ts";
import { checkpointFileName, findBlock, persistBlock, writeFileAtomicSync } from "../persist.ts";
import { fixture, scriptCommand, sleep, tempHome } from "./_helpers.ts";

const AGENT = "# My findings\n\nThe bug is in parser.ts line 40.\n";

/** Whether a file written by persist_loop is whole: agent text, then one intact block. */
function assertWhole(file: string): void {
  const text = fs.readFileSync(file, "utf8");
  assert.ok(text.startsWith(AGENT), "the agent's text leads the file");
  const m = text.slice(AGENT.length).match(
    /^\n<!-- agent-checkpoint:begin -->\nwrite (\d+) (\d+)\n(\d+)\n<!-- agent-checkpoint:end -->\n$/,
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
    "<!-- agent-checkpoint:begin -->\nwrite 1 1\n1\n<!-- agent-checkpoint:end -->",
  );
  assertWhole(file);
  assert.deepEqual(temps(dir), []);
  // Rounds killed between creating a temporary file and renaming it prove the test bites.
  assert.ok(killedMidWrite > 0, "no round was killed mid-write; the test proved nothing");
});

test("writeFileAtomic() replaces a file and leaves no temporary file", async () => {
  const dir = tempHome();
  const file = path.join(dir, "a.md");
  await writeFileAtomic(file, "one");
  writeFileAtomicSync(file, "two");
  await writeFileAtomic(file, "three");
  assert.equal(fs.readFileSync(file, "utf8"), "three");
  assert.deepEqual(fs.readdirSync(dir), ["a.md"]);
});

test("writeFileAtomic() rejects, leaving nothing, when the directory is missing", async () => {
  const dir = tempHome();
  await assert.rejects(writeFileAtomic(path.join(dir, "missing", "a.md"), "x"), /ENOENT/);
  assert.deepEqual(fs.readdirSync(dir), []);
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
  persistBlock(file, "<!-- agent-checkpoint:begin -->\nfirst\n<!-- agent-checkpoint:end -->");
  const first = fs.readFileSync(file);
  fs.writeFileSync(file, Buffer.concat([head, first, tail]));
  let appended = Buffer.alloc(0);
  for (let i = 0; i < 100; i++) {
    persistBlock(
      file,
      `<!-- agent-checkpoint:begin -->\npersist ${i}\n<!-- agent-checkpoint:end -->`,
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
    "<!-- agent-checkpoint:begin -->\npersist 99\n<!-- agent-checkpoint:end -->",
  );
});

test("a file with the agent's text and no block gets a block appended", () => {
  const file = path.join(tempHome(), "run.md");
  fs.writeFileSync(file, "no newline at the end");
  persistBlock(file, "<!-- agent-checkpoint:begin -->\nx\n<!-- agent-checkpoint:end -->");
  assert.equal(
    fs.readFileSync(file, "utf8"),
    "no newline at the end\n\n<!-- agent-checkpoint:begin -->\nx\n<!-- agent-checkpoint:end -->\n",
  );
});

test("a begin marker whose end the agent deleted is kept, and a new block appended", () => {
  const file = path.join(tempHome(), "run.md");
  const broken = "<!-- agent-checkpoint:begin -->\nhalf of an old block, edited by the agent\n";
  fs.writeFileSync(file, broken);
  persistBlock(file, "<!-- agent-checkpoint:begin -->\nnew\n<!-- agent-checkpoint:end -->");
  persistBlock(file, "<!-- agent-checkpoint:begin -->\nnewer\n<!-- agent-checkpoint:end -->");
  assert.equal(
    fs.readFileSync(file, "utf8"),
    broken + "\n<!-- agent-checkpoint:begin -->\nnewer\n<!-- agent-checkpoint:end -->\n",
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
