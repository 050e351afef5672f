// The file-write steps are data: these tests run them for real, trace each step, and check
// the order durability rests on — every temporary file written, then flushed, then closed,
// then renamed (or linked) into place, then its directory flushed; in a burst, one directory
// flush per directory, after every rename into it.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { atomicSteps, type Op, runSync } from "../_file_ops.ts";
import { persistBlocks, persistSteps } from "../_write_steps.ts";
import { tempHome } from "./_helpers.ts";

const block = (text: string) =>
  `<!-- agent-checkpoint:begin -->\n${text}\n<!-- agent-checkpoint:data {"v":1} -->\n` +
  "<!-- agent-checkpoint:end -->";

type Traced = Array<[Op, unknown]>;
const tracer = () => {
  const steps: Traced = [];
  return { steps, trace: (op: Op, result: unknown) => steps.push([op, result]) };
};

/**
 * Check each rename or link of a temporary file into place: its last write
 * came before a flush of it, the flush before its close, the close before the
 * rename; and (when `dirFlushed`) a flush of its directory follows. Returns
 * how many files were put in place.
 */
function checkDurable(steps: Traced, dirFlushed: boolean): number {
  let placed = 0;
  steps.forEach(([op], i) => {
    if (op.op !== "rename" && op.op !== "link") return;
    const opened = steps.findLastIndex(([o], k) =>
      k < i && o.op === "open" && o.path === op.from && (o.flags & fs.constants.O_CREAT) !== 0
    );
    if (opened === -1) return; // not a temporary file of this write
    placed++;
    const fd = steps[opened]![1] as number;
    const used = steps.slice(opened + 1, i).map(([o]) => o).filter((o) => "fd" in o && o.fd === fd);
    // Its life ends at its close: a burst's next open may be given the same descriptor number.
    const end = used.findIndex((o) => o.op === "close");
    const life = end === -1 ? used : used.slice(0, end + 1);
    const lastWrite = life.findLastIndex((o) => o.op === "write");
    const flushed = life.findLastIndex((o) => o.op === "fsync");
    const closed = life.findLastIndex((o) => o.op === "close");
    const order = life.map((o) => o.op).join(",");
    assert.ok(lastWrite >= 0, `the temporary file was written: ${order}`);
    assert.ok(flushed > lastWrite, `flushed after its last write, before the rename: ${order}`);
    assert.ok(closed > flushed, `closed after its flush: ${order}`);
    if (dirFlushed) {
      const dir = path.dirname(op.to);
      assert.ok(
        steps.some(([o], k) => k > i && o.op === "syncDir" && o.dir === dir),
        `the directory is flushed after the rename into it`,
      );
    }
  });
  return placed;
}

test("a persist flushes the temporary file before it links it into place, then the directory", () => {
  const file = path.join(tempHome(), "new.md");
  const { steps, trace } = tracer();
  runSync(persistSteps(file, block("one"), true), trace);
  assert.equal(checkDurable(steps, true), 1);
  assert.ok(steps.some(([o]) => o.op === "link"), "a new file is linked, never renamed over");
  assert.match(fs.readFileSync(file, "utf8"), /one/);
});

test("a persist over the agent's file flushes before the rename, keeping the agent's text", () => {
  const file = path.join(tempHome(), "run.md");
  fs.writeFileSync(file, "my notes\n");
  const { steps, trace } = tracer();
  runSync(persistSteps(file, block("two"), true), trace);
  assert.equal(checkDurable(steps, true), 1);
  assert.ok(steps.some(([o]) => o.op === "rename"));
  assert.equal(fs.readFileSync(file, "utf8"), `my notes\n\n${block("two")}\n`);
});

test("an atomic write flushes before the rename, then the directory", () => {
  const file = path.join(tempHome(), "a.json");
  fs.writeFileSync(file, "old");
  const { steps, trace } = tracer();
  runSync(atomicSteps(file, new TextEncoder().encode("new")), trace);
  assert.equal(checkDurable(steps, true), 1);
  assert.equal(fs.readFileSync(file, "utf8"), "new");
});

test("a burst flushes each file before its rename and each directory once, after its renames", async () => {
  const home = tempHome();
  const dirs = [path.join(home, "a"), path.join(home, "b")];
  for (const dir of dirs) fs.mkdirSync(dir);
  const items = Array.from({ length: 12 }, (_, i) => ({
    file: path.join(dirs[i % 2]!, `r${i}.md`),
    block: block(`run ${i}`),
  }));
  fs.writeFileSync(items[0]!.file, "agent text\n"); // one replaced, the others new
  const { steps, trace } = tracer();
  assert.deepEqual(
    await persistBlocks(items, { concurrency: 4 }, trace),
    items.map(() => undefined),
  );
  assert.equal(checkDurable(steps, true), 12);
  for (const dir of dirs) {
    const flushes = steps.flatMap(([o], k) => o.op === "syncDir" && o.dir === dir ? [k] : []);
    assert.equal(flushes.length, 1, `one flush of ${dir}`);
    const lastPlaced = steps.findLastIndex(([o]) =>
      (o.op === "rename" || o.op === "link") && path.dirname(o.to) === dir
    );
    assert.ok(flushes[0]! > lastPlaced, "after the last rename into it");
  }
  for (const [i, item] of items.entries()) {
    assert.match(fs.readFileSync(item.file, "utf8"), new RegExp(`run ${i}\\n`));
  }
});

test("a persist told its file is new links it without looking first, and never clobbers what is there", () => {
  const dir = tempHome();
  const file = path.join(dir, "fresh.md");
  const { steps, trace } = tracer();
  runSync(persistSteps(file, block("one"), true, true), trace);
  assert.equal(steps.some(([o]) => o.op === "lstat"), false, "no look before the link");
  assert.equal(checkDurable(steps, true), 1);
  // Wrong beliefs cost a try, never the file: the agent's text, a link, a directory.
  const agent = path.join(dir, "agent.md");
  fs.writeFileSync(agent, "the agent's own file\n");
  runSync(persistSteps(agent, block("two"), true, true));
  assert.equal(fs.readFileSync(agent, "utf8"), `the agent's own file\n\n${block("two")}\n`);
  const target = path.join(dir, "target.txt");
  fs.writeFileSync(target, "untouched");
  const link = path.join(dir, "link.md");
  fs.symlinkSync(target, link);
  runSync(persistSteps(link, block("three"), true, true));
  assert.equal(fs.readFileSync(target, "utf8"), "untouched");
  assert.equal(fs.lstatSync(link).isFile(), true);
  const sub = path.join(dir, "sub.md");
  fs.mkdirSync(sub);
  assert.throws(() => runSync(persistSteps(sub, block("four"), true, true)), /directory/);
  assert.deepEqual(fs.readdirSync(dir).filter((n) => n.endsWith(".tmp")), []);
});
