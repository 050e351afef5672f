/** The supervisor: `agent-checkpoint run [--budget S] [--deadline S] [--grace S] [--run-id ID] -- COMMAND`. */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { supervise, type SuperviseOptions } from "../../supervise/mod.ts";
import { runCommand } from "../../cli/_run.ts";
import { OutputTail } from "../../supervise/_tail.ts";
import { processAlive } from "../../supervise/_group.ts";
import { memoryIo } from "../../cli/_io.ts";
import { UsageError } from "../../cli/_args.ts";
import { type CheckpointRecord, MAX_ATTEMPTS, parseRecord, renderBlock } from "../../_record.ts";
import { fixture, scriptCommand, tempHome, waitFor, writeConfig } from "../_helpers.ts";

const decoder = new TextDecoder();

/** This process's environment without what would steer the supervisor (a test run under one). */
const cleanEnv = (): Record<string, string | undefined> => {
  const env: Record<string, string | undefined> = { ...process.env };
  for (
    const name of [
      "AGENT_CHECKPOINT_RUN_ID",
      "AGENT_CHECKPOINT_DEADLINE",
      "HERMES_KANBAN_TASK",
      "HERMES_HOME",
    ]
  ) {
    delete env[name];
  }
  return env;
};

/** Run `command` under the supervisor in this process, collecting what it prints. */
async function supervised(
  command: string[],
  options: Omit<SuperviseOptions, "command"> = {},
) {
  let out = "";
  let err = "";
  const notices: string[] = [];
  const result = await supervise({
    command,
    stdin: "ignore",
    forwardSignals: false,
    home: options.home ?? tempHome(),
    env: cleanEnv(),
    stdout: { write: (c) => (out += decoder.decode(c), true) },
    stderr: { write: (c) => (err += decoder.decode(c), true) },
    notice: (line) => notices.push(line),
    ...options,
  });
  return { result, out, err, notices };
}

const recordOf = (file: string): CheckpointRecord => {
  const record = parseRecord(fs.readFileSync(file));
  assert.ok(record, `a record in ${file}`);
  return record;
};

const sh = (script: string) => ["sh", "-c", script];

test("run exits with the command's status and gives it a run id and a deadline", async () => {
  const before = Date.now();
  const { result, out } = await supervised(
    sh('echo "id=$AGENT_CHECKPOINT_RUN_ID at=$AGENT_CHECKPOINT_DEADLINE"; exit 3'),
    { deadlineSeconds: 60, budgetSeconds: 30, runId: "status-run" },
  );
  const after = Date.now();
  assert.equal(result.exitCode, 3);
  assert.equal(result.outcome, "exited");
  const m = /^id=status-run at=(\d+)\n$/.exec(out);
  assert.ok(m, out);
  // The child plans for the budget, not the deadline.
  const at = Number(m[1]);
  assert.ok(at >= before + 30_000 - 1 && at <= after + 30_000 + 1, `${at}`);
  // A failed command leaves a record of how it ended.
  const record = recordOf(result.checkpointFile);
  assert.equal(path.basename(result.checkpointFile), "status-run.md");
  assert.equal(record.kind, "end");
  assert.equal(record.source, "supervisor");
  assert.equal(record.end?.status, "failed");
  assert.deepEqual(record.command?.argv, [
    "sh",
    "-c",
    'echo "id=$AGENT_CHECKPOINT_RUN_ID at=$AGENT_CHECKPOINT_DEADLINE"; exit 3',
  ]);
  assert.equal(record.command?.outcome, "exited");
  assert.equal(record.command?.exitCode, 3);
  assert.deepEqual(record.command?.tail, [out.trim()]);
});

test("a budget alone nudges and never stops; without either the command gets no deadline", async () => {
  const print = sh('echo "at=$AGENT_CHECKPOINT_DEADLINE"');
  const before = Date.now();
  const budget = await supervised(print, { budgetSeconds: 0.5 });
  assert.equal(budget.result.exitCode, 0);
  assert.equal(budget.result.deadlineAt, undefined);
  const at = Number(/^at=(\d+)$/m.exec(budget.out)?.[1]);
  assert.ok(at >= before + 500 && at <= Date.now() + 500, budget.out);
  const neither = await supervised(print);
  assert.equal(neither.out, "at=\n");
  // Past its budget, a command that does not use the library runs on.
  const slow = await supervised(sh("sleep 1; echo finished"), { budgetSeconds: 0.2 });
  assert.equal(slow.result.exitCode, 0);
  assert.equal(slow.out, "finished\n");
});

test("the run id: --run-id, else the environment's, else a fresh one; a kanban task id wins", async () => {
  const home = tempHome();
  const print = sh('echo "$AGENT_CHECKPOINT_RUN_ID"; exit 1');
  const given = await supervised(print, {
    home,
    env: { ...cleanEnv(), AGENT_CHECKPOINT_RUN_ID: "ci-7" },
  });
  assert.equal(given.out, "ci-7\n");
  assert.equal(path.basename(given.result.checkpointFile), "ci-7.md");
  const fresh = await supervised(print, {
    home,
    env: { ...cleanEnv(), AGENT_CHECKPOINT_RUN_ID: "" },
  });
  assert.match(fresh.out, /^run-\d{8}T\d{6}Z-[0-9a-f]{6}\n$/);
  const kanban = await supervised(print, {
    home,
    runId: "mine",
    env: { ...cleanEnv(), HERMES_KANBAN_TASK: "t-42" },
  });
  assert.equal(kanban.out, "t-42\n");
  assert.equal(path.basename(kanban.result.checkpointFile), "t-42.md");
  assert.equal(recordOf(kanban.result.checkpointFile).dialect, "kanban");
  assert.match(kanban.notices.join("\n"), /run id is the task id/);
});

test("a clean exit leaves no file, and completes one that is there", async () => {
  const home = tempHome();
  const clean = await supervised(sh("echo fine"), { home, deadlineSeconds: 60, runId: "clean" });
  assert.equal(clean.result.exitCode, 0);
  assert.equal(clean.result.written, false);
  assert.equal(fs.existsSync(clean.result.checkpointFile), false);

  const file = path.join(home, "agent-checkpoints", "notes.md");
  const again = await supervised(
    sh('mkdir -p "$(dirname "$F")" && printf "# My notes\\n\\nall done\\n" > "$F"'),
    { home, deadlineSeconds: 60, runId: "notes", env: { ...cleanEnv(), F: file } },
  );
  assert.equal(again.result.exitCode, 0);
  assert.equal(again.result.written, true);
  const text = fs.readFileSync(file, "utf8");
  assert.ok(text.startsWith("# My notes\n\nall done\n"), text);
  assert.equal(recordOf(file).end?.status, "done");
});

test("at the deadline the whole process group ends, no grandchild survives, and run exits 124", async () => {
  const home = tempHome();
  const pidFile = path.join(home, "grandchild.pid");
  const { result, notices } = await supervised(
    sh(`sleep 60 & echo $! > "${pidFile}"; echo ready; wait`),
    { home, deadlineSeconds: 1.5, graceSeconds: 5, runId: "cut-off" },
  );
  assert.equal(result.exitCode, 124);
  assert.equal(result.outcome, "deadline");
  assert.equal(result.signal, "SIGTERM");
  assert.equal(result.killed, false);
  const grandchild = Number(fs.readFileSync(pidFile, "utf8"));
  assert.ok(grandchild > 0);
  assert.ok(await waitFor(() => !processAlive(grandchild), 5000), "the grandchild is gone");
  const record = recordOf(result.checkpointFile);
  assert.equal(record.kind, "deadline");
  assert.equal(record.source, "supervisor");
  assert.equal(record.end?.status, "deadline");
  assert.equal(record.command?.outcome, "deadline");
  assert.equal(record.command?.signal, "SIGTERM");
  assert.deepEqual(record.command?.tail, ["ready"]);
  assert.ok(record.elapsedSeconds >= 1.5, `${record.elapsedSeconds}`);
  assert.match(notices.join("\n"), /deadline of 1s reached/);
});

test("what a command leaves running in its group is ended when it exits", async () => {
  const home = tempHome();
  const pidFile = path.join(home, "left.pid");
  const { result } = await supervised(sh(`sleep 60 & echo $! > "${pidFile}"; exit 0`), {
    home,
    deadlineSeconds: 60,
    graceSeconds: 5,
  });
  assert.equal(result.exitCode, 0);
  assert.equal(result.outcome, "exited");
  const left = Number(fs.readFileSync(pidFile, "utf8"));
  assert.ok(await waitFor(() => !processAlive(left), 5000), "the background process is gone");
});

test("a command that ignores SIGTERM is killed after the grace", async () => {
  const { result } = await supervised(
    sh("trap '' TERM; echo ready; sleep 30; echo not reached"),
    { deadlineSeconds: 1, graceSeconds: 1, runId: "stubborn" },
  );
  assert.equal(result.exitCode, 124);
  assert.equal(result.killed, true);
  assert.equal(result.signal, "SIGKILL");
  const record = recordOf(result.checkpointFile);
  assert.equal(record.command?.signal, "SIGKILL");
  assert.deepEqual(record.command?.tail, ["ready"]);
  assert.match(record.message, /SIGKILL after the 1s grace/);
});

test("a command ended by a signal exits 128 + its number", async () => {
  const term = await supervised(sh("kill -TERM $$"), { deadlineSeconds: 60 });
  assert.equal(term.result.exitCode, 143);
  assert.equal(term.result.outcome, "signaled");
  const record = recordOf(term.result.checkpointFile);
  assert.equal(record.command?.signal, "SIGTERM");
  assert.equal(record.end?.status, "failed");
  const kill = await supervised(sh("kill -KILL $$"));
  assert.equal(kill.result.exitCode, 137);
});

test("the agent's text and a library's figures in the file are kept at the deadline", async () => {
  const home = tempHome();
  const dir = path.join(home, "agent-checkpoints");
  fs.mkdirSync(dir);
  // What a library inside the command would have persisted mid-run.
  const libraryBlock = renderBlock({
    kind: "tier",
    source: "watchdog",
    runId: "kept",
    dialect: "chat",
    turnsUsed: 7,
    elapsedSeconds: 1,
    caps: { time: { value: 2, source: "supervisor" } },
    tier: 2,
    persistedAt: new Date().toISOString(),
    message: "Wrap up.",
    tools: [{ tool: "bash", callId: "c1", status: "ok", startedAt: 0.5, durationMs: 3 }],
    notes: ["found the failing test"],
  });
  const blockFile = path.join(home, "block.md");
  fs.writeFileSync(blockFile, libraryBlock + "\n");
  const file = path.join(dir, "kept.md");
  const { result } = await supervised(
    sh(
      `printf '# Agent notes\\n\\nstep 3 of 5\\n\\n' > "${file}"; cat "${blockFile}" >> "${file}"; ` +
        `printf '\\nmore notes after the block\\n' >> "${file}"; echo ready; sleep 30`,
    ),
    { home, deadlineSeconds: 1.5, graceSeconds: 2, runId: "kept" },
  );
  assert.equal(result.exitCode, 124);
  const text = fs.readFileSync(file, "utf8");
  assert.ok(text.startsWith("# Agent notes\n\nstep 3 of 5\n\n"), text);
  assert.ok(text.endsWith("\nmore notes after the block\n"), text);
  const record = recordOf(file);
  assert.equal(record.kind, "deadline");
  assert.equal(record.source, "supervisor");
  assert.equal(record.turnsUsed, 7);
  assert.equal(record.tier, 2);
  assert.deepEqual(record.notes, ["found the failing test"]);
  assert.equal(record.tools[0]?.callId, "c1");
  assert.equal(record.command?.outcome, "deadline");
});

test("a run after a cut-off one is its next attempt", async () => {
  const home = tempHome();
  const first = await supervised(sh("sleep 30"), {
    home,
    deadlineSeconds: 1,
    graceSeconds: 1,
    runId: "retried",
  });
  assert.equal(first.result.exitCode, 124);
  const second = await supervised(sh("exit 0"), { home, deadlineSeconds: 60, runId: "retried" });
  const record = recordOf(second.result.checkpointFile);
  assert.equal(record.end?.status, "done");
  assert.equal(record.attempt, 2);
  assert.equal(record.attempts?.length, 1);
  assert.match(record.attempts?.[0] ?? "", /attempt 1 ended deadline/);
});

test("a command that cannot start exits 127 (126 when not executable) with a record", async () => {
  const home = tempHome();
  const missing = await supervised(["/nonexistent/agent", "--task", "x"], {
    home,
    deadlineSeconds: 5,
    runId: "missing",
  });
  assert.equal(missing.result.exitCode, 127);
  assert.equal(missing.result.outcome, "not started");
  const record = recordOf(missing.result.checkpointFile);
  assert.equal(record.command?.outcome, "not started");
  assert.deepEqual(record.command?.argv, ["/nonexistent/agent", "--task", "x"]);
  assert.equal(record.end?.status, "failed");
  assert.match(record.message, /could not start/);

  const notExecutable = path.join(home, "agent.txt");
  fs.writeFileSync(notExecutable, "not a program\n", { mode: 0o644 });
  const denied = await supervised([notExecutable], { home });
  assert.equal(denied.result.exitCode, 126);
});

test("the output tail is the last lines, bounded, and the output passes through whole", async () => {
  const { result, out } = await supervised(
    sh("i=1; while [ $i -le 500 ]; do echo line $i; i=$((i+1)); done; printf 'no newline'"),
    { tailLines: 5 },
  );
  assert.equal(result.exitCode, 0);
  assert.equal(out.split("\n").length, 501);
  assert.deepEqual(result.tail, ["line 497", "line 498", "line 499", "line 500", "no newline"]);
});

test("OutputTail keeps what a terminal would show, bounded", () => {
  const tail = new OutputTail(3, 10);
  const bytes = new TextEncoder().encode("\x1b[31mred\x1b[0m\nprogress 10%\rprogress 99%\n");
  tail.push("out", bytes.subarray(0, 5));
  tail.push("out", bytes.subarray(5));
  tail.push("err", new TextEncoder().encode("é".repeat(30) + "\nhalf"));
  assert.deepEqual(tail.lines(), ["…gress 99%", "…" + "é".repeat(9), "half"]);
  tail.end("err");
  assert.deepEqual(tail.lines(), ["…gress 99%", "…" + "é".repeat(9), "half"]);
});

test("OutputTail keeps the last lines of a chunk with many, whatever came before", () => {
  const tail = new OutputTail(3);
  const enc = (t: string) => new TextEncoder().encode(t);
  tail.push("out", enc("x\ny\nan unfinished "));
  tail.push("out", enc("line\n1\n2\nü3\n4\n"));
  assert.deepEqual(tail.lines(), ["2", "ü3", "4"]);
  tail.push("out", enc(Array.from({ length: 1000 }, (_, i) => `line ${i}`).join("\n")));
  assert.deepEqual(tail.lines(), ["line 997", "line 998", "line 999"]);
  tail.end("out");
  assert.deepEqual(tail.lines(), ["line 997", "line 998", "line 999"]);
});

test("bad input is a usage error, with a one-line reason", async () => {
  const { io } = memoryIo();
  const bad: [string[], RegExp][] = [
    [["--deadline", "0", "--", "true"], /--deadline/],
    [["--deadline", "-5", "--", "true"], /--deadline/],
    [["--deadline", "NaN", "--", "true"], /--deadline/],
    [["--budget", "true", "--", "true"], /--budget/],
    [["--grace", "-1", "--deadline", "5", "--", "true"], /--grace/],
    [["--deadline", "900", "node", "agent.js"], /needs --/],
    [["--deadline", "900"], /needs --/],
    [["--deadline", "900", "--"], /needs a command/],
    [["--budget", "901", "--deadline", "900", "--", "true"], /past --deadline/],
  ];
  for (const [args, reason] of bad) {
    await assert.rejects(runCommand.run(args, io), (e: Error) => {
      assert.ok(e instanceof UsageError, `${args.join(" ")}: ${e}`);
      assert.match(e.message, reason);
      assert.doesNotMatch(e.message, /\n/);
      return true;
    });
  }
});

/** The `run` command as a program, as the npm bin runs it. */
function runCli(args: string[], env: Record<string, string> = {}) {
  const [cmd, argv] = scriptCommand(fixture("supervise_cli"), args);
  const child = spawn(cmd, argv, {
    env: { ...cleanEnv(), ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => stdout += d);
  child.stderr.on("data", (d) => stderr += d);
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const done = new Promise<number | null>((resolve) =>
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve(code);
    })
  );
  return { child, done, stdout: () => stdout, stderr: () => stderr };
}

test("the program exits 2 on bad input and 124 at the deadline", async () => {
  const home = tempHome();
  const bad = runCli(["--deadline", "0", "--", "true"]);
  bad.child.stdin.end();
  assert.equal(await bad.done, 2);
  assert.match(
    bad.stderr(),
    /^agent-checkpoint: --deadline .*"0".* \(see agent-checkpoint run --help\)\n$/,
  );

  const cut = runCli([
    "--deadline",
    "1",
    "--grace",
    "1",
    "--home",
    home,
    "--run-id",
    "cli",
    "--",
    "sleep",
    "30",
  ]);
  cut.child.stdin.end();
  assert.equal(await cut.done, 124);
  assert.match(cut.stderr(), /deadline of 1s reached/);
  assert.equal(recordOf(path.join(home, "agent-checkpoints", "cli.md")).kind, "deadline");
});

test("the program passes stdin through and forwards SIGINT and SIGTERM to the group", async () => {
  const cat = runCli(["--deadline", "30", "--", "cat"]);
  cat.child.stdin.end("hello through\n");
  assert.equal(await cat.done, 0);
  assert.equal(cat.stdout(), "hello through\n");

  const home = tempHome();
  const trapped = runCli([
    "--deadline",
    "30",
    "--home",
    home,
    "--run-id",
    "interrupted",
    "--",
    ...sh("trap 'echo got INT; exit 5' INT; echo ready; while :; do sleep 0.1; done"),
  ]);
  trapped.child.stdin.end();
  assert.ok(await waitFor(() => trapped.stdout().includes("ready"), 30_000), trapped.stderr());
  // process.kill, not child.kill: Deno's ChildProcess then reports the signal, not the status.
  process.kill(trapped.child.pid!, "SIGINT");
  assert.equal(await trapped.done, 5);
  assert.match(trapped.stdout(), /got INT/);
  const record = recordOf(path.join(home, "agent-checkpoints", "interrupted.md"));
  assert.equal(record.command?.exitCode, 5);

  const plain = runCli(["--deadline", "30", "--home", home, "--", ...sh("echo ready; sleep 30")]);
  plain.child.stdin.end();
  assert.ok(await waitFor(() => plain.stdout().includes("ready"), 30_000), plain.stderr());
  process.kill(plain.child.pid!, "SIGTERM");
  assert.equal(await plain.done, 143);
});

test("a command using the library gets the supervisor's time cap; its tier 2 lands before the kill", async () => {
  const home = tempHome();
  writeConfig(home, "agent_checkpoint:\n  watchdog_poll_seconds: 0.05\n");
  const { result, out, err } = await supervised(
    scriptCommand(fixture("supervise_library"), [home]).flat(),
    { home, deadlineSeconds: 6, graceSeconds: 2, runId: "with-library" },
  );
  assert.equal(result.exitCode, 124, err);
  assert.match(out, /^run with-library time cap [\d.]+ from supervisor$/m);
  const tier2 = out.indexOf("checkpoint kind=tier tier=2");
  assert.ok(tier2 !== -1, out);
  const record = recordOf(result.checkpointFile);
  assert.equal(record.kind, "deadline");
  assert.equal(record.source, "supervisor");
  assert.equal(record.runId, "with-library");
  assert.deepEqual(record.notes, ["halfway through the report"]);
  assert.ok(record.turnsUsed >= 1);
  assert.equal(record.caps.time?.source, "supervisor");
  assert.ok(record.tools.some((t) => t.tool === "bash"));
});

test("when the reader of the output goes away, the command gets its broken pipe", async () => {
  const yes = runCli(["--deadline", "30", "--", "yes"]);
  yes.child.stdin.end();
  yes.child.stdout.once("data", () => yes.child.stdout.destroy());
  // Long before the deadline: 128 + SIGPIPE where the runtime's stdio is a pipe
  // (Deno), an error exit where it is a socket pair (Node: "connection reset").
  const code = await yes.done;
  assert.ok(code !== null && code !== 0 && code !== 124, `exit ${code}`);
});

test("supervise() rejects a bad command or limit before starting anything", async () => {
  await assert.rejects(supervise({ command: [] }), TypeError);
  await assert.rejects(supervise({ command: ["true"], deadlineSeconds: 0 }), RangeError);
  await assert.rejects(supervise({ command: ["true"], deadlineSeconds: NaN }), RangeError);
  await assert.rejects(supervise({ command: ["true"], budgetSeconds: -1 }), RangeError);
  await assert.rejects(supervise({ command: ["true"], graceSeconds: -1 }), RangeError);
  await assert.rejects(
    supervise({ command: ["true"], budgetSeconds: 10, deadlineSeconds: 5 }),
    /budgetSeconds 10 is past deadlineSeconds 5/,
  );
});

test("a grace past 24.8 days is honoured: no SIGKILL, and the record and notice give it whole", async () => {
  const home = tempHome();
  const file = path.join(home, "agent-checkpoints", "long-grace.md");
  // At SIGTERM the command waits until the early deadline record is on disk (naming
  // the grace) and exits 7: a SIGKILL fired at once instead would cut that wait off.
  const cli = runCli([
    "--deadline",
    "1",
    "--grace",
    "30d",
    "--home",
    home,
    "--run-id",
    "long-grace",
    "--",
    ...sh(
      `trap 'i=0; while [ $i -lt 400 ] && ! grep -q "SIGKILL after 720h00m" "${file}"; do ` +
        `sleep 0.05; i=$((i+1)); done; echo "got TERM after $i"; exit 7' TERM; ` +
        "echo ready; while :; do sleep 0.05; done",
    ),
  ]);
  cli.child.stdin.end();
  assert.equal(await cli.done, 124, cli.stderr());
  assert.match(cli.stderr(), /SIGKILL in 720h00m/);
  assert.match(cli.stdout(), /got TERM after \d+\n/);
  assert.doesNotMatch(cli.stdout(), /after 400\n/, "the early record names the 30-day grace");
  const record = recordOf(file);
  assert.equal(record.kind, "deadline");
  assert.equal(record.command?.exitCode, 7);
  assert.equal(record.command?.signal, undefined);
  assert.doesNotMatch(record.message, /SIGKILL/);
});

test("a deadline past 24.8 days does not stop the command", async () => {
  const { result } = await supervised(sh("sleep 0.2; echo finished"), {
    deadlineSeconds: 30 * 86400,
    graceSeconds: 30 * 86400,
  });
  assert.equal(result.outcome, "exited");
  assert.equal(result.exitCode, 0);
});

test("a retried run id keeps the last five attempts, as the library does", async () => {
  const home = tempHome();
  let result: Awaited<ReturnType<typeof supervised>>["result"] | undefined;
  for (let i = 0; i < 25; i++) {
    ({ result } = await supervised(sh("exit 1"), { home, runId: "again" }));
  }
  const record = recordOf(result!.checkpointFile);
  assert.equal(record.attempt, 25);
  assert.equal(record.attempts?.length, MAX_ATTEMPTS);
  assert.match(record.attempts?.[0] ?? "", /^attempt 20 /);
  assert.match(record.attempts?.at(-1) ?? "", /^attempt 24 /);
});

const timeouts = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;

test("the supervisor leaves no timer behind, after a quick command or at the deadline", async () => {
  const before = timeouts();
  const quick = await supervised(["true"], { deadlineSeconds: 60 });
  assert.equal(quick.result.exitCode, 0);
  assert.equal(timeouts(), before, "no timer left after `run -- true`");
  const cut = await supervised(sh("sleep 30"), { deadlineSeconds: 0.5, graceSeconds: 30 });
  assert.equal(cut.result.exitCode, 124);
  assert.equal(timeouts(), before, "no timer left after the deadline");
  // The command line too: `agent-checkpoint run -- true` resolves with nothing pending.
  const { io } = memoryIo({ env: cleanEnv() });
  assert.equal(await runCommand.run(["--home", tempHome(), "--", "true"], io), 0);
  assert.equal(timeouts(), before, "no timer left after the run command");
});

/** The pid a command wrote, and a cleanup that never leaves it running. */
const pidIn = (file: string) => Number(fs.readFileSync(file, "utf8"));

for (const holdsPipes of [false, true]) {
  test(
    `at the deadline a grandchild that called setsid is stopped too (${
      holdsPipes ? "holding the output pipes" : "quiet"
    })`,
    {
      skip: process.platform !== "linux" || !fs.existsSync("/usr/bin/setsid") &&
          !fs.existsSync("/bin/setsid"),
    },
    async () => {
      const home = tempHome();
      const pidFile = path.join(home, "escaped.pid");
      const redirect = holdsPipes ? "" : " </dev/null >/dev/null 2>&1";
      let escaped = 0;
      try {
        const { result } = await supervised(
          sh(`setsid sleep 1000${redirect} & echo $! > "${pidFile}"; echo ready; wait`),
          { home, deadlineSeconds: 1, graceSeconds: 5, runId: "escaped" },
        );
        escaped = pidIn(pidFile);
        assert.equal(result.exitCode, 124);
        assert.equal(result.outcome, "deadline");
        assert.equal(processAlive(escaped), false, "gone when the supervisor returns");
        assert.equal(result.killed, false, "SIGTERM was enough");
        assert.equal(recordOf(result.checkpointFile).kind, "deadline");
      } finally {
        if (escaped > 0 && processAlive(escaped)) process.kill(escaped, "SIGKILL");
      }
    },
  );
}

test("a setsid grandchild that ignores SIGTERM gets SIGKILL after the grace", {
  skip: process.platform !== "linux",
}, async () => {
  const home = tempHome();
  const pidFile = path.join(home, "stubborn.pid");
  let escaped = 0;
  try {
    const { result } = await supervised(
      sh(
        `setsid sh -c "trap '' TERM; echo \\$\\$ > '${pidFile}'; while :; do sleep 0.05; done" ` +
          `</dev/null >/dev/null 2>&1 & while [ ! -s "${pidFile}" ]; do sleep 0.05; done; ` +
          "echo ready; wait",
      ),
      { home, deadlineSeconds: 1, graceSeconds: 1, runId: "stubborn-escaped" },
    );
    escaped = pidIn(pidFile);
    assert.equal(result.exitCode, 124);
    assert.equal(result.killed, true);
    assert.equal(processAlive(escaped), false);
  } finally {
    if (escaped > 0 && processAlive(escaped)) process.kill(escaped, "SIGKILL");
  }
});

test("nested under another supervisor the earlier deadline wins; a value that is not a time is ignored", async () => {
  const print = sh('echo "at=$AGENT_CHECKPOINT_DEADLINE"');
  const outer = Date.now() + 5000;
  const nested = await supervised(print, {
    deadlineSeconds: 60,
    env: { ...cleanEnv(), AGENT_CHECKPOINT_DEADLINE: String(outer) },
  });
  assert.equal(nested.out, `at=${outer}\n`);
  // Read as the library inside reads it: "0x10" is not ms since the epoch.
  const before = Date.now();
  const bad = await supervised(print, {
    deadlineSeconds: 60,
    env: { ...cleanEnv(), AGENT_CHECKPOINT_DEADLINE: "0x10" },
  });
  const at = Number(/^at=(\d+)$/m.exec(bad.out)?.[1]);
  assert.ok(at >= before + 60_000 - 1 && at <= Date.now() + 60_000 + 1, bad.out);
});
