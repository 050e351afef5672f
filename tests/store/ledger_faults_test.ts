// The run ledger survives its faults, made to happen for real: another process holding the file
// locked (at start, and for a few intervals mid-run), the file deleted or replaced under a live
// process, a damaged page; and a quiet run's heartbeat keeps it live.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { execFileSync, spawn } from "node:child_process";
import { createAgentCheckpoint } from "../../mod.ts";
import { main } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";
import { openSqliteStore, storeFile } from "../../store/sqlite.ts";
import { runState, type RunView } from "../../store/types.ts";
import { here, thisHost } from "../../store/_host.ts";
import { sqliteDriver } from "../../_sqlite.ts";
import { captureLog, locker, scriptCommand, sleep, tempHome, waitFor } from "../_helpers.ts";

const noDriver = sqliteDriver() === undefined;

/** Poll `check` until it gives a value, or fail after `ms` (the machine may be busy: generous). */
async function until<T>(what: string, check: () => T | undefined, ms = 40_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = check();
    if (value !== undefined) return value;
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Every run's newest attempt in the home's ledger, read as another process would; undefined when it cannot be read now. */
function ledgerRuns(home: string, hostTimeoutSeconds = 30): Map<string, RunView> | undefined {
  try {
    const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds, mode: "read" });
    try {
      return new Map(store.listSync({ limit: 100_000 }).map((v) => [v.record.runId, v]));
    } finally {
      store.closeSync();
    }
  } catch {
    return undefined; // locked, or not there yet
  }
}

async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const m = memoryIo();
  const code = await main(args, m.io);
  return { code, stdout: m.stdout(), stderr: m.stderr() };
}

test(
  "a ledger locked by another process at start: every run started meanwhile lands once it is free",
  {
    skip: noDriver,
  },
  async () => {
    const home = tempHome();
    // Held for 5 s from the first moment: no open, read or write of the file can succeed.
    const lock = locker(storeFile(home), "exclusive", 5000);
    await lock.locked;
    const log = captureLog();
    const ac = createAgentCheckpoint({
      home,
      env: {},
      logger: log.logger,
      settings: { progress_interval_seconds: 0.2 },
    });
    const runs = Array.from(
      { length: 5 },
      (_, i) => ac.startRun({ sessionId: `held-${i}`, caps: { turns: 10 } }),
    );
    for (const run of runs) {
      run.preLlmCall();
      run.preToolCall("bash", { callId: "c1" });
    }
    // One that starts and ends while the ledger is locked: its end waits in memory.
    const brief = ac.startRun({ sessionId: "brief", caps: { turns: 10 } });
    brief.preLlmCall();
    await brief.end({ status: "done", summary: "over before the ledger opened" });
    await lock.released;
    // Never ended: the worker's retried open writes them, within a bounded wait.
    const seen = await until("the 5 live runs and the ended one in the ledger", () => {
      const all = ledgerRuns(home);
      if (!all) return undefined;
      const ok = runs.every((r) => all.get(r.runId)?.record.inFlight.length === 1) &&
        all.get("brief")?.record.status === "done";
      return ok ? all : undefined;
    });
    for (const run of runs) {
      const view = seen.get(run.runId)!;
      assert.equal(view.state, "live");
      assert.equal(view.record.turnsUsed, 1);
      assert.equal(view.record.inFlight[0]!.tool, "bash");
    }
    assert.ok(
      log.records.some((r) => /wait in memory.*at most \d+/.test(r.message)),
      `the bound is logged: ${JSON.stringify(log.records.map((r) => r.message))}`,
    );
    await ac.close();
    const after = ledgerRuns(home)!;
    assert.deepEqual(
      [...after.keys()].sort(),
      ["brief", ...runs.map((r) => r.runId)].sort(),
    );
  },
);

test("runs started and ended while the ledger is locked at start land at close()", {
  skip: noDriver,
}, async () => {
  const home = tempHome();
  const lock = locker(storeFile(home), "exclusive");
  await lock.locked;
  const ac = createAgentCheckpoint({ home, env: {}, logger: () => {} });
  const runs = Array.from({ length: 5 }, (_, i) => ac.startRun({ sessionId: `c-${i}` }));
  for (const run of runs) run.preLlmCall();
  await runs[0]!.end({ status: "failed" });
  const closing = ac.close();
  await sleep(300);
  await lock.release();
  await closing;
  const all = ledgerRuns(home)!;
  assert.equal(all.size, 5, JSON.stringify([...all.keys()]));
  assert.equal(all.get("c-0")!.record.status, "failed");
  for (const id of ["c-1", "c-2", "c-3", "c-4"]) assert.equal(all.get(id)!.record.turnsUsed, 1);
});

test(
  "runs that started and ended while another process held the ledger for seconds land at close(), whatever the retry's backoff",
  {
    skip: noDriver,
  },
  async () => {
    const home = tempHome();
    const log = captureLog();
    const ac = createAgentCheckpoint({ home, env: {}, logger: log.logger });
    const warm = ac.startRun({ sessionId: "warm" });
    warm.preLlmCall();
    assert.ok(
      await waitFor(() => ledgerRuns(home)?.has("warm") === true),
      "the ledger takes records",
    );
    const lock = locker(storeFile(home), "write");
    await lock.locked;
    const ids = ["a", "b", "c"];
    for (const id of ids) {
      const run = ac.startRun({ sessionId: id });
      run.preLlmCall();
      await run.end({ status: "done" });
    }
    // The watchdog's commits fail, and its next try is put off (2 s, 4 s, 8 s): past close().
    assert.ok(
      await waitFor(
        () => log.records.some((r) => /next try in ([4-9]|\d\d+)s/.test(r.message)),
        90_000,
      ),
      "the watchdog's commits failed while the ledger was locked, and its next try is seconds away",
    );
    await lock.release();
    await warm.end({ status: "done" });
    await ac.close();
    const all = ledgerRuns(home)!;
    for (const id of [...ids, "warm"]) {
      assert.equal(all.get(id)?.record.status, "done", `${id}: ${all.get(id)?.record.status}`);
    }
    assert.ok(!log.records.some((r) => /are lost/.test(r.message)), "nothing was lost");
  },
);

test("a start the locked ledger could not number never lands over the earlier attempt's record", {
  skip: noDriver,
}, async () => {
  const home = tempHome();
  // Attempt 1 gets to 6 turns, and its process lets it go without an end (a keeper closed).
  const first = createAgentCheckpoint({ home, env: {}, logger: () => {} });
  const one = first.startRun({ sessionId: "job", caps: { turns: 100 } });
  for (let i = 0; i < 6; i++) one.preLlmCall();
  await first.close();
  // The retry starts while another process holds the ledger: nothing can open or read it.
  const lock = locker(storeFile(home), "exclusive");
  await lock.locked;
  const second = createAgentCheckpoint({ home, env: {}, logger: () => {} });
  const two = second.startRun({ sessionId: "job", caps: { turns: 100 } });
  two.preLlmCall();
  await lock.release();
  await two.end({ status: "done" });
  await second.close();
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30, mode: "read" });
  const attempts = store.listSync({ runId: "job" }).map((v) => [
    v.record.attempt,
    v.record.status,
    v.record.turnsUsed,
  ]);
  store.closeSync();
  // The guessed number was attempt 1's: the retry is recorded as the next attempt instead.
  assert.deepEqual(attempts.sort(), [[1, "live", 6], [2, "done", 1]]);
});

test("a keeper opened right after another's close() in the same process resumes the run", {
  skip: noDriver,
}, async () => {
  for (let i = 0; i < 10; i++) {
    const home = tempHome();
    const settings = { progress_interval_seconds: 0.05 };
    const first = createAgentCheckpoint({ home, env: {}, logger: () => {}, settings });
    const one = first.startRun({ sessionId: "eval", caps: { turns: 100 } });
    for (let t = 0; t < 3; t++) {
      one.preLlmCall();
      one.preToolCall("step", { callId: `c${t}` });
      one.postToolCall("step", { callId: `c${t}`, ok: true });
    }
    // The watchdog commits a few times; its connection is open when close() is called.
    await sleep(60 + 20 * i);
    await first.close();
    // The first keeper's run is live in this same, still running process: only warn resumes it here.
    const second = createAgentCheckpoint({
      home,
      env: {},
      logger: () => {},
      settings: { on_duplicate: "warn" },
    });
    const two = second.startRun({ sessionId: "eval", caps: { turns: 100 } });
    assert.equal(two.attempt, 2, `round ${i}: the retry resumes attempt 1`);
    await two.end({ status: "done" });
    await second.close();
  }
});

for (const how of ["deleted", "replaced"] as const) {
  test(
    `a ledger file ${how} under a live process: noticed, made anew, every live run written to it`,
    {
      skip: noDriver,
    },
    async () => {
      const home = tempHome();
      const file = storeFile(home);
      const log = captureLog();
      const ac = createAgentCheckpoint({
        home,
        env: {},
        logger: log.logger,
        settings: { progress_interval_seconds: 0.2 },
      });
      const runs = Array.from({ length: 3 }, (_, i) => ac.startRun({ sessionId: `${how}-${i}` }));
      for (const run of runs) run.preLlmCall();
      await until("the runs in the ledger", () => {
        const all = ledgerRuns(home);
        return runs.every((r) => all?.get(r.runId)?.record.turnsUsed === 1) || undefined;
      });
      if (how === "deleted") {
        for (const f of [file, `${file}-wal`, `${file}-shm`]) fs.rmSync(f, { force: true });
      } else {
        // Another ledger put in its place (a copy restored), its log files with it.
        const other = path.join(home, "other.db");
        openSqliteStore({ file: other, hostTimeoutSeconds: 30 }).closeSync();
        for (const f of [`${file}-wal`, `${file}-shm`]) fs.rmSync(f, { force: true });
        fs.renameSync(other, file);
      }
      // Nothing changes in the runs: the worker must notice the file itself.
      const noticed = await until(
        "a log line about the ledger file",
        () =>
          log.records.find((r) => new RegExp(how).test(r.message) && /run ledger/.test(r.message)),
      );
      assert.match(noticed.message, /every live run's record is written/);
      const all = await until("every live run in the new ledger", () => {
        const all = ledgerRuns(home);
        return runs.every((r) => all?.get(r.runId)?.record.turnsUsed === 1) ? all : undefined;
      });
      assert.equal(all.size, 3);
      // Later runs, and ends written by the host's thread, go to the new file too.
      const later = ac.startRun({ sessionId: `${how}-later` });
      later.preLlmCall();
      await runs[0]!.end({ status: "done" });
      await until("a later run and an end in the new ledger", () => {
        const all = ledgerRuns(home);
        return all?.get(`${how}-later`) && all.get(runs[0]!.runId)?.record.status === "done"
          ? true
          : undefined;
      });
      // The host's thread and the watchdog each have a connection, and each finds the new file:
      // one line says what became of the old one (the second to look had found "another file").
      const said = log.records.filter((r) => /the run ledger at /.test(r.message));
      assert.deepEqual(said.map((r) => r.message), [noticed.message]);
      await ac.close();
    },
  );
}

test(
  "commits that fail while another process holds the ledger are retried: every run's last state lands",
  {
    skip: noDriver,
  },
  async () => {
    const home = tempHome();
    const log = captureLog();
    const ac = createAgentCheckpoint({
      home,
      env: {},
      logger: log.logger,
      settings: { progress_interval_seconds: 0.1 },
    });
    const runs = Array.from({ length: 8 }, (_, i) => ac.startRun({ sessionId: `f-${i}` }));
    for (const run of runs) run.preLlmCall();
    await until("the runs in the ledger", () => {
      const all = ledgerRuns(home);
      return runs.every((r) => all?.get(r.runId)?.record.turnsUsed === 1) || undefined;
    });
    const lock = locker(storeFile(home), "write");
    await lock.locked;
    // Each run moves on while commits fail, then goes quiet: its last state is in a failed commit.
    for (const [i, run] of runs.entries()) {
      for (let t = 0; t <= i; t++) run.preLlmCall();
      run.preToolCall(`tool-${i}`, { callId: `k${i}` });
    }
    await runs[7]!.end({ status: "capped", summary: "ended while locked" });
    await until(
      "a failed commit",
      () => log.records.some((r) => /run ledger could not be written/.test(r.message)) || undefined,
    );
    // Past the first retry (1 s after the failure): the records kept in memory meanwhile fail
    // again, and must go back in line.
    await sleep(2000);
    await lock.release();
    const all = await until("every run's last state", () => {
      const all = ledgerRuns(home);
      const ok = runs.every((run, i) => {
        const r = all?.get(run.runId)?.record;
        return r?.turnsUsed === i + 2 &&
          (i === 7 ? r.status === "capped" : r.inFlight.length === 1);
      });
      return ok ? all : undefined;
    }, 60_000);
    for (const [i, run] of runs.slice(0, 7).entries()) {
      assert.equal(all.get(run.runId)!.record.inFlight[0]!.tool, `tool-${i}`);
    }
    // Said by the watchdog's thread, whose log lines reach this one a message later.
    await until(
      "the line that says the ledger takes records again",
      () => log.records.some((r) => /takes records again/.test(r.message)) || undefined,
    );
    await ac.close();
  },
);

/** A small tmpfs mounted at a fresh directory, or the reason it cannot be. */
function smallDisk(size: string): { dir: string; unmount(): void } | string {
  const dir = tempHome();
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir], { stdio: "pipe" });
  } catch (error) {
    return `no tmpfs can be mounted here (${String(error).split("\n")[0]})`;
  }
  return {
    dir,
    unmount: () => execFileSync("umount", ["-l", dir], { stdio: "pipe" }),
  };
}

/** Fill the file system under `dir` to the last byte; returns the filler's path. */
function fill(dir: string): string {
  const filler = path.join(dir, "filler");
  const fd = fs.openSync(filler, "w");
  const chunk = Buffer.alloc(64 * 1024, 1);
  try {
    for (;;) fs.writeSync(fd, chunk);
  } catch { /* ENOSPC: full */ }
  try {
    for (;;) fs.writeSync(fd, chunk, 0, 512);
  } catch { /* full to the last block */ }
  fs.closeSync(fd);
  return filler;
}

test(
  "commits that fail on a full disk are retried once space returns: every run's last state lands",
  {
    skip: noDriver,
  },
  async (t) => {
    const disk = smallDisk("4m");
    if (typeof disk === "string") return t.skip(disk);
    try {
      const home = disk.dir;
      const log = captureLog();
      const ac = createAgentCheckpoint({
        home,
        env: {},
        logger: log.logger,
        settings: { progress_interval_seconds: 0.1 },
      });
      const runs = Array.from({ length: 8 }, (_, i) => ac.startRun({ sessionId: `d-${i}` }));
      for (const run of runs) run.preLlmCall();
      await until("the runs in the ledger", () => {
        const all = ledgerRuns(home);
        return runs.every((r) => all?.get(r.runId)?.record.turnsUsed === 1) || undefined;
      });
      const filler = fill(home);
      for (const [i, run] of runs.entries()) {
        for (let k = 0; k <= i; k++) run.preLlmCall();
        // Large enough that the commit needs pages the full disk does not have.
        run.note("n".repeat(1500));
      }
      await until(
        "a commit failed for want of space",
        () => log.records.some((r) => /could not be written.*full/i.test(r.message)) || undefined,
      );
      await sleep(2000); // past the first retry
      fs.rmSync(filler);
      await until("every run's last state", () => {
        const all = ledgerRuns(home);
        return runs.every((run, i) => all?.get(run.runId)?.record.turnsUsed === i + 2) || undefined;
      }, 60_000);
      await ac.close();
    } finally {
      disk.unmount();
    }
  },
);

test(
  "with the ledger locked by another process, starts and ends hand their rows on: none is missing",
  {
    skip: noDriver,
  },
  async () => {
    const home = tempHome();
    const ac = createAgentCheckpoint({
      home,
      env: {},
      logger: () => {},
      settings: { progress_interval_seconds: 0.1 },
    });
    ac.startRun({ sessionId: "warm" }).preLlmCall(); // the store and the worker are up
    await until("the first run in the ledger", () => ledgerRuns(home)?.get("warm") ?? undefined);
    // Held twice: each start and end meets the lock (a live host's ledger cannot be taken in
    // exclusive locking mode: its connections keep it shared).
    for (const mode of ["write", "write again"] as const) {
      const lock = locker(storeFile(home), "write");
      await lock.locked;
      const runs = Array.from(
        { length: 40 },
        (_, i) => ac.startRun({ sessionId: `${mode.replace(" ", "-")}-${i}` }),
      );
      for (const [i, run] of runs.entries()) {
        run.preLlmCall();
        if (i % 2 === 0) await run.end({ status: "done" });
      }
      await sleep(300);
      await lock.release();
      await until(`all 40 runs started under a ${mode} lock`, () => {
        const all = ledgerRuns(home);
        return runs.every((run, i) => {
          const r = all?.get(run.runId)?.record;
          return r !== undefined && r.turnsUsed === 1 &&
            r.status === (i % 2 === 0 ? "done" : "live");
        }) || undefined;
      });
    }
    await ac.close();
  },
);

/** Overwrite the middle half of a file with garbage: its pages there are damaged. */
function damage(file: string): void {
  const size = fs.statSync(file).size;
  const fd = fs.openSync(file, "r+");
  try {
    const junk = Buffer.alloc(Math.floor(size / 2), 0xa5);
    fs.writeSync(fd, junk, 0, junk.length, Math.floor(size / 4));
  } finally {
    fs.closeSync(fd);
  }
}

/** A home whose ledger holds `n` ended runs, written by a process that then closed. */
async function ledgerWithRuns(n: number): Promise<string> {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, logger: () => {} });
  for (let i = 0; i < n; i++) {
    const run = ac.startRun({ sessionId: `old-${i}`, caps: { turns: 9 } });
    run.preLlmCall();
    await run.end({ status: "done", summary: "x".repeat(200) });
  }
  await ac.close();
  // Every page in the database file itself, not in its write-ahead log.
  const db = sqliteDriver()!.open(storeFile(home), { readOnly: false });
  db.exec("PRAGMA busy_timeout = 5000");
  db.get("PRAGMA wal_checkpoint(TRUNCATE)");
  db.close();
  return home;
}

test("ls, show and audit on a damaged ledger say so, name the file and how to set it aside", {
  skip: noDriver,
}, async () => {
  const home = await ledgerWithRuns(300);
  const file = storeFile(home);
  damage(file);
  for (const args of [["ls"], ["show", "old-150"], ["audit"]]) {
    const out = await cli([...args, "--home", home]);
    assert.notEqual(out.code, 0, `${args[0]}: ${out.stdout}`);
    assert.ok(out.stderr.includes(file), `${args[0]} names the file: ${out.stderr}`);
    assert.match(out.stderr, /damaged/);
    assert.match(out.stderr, /set it aside with `mv /);
    assert.doesNotMatch(out.stderr, /\n\s+at /, "no stack");
  }
  // Not a database at all (its header overwritten): the same.
  fs.writeFileSync(file, "not a database ".repeat(400));
  const out = await cli(["ls", "--home", home]);
  assert.notEqual(out.code, 0);
  assert.ok(out.stderr.includes(file) && /set it aside/.test(out.stderr), out.stderr);
});

test("serve on a damaged ledger answers with what is wrong and how to set it aside", {
  skip: noDriver,
}, async () => {
  const home = await ledgerWithRuns(300);
  damage(storeFile(home));
  const script = new URL(
    import.meta.url.endsWith(".ts") ? "../../scripts/cli.ts" : "../../scripts/cli.js",
    import.meta.url,
  );
  const [cmd, argv] = scriptCommand(decodeURIComponent(script.pathname), [
    "serve",
    "--port",
    "0",
    "--home",
    home,
  ]);
  const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  child.stdout.on("data", (d) => stdout += d);
  const exited = new Promise((r) => child.once("exit", r));
  try {
    const url = await until("serve's URL", () => /http:\/\/\S+\//.exec(stdout)?.[0], 60_000);
    const res = await fetch(`${url}api/runs`);
    const body = await res.json() as { error: string };
    assert.equal(res.status, 503);
    assert.ok(body.error.includes(storeFile(home)), body.error);
    assert.match(body.error, /damaged.*set it aside with `mv /);
  } finally {
    child.kill("SIGTERM");
    await exited;
  }
});

test("the library, finding its ledger damaged, keeps the old file beside a new one and logs it", {
  skip: noDriver,
}, async () => {
  const home = await ledgerWithRuns(300);
  const file = storeFile(home);
  damage(file);
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: log.logger,
    settings: { progress_interval_seconds: 0.1 },
  });
  // Runs of the ids the damaged file holds: their starts and rows meet its damaged pages.
  const runs = Array.from({ length: 20 }, (_, i) => ac.startRun({ sessionId: `old-${i * 15}` }));
  for (const run of runs) run.preLlmCall();
  const line = await until(
    "the log line",
    () => log.records.find((r) => /damaged/.test(r.message) && /moved aside/.test(r.message)),
  );
  const aside = fs.readdirSync(path.dirname(file)).filter((f) => /^runs\.db\.corrupt-/.test(f));
  assert.equal(aside.filter((f) => !/-(wal|shm)$/.test(f)).length, 1, aside.join());
  assert.ok(line.message.includes(path.join(path.dirname(file), aside[0]!)), line.message);
  await until("the live runs in the new ledger", () => {
    const all = ledgerRuns(home);
    return runs.every((r) => all?.get(r.runId)?.record.status === "live") || undefined;
  });
  await ac.close();
  const listed = await cli(["ls", "--home", home, "--json"]);
  assert.equal(listed.code, 0, listed.stderr);
});

test("a quiet live run stays live past host_timeout_seconds: the heartbeat keeps it fresh", {
  skip: noDriver,
}, async () => {
  const home = tempHome();
  // Long enough that a busy machine's watchdog (load 12 and more on two cores, its commits'
  // fsyncs slowed by other processes') beats within it.
  const timeout = 8;
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: () => {},
    settings: { progress_interval_seconds: 0.2, host_timeout_seconds: timeout },
  });
  const run = ac.startRun({ sessionId: "quiet" });
  run.preLlmCall(); // then no hook at all
  // The watchdog's first beat: a thread started on a busy machine may take seconds to give it.
  await until("the run and its process's heartbeat in the ledger", () => {
    const view = ledgerRuns(home, timeout)?.get("quiet");
    return view?.heartbeat ? view : undefined;
  });
  const quietSince = Date.now();
  // Past two timeouts of silence, read every 100 ms: live each time, and live as another
  // machine judges it (by the heartbeat alone, with no pid to look at).
  while (Date.now() - quietSince < 2 * timeout * 1000) {
    const view = ledgerRuns(home, timeout)?.get("quiet");
    if (view) {
      assert.equal(view.state, "live", `cut off after ${Date.now() - quietSince} ms of quiet`);
      // Judged with the default timeout: at load 40 a commit's fsync can wait several seconds.
      const elsewhere = { ...here(30), machine: "another machine" };
      assert.equal(runState(view.record, view.heartbeat, elsewhere), "live", "a fresh heartbeat");
    }
    await sleep(100);
  }
  await ac.close();
});

test("a live run whose process still runs is live on its machine, however old its heartbeat", {
  skip: noDriver,
}, () => {
  const store = openSqliteStore({ file: storeFile(tempHome()), hostTimeoutSeconds: 1 });
  // Its watchdog's first beat not yet there (a thread slow to start on a busy machine): the
  // record is a minute old, and its process is this one.
  const long = Date.now() - 60_000;
  const record = {
    runId: "running",
    attempt: 1,
    dialect: "chat" as const,
    caps: {},
    turnsUsed: 0,
    elapsedSeconds: 0,
    tier: 0,
    inFlight: [],
    recent: [],
    notes: [],
    host: thisHost(),
    status: "live" as const,
    startedAt: long,
    updatedAt: long,
  };
  store.startAttemptSync(record);
  assert.equal(store.latestSync("running")?.state, "live");
  // A process that is gone is cut off at once; another machine's is judged by its heartbeat.
  store.startAttemptSync({ ...record, runId: "gone", host: { ...record.host, pid: 2 ** 22 + 7 } });
  assert.equal(store.latestSync("gone")?.state, "cut-off");
  store.startAttemptSync({ ...record, runId: "far", host: { ...record.host, machine: "far" } });
  assert.equal(store.latestSync("far")?.state, "cut-off");
  store.closeSync();
});

test(
  "a retry that starts while another process holds the ledger's write lock reads it and numbers itself: the previous attempt's number + 1, cut off or ended done",
  { skip: noDriver },
  async () => {
    const home = tempHome();
    const first = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
    const cut = first.startRun({ sessionId: "cut" });
    cut.preLlmCall();
    await cut.checkpoint("step 1 done");
    const done = first.startRun({ sessionId: "done" });
    done.preLlmCall();
    await done.end({ status: "done" });
    await first.close(); // "cut" never ends: its retry resumes it
    await until(
      "the first keeper's connections closed",
      () => !fs.existsSync(`${storeFile(home)}-wal`) || undefined,
    );
    // Readers go on, writers wait: the retry's start cannot be recorded, only read.
    const lock = locker(storeFile(home), "write");
    await lock.locked;
    const log = captureLog();
    const second = createAgentCheckpoint({
      home,
      env: {},
      logger: log.logger,
      // The first attempt's process (this one) is alive: warn lets the retry go on.
      settings: { watchdog: false, on_duplicate: "warn" },
    });
    try {
      const retry = second.startRun({ sessionId: "cut" });
      const again = second.startRun({ sessionId: "done" });
      assert.equal(retry.attempt, 2, "a cut-off attempt 1's retry is attempt 2");
      assert.equal(retry.previous?.attempt, 1);
      assert.equal(again.attempt, 2, "a new run after attempt 1 ended done is attempt 2");
      assert.equal(again.previous, undefined, "a run that ended done is not resumed");
      // The lock was really met: the ledger still holds attempt 1 of each (read under the lock).
      const held = ledgerRuns(home);
      assert.equal(held?.get("cut")?.record.attempt, 1);
      assert.equal(held?.get("done")?.record.attempt, 1);
    } finally {
      await lock.release();
      await second.close();
    }
  },
);
