import { test } from "node:test";
// @ts-types="npm:@types/shell-quote@1.7.5"
// deno-lint-ignore no-import-prefix -- the same pinned tokenizer the workspace snapshots use
import { parse as parseShell } from "npm:shell-quote@1.8.3";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { appendLogLine, createLog, LOG_LINE_LIMIT, logFilePath } from "../log.ts";
import { captureLog, fixture, runScript, tempHome, underDeno } from "./_helpers.ts";

const probe = async (which: string, dir = tempHome()) => {
  const result = await runScript(fixture("config_probe"), [which, dir], { timeoutMs: 60_000 });
  assert.equal(result.code, 0, `${which} ended with ${result.code}: ${result.stderr}`);
  return { value: JSON.parse(result.stdout.trim().split("\n").at(-1)!), stderr: result.stderr };
};

const LOST = /^agent-checkpoint: cannot write its log file .*; its log lines are lost\. Fix: /;

test("a log line is one line of bounded length, in the file and to the host", () => {
  const home = tempHome();
  const huge = `first\nsecond\r\n${"x".repeat(1_000_000)}`;
  createLog(home)("warn", huge, "r".repeat(10_000));
  const lines = fs.readFileSync(logFilePath(home), "utf8").split("\n");
  assert.equal(lines.length, 2, "one line and the final newline");
  assert.ok(lines[0]!.length < LOG_LINE_LIMIT + 300, `${lines[0]!.length} characters`);
  assert.match(lines[0]!, /WARN \[r+… \(\d+ more characters\)\] first\\nsecond\\n/);
  const log = captureLog();
  createLog(home, log.logger)("info", huge);
  assert.ok(log.records[0]!.message.length <= LOG_LINE_LIMIT);
  assert.match(log.records[0]!.message, /^first\\nsecond\\nx+… \(\d+ more characters\)$/);
});

test("an async logger that rejects, or a promise of another realm, is no unhandled rejection", async () => {
  const { value } = await probe("rejecting-logger");
  const text = value.join("\n");
  assert.match(text, /the host's logger rejected \(async logger down\)/);
  assert.match(text, /the host's logger rejected \(other realm down\)/);
  assert.match(text, /the host's logger rejected \(thenable down\)/);
  assert.match(text, /the host's logger rejected \(then getter down\)/);
  assert.match(text, /unknown setting valueOf in override/, "the constructor's warning too");
  assert.ok(value.filter((l: string) => l.endsWith(" a line")).length === 4, text);
});

test("a log file that is a FIFO with no reader does not hang the host", {
  skip: process.platform === "win32" && "no FIFOs",
}, async () => {
  const { value, stderr } = await probe("fifo-log");
  assert.equal(value, "returned");
  assert.match(stderr, /agent-checkpoint: cannot write its log file .*agent-checkpoint\.log/);
});

test("when no log line can be written, one line on stderr says so, once", async () => {
  const { value, stderr } = await probe("lost-log");
  assert.equal(value, "logged");
  const lines = stderr.split("\n").filter((l) => l.startsWith("agent-checkpoint:"));
  assert.equal(lines.length, 1, stderr);
  assert.match(lines[0]!, LOST);
  assert.match(lines[0]!, /pass a logger to createAgentCheckpoint/);
});

test("under Deno without --allow-write, one line on stderr names the flag", {
  skip: !underDeno && "Deno's permissions",
}, async () => {
  const dir = tempHome();
  const child = spawn(
    process.execPath,
    ["run", "--quiet", "--allow-read", "--allow-env", fixture("config_probe"), "no-write", dir],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => stdout += d);
  child.stderr.on("data", (d) => stderr += d);
  const code = await new Promise((resolve) => child.on("close", resolve));
  assert.equal(code, 0, stderr);
  assert.equal(stdout.trim(), '"logged"');
  const lines = stderr.split("\n").filter((l) => l.startsWith("agent-checkpoint:"));
  assert.equal(lines.length, 1, stderr);
  assert.match(lines[0]!, LOST);
  assert.match(lines[0]!, /--allow-write/);
  assert.ok(!fs.existsSync(path.join(dir, "logs")));
});

test("appendLogLine() refuses a log path that is not a regular file, and says why", () => {
  const home = tempHome();
  fs.mkdirSync(logFilePath(home), { recursive: true });
  assert.match(
    appendLogLine(logFilePath(home), { level: "info", message: "x" }) ?? "",
    /EISDIR|directory/,
  );
});

/** Deno's own process API, typed here so that the Node build of the tests compiles. */
interface DenoCommand {
  execPath(): string;
  Command: new (cmd: string, options: { args: string[]; stdin: "null" }) => {
    output(): Promise<{ code: number; stdout: Uint8Array; stderr: Uint8Array }>;
  };
}

/**
 * Run a script with Deno and exactly the flags given. Not node:child_process:
 * under Deno, a child spawned through it is granted permissions it was not
 * given on its command line.
 */
async function denoRun(flags: string[], script: string, args: string[]) {
  const deno = (globalThis as unknown as { Deno: DenoCommand }).Deno;
  const command = new deno.Command(deno.execPath(), {
    args: ["run", "--quiet", "--no-prompt", ...flags, script, ...args],
    stdin: "null",
  });
  const { code, stdout, stderr } = await command.output();
  const text = new TextDecoder();
  return { code, stdout: text.decode(stdout), stderr: text.decode(stderr) };
}

test(
  "under Deno with no permissions, one line on stderr says no checkpoint can be written, and the flags",
  {
    skip: !underDeno && "Deno's permissions",
  },
  async () => {
    const home = path.join(tempHome(), "home");
    const { code, stdout, stderr } = await denoRun([], fixture("host_plain"), [home]);
    assert.equal(code, 0, stderr);
    assert.equal(stdout, "done\n");
    assert.doesNotMatch(stderr, /Uncaught|error:/i);
    const lines = stderr.split("\n").filter((l) => l !== "");
    assert.equal(lines.length, 1, stderr);
    const line = lines[0]!;
    assert.match(line, /^agent-checkpoint: .*no checkpoint file can be written/);
    // The flags as a shell reads them: a path with a space comes quoted.
    const flags = parseShell(line.match(/Fix: run with (.*)\.$/)?.[1] ?? "") as string[];
    const reads = flags.find((f) => f.startsWith("--allow-read="))?.slice(13).split(",") ?? [];
    assert.ok(reads.includes(home), line);
    assert.ok(flags.includes(`--allow-write=${home}`), line);
    assert.ok(flags.includes("--allow-env"), line);
    assert.ok(flags.includes("--allow-sys=hostname"), line);
    assert.equal(fs.existsSync(home), false);
    // With exactly those flags, the same host writes its checkpoint and says nothing.
    const again = await denoRun(flags, fixture("host_plain"), [home]);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stderr, "");
    assert.ok(fs.existsSync(path.join(home, "agent-checkpoints", "plain.md")));
  },
);

test(
  "under Deno without the host name, one line on stderr says what is lost and names --allow-sys=hostname",
  {
    skip: !underDeno && "Deno's permissions",
  },
  async () => {
    const home = path.join(tempHome(), "home");
    const flags = [`--allow-read=${home},${path.resolve("..")}`, "--allow-write", "--allow-env"];
    const { code, stdout, stderr } = await denoRun(flags, fixture("host_plain"), [home]);
    assert.equal(code, 0, stderr);
    assert.equal(stdout, "done\n");
    const lines = stderr.split("\n").filter((l) => l !== "");
    assert.equal(lines.length, 1, stderr);
    assert.match(
      lines[0]!,
      /^agent-checkpoint: Deno denies the host name \(grant --allow-sys=hostname\)/,
    );
    assert.match(lines[0]!, /recorded without their machine/);
    assert.ok(fs.existsSync(path.join(home, "agent-checkpoints", "plain.md")));
  },
);
