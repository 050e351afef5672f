// A full disk costs a log line, never the record: on a real, small tmpfs filled to the last
// byte, runs cross their tiers (and some end) while no file can be written; once space
// returns, every run gets its file with the tier it reached, and the run ledger never says a
// file is written before it is.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { execFileSync } from "node:child_process";
import { createAgentCheckpoint, type Run } from "../mod.ts";
import { readCheckpoint } from "../persist.ts";
import { openSqliteStore, storeFile } from "../store/sqlite.ts";
import type { RunView } from "../store/types.ts";
import { sqliteDriver } from "../_sqlite.ts";
import { Worker } from "node:worker_threads";
import { captureLog, fixture, runScript, tempHome, waitFor } from "./_helpers.ts";

/** A small tmpfs mounted on a fresh directory; undefined (with why) when mounting is not allowed. */
function smallDisk(): { dir: string; unmount: () => void } | string {
  const dir = fs.mkdtempSync(path.join(tempHome(), "disk-"));
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", dir], { stdio: "pipe" });
  } catch (error) {
    return `mounting a tmpfs is not permitted here (${String(error).split("\n")[0]})`;
  }
  return {
    dir,
    unmount: () => {
      try {
        execFileSync("umount", ["-l", dir], { stdio: "pipe" });
      } catch { /* unmounted already */ }
    },
  };
}

/** Fill the file system under `dir` to its last byte with one file; returns it. */
function fill(dir: string): string {
  const filler = path.join(dir, "filler");
  const fd = fs.openSync(filler, "w");
  const chunk = new Uint8Array(4096).fill(120);
  try {
    for (;;) fs.writeSync(fd, chunk);
  } catch (error) {
    assert.equal((error as NodeJS.ErrnoException).code, "ENOSPC");
  } finally {
    fs.closeSync(fd);
  }
  // The last partial block too, a byte at a time.
  const tail = fs.openSync(filler, "a");
  try {
    for (;;) fs.writeSync(tail, "x");
  } catch {
    /* full */
  } finally {
    fs.closeSync(tail);
  }
  return filler;
}

function ledgerRuns(home: string): Map<string, RunView> | undefined {
  try {
    const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30, mode: "read" });
    try {
      return new Map(store.listSync({ limit: 1000 }).map((v) => [v.record.runId, v]));
    } finally {
      store.closeSync();
    }
  } catch {
    return undefined; // locked, or not there yet
  }
}

const mounted = smallDisk();

test("runs crossing their tiers on a full disk all get their files once space returns", {
  skip: typeof mounted === "string" ? mounted : false,
}, async () => {
  if (typeof mounted === "string") return;
  const home = tempHome();
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: log.logger,
    settings: {
      checkpoint_dir: mounted.dir,
      stall_window_seconds: 0,
      progress_interval_seconds: 1,
    },
  });
  try {
    const filler = fill(mounted.dir);
    const runs: Run[] = [];
    for (let i = 0; i < 20; i++) {
      const run = ac.startRun({ sessionId: `F-${i}`, caps: { turns: 10 } });
      for (let t = 0; t < 10; t++) run.preLlmCall(); // both tiers, each write failing
      runs.push(run);
    }
    for (const run of runs) assert.equal(fs.existsSync(run.checkpointFile), false);
    const failed = log.records.filter((r) => /could not persist the checkpoint/.test(r.message));
    assert.ok(failed.length >= 20, `${failed.length} failed writes said`);
    assert.match(failed[0]!.message, /ENOSPC|No space left/);
    assert.match(failed[0]!.message, /tried again/);
    // Half of them end while the disk is still full: their end records fail too.
    for (const run of runs.slice(0, 10)) await run.end({ status: "done" });
    for (const run of runs) assert.equal(fs.existsSync(run.checkpointFile), false);
    if (sqliteDriver()) {
      // The ledger never names as written a file that is not there (the ends' rows may wait for
      // the store a moment: the watchdog's commit can hold it).
      const ended = runs.slice(0, 10);
      let rows: Map<string, RunView> | undefined;
      assert.ok(
        await waitFor(() => {
          rows = ledgerRuns(home);
          return ended.every((run) => rows?.get(run.runId)?.record.status === "done");
        }),
        "the ends are in the ledger",
      );
      for (const run of ended) assert.equal(rows!.get(run.runId)!.record.fileState, "pending");
    }

    fs.unlinkSync(filler); // space returns
    assert.ok(
      await waitFor(() => runs.every((run) => fs.existsSync(run.checkpointFile)), 90_000),
      `files written: ${runs.filter((run) => fs.existsSync(run.checkpointFile)).length}/20`,
    );
    for (const [i, run] of runs.entries()) {
      const found = readCheckpoint(run.checkpointFile);
      assert.equal(found.state, "record", run.runId);
      assert.equal(found.record!.tier, 2, run.runId);
      if (i < 10) assert.equal(found.record!.turnsUsed, 10, run.runId);
      assert.equal(found.record!.kind, i < 10 ? "end" : "tier", run.runId);
    }
    assert.ok(log.records.some((r) => /is written, after \d+ failed tr/.test(r.message)));
    if (sqliteDriver()) {
      // Every row now says its file is written: the ended ones' rows were written again.
      assert.ok(
        await waitFor(() => {
          const rows = ledgerRuns(home);
          return runs.every((run) => rows?.get(run.runId)?.record.fileState === "written");
        }, 60_000),
        JSON.stringify([...ledgerRuns(home)?.values() ?? []].map((v) => v.record.fileState)),
      );
    }
  } finally {
    await ac.close();
    mounted.unmount();
  }
});

test("at close, a write still owed is tried once more", {
  skip: typeof mounted === "string" ? mounted : false,
}, async () => {
  const disk = smallDisk();
  if (typeof disk === "string") return;
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: () => {},
    settings: { checkpoint_dir: disk.dir, stall_window_seconds: 0, watchdog: false },
  });
  try {
    const filler = fill(disk.dir);
    const run = ac.startRun({ sessionId: "C", caps: { turns: 4 } });
    for (let t = 0; t < 4; t++) run.preLlmCall();
    assert.equal(fs.existsSync(run.checkpointFile), false);
    fs.unlinkSync(filler);
    await ac.close(); // before the first retry is due (1 s): close tries it
    assert.equal(readCheckpoint(run.checkpointFile).record?.tier, 2);
  } finally {
    disk.unmount();
  }
});

test("a worker's persist keeps the agent's late lines a full disk refused, and writes them next", {
  skip: typeof mounted === "string" ? mounted : false,
}, async () => {
  const disk = smallDisk();
  if (typeof disk === "string") return;
  const worker = new Worker(fixture("late_bytes_on_full_disk"), { workerData: disk.dir });
  try {
    const result = await new Promise<
      { during: string; stuck: number; after: string; left: number }
    >((resolve, reject) => {
      worker.once("message", resolve);
      worker.once("error", reject);
    });
    const line = `agent: ${"a long line written during the swap ".repeat(300)}\n`;
    assert.equal(result.during.includes(line), false, "the full disk refused the copy");
    assert.equal(result.stuck, line.length, "the worker kept the refused bytes");
    assert.equal(result.after.split(line).length - 1, 1, result.after);
    assert.match(result.after, /two/);
    assert.ok(result.after.startsWith("agent: started\n"), result.after);
    assert.equal(result.left, 0);
  } finally {
    await worker.terminate();
    disk.unmount();
  }
});

test("the watchdog's stall record, refused by a full disk, lands once space returns", {
  skip: typeof mounted === "string" ? mounted : false,
}, async () => {
  const disk = smallDisk();
  if (typeof disk === "string") return;
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home: tempHome(),
    env: {},
    logger: log.logger,
    settings: { checkpoint_dir: disk.dir, stall_window_seconds: 0.3 },
  });
  try {
    const filler = fill(disk.dir);
    const run = ac.startRun({ sessionId: "W", caps: { turns: 100 } });
    run.preToolCall("slow_tool"); // silent from here: one stall record, written by the watchdog
    assert.ok(
      await waitFor(() =>
        log.records.some((r) => /could not persist the checkpoint/.test(r.message))
      ),
      "the watchdog's write failed and said so",
    );
    assert.equal(fs.existsSync(run.checkpointFile), false);
    fs.unlinkSync(filler);
    assert.ok(
      await waitFor(() => fs.existsSync(run.checkpointFile), 90_000),
      "written once it can",
    );
    const found = readCheckpoint(run.checkpointFile);
    assert.equal(found.record?.kind, "stall");
    assert.equal(found.record?.source, "watchdog");
  } finally {
    await ac.close();
    disk.unmount();
  }
});

test("a host whose checkpoint writes are owed still exits when its own work is done", async () => {
  const result = await runScript(fixture("host_owed_exit"), [tempHome()], { timeoutMs: 30_000 });
  assert.equal(result.stdout, "done\n");
  assert.equal(result.code, 0, result.stderr);
});
