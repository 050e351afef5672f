import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { RunTable } from "../_run_table.ts";
import { CheckpointWriter, type PendingWrite, type RunInfo } from "../_writer.ts";
import { defaultSettings } from "../settings.ts";
import { parseRecord } from "../_record.ts";
import { captureLog, tempHome, waitFor } from "./_helpers.ts";

/** A table with two live runs, and a writer whose sinks keep what they are told. */
function setUp() {
  const dir = tempHome();
  const table = new RunTable(undefined, 8);
  assert.ok(table.grow());
  const { logger, records } = captureLog();
  const written: string[] = [];
  const writer = new CheckpointWriter(table, {
    log: (level, message, runId) => logger({ level, message, ...(runId ? { runId } : {}) }),
    comment: () => {},
    written: (event) => written.push(event.runId),
  });
  const settings = defaultSettings(dir);
  const pending = (slot: number, runId: string): PendingWrite => {
    table.claim(slot, Date.now());
    const info: RunInfo = {
      slot,
      gen: table.gen(slot),
      runId,
      dialect: "chat",
      caps: {},
      checkpointFile: path.join(dir, `${runId}.md`),
      notes: [],
    };
    return { info, settings, event: { kind: "manual" }, source: "watchdog", now: Date.now() };
  };
  return { table, writer, written, records, pending };
}

test("a batch of checkpoint writes waits for a run's file lock, and writes once it is released", async () => {
  const { table, writer, written, records, pending } = setUp();
  const held = pending(0, "held");
  const free = pending(1, "free");
  // Another thread (here: this test) is rewriting run "held"'s file.
  assert.ok(table.lockFile(0, 0));
  const batch = writer.writeMany([held, free]);
  assert.ok(
    await waitFor(() => fs.existsSync(free.info.checkpointFile)),
    "the free run is written",
  );
  assert.equal(fs.existsSync(held.info.checkpointFile), false, "the locked run's file waits");
  table.unlockFile(0);
  await batch;
  assert.equal(parseRecord(fs.readFileSync(held.info.checkpointFile))?.runId, "held");
  assert.deepEqual(written.sort(), ["free", "held"]);
  assert.deepEqual(records, []);
  // The batch gave the lock back.
  assert.ok(table.lockFile(0, 0));
});
