import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { createAgentCheckpoint } from "../mod.ts";
import { type CliIo, main, parseDuration } from "../cli.ts";
import { explain } from "../explain.ts";
import { Buffer } from "node:buffer";
import { runScript, tempHome, writeConfig } from "./_helpers.ts";

/** Run the command line; returns exit code, stdout and stderr. */
function cli(args: string[], io: Partial<CliIo> = {}) {
  let stdout = "";
  let stderr = "";
  const code = main(args, {
    stdout: (t) => void (stdout += t),
    stderr: (t) => void (stderr += t),
    env: {},
    isTTY: false,
    now: () => Date.now(),
    ...io,
  });
  return { code, stdout, stderr };
}

/** A home with two persisted runs and every kind of odd file. */
async function populated(): Promise<string> {
  const home = tempHome();
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
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

test("explain shows every setting with its source, the caps, the schedule and the runtime", () => {
  const home = tempHome();
  writeConfig(home, "agent:\n  max_turns: 60\nagent_checkpoint:\n  stall_window_seconds: 300\n");
  const { code, stdout, stderr } = cli(["explain", "--home", home, "--task", "t-9"], {
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
      /^ {2}time cap +15m30s {2}\(TERMINAL_TIMEOUT\)$/m,
      /^ {2}1 +model call 31 \(30 turns used\), or the first model call after 7m44s +tool calls after model call 30, or 7m44s/m,
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

test("explain --json gives the same as one JSON object", () => {
  const home = tempHome();
  const { code, stdout } = cli(["explain", "--home", home, "--session", "s1", "--json"]);
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

test("explain exits 1 when settings fell back to defaults", () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint:\n  mode: loud\n");
  const { code, stdout } = cli(["explain", "--home", home]);
  assert.equal(code, 1);
  assert.match(stdout, /1 problem:\n {2}✗ settings: setting mode = "loud"/);
});

test("explain exits 1 when the checkpoint directory cannot be written", () => {
  const home = tempHome();
  const file = path.join(home, "a-file");
  fs.writeFileSync(file, "");
  const { code, stdout } = cli(["explain", "--home", home], {
    env: { DIR: file },
  });
  assert.equal(code, 0, "the default directory is fine");
  writeConfig(home, "agent_checkpoint:\n  checkpoint_dir: $DIR/cp\n");
  const bad = cli(["explain", "--home", home, "--json"], { env: { DIR: file } });
  assert.equal(bad.code, 1, stdout);
  assert.match(
    JSON.parse(bad.stdout).problems[0],
    /checkpoint directory cannot be written: .*ENOTDIR/,
  );
});

test("explain exits 1 when a kanban board cannot be read", () => {
  const home = tempHome();
  const board = path.join(home, "kanban.db");
  fs.writeFileSync(board, "not a database at all, just text that is long enough to be a header");
  const { code, stdout } = cli(["explain", "--home", home, "--task", "t"], {
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
  const { code, stdout } = cli(["ls", "--home", home]);
  assert.equal(code, 0);
  const lines = stdout.split("\n");
  assert.match(lines[0]!, /^RUN +PERSISTED +KIND +SOURCE +AGENT TEXT +MARKED +SIZE$/);
  const row = (run: string) => lines.find((l) => l.startsWith(`${run} `)) ?? "";
  assert.match(row("alpha"), /^alpha +just now +tier 2 +pre_tool_call +yes +INCOMPLETE +\d/);
  assert.match(row("beta"), /^beta +just now +tier 1 +pre_tool_call +- +- +\d/);
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
  const { stdout } = cli(["ls", "--home", home, "--json"]);
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
  const { stdout } = cli(["ls", "--home", home], { now: () => later });
  assert.match(stdout, /^alpha +3m ago /m);
  const { stdout: days } = cli(["ls", "--home", home], { now: () => later + 2 * 86_400_000 });
  assert.match(days, /^alpha +2d ago /m);
});

test("show prints one file, also one that is empty, truncated or not UTF-8", async () => {
  const home = await populated();
  const alpha = cli(["show", "alpha", "--home", home]);
  assert.equal(alpha.code, 0);
  assert.match(
    alpha.stdout,
    /alpha\.md\ntier 2, persisted just now, [\d.]+ KiB\n\n<!-- agent-checkpoint:begin -->/,
  );
  assert.match(alpha.stdout, /INCOMPLETE: next, rerun the failing test\n$/);
  for (const run of ["empty", "trunc", "latin", "mine.md"]) {
    assert.equal(cli(["show", run, "--home", home]).code, 0, run);
  }
  assert.match(cli(["show", "latin", "--home", home]).stdout, /not valid UTF-8.*\n\ncaf\uFFFD\n$/);
  assert.equal(
    JSON.parse(cli(["show", "trunc", "--home", home, "--json"]).stdout).state,
    "truncated",
  );
});

test("show of an unknown run is a usage error naming ls", async () => {
  const home = await populated();
  const { code, stderr } = cli(["show", "nope", "--home", home]);
  assert.equal(code, 2);
  assert.match(
    stderr,
    /^agent-checkpoint: no checkpoint file for run "nope" in .* \(see agent-checkpoint ls\)\n$/,
  );
});

test("audit summarizes kinds, sources, tiers, agent text and INCOMPLETE", async () => {
  const home = await populated();
  const { code, stdout } = cli(["audit", "--home", home]);
  assert.equal(code, 0);
  assert.match(stdout, /^runs with a record +2$/m);
  assert.match(stdout, /^ {2}by kind +tier: 2$/m);
  assert.match(stdout, /^ {2}by source +pre_tool_call: 2$/m);
  assert.match(stdout, /^ {2}by tier +tier (1|2): 1 · tier (1|2): 1$/m);
  assert.match(stdout, /^agent's own text +4 of 6$/m);
  assert.match(stdout, /^marked INCOMPLETE +1$/m);
  assert.match(
    stdout,
    /^files without a record +agent text only: 2 · (empty|truncated): 1 · (empty|truncated): 1$/m,
  );
  const json = JSON.parse(cli(["audit", "--home", home, "--json"]).stdout);
  assert.deepEqual(json.byTier, { "1": 1, "2": 1 });
});

test("audit --since keeps only what was persisted in that window", async () => {
  const home = await populated();
  const later = Date.now() + 2 * 3600_000;
  assert.equal(
    JSON.parse(
      cli(["audit", "--home", home, "--json", "--since", "3h"], { now: () => later }).stdout,
    ).files,
    6,
  );
  assert.equal(
    JSON.parse(
      cli(["audit", "--home", home, "--json", "--since", "1h"], { now: () => later }).stdout,
    ).files,
    0,
  );
  assert.deepEqual([parseDuration("90s"), parseDuration("1.5h"), parseDuration("2w")], [
    90,
    5400,
    1209600,
  ]);
});

test("each command has help; unknown commands, flags and missing arguments exit 2", () => {
  for (const command of ["", "explain", "ls", "show", "audit"]) {
    const { code, stdout } = cli(command ? [command, "--help"] : ["--help"]);
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
    const { code, stdout, stderr } = cli(args);
    assert.equal(code, 2, args.join(" "));
    assert.equal(stdout, "");
    assert.match(stderr, reason);
    assert.match(stderr, /^agent-checkpoint: .*\(see agent-checkpoint (audit )?--help\)\n$/);
  }
});

test("colour only on a terminal, and never with NO_COLOR set", async () => {
  const home = await populated();
  const coloured = (io: Partial<CliIo>) => cli(["ls", "--home", home], io).stdout.includes("\x1b[");
  assert.equal(coloured({}), false);
  assert.equal(coloured({ isTTY: true }), true);
  assert.equal(coloured({ isTTY: true, env: { NO_COLOR: "1" } }), false);
  // no-color.org: an empty NO_COLOR is as good as unset.
  assert.equal(coloured({ isTTY: true, env: { NO_COLOR: "" } }), true);
});

test("the command runs as a program, with its exit codes", async () => {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  const program = new URL(`../scripts/cli${ext}`, import.meta.url).pathname;
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
