import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { createAgentCheckpoint } from "../../mod.ts";
import { type CliIo, COMMANDS, main, parseDuration } from "../../cli/mod.ts";
import { memoryIo } from "../../cli/_io.ts";
import { explain } from "../../cli/_explain_report.ts";
import { Buffer } from "node:buffer";
import { hermesBoard } from "../_hermes.ts";
import { fixture, runScript, scriptCommand, tempHome, writeConfig } from "../_helpers.ts";
import { execFileSync, spawn } from "node:child_process";
import process from "node:process";
import { type CheckpointRecord, renderBlock } from "../../_record.ts";
import { checkpointFileName, persistBlock } from "../../persist.ts";

/** Run the command line; resolves to exit code, stdout and stderr. */
async function cli(args: string[], io: Partial<CliIo> = {}) {
  // A home of its own unless the test names one: never the machine's ~/.hermes.
  const m = memoryIo({ env: { HERMES_HOME: tempHome() }, ...io });
  const code = await main(args, m.io);
  return { code, stdout: m.stdout(), stderr: m.stderr() };
}

/**
 * A home with two persisted runs and every kind of odd file, and no run ledger: `ls`, `show`
 * and `audit` read the checkpoint files (tests/store/ covers them over the ledger).
 */
async function populated(): Promise<string> {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false, ledger: false } });
  for (const [id, turns] of [["alpha", 3], ["beta", 100]] as const) {
    const run = ac.startRun({ sessionId: id, caps: { turns } });
    for (let t = 0; t < (turns === 3 ? 2 : 51); t++) run.preLlmCall();
    run.preToolCall("bash");
  }
  await ac.close();
  const dir = path.join(home, "agent-checkpoints");
  fs.appendFileSync(path.join(dir, "alpha.md"), "\nINCOMPLETE: next, rerun the failing test\n");
  fs.writeFileSync(path.join(dir, "mine.md"), "my own notes, no block\n");
  fs.writeFileSync(path.join(dir, "empty.md"), "");
  fs.writeFileSync(path.join(dir, "trunc.md"), "<!-- agent-checkpoint:begin -->\n## agent-chec");
  fs.writeFileSync(path.join(dir, "latin.md"), Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));
  return home;
}

test("explain shows every setting with its source, the caps, the schedule and the runtime", async () => {
  const home = tempHome();
  writeConfig(home, "agent:\n  max_turns: 60\nagent_checkpoint:\n  stall_window_seconds: 300\n");
  // The task's board is the default one in the home (the Hermes root of a home outside ~/.hermes).
  hermesBoard(path.join(home, "kanban.db"), [{ id: "t-9", maxRuntimeSeconds: 930 }]);
  const { code, stdout, stderr } = await cli(["explain", "--home", home, "--task", "t-9"], {
    env: { TERMINAL_TIMEOUT: "900" },
  });
  assert.equal(stderr, "");
  assert.equal(code, 0, stdout);
  for (
    const line of [
      /^ {2}mode +snapshot +default$/m,
      /^ {2}stall_window_seconds +300 +config\.yaml agent_checkpoint$/m,
      /^ {2}caps\.turns +none +default$/m,
      /^ {2}dialect +kanban {2}\(task t-9\)$/m,
      /^ {2}turn cap +60 {2}\(agent\.max_turns\)$/m,
      /^ {2}time cap +15m30s {2}\(kanban db\)$/m,
      /^ {2}kanban board +.*kanban\.db {2}\(the default board in the Hermes root .*\)$/m,
      /^ {2}time origin +when startRun is called$/m,
      /^ {2}1 +model call 31 \(30 turns used\), or the first model call after 7m45s +tool calls after model call 30, or 7m45s/m,
      /^ {2}2 +model call 55 \(54 turns used\)/m,
      new RegExp(
        `^ {2}${path.join(home, "agent-checkpoints", "t-9.md").replace(/[.]/g, "\\.")}$`,
        "m",
      ),
      /directory writable: yes/,
      /^ {2}SQLite driver +(node:sqlite|better-sqlite3)$/m,
      /^ {2}watchdog +on, polls every 10s$/m,
      /^ {2}uncapped runs +a checkpoint every 30m00s$/m,
      /^ {2}stalls +a checkpoint after 5m00s of silence$/m,
      /^No problems found\.$/m,
    ]
  ) assert.match(stdout, line);
});

test("explain --json gives the same as one JSON object", async () => {
  const home = tempHome();
  const { code, stdout } = await cli(["explain", "--home", home, "--session", "s1", "--json"]);
  assert.equal(code, 0);
  const e = JSON.parse(stdout);
  assert.equal(e.home, home);
  assert.equal(e.run.runId, "s1");
  assert.equal(e.run.capless, true);
  assert.deepEqual(e.settings.find((s: { key: string }) => s.key === "mode"), {
    key: "mode",
    value: "snapshot",
    source: "default",
  });
  assert.deepEqual(e.writable, { ok: true });
  assert.deepEqual(e.problems, []);
  assert.equal(e.watchdog.pollSeconds, 10);
});

test("explain exits 1 when settings fell back to defaults", async () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint:\n  mode: loud\n");
  const { code, stdout } = await cli(["explain", "--home", home]);
  assert.equal(code, 1);
  assert.match(stdout, /1 problem:\n {2}✗ settings: setting mode = "loud"/);
});

test("explain exits 1 when the checkpoint directory cannot be written", async () => {
  const home = tempHome();
  const file = path.join(home, "a-file");
  fs.writeFileSync(file, "");
  const { code, stdout } = await cli(["explain", "--home", home], {
    env: { DIR: file },
  });
  assert.equal(code, 0, "the default directory is fine");
  writeConfig(home, "agent_checkpoint:\n  checkpoint_dir: $DIR/cp\n");
  const bad = await cli(["explain", "--home", home, "--json"], { env: { DIR: file } });
  assert.equal(bad.code, 1, stdout);
  assert.match(
    JSON.parse(bad.stdout).problems[0],
    /checkpoint directory cannot be written: .*ENOTDIR/,
  );
});

test("explain exits 1 when a kanban board cannot be read", async () => {
  const home = tempHome();
  const board = path.join(home, "kanban.db");
  fs.writeFileSync(board, "not a database at all, just text that is long enough to be a header");
  const { code, stdout } = await cli(["explain", "--home", home, "--task", "t"], {
    env: { HERMES_KANBAN_DB: board },
  });
  assert.equal(code, 1);
  assert.match(stdout, /✗ cap discovery: cannot read the kanban board/);
});

test("explain reports a kanban run with no SQLite driver as a problem", () => {
  const e = explain({
    home: tempHome(),
    env: { HERMES_KANBAN_DB: "/boards/kanban.db" },
    taskId: "t",
    sqlite: null,
  });
  assert.equal(e.sqliteDriver, null);
  assert.match(e.problems.join("\n"), /install the better-sqlite3 package/);
});

test("ls lists every file newest first, with records and odd files described", async () => {
  const home = await populated();
  const { code, stdout } = await cli(["ls", "--home", home]);
  assert.equal(code, 0);
  const lines = stdout.split("\n");
  assert.match(lines[0]!, /^RUN +PERSISTED +KIND +SOURCE +AGENT TEXT +MARKED +SIZE$/);
  const row = (run: string) => lines.find((l) => l.startsWith(`${run} `)) ?? "";
  // The tier became due at a model call, which persists the file itself.
  assert.match(row("alpha"), /^alpha +just now +tier 2 +pre_llm_call +yes +INCOMPLETE +\d/);
  assert.match(row("beta"), /^beta +just now +tier 1 +pre_llm_call +- +- +\d/);
  assert.match(row("mine"), /^mine +- +agent text only +- +yes +- +23 B$/);
  assert.match(row("empty"), /^empty +- +empty +- +- +- +0 B$/);
  assert.match(row("trunc"), /^trunc +- +truncated /);
  assert.match(row("latin"), /^latin +- +agent text only .*\(not UTF-8\)$/);
  // Aligned: every row's second column starts where the header's does.
  const at = lines[0]!.indexOf("PERSISTED");
  for (const l of lines.slice(1, 7)) {
    assert.equal(l[at - 1], " ", l), assert.notEqual(l[at], " ", l);
  }
  assert.match(
    stdout,
    /6 checkpoint files in .*: 2 with a record, 4 with the agent's own text, 1 marked INCOMPLETE\n$/,
  );
});

test("ls --json gives each file's description", async () => {
  const home = await populated();
  const { stdout } = await cli(["ls", "--home", home, "--json"]);
  const { files } = JSON.parse(stdout);
  assert.equal(files.length, 6);
  const alpha = files.find((f: { runId: string }) => f.runId === "alpha");
  assert.equal(alpha.state, "record");
  assert.equal(alpha.record.tier, 2);
  assert.equal(alpha.incomplete, true);
  assert.equal(files.find((f: { runId: string }) => f.runId === "latin").utf8, false);
});

test("ls shows relative times from when a checkpoint was persisted", async () => {
  const home = await populated();
  const later = Date.now() + 3 * 60_000 + 5_000;
  const { stdout } = await cli(["ls", "--home", home], { now: () => later });
  assert.match(stdout, /^alpha +3m ago /m);
  const { stdout: days } = await cli(["ls", "--home", home], { now: () => later + 2 * 86_400_000 });
  assert.match(days, /^alpha +2d ago /m);
});

test("show prints one file, also one that is empty, truncated or not UTF-8", async () => {
  const home = await populated();
  const alpha = await cli(["show", "alpha", "--home", home]);
  assert.equal(alpha.code, 0);
  assert.match(
    alpha.stdout,
    /alpha\.md\ntier 2, persisted just now, [\d.]+ KiB\n\n<!-- agent-checkpoint:begin -->/,
  );
  assert.match(alpha.stdout, /INCOMPLETE: next, rerun the failing test\n$/);
  for (const run of ["empty", "trunc", "latin", "mine.md"]) {
    assert.equal((await cli(["show", run, "--home", home])).code, 0, run);
  }
  assert.match(
    (await cli(["show", "latin", "--home", home])).stdout,
    /not valid UTF-8.*\n\ncaf\uFFFD\n$/,
  );
  assert.equal(
    JSON.parse((await cli(["show", "trunc", "--home", home, "--json"])).stdout).state,
    "truncated",
  );
});

test("show of an unknown run exits 1 (not found), naming ls", async () => {
  const home = await populated();
  const { code, stderr } = await cli(["show", "nope", "--home", home]);
  assert.equal(code, 1);
  assert.match(
    stderr,
    /^agent-checkpoint: no such run "nope": no run ledger, and no checkpoint file in .* \(see agent-checkpoint ls\)\n$/,
  );
});

test("audit summarizes kinds, sources, tiers, agent text and INCOMPLETE", async () => {
  const home = await populated();
  const { code, stdout } = await cli(["audit", "--home", home]);
  assert.equal(code, 0);
  assert.match(stdout, /^runs with a record +2$/m);
  assert.match(stdout, /^ {2}by kind +tier: 2$/m);
  assert.match(stdout, /^ {2}by source +pre_llm_call: 2$/m);
  assert.match(stdout, /^ {2}by tier +tier (1|2): 1 · tier (1|2): 1$/m);
  assert.match(stdout, /^agent's own text +4 of 6$/m);
  assert.match(stdout, /^marked INCOMPLETE +1$/m);
  assert.match(
    stdout,
    /^files without a record +agent text only: 2 · (empty|truncated): 1 · (empty|truncated): 1$/m,
  );
  const json = JSON.parse((await cli(["audit", "--home", home, "--json"])).stdout);
  assert.deepEqual(json.byTier, { "1": 1, "2": 1 });
});

test("audit --since keeps only what was persisted in that window", async () => {
  const home = await populated();
  const later = Date.now() + 2 * 3600_000;
  assert.equal(
    JSON.parse(
      (await cli(["audit", "--home", home, "--json", "--since", "3h"], { now: () => later }))
        .stdout,
    ).files,
    6,
  );
  assert.equal(
    JSON.parse(
      (await cli(["audit", "--home", home, "--json", "--since", "1h"], { now: () => later }))
        .stdout,
    ).files,
    0,
  );
  assert.deepEqual([parseDuration("90s"), parseDuration("1.5h"), parseDuration("2w")], [
    90,
    5400,
    1209600,
  ]);
});

test("each command has help; unknown commands, flags and missing arguments exit 2", async () => {
  for (const command of ["", "explain", "ls", "show", "audit"]) {
    const { code, stdout } = await cli(command ? [command, "--help"] : ["--help"]);
    assert.equal(code, 0);
    assert.match(
      stdout,
      command ? new RegExp(`^Usage: agent-checkpoint ${command}`) : /^agent-checkpoint: /,
    );
  }
  const cases: Array<[string[], RegExp]> = [
    [["frob"], /unknown command "frob"/],
    [["ls", "--colour"], /unknown option --colour for ls/],
    [["show"], /show needs RUN/],
    [["explain", "--home"], /--home needs a value/],
    [["audit", "--since", "soon"], /--since takes a duration such as 30m, 12h or 7d, not "soon"/],
    [["ls", "extra"], /unexpected argument "extra"/],
  ];
  for (const [args, reason] of cases) {
    const { code, stdout, stderr } = await cli(args);
    assert.equal(code, 2, args.join(" "));
    assert.equal(stdout, "");
    assert.match(stderr, reason);
    assert.match(stderr, /^agent-checkpoint: .*\(see agent-checkpoint (audit )?--help\)\n$/);
  }
});

test("colour only on a terminal, and never with NO_COLOR set", async () => {
  const home = await populated();
  const coloured = async (io: Partial<CliIo>) =>
    (await cli(["ls", "--home", home], io)).stdout.includes("\x1b[");
  assert.equal(await coloured({}), false);
  assert.equal(await coloured({ isTTY: true }), true);
  assert.equal(await coloured({ isTTY: true, env: { NO_COLOR: "1" } }), false);
  // no-color.org: an empty NO_COLOR is as good as unset.
  assert.equal(await coloured({ isTTY: true, env: { NO_COLOR: "" } }), true);
});

test("the command runs as a program, with its exit codes", async () => {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  const program = fileURLToPath(new URL(`../../scripts/cli${ext}`, import.meta.url));
  const home = tempHome();
  const ok = await runScript(program, ["explain", "--home", home, "--json"]);
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(JSON.parse(ok.stdout).home, home);
  const bad = await runScript(program, ["frob"]);
  assert.equal(bad.code, 2);
  assert.equal(
    bad.stderr,
    'agent-checkpoint: unknown command "frob" (see agent-checkpoint --help)\n',
  );
});

test("a home that does not exist is a usage error naming it; show of an unknown run says no such run", async () => {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  const program = fileURLToPath(new URL(`../../scripts/cli${ext}`, import.meta.url));
  const missing = path.join(tempHome(), "does-not-exist");
  for (const args of [["ls"], ["audit"], ["show", "r1"], ["snapshots"], ["ls", "--json"]]) {
    const r = await runScript(program, [...args, "--home", missing]);
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stdout}`);
    assert.equal(r.stdout, "");
    assert.ok(r.stderr.includes(`the home ${missing} (--home) does not exist`), r.stderr);
    assert.ok(!fs.existsSync(missing), "a mistyped home is not made");
  }
  const viaEnv = await runScript(program, ["ls"], { env: { HERMES_HOME: missing } });
  assert.equal(viaEnv.code, 2);
  assert.match(viaEnv.stderr, /\(\$HERMES_HOME\) does not exist/);
  // A home with a ledger: an unknown run is "no such run", exit 1; a finished run with no file
  // points at its ledger record and never says a file is still to come.
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  await ac.startRun({ sessionId: "quick", caps: { turns: 50 } }).end({ status: "done" });
  await ac.close();
  const unknown = await runScript(program, ["show", "nope", "--home", home]);
  assert.equal(unknown.code, 1);
  assert.match(
    unknown.stderr,
    /^agent-checkpoint: no such run "nope": not in the run ledger, and no checkpoint file in /,
  );
  const done = await runScript(program, ["show", "quick", "--home", home]);
  assert.equal(done.code, 0, done.stderr);
  assert.match(done.stdout, /^Run quick: ended done/);
  assert.doesNotMatch(done.stdout, /no checkpoint file yet/);
  assert.match(
    done.stdout,
    /no checkpoint file: the run ended before a tier.*the ledger's record above/,
  );
});

test("explain exits 0 on a sound home whose config.yaml names no plugins.enabled list: a note about Hermes's plugin", async () => {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  const program = fileURLToPath(new URL(`../../scripts/cli${ext}`, import.meta.url));
  const home = tempHome();
  writeConfig(
    home,
    "agent:\n  max_turns: 40\nplugins:\n  entries:\n    agent-checkpoint:\n      config: { mode: notify }\n",
  );
  const r = await runScript(program, ["explain", "--home", home]);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(
    r.stdout,
    /no plugins\.enabled list naming it: .*Hermes does not load its own Python plugin; this library works without it/,
  );
  assert.match(r.stdout, /^No problems found\.$/m);
});

test("rollback --run RUN undoes a whole run, keeping hand edits; rollback diff --run shows it first", async () => {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  const program = fileURLToPath(new URL(`../../scripts/cli${ext}`, import.meta.url));
  const home = tempHome();
  const dir = fs.realpathSync(tempHome());
  const file = (name: string) => path.join(dir, name);
  fs.writeFileSync(file("a.txt"), "a, as the user left it\n");
  fs.writeFileSync(file("b.txt"), "b, as the user left it\n");
  fs.writeFileSync(file("c.txt"), "c, as the user left it\n");
  const ac = createAgentCheckpoint({
    home,
    env: { PATH: process.env.PATH },
    settings: { watchdog: false, workspace_snapshots: true },
  });
  const run = ac.startRun({ sessionId: "job", caps: { turns: 50 }, workspace: dir });
  const tool = (name: string, input: Record<string, unknown>, act: () => void) => {
    run.preLlmCall();
    run.preToolCall(name, { callId: name + JSON.stringify(input), input });
    act();
    run.postToolCall(name, { callId: name + JSON.stringify(input), ok: true });
  };
  tool("write_file", { path: "a.txt" }, () => fs.writeFileSync(file("a.txt"), "a, by the agent\n"));
  tool("bash", { command: "rm b.txt" }, () => fs.rmSync(file("b.txt")));
  tool("write_file", { path: "c.txt" }, () => fs.writeFileSync(file("c.txt"), "c, by the agent\n"));
  tool("write_file", { path: "new.txt" }, () => fs.writeFileSync(file("new.txt"), "made\n"));
  await run.end();
  await ac.close();
  fs.writeFileSync(file("c.txt"), "c, then fixed by hand\n");

  const diff = await runScript(program, ["rollback", "diff", "--run", "job", "--home", home], {
    cwd: dir,
  });
  assert.equal(diff.code, 0, diff.stderr);
  assert.match(diff.stdout, /would restore +a\.txt/);
  assert.equal(fs.readFileSync(file("a.txt"), "utf8"), "a, by the agent\n", "diff changes nothing");

  const undone = await runScript(program, ["rollback", "--run", "job", "--home", home, "--json"], {
    cwd: dir,
  });
  assert.equal(undone.code, 0, undone.stderr);
  const r = JSON.parse(undone.stdout);
  assert.deepEqual([...r.restored].sort(), ["a.txt", "b.txt"]);
  assert.deepEqual(r.removed, ["new.txt"]);
  assert.deepEqual(r.skipped.map((s: { path: string }) => s.path), ["c.txt"]);
  assert.equal(fs.readFileSync(file("a.txt"), "utf8"), "a, as the user left it\n");
  assert.equal(fs.readFileSync(file("b.txt"), "utf8"), "b, as the user left it\n");
  assert.equal(fs.readFileSync(file("c.txt"), "utf8"), "c, then fixed by hand\n");
  assert.equal(fs.existsSync(file("new.txt")), false);

  const unknown = await runScript(program, ["rollback", "--run", "other", "--home", home], {
    cwd: dir,
  });
  assert.equal(unknown.code, 1);
  assert.match(
    unknown.stderr,
    /no snapshot of run "other" in this project \(its snapshots are of job\)/,
  );
  const both = await runScript(program, ["rollback", "2", "--run", "job", "--home", home], {
    cwd: dir,
  });
  assert.equal(both.code, 2);
});

/** Writes a checkpoint file for `runId` whose record has `extra` (an end, an attempt …). */
function writeRecord(home: string, runId: string, extra: Record<string, unknown>, agent = "") {
  const dir = path.join(home, "agent-checkpoints");
  fs.mkdirSync(dir, { recursive: true });
  const record = {
    kind: "tier",
    source: "watchdog",
    runId,
    dialect: "chat",
    turnsUsed: 7,
    elapsedSeconds: 65,
    caps: { turns: { value: 10, source: "host" } },
    tier: 2,
    persistedAt: new Date().toISOString(),
    message: "checkpoint",
    tools: [],
    notes: [],
    ...extra,
  } as unknown as CheckpointRecord;
  const file = path.join(dir, checkpointFileName(runId));
  if (agent) fs.writeFileSync(file, agent);
  persistBlock(file, renderBlock(record));
  return file;
}

const ended = (status: string, summary?: string) => ({
  kind: "end",
  source: "host",
  end: { status, at: "2026-11-30T10:00:00.000Z", ...(summary ? { summary } : {}) },
});

/** A home with runs that ended each way, runs cut off, and a resumed one. */
function endings(): string {
  const home = tempHome();
  writeRecord(home, "finished", ended("done", "all tests pass"));
  writeRecord(home, "capped", ended("capped"));
  writeRecord(home, "crashed", ended("failed"));
  writeRecord(home, "stopped", ended("aborted"));
  writeRecord(home, "late", { ...ended("deadline"), kind: "deadline", source: "supervisor" });
  writeRecord(home, "cut", {});
  writeRecord(
    home,
    "again",
    { kind: "manual", source: "host", attempt: 2 },
    "INCOMPLETE: step 3\n",
  );
  writeRecord(home, "stalled", { kind: "stall", source: "pre_llm_call", attempt: 1 });
  return home;
}

test("ls tells runs that ended, with their status, from runs that were cut off", async () => {
  const home = endings();
  const { code, stdout } = await cli(["ls", "--home", home]);
  assert.equal(code, 0);
  const row = (run: string) => stdout.split("\n").find((l) => l.startsWith(`${run} `)) ?? "";
  assert.match(row("finished"), /^finished +just now +ended done +host /);
  assert.match(row("capped"), / ended capped +host /);
  assert.match(row("crashed"), / ended failed +host /);
  assert.match(row("stopped"), / ended aborted +host /);
  assert.match(row("late"), / ended deadline +supervisor /);
  assert.match(row("cut"), / tier 2 +watchdog /);
  assert.match(row("again"), / manual, attempt 2 +host +yes +INCOMPLETE /);
  assert.match(row("stalled"), / stall +pre_llm_call /);
  assert.match(
    stdout,
    /^5 runs ended, 3 runs cut off \(no end recorded: (cut|again|stalled), (cut|again|stalled), (cut|again|stalled)\)$/m,
  );

  const { files } = JSON.parse((await cli(["ls", "--home", home, "--json"])).stdout);
  const file = (run: string) => files.find((f: { runId: string }) => f.runId === run);
  assert.equal(file("finished").run, "ended");
  assert.equal(file("finished").ended, "done");
  assert.equal(file("finished").record.end.summary, "all tests pass");
  assert.equal(file("late").ended, "deadline");
  assert.equal(file("cut").run, "cut off");
  assert.equal(file("cut").ended, undefined);
  assert.equal(file("cut").cutOff, true);
  assert.equal(file("again").attempt, 2);
  assert.equal(file("cut").attempt, 1);
});

test("show heads a file with how its run ended, or that it was cut off", async () => {
  const home = endings();
  const done = await cli(["show", "finished", "--home", home]);
  assert.equal(done.code, 0);
  assert.match(
    done.stdout,
    /^Run finished: ended done at 2026-11-30T10:00:00\.000Z: all tests pass\n.*finished\.md\nended done, persisted just now, /,
  );
  const cut = await cli(["show", "again", "--home", home]);
  assert.match(
    cut.stdout,
    /^Run again, attempt 2: cut off \(its run never recorded an end\)\n.*again\.md\nmanual, attempt 2, persisted/,
  );
  assert.match(cut.stdout, /INCOMPLETE: step 3\n/);
  const json = JSON.parse((await cli(["show", "late", "--home", home, "--json"])).stdout);
  assert.equal(json.run, "ended");
  assert.equal(json.ended, "deadline");
  assert.equal(json.record.source, "supervisor");
});

test("audit counts runs that ended, by status, and runs cut off", async () => {
  const home = endings();
  const { code, stdout } = await cli(["audit", "--home", home]);
  assert.equal(code, 0);
  assert.match(stdout, /^runs with a record +8$/m);
  assert.match(
    stdout,
    /^ {2}ended +5 {2}\((done|capped|failed|aborted|deadline): 1( · (done|capped|failed|aborted|deadline): 1){4}\)$/m,
  );
  assert.match(stdout, /^ {2}cut off +3$/m);
  assert.match(stdout, /^ {2}by kind +end: 4 · (tier|manual|stall|deadline): 1/m);
  assert.match(stdout, /^ {2}by source +host: 5 · /m);
  assert.match(stdout, /pre_llm_call: 1/);
  assert.match(stdout, /supervisor: 1/);
  assert.match(stdout, /^ {2}resumed +attempt 2: 1$/m);
  const json = JSON.parse((await cli(["audit", "--home", home, "--json"])).stdout);
  assert.deepEqual(json.ended, { done: 1, capped: 1, failed: 1, aborted: 1, deadline: 1 });
  assert.equal(json.cutOff, 3);
  assert.deepEqual(json.byAttempt, { "2": 1 });
  assert.equal(json.byKind.deadline, 1);
  assert.equal(json.byKind.manual, 1);
});

test("explain prints each time crossing at its exact second", async () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint:\n  caps:\n    time_seconds: 3600\n");
  const { code, stdout } = await cli(["explain", "--home", home]);
  assert.equal(code, 0, stdout);
  assert.match(stdout, /^ {2}1 +the first model call after 30m00s +30m00s \(the watchdog/m);
  assert.match(stdout, /^ {2}2 +the first model call after 48m00s +48m00s \(the watchdog/m);
  assert.doesNotMatch(stdout, /29m59s|47m59s/);
  const e = JSON.parse((await cli(["explain", "--home", home, "--json"])).stdout);
  assert.deepEqual(e.schedule.map((t: { atSeconds: number }) => t.atSeconds), [1800, 2880]);
  // A crossing inside a second is shown at the end of that second: 0.5 × 915 s = 457.5 s.
  writeConfig(home, "agent_checkpoint:\n  caps:\n    time_seconds: 915\n");
  const odd = await cli(["explain", "--home", home]);
  assert.match(odd.stdout, /^ {2}1 +the first model call after 7m38s /m);
  assert.equal(
    JSON.parse((await cli(["explain", "--home", home, "--json"])).stdout).schedule[0].atSeconds,
    457.5,
  );
});

test("explain shows the settings generically, the supervisor's deadline and run id", async () => {
  const home = tempHome();
  const now = Date.parse("2026-11-30T12:00:00Z");
  const deadline = now + 10 * 60_000;
  const { stdout } = await cli(["explain", "--home", home], {
    now: () => now,
    env: { AGENT_CHECKPOINT_DEADLINE: String(deadline), AGENT_CHECKPOINT_RUN_ID: "sup-1" },
  });
  assert.match(
    stdout,
    /^ {2}supervisor deadline +2026-11-30T12:10:00\.000Z, in 10m00s {2}\(AGENT_CHECKPOINT_DEADLINE\)$/m,
  );
  assert.match(stdout, /^ {2}supervisor run id +sup-1 {2}\(AGENT_CHECKPOINT_RUN_ID\)$/m);
  const e = JSON.parse(
    (await cli(["explain", "--home", home, "--json"], {
      now: () => now,
      env: { AGENT_CHECKPOINT_DEADLINE: String(deadline) },
    })).stdout,
  );
  assert.equal(e.supervisor.at, deadline);
  assert.equal(e.supervisor.secondsLeft, 600);
  // Every setting of the table is listed, whichever it is.
  for (const s of e.settings) {
    assert.match(stdout, new RegExp(`^ {2}${s.key.replace(".", "\\.")} `, "m"));
  }
  const bad = await cli(["explain", "--home", home], {
    env: { AGENT_CHECKPOINT_DEADLINE: "tomorrow" },
  });
  assert.equal(bad.code, 1);
  assert.match(bad.stdout, /✗ .*AGENT_CHECKPOINT_DEADLINE.*tomorrow/);
});

test("help CMD prints a command's help; help of an unknown command is a usage error", async () => {
  for (const command of ["explain", "ls", "show", "audit"]) {
    const { code, stdout } = await cli(["help", command]);
    assert.equal(code, 0);
    assert.match(stdout, new RegExp(`^Usage: agent-checkpoint ${command}`));
    assert.equal(stdout, (await cli([command, "-h"])).stdout);
  }
  const overview = await cli(["help"]);
  assert.equal(overview.code, 0);
  for (const command of ["explain", "ls", "show", "audit"]) {
    assert.match(overview.stdout, new RegExp(`^ {2}${command} +\\S`, "m"));
  }
  assert.equal(overview.stdout, (await cli([])).stdout);
  const bad = await cli(["help", "frob"]);
  assert.equal(bad.code, 2);
  assert.equal(
    bad.stderr,
    'agent-checkpoint: unknown command "frob" (see agent-checkpoint --help)\n',
  );
  // --help wins over a usage error in the same arguments.
  assert.equal((await cli(["show", "--colour", "--help"])).code, 0);
});

test("a relative --home is taken from the command's current directory", async () => {
  const home = endings();
  const { code, stdout } = await cli(["ls", "--home", path.basename(home), "--json"], {
    cwd: path.dirname(home),
  });
  assert.equal(code, 0);
  assert.equal(JSON.parse(stdout).dir, path.join(home, "agent-checkpoints"));
  const e = await cli(["explain", "--home", path.basename(home), "--json"], {
    cwd: path.dirname(home),
  });
  assert.equal(JSON.parse(e.stdout).home, home);
});

/** Runs the ask fixture with `input` on its stdin. */
function askFixture(
  count: number,
  input: string | undefined,
  options: { keepOpen?: boolean } = {},
) {
  const [cmd, argv] = scriptCommand(fixture("cli_ask"), [String(count)]);
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(cmd, argv, { stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => stdout += d);
    child.stderr.on("data", (d) => stderr += d);
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    if (input !== undefined && options.keepOpen) child.stdin.write(input);
    else if (input !== undefined) child.stdin.end(input);
  });
}

test("ask reads one line of stdin per question, and an empty answer at its end", async () => {
  const two = await askFixture(3, "yes\nno\n");
  assert.equal(two.code, 0, two.stderr);
  assert.equal(two.stdout, 'answer 1: "yes"\nanswer 2: "no"\nanswer 3: ""\n');
  assert.match(two.stderr, /question 1\? question 2\? question 3\? /);
  // A question answered before the input ends lets the program exit.
  const one = await askFixture(1, "y\nmore\n");
  assert.equal(one.code, 0, one.stderr);
  assert.equal(one.stdout, 'answer 1: "y"\n');
  // Nor does an input that stays open keep it alive once it has its answer.
  const open = await askFixture(1, "ok\n", { keepOpen: true });
  assert.equal(open.code, 0, open.stderr);
  assert.equal(open.stdout, 'answer 1: "ok"\n');
});

test("every command of the table has its help, listed in the overview", async () => {
  const names = COMMANDS.map((c) => c.name);
  assert.deepEqual(names.slice(0, 4), ["explain", "ls", "show", "audit"]);
  assert.equal(new Set(names).size, names.length, "one entry per name");
  const overview = (await cli(["--help"])).stdout;
  for (const command of COMMANDS) {
    assert.match(
      overview,
      new RegExp(`^ {2}${command.name} +${command.summary.slice(0, 20)}`, "m"),
    );
    for (const args of [["help", command.name], [command.name, "--help"]]) {
      const { code, stdout, stderr } = await cli(args);
      assert.equal(code, 0, args.join(" "));
      assert.equal(stderr, "");
      assert.match(stdout, new RegExp(`^Usage: agent-checkpoint ${command.name}\\b`));
      assert.match(stdout, /--home DIR/, `${command.name} takes --home`);
    }
  }
});

test("ls and audit tell a run that called end() from one that never did", async () => {
  const home = tempHome();
  // The files alone (no run ledger): a run without an end is cut off.
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false, ledger: false } });
  for (const id of ["ends", "never"]) {
    const run = ac.startRun({ sessionId: id, caps: { turns: 3 } });
    run.preLlmCall();
    run.preLlmCall();
    run.preToolCall("bash");
    if (id === "ends") await run.end({ status: "capped", summary: "stopped at the cap" });
  }
  await ac.close();
  const { stdout } = await cli(["ls", "--home", home]);
  assert.match(stdout, /^ends +just now +ended capped +/m);
  assert.match(stdout, /^never +just now +tier 2 +/m);
  assert.match(stdout, /^1 run ended, 1 run cut off \(no end recorded: never\)$/m);
  const audit = JSON.parse((await cli(["audit", "--home", home, "--json"])).stdout);
  assert.deepEqual(audit.ended, { capped: 1 });
  assert.equal(audit.cutOff, 1);
  assert.match(
    (await cli(["show", "ends", "--home", home])).stdout,
    /^Run ends: ended capped at .*: stopped at the cap\n/,
  );
});

test("show finds a run by its record's run id, and never hangs on a FIFO", async (t) => {
  const home = endings();
  const dir = path.join(home, "agent-checkpoints");
  fs.renameSync(path.join(dir, "cut.md"), path.join(dir, "renamed.md"));
  const cut = await cli(["show", "cut", "--home", home]);
  assert.equal(cut.code, 0, cut.stderr);
  assert.match(cut.stdout, /^Run cut: cut off .*\n.*renamed\.md\n/);
  if (process.platform === "win32") return t.skip("no FIFOs");
  execFileSync("mkfifo", [path.join(dir, "pipe.md")]);
  const pipe = await cli(["show", "pipe", "--home", home]);
  assert.equal(pipe.code, 0, pipe.stderr);
  assert.match(pipe.stdout, /not a regular file/);
  const { files } = JSON.parse((await cli(["ls", "--home", home, "--json"])).stdout);
  assert.equal(
    files.find((f: { runId: string }) => f.runId === "pipe").state,
    "not a regular file",
  );
});

test("main hands run its arguments after --, --help included, and exits with its status", async (t) => {
  if (process.platform === "win32") return t.skip("no sh");
  const home = tempHome();
  const { code, stderr } = await cli(["run", "--home", home, "--", "sh", "-c", "exit 4", "--help"]);
  assert.equal(code, 4, stderr);
  assert.equal((await cli(["run", "--help"])).code, 0);
  const usage = await cli(["run", "--deadline", "soon", "--", "true"]);
  assert.equal(usage.code, 2);
  assert.match(
    usage.stderr,
    /^agent-checkpoint: --deadline .*"soon".*\(see agent-checkpoint (run )?--help\)\n$/,
  );
});

// ---- terminal safety, not-found, FIFOs and links, many runs, the argument parser -----------

/** What an attacker puts in a run id or a summary: clear screen, window title, clipboard write. */
const PAYLOADS = ["\x1b[2J", "\x1b]0;owned\x07", "\x1b]52;c;ZWNobyBvd25lZA==\x07"];

/** Whether `text` holds any control character but a newline. */
// deno-lint-ignore no-control-regex
const hasControl = (text: string) => /[\x00-\x09\x0b-\x1f\x7f-\x9f]/.test(text);

test("ls, show and audit print run ids, summaries, sources and agent text with control characters escaped", async () => {
  const home = tempHome();
  const runId = `evil${PAYLOADS.join("")}`;
  const summary = `done${PAYLOADS.join("")}`;
  writeRecord(home, runId, ended("done", summary));
  writeRecord(home, `cut${PAYLOADS[1]}`, {}, `notes ${PAYLOADS[2]} INCOMPLETE\n`);
  const ls = await cli(["ls", "--home", home]);
  assert.equal(ls.code, 0, ls.stderr);
  assert.equal(hasControl(ls.stdout), false, JSON.stringify(ls.stdout));
  assert.match(ls.stdout, /^evil\\x1b\[2J\\x1b\]0;owned\\x07\\x1b\]52;c;ZWNobyBvd25lZA==\\x07 /m);
  assert.match(ls.stdout, /no end recorded: cut\\x1b\]0;owned\\x07\)/);

  const show = await cli(["show", runId, "--home", home]);
  assert.equal(show.code, 0, show.stderr);
  assert.equal(hasControl(show.stdout), false, JSON.stringify(show.stdout));
  assert.match(
    show.stdout,
    /^Run evil\\x1b\[2J\\x1b\]0;owned\\x07\S+: ended done at \S+: done\\x1b\[2J\\x1b\]0;owned\\x07\\x1b\]52;c;ZWNobyBvd25lZA==\\x07\n/,
  );
  const cut = await cli(["show", `cut${PAYLOADS[1]}`, "--home", home]);
  assert.equal(hasControl(cut.stdout), false, JSON.stringify(cut.stdout));
  assert.match(cut.stdout, /\n\nnotes \\x1b\]52;c;ZWNobyBvd25lZA==\\x07 INCOMPLETE\n/);

  // Not found: the id is echoed escaped on stderr.
  const missing = await cli(["show", `nope${PAYLOADS[0]}`, "--home", home]);
  assert.equal(missing.code, 1);
  assert.equal(hasControl(missing.stderr), false, JSON.stringify(missing.stderr));
  assert.match(missing.stderr, /"nope\\x1b\[2J"/);

  // --json stays exact JSON: the values come back as they are, escapes and all.
  const { files } = JSON.parse((await cli(["ls", "--home", home, "--json"])).stdout);
  const evil = files.find((f: { runId: string }) => f.runId === runId);
  assert.ok(evil, "the run id is exact in ls --json");
  assert.equal(evil.record.end.summary, summary);
  assert.equal(
    JSON.parse((await cli(["show", runId, "--home", home, "--json"])).stdout).runId,
    runId,
  );
  // A checkpoint directory named with escapes (from config.yaml) is printed escaped too.
  const odd = `${home}/cp${PAYLOADS[1]}`;
  fs.mkdirSync(odd);
  fs.writeFileSync(path.join(odd, "notes.md"), "mine\n");
  writeConfig(home, `agent_checkpoint:\n  checkpoint_dir: ${JSON.stringify(odd)}\n`);
  for (const args of [["audit"], ["ls"], ["show", "notes"]]) {
    const out = await cli([...args, "--home", home]);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(hasControl(out.stdout), false, `${args}: ${JSON.stringify(out.stdout)}`);
    assert.ok(out.stdout.includes("/cp\\x1b]0;owned\\x07"), out.stdout);
  }
  const json = JSON.parse((await cli(["audit", "--home", home, "--json"])).stdout);
  assert.equal(json.dir, odd);
});

test("a file name with control characters is escaped in ls and show", async () => {
  const home = tempHome();
  const dir = path.join(home, "agent-checkpoints");
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "title\x1b]0;x\x07.md"), "hello\x1b[2J\n");
  const ls = await cli(["ls", "--home", home]);
  assert.equal(hasControl(ls.stdout), false, JSON.stringify(ls.stdout));
  assert.match(ls.stdout, /^title\\x1b\]0;x\\x07 +- +agent text only/m);
  const show = await cli(["show", "title\x1b]0;x\x07", "--home", home]);
  assert.equal(show.code, 0, show.stderr);
  assert.equal(hasControl(show.stdout), false, JSON.stringify(show.stdout));
  assert.match(show.stdout, /title\\x1b\]0;x\\x07\.md\n[^\n]*modified[^\n]*\n\nhello\\x1b\[2J\n$/);
});

test("show says what a FIFO or a symbolic link is, and opens neither", async (t) => {
  if (process.platform === "win32") return t.skip("no FIFOs");
  const home = tempHome();
  const dir = path.join(home, "agent-checkpoints");
  fs.mkdirSync(dir, { recursive: true });
  execFileSync("mkfifo", [path.join(dir, "pipe.md")]);
  const secret = path.join(home, "secret.txt");
  fs.writeFileSync(secret, "do not print me\n");
  fs.symlinkSync(secret, path.join(dir, "link.md"));
  const pipe = await cli(["show", "pipe", "--home", home]);
  assert.equal(pipe.code, 0, pipe.stderr);
  assert.match(pipe.stdout, /pipe\.md\na FIFO, not a regular file; not opened\n$/);
  assert.doesNotMatch(pipe.stdout, /persisted/);
  const link = await cli(["show", "link", "--home", home]);
  assert.equal(link.code, 0, link.stderr);
  assert.ok(
    link.stdout.endsWith(
      `link.md\na symbolic link to ${secret}, not a regular file; links are never followed\n`,
    ),
    link.stdout,
  );
  assert.doesNotMatch(link.stdout, /persisted|do not print me/);
});

test("no arguments prints the overview and exits 2", async () => {
  const none = await cli([]);
  assert.equal(none.code, 2);
  assert.match(none.stdout, /^agent-checkpoint: .*\n\nUsage: agent-checkpoint <command>/);
  assert.equal((await cli(["--help"])).code, 0);
  assert.equal((await cli(["help"])).code, 0);
});

test("ls names at most five cut-off runs and counts the rest", async () => {
  const home = tempHome();
  for (let i = 0; i < 40; i++) writeRecord(home, `run-${String(i).padStart(2, "0")}`, {});
  writeRecord(home, "finished", ended("done"));
  const { code, stdout } = await cli(["ls", "--home", home]);
  assert.equal(code, 0);
  const line = stdout.split("\n").find((l) => l.startsWith("1 run ended")) ?? "";
  assert.match(
    line,
    /^1 run ended, 40 runs cut off \(no end recorded: run-\d\d, run-\d\d, run-\d\d, run-\d\d, run-\d\d and 35 more\)$/,
  );
  // Five cut off: all named.
  const five = tempHome();
  for (let i = 0; i < 5; i++) writeRecord(five, `r${i}`, {});
  assert.match(
    (await cli(["ls", "--home", five])).stdout,
    /^0 runs ended, 5 runs cut off \(no end recorded: r\d, r\d, r\d, r\d, r\d\)$/m,
  );
});

test("the argument parser: = values, --, short aliases, strict options, last value wins", async () => {
  const { parseArgs, UsageError } = await import("../../cli/_args.ts");
  const spec = {
    command: "rollback",
    values: ["--project"],
    switches: ["--json", "--dry-run"],
    aliases: { "-n": "--dry-run" },
    optional: ["TARGET", "PATH"],
  };
  const p = parseArgs(["--project=a", "-n", "3", "--project", "b", "--", "-odd"], spec);
  assert.equal(p.values["--project"], "b");
  assert.ok(p.switches.has("--dry-run"));
  assert.deepEqual(p.positional, ["3", "-odd"]);
  assert.equal(p.rest, undefined);
  const r = parseArgs(["--home", "h", "--", "sh", "-c", "--help"], {
    command: "run",
    rest: true,
  });
  assert.deepEqual(r.rest, ["sh", "-c", "--help"]);
  assert.equal(r.help, false);
  assert.equal(parseArgs(["--frob", "-h"], { command: "ls" }).help, true);
  for (
    const [args, message] of [
      [["--json=yes"], "--json takes no value"],
      [["--project"], "--project needs a value"],
      [["--project="], "--project needs a value"],
      [["--project", "--json"], "--project needs a value"],
      [["-x"], "unknown option -x for rollback"],
      [["--frob"], "unknown option --frob for rollback"],
      [["a", "b", "c"], 'unexpected argument "c"'],
    ] as Array<[string[], string]>
  ) {
    assert.throws(() => parseArgs(args, spec), (e: unknown) => {
      assert.ok(e instanceof UsageError, String(e));
      assert.equal((e as Error).message, message);
      return true;
    });
  }
});

test("--home is taken from the command's current directory by every command", async () => {
  const home = tempHome();
  const cwd = path.dirname(home);
  const rel = path.basename(home);
  const snapshots = await cli(["snapshots", "--home", rel, "--json"], { cwd });
  assert.equal(snapshots.code, 0, snapshots.stderr);
  assert.equal(JSON.stringify(JSON.parse(snapshots.stdout)).includes(home), true, snapshots.stdout);
});

test("each helper once: isMapping, the non-empty text test, and --home's resolution", async (t) => {
  const { underDeno } = await import("../_helpers.ts");
  if (!underDeno) return t.skip("reads the TypeScript sources");
  const root = fileURLToPath(new URL("../../", import.meta.url));
  const sources = ["", "cli", "supervise", "workspace", "adapters"].flatMap((dir) =>
    fs.readdirSync(path.join(root, dir)).filter((f) => f.endsWith(".ts")).map((f) =>
      fs.readFileSync(path.join(root, dir, f), "utf8")
    )
  ).join("\n");
  const count = (re: RegExp) => sources.match(re)?.length ?? 0;
  assert.equal(count(/\bconst isMapping\b|\bfunction isMapping\b/g), 1);
  assert.equal(count(/typeof v === "string" && v !== "" \? v : undefined/g), 1);
  const cliSources = fs.readdirSync(path.join(root, "cli")).map((f) =>
    fs.readFileSync(path.join(root, "cli", f), "utf8")
  ).join("\n");
  assert.equal(/resolveHome\(parsed\.values/.test(cliSources), false, "--home via homeOption");
});

test("ls shows a retried run's attempt with its retries, in text and --json", async () => {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  const program = fileURLToPath(new URL(`../../scripts/cli${ext}`, import.meta.url));
  const home = tempHome();
  const log = path.join(home, "events.jsonl");
  // What steers a supervisor of its own stays out: this run is the command line's alone.
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !/^(AGENT_CHECKPOINT_|HERMES_)/.test(k)) env[k] = v;
  }
  // A command that SIGKILLs itself on its first two attempts, then finishes: three attempts.
  const worker = scriptCommand(fixture("retried_worker"), [home, log, "2", "1"]).flat();
  const [cmd, argv] = scriptCommand(fixture("supervise_cli"), [
    ...["--retries", "3", "--retry-delay", "0.1", "--deadline", "120", "--run-id", "redriven"],
    ...["--home", home, "--", ...worker],
  ]);
  const code = await new Promise<number | null>((resolve) => {
    const child = spawn(cmd, argv, { env, stdio: "ignore" });
    const timer = setTimeout(() => child.kill("SIGKILL"), 180_000);
    child.on("close", (c) => {
      clearTimeout(timer);
      resolve(c);
    });
  });
  assert.equal(code, 0);
  // A run never retried beside it: its one attempt, no retries.
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  await ac.startRun({ sessionId: "once", caps: { turns: 5 } }).end({ status: "done" });
  await ac.close();
  const text = await runScript(program, ["ls", "--home", home]);
  assert.equal(text.code, 0, text.stderr);
  const row = (id: string) => text.stdout.split("\n").find((l) => l.startsWith(`${id} `)) ?? "";
  assert.match(row("redriven"), / 3 \(2 retries\) /, text.stdout);
  assert.match(row("once"), / 1 +\d/, text.stdout);
  const json = await runScript(program, ["ls", "--home", home, "--json"]);
  assert.equal(json.code, 0, json.stderr);
  const runs = JSON.parse(json.stdout).runs as {
    runId: string;
    attempt: number;
    attemptCount: number;
    retries: number;
  }[];
  const pick = (id: string) => runs.find((r) => r.runId === id);
  assert.deepEqual(
    [pick("redriven")?.attempt, pick("redriven")?.attemptCount, pick("redriven")?.retries],
    [3, 3, 2],
  );
  assert.deepEqual([pick("once")?.attemptCount, pick("once")?.retries], [1, 0]);
});
