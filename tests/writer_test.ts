import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { RunTable } from "../_run_table.ts";
import { CheckpointWriter, type PendingWrite, type RunInfo } from "../_writer.ts";
import { defaultSettings } from "../settings.ts";
import { parseRecord } from "../_record.ts";
import { FILE_LOCK_WAIT_MS } from "../persist.ts";
import { Worker } from "node:worker_threads";
import { captureLog, fixture, tempHome, waitFor } from "./_helpers.ts";

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

test("a single write waits for the run's file lock another thread holds, then goes ahead as documented", async () => {
  const { table, writer, written, pending } = setUp();
  const item = pending(0, "single");
  // Another thread holds run "single"'s file lock (as the watchdog does while it writes the file),
  // and lets go only once the file exists: the write must wait its documented while, then go ahead.
  const holder = new Worker(fixture("file_lock_holder"), {
    workerData: { buffers: table.buffers, slot: 0, file: item.info.checkpointFile },
  });
  const said: string[] = [];
  const locked = new Promise<void>((resolve, reject) => {
    holder.on("message", (m) => {
      said.push(String(m));
      if (m === "locked") resolve();
    });
    holder.once("error", reject);
  });
  try {
    await locked;
    const began = performance.now();
    const file = writer.write(item.info, item.settings, item.event, item.source, Date.now());
    const waited = performance.now() - began;
    assert.equal(file, item.info.checkpointFile);
    assert.ok(
      waited >= FILE_LOCK_WAIT_MS - 50,
      `the write waited ${
        Math.round(waited)
      } ms for the lock (documented: ${FILE_LOCK_WAIT_MS} ms)`,
    );
    assert.equal(parseRecord(fs.readFileSync(item.info.checkpointFile))?.runId, "single");
    assert.deepEqual(written, ["single"]);
    assert.ok(await waitFor(() => said.includes("released")), "the holder let go");
    // The write took no lock it did not give back: the lock is free.
    assert.ok(table.lockFile(0, 0));
  } finally {
    await holder.terminate();
  }
});

test("a burst makes each record as its lane comes to it, never from a slot its run let go", async () => {
  const dir = tempHome();
  const table = new RunTable(undefined, 64);
  assert.ok(table.grow());
  const written: string[] = [];
  const writer = new CheckpointWriter(table, {
    log: () => {},
    comment: () => {},
    written: (event) => written.push(event.runId),
  });
  const settings = defaultSettings(dir);
  const items: PendingWrite[] = Array.from({ length: 17 }, (_, slot) => {
    table.claim(slot, Date.now());
    const info: RunInfo = {
      slot,
      gen: table.gen(slot),
      runId: `r${slot}`,
      dialect: "chat",
      caps: {},
      checkpointFile: path.join(dir, `r${slot}.md`),
      notes: [],
    };
    return { info, settings, event: { kind: "manual" }, source: "watchdog", now: Date.now() };
  });
  // Sixteen lanes, each held at its first run's file lock: the seventeenth record is not made yet.
  for (let slot = 0; slot < 16; slot++) assert.ok(table.lockFile(slot, 0));
  const burst = writer.writeMany(items);
  assert.equal(table.writeDue(16), true, "the burst says the run's record is still to be made");
  assert.equal(table.writeDue(0), false, "the first sixteen are made");
  table.free(16); // the run ends before its record is made: its end record is the last word
  for (let slot = 0; slot < 16; slot++) table.unlockFile(slot);
  await burst;
  assert.equal(fs.existsSync(items[16]!.info.checkpointFile), false);
  assert.deepEqual(written.sort(), items.slice(0, 16).map((i) => i.info.runId).sort());
});
