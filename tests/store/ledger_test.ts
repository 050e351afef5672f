// The run ledger, through the public API and the command line: every run has a record from its
// start, a process's death leaves where the run was, and a retry resumes from there.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { type ChildProcess, spawn } from "node:child_process";
import { createAgentCheckpoint } from "../../mod.ts";
import { main } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";
import { supervise } from "../../supervise/mod.ts";
import { clearStore } from "../../workspace/mod.ts";
import { openStore, storeFile } from "../../store/mod.ts";
import { sqliteDriver } from "../../_sqlite.ts";
import {
  LedgerProgress,
  type LedgerStore,
  recordOf,
  type RunRecord,
  type WriteBatch,
} from "../../_ledger.ts";
import { nowMs, RunTable } from "../../_run_table.ts";
import { thisHost } from "../../store/_host.ts";
import type { RunInfo } from "../../_writer.ts";
import {
  captureLog,
  fixture,
  runScript,
  scriptCommand,
  sleep,
  tempHome,
  writeConfig,
} from "../_helpers.ts";

interface Started {
  attempt: number;
  previous?: {
    attempt: number;
    status?: string;
    turnsUsed: number;
    summary: string;
    endStatus?: string;
    inFlight?: { tool: string; callId?: string; runningSeconds: number }[];
  };
  caps: { turns?: { value: number; source: string } };
  file: string;
  prologue: string | null;
}

interface LedgerRun {
  runId: string;
  attempt: number;
  state: "live" | "ended" | "cut-off";
  status: string;
  turnsUsed: number;
  inFlight: { tool: string; callId?: string }[];
  host: { machine: string; pid: number };
}

async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const m = memoryIo();
  const code = await main(args, m.io);
  return { code, stdout: m.stdout(), stderr: m.stderr() };
}

/** `ls --json` over the ledger, with `--status` when given. */
async function ls(home: string, status?: string): Promise<LedgerRun[]> {
  const { code, stdout, stderr } = await cli([
    "ls",
    "--home",
    home,
    "--json",
    ...(status ? ["--status", status] : []),
  ]);
  assert.equal(code, 0, stderr);
  return JSON.parse(stdout).runs;
}

/** Poll `check` until it gives a value, or fail after `ms` (the machine may be busy: generous). */
async function until<T>(
  what: string,
  check: () => Promise<T | undefined>,
  ms = 30_000,
): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

/** A host process of the ledger fixture, its JSON lines read as they come. */
function host(home: string, plan: Record<string, unknown>) {
  const [cmd, argv] = scriptCommand(fixture("ledger_host"), [home, JSON.stringify(plan)]);
  const child: ChildProcess = spawn(cmd, argv, { stdio: ["ignore", "pipe", "pipe"] });
  const lines: Record<string, unknown>[] = [];
  let buffer = "";
  let stderr = "";
  child.stdout!.on("data", (d) => {
    buffer += d;
    for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
      lines.push(JSON.parse(buffer.slice(0, i)));
      buffer = buffer.slice(i + 1);
    }
  });
  child.stderr!.on("data", (d) => stderr += d);
  const exited = new Promise<number | null>((resolve) =>
    child.on("close", (code) => resolve(code))
  );
  return {
    child,
    exited,
    line: (event: string) =>
      until(
        `the host's "${event}" line (stderr: ${stderr})`,
        () => Promise.resolve(lines.find((l) => l.event === event)),
      ),
  };
}

/** One whole attempt in a process of its own; what the run saw at its start. */
async function attempt(home: string, plan: Record<string, unknown>): Promise<Started> {
  const result = await runScript(fixture("ledger_host"), [home, JSON.stringify(plan)], {
    timeoutMs: 60_000,
  });
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout.split("\n")[0]!);
}

/** A host SIGKILLed inside turn `turn`'s tool call, once the ledger shows it there. */
async function killedInside(home: string, sessionId: string, turn: number, turns: number) {
  const h = host(home, { sessionId, turns, calls: turns, hangAt: turn });
  const inside = await h.line("inside");
  assert.equal(inside.turn, turn);
  // The ledger catches up within an interval: wait for it, then kill.
  await until("the ledger to show the run inside the tool", async () => {
    const run = (await ls(home, "live")).find((r) => r.runId === sessionId);
    return run?.turnsUsed === turn && run.inFlight.some((c) => c.callId === `call-${turn}`)
      ? run
      : undefined;
  });
  h.child.kill("SIGKILL");
  await h.exited;
  return h.child.pid!;
}

test("a host killed inside turn 4's tool is cut off at turn 4 with that tool in flight; its retry is attempt 2, told so", async () => {
  const home = tempHome();
  const pid = await killedInside(home, "job", 4, 12);

  const [cut] = await ls(home, "cut-off");
  assert.equal(cut?.runId, "job");
  assert.equal(cut.attempt, 1);
  assert.equal(cut.turnsUsed, 4);
  assert.equal(cut.host.pid, pid);
  assert.deepEqual(cut.inFlight.map((c) => [c.tool, c.callId]), [["deploy", "call-4"]]);
  assert.deepEqual(await ls(home, "live"), []);
  // No checkpoint file yet (tier 1 is due at turn 6): the ledger alone knows the run.
  assert.equal(fs.existsSync(path.join(home, "agent-checkpoints", "job.md")), false);
  const text = (await cli(["ls", "--home", home])).stdout;
  assert.match(text, /^job +cut off +1 +4 of 12 +- +deploy \(call-4\) /m);
  assert.match(text, /^1 run: 0 live, 0 ended, 1 cut off \(job\)$/m);
  const show = await cli(["show", "job", "--home", home]);
  assert.equal(show.code, 0, show.stderr);
  assert.match(show.stdout, /^Run job: cut off/);
  assert.match(show.stdout, /no checkpoint file yet/);

  // The retry resumes from where the run died, not from a file it never wrote.
  const retry = await attempt(home, { sessionId: "job", turns: 12, calls: 2, end: "done" });
  assert.equal(retry.attempt, 2);
  assert.equal(retry.previous?.attempt, 1);
  assert.equal(retry.previous?.status, "cut-off");
  assert.equal(retry.previous?.endStatus, undefined);
  assert.equal(retry.previous?.turnsUsed, 4);
  assert.deepEqual(retry.previous?.inFlight?.map((c) => [c.tool, c.callId]), [
    ["deploy", "call-4"],
  ]);
  assert.equal(retry.caps.turns?.value, 12, "resume_budget: fresh gives the full caps");
  const resume = retry.prologue ?? "";
  assert.match(resume, /attempt 2/);
  assert.match(resume, /attempt 1 cut off after 4 of 12 turns/);
  assert.match(resume, /inside tool deploy \(call id call-4, for /);
  assert.match(resume, /outcome unknown: deploy \(call id call-4/);
  assert.match(resume, /Check whether each took effect before you repeat it/);
  // It left no file: the text names none, and says the figures are the ledger's.
  assert.ok(!resume.includes(retry.file), resume);
  assert.doesNotMatch(resume, /checkpoint is in|read it first/, resume);
  assert.match(resume, /stopped before it wrote a checkpoint file/);
  assert.match(resume, /do not redo finished work/);
  // The retry ended done: the run is ended, attempt 2.
  const [done] = await ls(home);
  assert.equal(done?.state, "ended");
  assert.equal(done.status, "done");
  assert.equal(done.attempt, 2);
});

test("run.previous.host reads as `machine (pid N)`, and is `{ machine, pid }` as JSON", async () => {
  const home = tempHome();
  await attempt(home, { sessionId: "where", turns: 12, calls: 2 }); // exits with no end
  const [cut] = await ls(home, "cut-off");
  assert.equal(cut?.runId, "where");
  const ac = createAgentCheckpoint({ home, env: {} });
  try {
    const run = ac.startRun({ sessionId: "where", caps: { turns: 12 } });
    assert.equal(run.attempt, 2);
    const host = run.previous?.host;
    assert.equal(`${host}`, `${cut.host.machine} (pid ${cut.host.pid})`);
    assert.deepEqual(
      JSON.parse(JSON.stringify(host)),
      {
        machine: cut.host.machine,
        pid: cut.host.pid,
      },
    );
    await run.end();
  } finally {
    await ac.close();
  }
});

test("show says whose file it prints when the newest attempt wrote none", async () => {
  const home = tempHome();
  // Attempt 1 writes its file at tier 1 (turn 6) and exits with no end; attempt 2 writes none.
  await attempt(home, { sessionId: "whose", turns: 12, calls: 7 });
  await attempt(home, { sessionId: "whose", turns: 12, calls: 1 });
  const [cut] = await ls(home, "cut-off");
  assert.equal(cut?.attempt, 2);
  const show = await cli(["show", "whose", "--home", home]);
  assert.equal(show.code, 0, show.stderr);
  assert.match(show.stdout, /^Run whose, attempt 2: cut off/);
  assert.match(
    show.stdout,
    new RegExp(
      `\\(the checkpoint file on this machine, \\S+whose\\.md, is attempt 1's; attempt 2 ran on ${cut.host.machine} \\(pid ${cut.host.pid}\\), and neither this machine nor the store has its file\\)`,
    ),
  );
});

test("ls --json pages like the table, and says so: shown and limit beside the counts", async () => {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {} });
  for (const id of ["p1", "p2", "p3"]) await ac.startRun({ sessionId: id }).end();
  await ac.close();
  const page = async (...args: string[]) => {
    const { code, stdout, stderr } = await cli(["ls", "--home", home, "--json", ...args]);
    assert.equal(code, 0, stderr);
    return JSON.parse(stdout);
  };
  const two = await page("--limit", "2");
  assert.equal(two.runs.length, 2);
  assert.equal(two.shown, 2);
  assert.equal(two.limit, 2);
  assert.equal(two.counts.ended, 3, JSON.stringify(two.counts));
  const all = await page();
  assert.deepEqual([all.shown, all.limit], [3, 100]);
  const every = await page("--limit", "0");
  assert.deepEqual([every.shown, every.limit], [3, null]);
  const help = await cli(["ls", "--help"]);
  assert.match(help.stdout.replace(/\s+/g, " "), /--json .*paged like the table/);
});

test("resume_budget: remaining gives the next attempt the turns the earlier one left", async () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint:\n  resume_budget: remaining\n");
  // The first attempt makes 5 model calls and exits without an end.
  await attempt(home, { sessionId: "budget", turns: 12, calls: 5 });
  const [first] = await ls(home, "cut-off");
  assert.equal(first?.turnsUsed, 5);
  const retry = await attempt(home, { sessionId: "budget", turns: 12, calls: 1, end: "capped" });
  assert.equal(retry.attempt, 2);
  assert.equal(retry.caps.turns?.value, 7);
  assert.match(retry.caps.turns?.source ?? "", /less 5 used by earlier attempts/);
  assert.match(retry.prologue ?? "", /only what the earlier attempts left: 7 turns/);
  // A third attempt has what both left.
  const third = await attempt(home, { sessionId: "budget", turns: 12, calls: 1, end: "done" });
  assert.equal(third.attempt, 3);
  assert.equal(third.caps.turns?.value, 6);
});

test("a run that ended is never shown cut off, however old its process's heartbeat", async () => {
  const home = tempHome();
  await attempt(home, { sessionId: "ends", turns: 12, calls: 3, end: "failed" });
  // Every heartbeat is stale from here on; the process is gone too.
  writeConfig(home, "agent_checkpoint:\n  host_timeout_seconds: 0.001\n");
  await sleep(5);
  assert.deepEqual(await ls(home, "cut-off"), []);
  const [ended] = await ls(home, "ended");
  assert.equal(ended?.runId, "ends");
  assert.equal(ended.status, "failed");
  const audit = JSON.parse((await cli(["audit", "--home", home, "--json"])).stdout);
  assert.deepEqual(audit.byState, { live: 0, ended: 1, "cut-off": 0 });
  assert.deepEqual(audit.ended, { failed: 1 });
  assert.match((await cli(["show", "ends", "--home", home])).stdout, /^Run ends: ended failed/);
  // Its retry is told it ended failed, not that it was cut off.
  const retry = await attempt(home, { sessionId: "ends", turns: 12, calls: 1, end: "done" });
  assert.equal(retry.previous?.status, "failed");
  assert.match(retry.previous?.summary ?? "", /^attempt 1 ended failed after 3 of 12 turns/);
});

test("the supervisor's deadline record is in the ledger, on the attempt the library inside recorded", async () => {
  const home = tempHome();
  const notices: string[] = [];
  const env: Record<string, string | undefined> = { ...process.env };
  for (const name of ["AGENT_CHECKPOINT_RUN_ID", "AGENT_CHECKPOINT_DEADLINE", "HERMES_HOME"]) {
    delete env[name];
  }
  const result = await supervise({
    command: scriptCommand(fixture("supervise_library"), [home]).flat(),
    deadlineSeconds: 3,
    graceSeconds: 2,
    runId: "supervised",
    home,
    env,
    stdin: "ignore",
    stdout: { write: () => true },
    stderr: { write: () => true },
    notice: (line) => notices.push(line),
    forwardSignals: false,
  });
  assert.equal(result.outcome, "deadline");
  const runs = await ls(home);
  assert.equal(runs.length, 1, JSON.stringify(runs));
  assert.equal(runs[0]!.runId, "supervised");
  assert.equal(runs[0]!.state, "ended");
  assert.equal(runs[0]!.status, "deadline");
  assert.ok(runs[0]!.turnsUsed >= 1, "the library's own figures are kept");
  assert.ok(!notices.some((n) => /run ledger/.test(n)), notices.join("\n"));

  // A command with no library inside gets an attempt recorded for it.
  const bare = await supervise({
    command: ["sh", "-c", "sleep 30"],
    deadlineSeconds: 1,
    graceSeconds: 1,
    runId: "bare",
    home,
    env,
    stdin: "ignore",
    stdout: { write: () => true },
    stderr: { write: () => true },
    notice: () => {},
    forwardSignals: false,
  });
  assert.equal(bare.outcome, "deadline");
  const recorded = (await ls(home)).find((r) => r.runId === "bare");
  assert.equal(recorded?.state, "ended");
  assert.equal(recorded?.status, "deadline");
});

test("a corrupt store costs log lines, never the run", async () => {
  const home = tempHome();
  fs.mkdirSync(path.join(home, "agent-checkpoint"));
  fs.writeFileSync(
    storeFile(home),
    "this is not a database, and it is long enough to be read".repeat(20),
  );
  const log = captureLog();
  const ac = createAgentCheckpoint({ home, env: {}, logger: log.logger });
  const run = ac.startRun({ sessionId: "still-works", caps: { turns: 4 } });
  const texts = [run.preLlmCall(), run.preLlmCall(), run.preLlmCall()];
  run.preToolCall("bash", { callId: "c1" });
  run.postToolCall("bash", { callId: "c1", ok: true });
  assert.ok(texts.some((t) => t !== undefined), "the tiers still come");
  await run.end({ status: "done" });
  await ac.close();
  assert.ok(fs.existsSync(run.checkpointFile), "the checkpoint file is still written");
  assert.ok(
    log.records.some((r) => /run ledger/.test(r.message) && r.level !== "info"),
    JSON.stringify(log.records),
  );
  // The library set the damaged file aside, kept beside a new ledger that has the run.
  const kept = fs.readdirSync(path.dirname(storeFile(home))).filter((f) =>
    /^runs\.db\.corrupt-/.test(f)
  );
  assert.equal(kept.length, 1, kept.join());
  assert.match(
    fs.readFileSync(path.join(path.dirname(storeFile(home)), kept[0]!), "utf8"),
    /^this is not a database/,
  );
  const listed = await cli(["ls", "--home", home]);
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(listed.stdout, /^still-works +ended done +1 +3 of 4/m);
});

test("a locked store costs log lines, never a hook's time; the worker writes the run once it can", {
  skip: sqliteDriver() === undefined,
}, async () => {
  const home = tempHome();
  // Create the store, then hold its write lock from another connection.
  openStore({ home, settings: { host_timeout_seconds: 30 } })!.closeSync();
  const locker = sqliteDriver()!.open(storeFile(home), { readOnly: false });
  locker.exec("BEGIN EXCLUSIVE");
  const log = captureLog();
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: log.logger,
    settings: { progress_interval_seconds: 0.05 },
  });
  const run = ac.startRun({ sessionId: "locked-out", caps: { turns: 12 } });
  run.preLlmCall();
  run.preToolCall("bash", { callId: "c1" });
  await until("a log line about the locked ledger", () =>
    Promise.resolve(
      log.records.find((r) => /run ledger could not/.test(r.message)) ? true : undefined,
    ));
  locker.exec("ROLLBACK");
  locker.close();
  // Once the lock is gone, the worker's retry lands the run where it is.
  const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" })!;
  const view = await until("the run in the ledger", () => {
    const v = store.latestSync("locked-out");
    return Promise.resolve(v?.record.inFlight.length === 1 ? v : undefined);
  });
  assert.equal(view.record.turnsUsed, 1);
  assert.equal(view.state, "live");
  store.closeSync();
  await run.end();
  await ac.close();
});

test("clearing the workspace snapshots keeps the run ledger beside them", async () => {
  const home = tempHome();
  await attempt(home, { sessionId: "kept", turns: 12, calls: 2, end: "done" });
  fs.mkdirSync(path.join(home, "agent-checkpoint", "store"), { recursive: true });
  clearStore({ home });
  assert.equal(fs.existsSync(path.join(home, "agent-checkpoint", "store")), false);
  assert.deepEqual((await ls(home)).map((r) => [r.runId, r.status]), [["kept", "done"]]);
});

test("an end handed to the watchdog's commit is never put back to live by a record made from its slot before it", async () => {
  const stored = new Map<string, string>();
  let fail = true;
  const store = {
    write(batch: WriteBatch): Promise<void> {
      if (fail) {
        fail = false;
        return Promise.reject(new Error("database is locked"));
      }
      for (const r of batch.records) stored.set(`${r.attempt} ${r.runId}`, r.status);
      return Promise.resolve();
    },
    prune: () => Promise.resolve(0),
    close: () => Promise.resolve(),
  } as LedgerStore;
  const progress = new LedgerProgress(
    store,
    () => {},
    { machine: "m", pid: 1, start: "" } as never,
  );
  const record = (runId: string, status: string) =>
    ({ runId, attempt: 1, status, updatedAt: Date.now() }) as unknown as RunRecord;
  // The host's thread found the store busy for an end and handed it on; the slot was still due,
  // so a live record of the same attempt is made after it.
  progress.take(record("ended", "capped"));
  progress.take(record("ended", "live"));
  progress.take(record("other", "live"));
  // A failed commit puts the batch back behind what came meanwhile: a live record again.
  const failing = progress.flush(Date.now(), 1, false);
  progress.take(record("ended", "live"));
  await failing;
  await progress.flush(Date.now() + 60_000, 1, false);
  assert.equal(stored.get("1 ended"), "capped");
  assert.equal(stored.get("1 other"), "live");
});

test("a look that began before a run did still puts the run's tool in flight over its start row", async () => {
  // The watchdog reads its clock as a look begins; on a busy machine the host's thread may start
  // a run, record its start and enter a tool before that look reaches the run. What the look
  // then makes of the run is newer than the start row, and the store must keep it.
  const home = tempHome();
  const store = openStore({ home, settings: { host_timeout_seconds: 30 } }) as LedgerStore;
  const table = new RunTable(undefined, 8);
  assert.ok(table.grow());
  const host = thisHost();
  const lookBegan = nowMs();
  // The host's thread, meanwhile: the run starts a few ms later, is recorded, enters a tool.
  const start = lookBegan + 5;
  table.claim(0, start);
  const info: RunInfo = {
    slot: 0,
    gen: table.gen(0),
    runId: "late-look",
    dialect: "chat",
    caps: {},
    checkpointFile: path.join(home, "late-look.md"),
    notes: [],
    attempt: 1,
  };
  const first = recordOf(info, table, host, start + 3);
  first.updatedAt = Math.round(table.activity(0)); // as a start stamps it
  assert.equal(store.sync!.startAttempt(first).attempt, 1);
  table.toolStart(0, table.internName("deploy"), start + 4, "held");
  // The look reaches the run now, with the time it began.
  const progress = new LedgerProgress(store, () => {}, host);
  progress.collect(table, () => info, lookBegan);
  await progress.flush(lookBegan, 0.1, true);
  const view = store.sync!.latest("late-look")!;
  assert.deepEqual(view.record.inFlight.map((c) => c.tool), ["deploy"]);
  // Nothing changes after: the next look has nothing new to write, and the row stays so.
  progress.collect(table, () => info, nowMs());
  await progress.flush(nowMs(), 0.1, true);
  assert.equal(store.sync!.latest("late-look")!.record.inFlight.length, 1);
  await store.close();
});
