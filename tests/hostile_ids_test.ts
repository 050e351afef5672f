// Run ids a scheduler or a host can hand over (10 kB long, emoji, right-to-left marks, NUL,
// newlines): each run starts, is recorded and written, and its id is shown as a faithful head.
// Each run is a process of its own with a bound, so a host that would hang fails the test.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import { Buffer } from "node:buffer";
import { main } from "../cli/mod.ts";
import { memoryIo } from "../cli/_io.ts";
import { parseRecord } from "../_record.ts";
import { MAX_RUN_ID_BYTES } from "../persist.ts";
import { fixture, runScript, tempHome } from "./_helpers.ts";

const HOSTILE: [string, string][] = [
  ["10 kB", "k".repeat(10_000)],
  ["300 × 🔥", "🔥".repeat(300)],
  ["400 × U+202E", "\u202e".repeat(400)],
  ["newlines", "task\nwith\r\nnewlines\n".repeat(60)],
  ["a NUL", "task\u0000tail"],
];

/** `text` is `id`, or a head of `id` followed by `…` and what the library added after it. */
function faithfulHead(text: string, id: string, what: string): void {
  if (text === id) return;
  const cut = text.indexOf("…");
  assert.ok(cut >= 0, `${what} ${JSON.stringify(text.slice(0, 80))} is neither the id nor cut`);
  assert.ok(id.startsWith(text.slice(0, cut)), `${what} is not a head of the id`);
}

async function ledgerRuns(home: string) {
  const m = memoryIo();
  const code = await main(["ls", "--home", home, "--json"], m.io);
  assert.equal(code, 0, m.stderr());
  return JSON.parse(m.stdout()).runs as {
    runId: string;
    taskId?: string;
    status: string;
    checkpointFile?: string;
  }[];
}

async function oneRun(id: string, how: "init" | "env"): Promise<void> {
  const home = tempHome();
  const got = await runScript(
    fixture("hostile_id"),
    how === "init" ? [home, "init", JSON.stringify(id)] : [home, "env"],
    { timeoutMs: 60_000, env: how === "env" ? { HERMES_KANBAN_TASK: id } : {} },
  );
  assert.equal(got.code, 0, `the host did not finish (${got.ms} ms): ${got.stderr.slice(-2000)}`);
  const end = got.stdout.trim().split("\n").map((l) => JSON.parse(l)).find((l) =>
    l.event === "end"
  );
  assert.ok(end, got.stdout);
  faithfulHead(end.runId, id, "the run id");
  assert.ok(Buffer.byteLength(JSON.stringify(end.runId)) <= MAX_RUN_ID_BYTES + 2);
  const runs = await ledgerRuns(home);
  assert.equal(runs.length, 1, JSON.stringify(runs).slice(0, 2000));
  const [row] = runs;
  assert.equal(row!.runId, end.runId);
  assert.equal(row!.status, "done");
  faithfulHead(row!.taskId!, id, "the record's task id");
  assert.equal(row!.checkpointFile, end.file);
  const record = parseRecord(fs.readFileSync(end.file));
  assert.equal(record?.runId, end.runId);
}

for (const [name, id] of HOSTILE) {
  test(`a kanban task id of ${name} given to startRun: the run starts, ends, is recorded and written`, async () => {
    await oneRun(id, "init");
  });
  // An environment variable cannot hold a NUL.
  if (!id.includes("\u0000")) {
    test(`a kanban task id of ${name} in HERMES_KANBAN_TASK: the run starts, ends, is recorded and written`, async () => {
      await oneRun(id, "env");
    });
  }
}
