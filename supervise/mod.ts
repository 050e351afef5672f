/**
 * The supervisor: `agent-checkpoint run [--budget S] [--deadline S] [--grace S]
 * [--run-id ID] -- COMMAND ...`. A budget is a nudge; a deadline is a stop.
 *
 * The supervisor starts any command in its own process group, with the run id
 * and the time it should plan to finish by in its environment
 * (`AGENT_CHECKPOINT_RUN_ID`, `AGENT_CHECKPOINT_DEADLINE`, ms since the
 * epoch), so that a library inside it takes them as its run id and time cap.
 * It passes stdin, stdout and stderr through (keeping the last lines of output
 * in memory), forwards SIGINT, SIGTERM and SIGHUP, and at the deadline ends
 * the whole group, and on Linux what the command started that left it
 * (`setsid`): SIGTERM, then SIGKILL after the grace. When the command was
 * cut off, failed, or left a checkpoint file, the supervisor writes its own
 * record into the run's checkpoint file, keeping what the command wrote there.
 *
 * @module
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import type { Buffer } from "node:buffer";
import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { type Env, loadSettings } from "../config.ts";
import { Descendants, groupAlive, signalGroup } from "./_group.ts";
import { OutputTail } from "./_tail.ts";
import { checkpointFileName, persistBlock, readCheckpoint } from "../persist.ts";
import {
  type CheckpointRecord,
  type EndStatus,
  MAX_ATTEMPTS,
  PLUGIN,
  renderBlock,
  summaryLine,
} from "../_record.ts";
import { supervisorDeadline } from "../discover.ts";
import { longTimeout, type LongTimer } from "../_timer.ts";
import { formatDuration } from "../template.ts";
import { liveHolder, recordSupervisedEnd } from "../store/mod.ts";

/** Where the command's output is passed on to: `process.stdout` or any writable stream. */
export interface OutputSink {
  /** Takes a chunk; false asks the writer to wait for `drain`. */
  write(chunk: Uint8Array): boolean;
  /** Called once when a sink that returned false can take more. */
  once?(event: "drain", listener: () => void): unknown;
  /** Listens for the sink's errors (a closed pipe: `EPIPE`). */
  on?(event: "error", listener: (error: Error) => void): unknown;
  /** Stops listening. */
  off?(event: "error", listener: (error: Error) => void): unknown;
}

/** What {@linkcode supervise} runs, and how. */
export interface SuperviseOptions {
  /** The program and its arguments. */
  command: string[];
  /** Seconds until the hard stop: SIGTERM to the process group, SIGKILL after the grace. @default {no deadline} */
  deadlineSeconds?: number;
  /**
   * Seconds the command should plan to finish in: the time cap a library
   * inside it nudges the model with. Never kills anything. At most the
   * deadline. @default {the deadline}
   */
  budgetSeconds?: number;
  /** Seconds between SIGTERM and SIGKILL at the deadline. @default {10} */
  graceSeconds?: number;
  /**
   * The run id, naming the checkpoint file. A kanban task id (`HERMES_KANBAN_TASK`)
   * always wins, as it does in the library. @default {`AGENT_CHECKPOINT_RUN_ID`
   * from `env`, else a fresh `run-<time>-<random>`}
   */
  runId?: string;
  /** The profile directory; also given to the command as `HERMES_HOME`. @default {`HERMES_HOME`, else ~/.hermes} */
  home?: string;
  /** The environment for the command and the settings. @default {process.env} */
  env?: Record<string, string | undefined>;
  /** The command's working directory. @default {process.cwd()} */
  cwd?: string;
  /** Whether the command reads this process's stdin. @default {"inherit"} */
  stdin?: "inherit" | "ignore";
  /** Where the command's stdout goes. @default {process.stdout} */
  stdout?: OutputSink;
  /** Where the command's stderr goes. @default {process.stderr} */
  stderr?: OutputSink;
  /** Forward SIGINT, SIGTERM and SIGHUP this process gets to the command's group. @default {true} */
  forwardSignals?: boolean;
  /** Lines of output kept for the record. @default {40} */
  tailLines?: number;
  /** The supervisor's own one-line notices. @default {a line on stderr} */
  notice?: (line: string) => void;
  /**
   * Asked once the command has ended (not at a deadline), before its record
   * is written: a reason to start it again (`retried: ...`), which the
   * record's end keeps, or undefined. Set by {@linkcode superviseRetrying}. @internal
   */
  retryNote?: (ended: AttemptEnd) => string | undefined;
}

/** How one attempt of a supervised command ended, as a retry decides on it. */
export interface AttemptEnd {
  /** Its exit status, when it exited. */
  code?: number;
  /** The signal that ended it, when one did. */
  signal?: string;
  /** A signal this process got and passed on (the user stopped it): never retried. */
  forwarded?: string;
  /** The command's process id. */
  pid: number;
  /** When the supervisor started it, ms since the epoch. */
  startedAt: number;
}

/** How a supervised command ended. */
export type CommandOutcome = "exited" | "signaled" | "deadline" | "not started";

/** What {@linkcode supervise} resolves to. */
export interface SupervisorResult {
  /** The exit status to leave with: the command's, 128 + signal, 124 at the deadline, 126/127 when it could not start. */
  exitCode: number;
  /** How the command ended. */
  outcome: CommandOutcome;
  /** The command's own exit status, when it exited. */
  code?: number;
  /** The signal that ended it, when one did. */
  signal?: string;
  /** A signal this process got and passed on to the command's group. */
  forwarded?: string;
  /** Whether SIGKILL was needed at the end of the grace. */
  killed: boolean;
  /** Seconds from the start to the end of the command's whole group. */
  elapsedSeconds: number;
  /** The last lines of its output. */
  tail: string[];
  /** The run id the command was given. */
  runId: string;
  /** The run's checkpoint file. */
  checkpointFile: string;
  /** Whether the supervisor wrote its record into that file. */
  written: boolean;
  /** Why the command could not start. */
  error?: string;
  /** When the deadline fell (ms since the epoch), if there was one. */
  deadlineAt?: number;
  /** When the command's whole process group was gone (ms since the epoch). */
  goneAt?: number;
  /** When the final record was on disk (ms since the epoch). */
  writtenAt?: number;
  /** Why the command is to be started again, when it is (`retried: ...`). */
  retried?: string;
}

/** The default time between SIGTERM and SIGKILL at the deadline. */
const DEFAULT_GRACE_SECONDS = 10;
/** The exit status at the deadline, as `timeout(1)` has it. */
const DEADLINE_EXIT = 124;

/** What a record keeps from the file it replaces: the run's figures, not how it was written. */
type Base = Omit<
  CheckpointRecord,
  "kind" | "source" | "message" | "persistedAt" | "elapsedSeconds" | "command" | "end"
>;

const positive = (n: unknown) => typeof n === "number" && Number.isFinite(n) && n > 0;
const EARLY_RECORD_MS = 100;
/** How often the command's process tree is walked, to find later what left its group. */
const TREE_WALK_MS = 1000;
/** How long the output pipes may stay open after the command's processes are gone. */
const PIPES_WAIT_MS = 1000;
/** Wall-clock ms since the epoch, with the monotonic clock's resolution. */
const wall = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function checkOptions(o: SuperviseOptions): void {
  const argv: unknown = o.command;
  if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === "string")) {
    throw new TypeError(`command must be a non-empty array of strings, got ${String(argv)}`);
  }
  const limits: [string, number | undefined][] = [
    ["deadlineSeconds", o.deadlineSeconds],
    ["budgetSeconds", o.budgetSeconds],
  ];
  for (const [name, v] of limits) {
    if (v !== undefined && !positive(v)) {
      throw new RangeError(`${name} must be a finite number greater than 0, got ${v}`);
    }
  }
  const grace = o.graceSeconds;
  if (grace !== undefined && !(positive(grace) || grace === 0)) {
    throw new RangeError(`graceSeconds must be a finite number of at least 0, got ${grace}`);
  }
  if (o.tailLines !== undefined && !(Number.isInteger(o.tailLines) && o.tailLines >= 1)) {
    throw new RangeError(`tailLines must be an integer of at least 1, got ${o.tailLines}`);
  }
  if (
    o.budgetSeconds !== undefined && o.deadlineSeconds !== undefined &&
    o.budgetSeconds > o.deadlineSeconds
  ) {
    throw new RangeError(
      `budgetSeconds ${o.budgetSeconds} is past deadlineSeconds ${o.deadlineSeconds}`,
    );
  }
}

/** A fresh run id: sortable by start time, unique, safe as a file name. */
function freshRunId(now: number): string {
  const stamp = new Date(now).toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
  return `run-${stamp}-${randomBytes(3).toString("hex")}`;
}

const signalNumber = (signal: string) =>
  (os.constants.signals as Record<string, number | undefined>)[signal] ?? 0;

function readRecord(file: string): { exists: boolean; record?: CheckpointRecord } {
  // Bounded, never through a link, never blocking on a FIFO.
  const found = readCheckpoint(file);
  if (found.state === "missing") return { exists: false };
  return found.record ? { exists: true, record: found.record } : { exists: true };
}

/** The run's figures from a record, without what says how and when it was written. */
function carry(r: CheckpointRecord): Base {
  const base: Base = {
    runId: r.runId,
    dialect: r.dialect,
    turnsUsed: r.turnsUsed,
    caps: r.caps ?? {},
    tier: r.tier,
    tools: Array.isArray(r.tools) ? r.tools : [],
    notes: Array.isArray(r.notes) ? r.notes : [],
  };
  if (r.attempt !== undefined) base.attempt = r.attempt;
  if (r.attempts !== undefined) base.attempts = r.attempts.slice(-MAX_ATTEMPTS);
  if (r.workspace !== undefined) base.workspace = r.workspace;
  return base;
}

/** How a command ended, in a few words. */
function commandSummary(c: NonNullable<CheckpointRecord["command"]>): string {
  const how = c.signal !== undefined
    ? `ended by ${c.signal}`
    : c.exitCode !== undefined
    ? `exited with status ${c.exitCode}`
    : "";
  if (c.outcome === "deadline") {
    return how ? `stopped at its deadline, ${how}` : "stopped at its deadline";
  }
  return c.outcome === "not started" ? "could not start" : how;
}

const sameRecord = (a: CheckpointRecord | undefined, b: CheckpointRecord | undefined) =>
  a !== undefined && b !== undefined && a.persistedAt === b.persistedAt && a.source === b.source &&
  a.kind === b.kind;

/** Pass a stream's bytes on to a sink, waiting for it to drain, and into the tail. */
function passThrough(
  from: Readable,
  to: OutputSink,
  tail: OutputTail,
  name: string,
): { done: Promise<void>; detach(): void } {
  let onError = () => {};
  const done = new Promise<void>((resolve) => {
    // When the reader of our output goes away (`run -- cmd | head -1`), the
    // command's own pipe is closed too, so that it gets EPIPE as it would have
    // without us; an unhandled error here would end the supervisor instead.
    let broken = false;
    onError = () => {
      broken = true;
      from.destroy();
    };
    to.on?.("error", onError);
    from.on("data", (chunk: Buffer) => {
      tail.push(name, chunk);
      if (broken) return;
      let more = true;
      try {
        more = to.write(chunk);
      } catch {
        broken = true;
        from.destroy();
        return;
      }
      if (!more && to.once) {
        from.pause();
        to.once("drain", () => from.resume());
      }
    });
    from.once("end", resolve);
    from.once("close", resolve);
    from.once("error", () => resolve());
  });
  return { done, detach: () => void to.off?.("error", onError) };
}

/**
 * Run a command under a deadline, passing its I/O through, and leave a
 * checkpoint record when it was cut off, failed, or left a checkpoint file.
 *
 * The command runs in its own process group with `AGENT_CHECKPOINT_RUN_ID`
 * and `AGENT_CHECKPOINT_DEADLINE` (the budget's end, else the deadline's, in
 * ms since the epoch) in its environment. At the deadline its whole group
 * gets SIGTERM, then SIGKILL after the grace, and so do, on Linux, the
 * processes it started that left the group (found by walking its process
 * tree every second and at the deadline); the result's `exitCode` is then
 * 124. When the command itself exits, what it left running in its group is
 * ended the same way. Durations of any length are kept (no timer overflow).
 *
 * The record (source `supervisor`; kind `deadline` at the deadline, else
 * `end`) goes into `<checkpoint_dir>/<run id>.md` at the deadline, and again
 * once the group is gone; it keeps the agent's text and the figures a library
 * inside the command persisted there (turns, tools, notes, attempts). It is
 * written when the deadline cut the command off, when it exited with a status
 * other than 0, died by a signal or could not start, and, after a clean exit,
 * only when the file exists (to record the end of the run it holds).
 *
 * @param options The command and its limits.
 * @returns How the command ended, and the exit status to leave with.
 * @throws {TypeError} When `command` is not a non-empty array of strings.
 * @throws {RangeError} When a number of seconds is not finite and positive
 * (the grace may be 0), the budget is past the deadline, or `tailLines` is
 * not a positive integer.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import process from "node:process";
 * import { supervise } from "./mod.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * const out: string[] = [];
 * const sink = { write: (c: Uint8Array) => out.push(new TextDecoder().decode(c)) > 0 };
 * const result = await supervise({
 *   command: ["sh", "-c", 'echo "run $AGENT_CHECKPOINT_RUN_ID"; exit 3'],
 *   deadlineSeconds: 60,
 *   runId: "doc-run",
 *   home,
 *   env: { PATH: process.env.PATH },
 *   stdin: "ignore",
 *   stdout: sink,
 *   stderr: sink,
 *   forwardSignals: false,
 * });
 * assert.equal(result.exitCode, 3);
 * assert.deepEqual(result.tail, ["run doc-run"]);
 * assert.match(fs.readFileSync(result.checkpointFile, "utf8"), /"status":"failed"/);
 * ```
 */
export async function supervise(options: SuperviseOptions): Promise<SupervisorResult> {
  checkOptions(options);
  const env: Env = { ...(options.env ?? process.env) };
  const started = performance.now();
  const startedWall = performance.timeOrigin + started;
  const elapsed = () => (performance.now() - started) / 1000;
  const notice = options.notice ??
    ((line: string) => process.stderr.write(`${PLUGIN} run: ${line}\n`));
  const grace = options.graceSeconds ?? DEFAULT_GRACE_SECONDS;
  const argv = options.command;

  // In a kanban task the task id is the run id, as the library inside sees it.
  const task = env.HERMES_KANBAN_TASK;
  let runId = options.runId || env.AGENT_CHECKPOINT_RUN_ID || freshRunId(Date.now());
  if (task) {
    if (options.runId !== undefined && options.runId !== task) {
      notice(`in kanban task ${task} the run id is the task id; --run-id ${options.runId} ignored`);
    }
    runId = task;
  }
  const home = options.home === undefined ? undefined : path.resolve(options.home);
  // Never throws: a settings problem is a warning, and the defaults apply.
  const file = path.join(
    loadSettings(home === undefined ? { env } : { home, env }).settings.checkpoint_dir,
    checkpointFileName(runId),
  );

  const deadlineAt = options.deadlineSeconds === undefined
    ? undefined
    : startedWall + options.deadlineSeconds * 1000;
  const planSeconds = options.budgetSeconds ?? options.deadlineSeconds;
  const childEnv: Env = { ...env, AGENT_CHECKPOINT_RUN_ID: runId };
  if (home !== undefined) childEnv.HERMES_HOME = home;
  if (planSeconds !== undefined) {
    // Nested under another supervisor, the earlier end wins.
    const outer = supervisorDeadline(env)?.at;
    const mine = Math.round(Date.now() + planSeconds * 1000);
    childEnv.AGENT_CHECKPOINT_DEADLINE = String(outer === undefined ? mine : Math.min(outer, mine));
  }

  const before = readRecord(file).record;
  const tail = new OutputTail(options.tailLines ?? 40);
  const freshBase = (): Base => {
    const base: Base = {
      runId,
      dialect: task ? "kanban" : "chat",
      turnsUsed: 0,
      caps: planSeconds === undefined ? {} : { time: { value: planSeconds, source: "supervisor" } },
      tier: 0,
      tools: [],
      notes: [],
    };
    if (before && before.end?.status !== "done") {
      base.attempt = (before.attempt ?? 1) + 1;
      base.attempts = [...(before.attempts ?? []), summaryLine(before)].slice(-MAX_ATTEMPTS);
    }
    return base;
  };
  let ours: { persistedAt: string; base: Base } | undefined;
  /** Why this attempt is to be retried, once known: its record's end says so. */
  let retried: string | undefined;
  /** The command's process, once started: only its own attempt's record is the supervisor's to end. */
  const spawned: { pid?: number } = {};

  /** The base of a new record: what is in the file now, unless it is an earlier attempt's. */
  const baseNow = (): { base: Base; childEnd?: CheckpointRecord["end"] } => {
    const now = readRecord(file).record;
    if (now && ours && now.source === "supervisor" && now.persistedAt === ours.persistedAt) {
      return { base: ours.base };
    }
    if (now && !sameRecord(now, before)) {
      return now.end ? { base: carry(now), childEnd: now.end } : { base: carry(now) };
    }
    return { base: freshBase() };
  };

  const write = (
    kind: "deadline" | "end",
    message: string,
    command: NonNullable<CheckpointRecord["command"]>,
    status: EndStatus,
    keepChildEnd: boolean,
  ): boolean => {
    try {
      const { base, childEnd } = baseNow();
      const persistedAt = new Date().toISOString();
      const record: CheckpointRecord = {
        ...base,
        kind,
        source: "supervisor",
        elapsedSeconds: elapsed(),
        persistedAt,
        message,
        command,
        end: keepChildEnd && childEnd ? childEnd : {
          status,
          at: persistedAt,
          summary: `supervised command ${commandSummary(command)}${
            retried === undefined ? "" : `; ${retried}`
          }`,
        },
      };
      try {
        recordSupervisedEnd({
          env,
          record,
          file,
          status: record.end!.status,
          startedAt: startedWall,
          ...(home === undefined ? {} : { home }),
          ...(spawned.pid === undefined ? {} : { pid: spawned.pid }),
        });
      } catch (error) {
        notice(`could not write the run ledger: ${(error as Error).message}`);
      }
      persistBlock(file, renderBlock(record));
      ours = { persistedAt, base };
      return true;
    } catch (error) {
      notice(`could not write the checkpoint file ${file}: ${(error as Error).message}`);
      return false;
    }
  };

  const result = (fields: Omit<SupervisorResult, "runId" | "checkpointFile" | "tail">) => {
    const r: SupervisorResult = { runId, checkpointFile: file, tail: tail.lines(), ...fields };
    if (deadlineAt !== undefined) r.deadlineAt = deadlineAt;
    return r;
  };

  // Start it.
  let child: ChildProcess;
  let startError: NodeJS.ErrnoException | undefined;
  try {
    child = spawn(argv[0] as string, argv.slice(1), {
      cwd: options.cwd ?? process.cwd(),
      env: Object.fromEntries(
        Object.entries(childEnv).filter((e): e is [string, string] => e[1] !== undefined),
      ),
      detached: process.platform !== "win32",
      stdio: [options.stdin ?? "inherit", "pipe", "pipe"],
    });
  } catch (error) {
    // kept, and reported below as the command's failure to start
    startError = error as NodeJS.ErrnoException;
    child = undefined as never;
  }
  if (!startError) {
    startError = await new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
      if (child.pid !== undefined) return resolve(undefined);
      child.once("error", (e) => resolve(e as NodeJS.ErrnoException));
      child.once("spawn", () => resolve(undefined));
    });
  }
  if (startError || child.pid === undefined) {
    const why = startError?.message ?? "no process id";
    const exitCode = startError?.code === "EACCES" || startError?.code === "EISDIR" ? 126 : 127;
    const message = `The command could not start: ${why}.`;
    notice(`could not start ${argv[0]}: ${why}`);
    const written = write(
      "end",
      message,
      { argv, outcome: "not started", tail: [] },
      "failed",
      false,
    );
    const r = result({
      exitCode,
      outcome: "not started",
      killed: false,
      elapsedSeconds: elapsed(),
      written,
      error: why,
    });
    if (written) r.writtenAt = wall();
    return r;
  }
  child.on("error", () => {/* a failed kill: the group watch below decides */});
  const pgid = child.pid;
  spawned.pid = pgid;

  const streams = [
    passThrough(child.stdout as Readable, options.stdout ?? process.stdout, tail, "out"),
    passThrough(child.stderr as Readable, options.stderr ?? process.stderr, tail, "err"),
  ];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal }))
  );

  // Forward signals.
  let forwarded: string | undefined;
  const forward = (signal: NodeJS.Signals) => {
    forwarded = signal;
    signalGroup(pgid, signal);
  };
  const forwardedSignals: NodeJS.Signals[] = process.platform === "win32"
    ? ["SIGINT"]
    : ["SIGINT", "SIGTERM", "SIGHUP"];
  if (options.forwardSignals !== false) {
    for (const s of forwardedSignals) {
      try {
        process.on(s, forward);
      } catch { /* a runtime that cannot listen for it */ }
    }
  }

  // What left the group (setsid) is found through the process tree, walked
  // while the command runs and again at the deadline (Linux).
  const tree = new Descendants(pgid);
  const treeWalk = deadlineAt === undefined
    ? undefined
    : setInterval(() => tree.record(), TREE_WALK_MS);
  const leftAlive = () => deadlineHit && tree.outside().length > 0;

  // Ending the group: SIGTERM now, SIGKILL after the grace if anything is left.
  let terminating = false;
  let killed = false;
  let killTimer: LongTimer | undefined;
  const terminate = () => {
    if (terminating) return;
    terminating = true;
    signalGroup(pgid, "SIGTERM");
    if (deadlineHit) tree.signal("SIGTERM");
    killTimer = longTimeout(() => {
      if (groupAlive(pgid) || leftAlive()) {
        killed = true;
        signalGroup(pgid, "SIGKILL");
        if (deadlineHit) tree.signal("SIGKILL");
      }
    }, grace * 1000);
  };

  let deadlineHit = false;
  let earlyRecord: LongTimer | undefined;
  let deadlineTimer: LongTimer | undefined;
  const onDeadline = () => {
    deadlineHit = true;
    // Before the group's signal: a parent that dies of it orphans what it started.
    tree.record();
    terminate();
    notice(
      `deadline of ${formatDuration(options.deadlineSeconds as number)} reached: ` +
        `SIGTERM sent to the command's process group, SIGKILL in ${formatDuration(grace)}`,
    );
    // A record now, in case this process is killed during the grace; a moment
    // later, so that a command that dies at once is seen dead without waiting
    // for a disk flush, and gets its one final record.
    earlyRecord = longTimeout(() => {
      earlyRecord = undefined;
      write(
        "deadline",
        `Stopped at its deadline of ${formatDuration(options.deadlineSeconds as number)}: ` +
          `SIGTERM sent to its process group, SIGKILL after ${formatDuration(grace)} ` +
          `if anything is left.`,
        { argv, outcome: "deadline", signal: "SIGTERM", tail: tail.lines() },
        "deadline",
        false,
      );
    }, EARLY_RECORD_MS);
  };
  if (deadlineAt !== undefined) deadlineTimer = longTimeout(onDeadline, deadlineAt - wall());

  const { code, signal } = await exited;
  deadlineTimer?.clear();
  if (treeWalk !== undefined) clearInterval(treeWalk);
  // What the command left running in its group does not outlive it.
  if (groupAlive(pgid)) terminate();
  const giveUp = wall() + grace * 1000 + 5000;
  while ((groupAlive(pgid) || leftAlive()) && wall() < giveUp) await sleep(20);
  const goneAt = wall();
  killTimer?.clear();
  earlyRecord?.clear();
  // A process that left the group after a clean exit may hold the pipes open: bounded wait.
  let pipesTimer: LongTimer | undefined;
  await Promise.race([
    Promise.all(streams.map((s) => s.done)),
    new Promise<void>((resolve) => (pipesTimer = longTimeout(resolve, PIPES_WAIT_MS))),
  ]);
  pipesTimer?.clear();
  child.stdout?.destroy();
  child.stderr?.destroy();
  for (const s of streams) s.detach();
  tail.end("out");
  tail.end("err");
  for (const s of forwardedSignals) process.off(s, forward);

  const took = elapsed();
  const outcome: CommandOutcome = deadlineHit ? "deadline" : signal ? "signaled" : "exited";
  const exitCode = deadlineHit ? DEADLINE_EXIT : signal ? 128 + signalNumber(signal) : code ?? 1;
  const command: NonNullable<CheckpointRecord["command"]> = { argv, outcome, tail: tail.lines() };
  if (code !== null) command.exitCode = code;
  if (signal) command.signal = signal;
  const how = signal ? `was ended by ${signal}` : `exited with status ${code}`;

  if (!deadlineHit && !forwarded && options.retryNote) {
    const end: AttemptEnd = { pid: pgid, startedAt: startedWall };
    if (code !== null) end.code = code;
    if (signal) end.signal = signal;
    retried = options.retryNote(end);
  }
  const after = retried === undefined ? "" : ` It is ${retried}.`;
  let written = false;
  if (deadlineHit) {
    written = write(
      "deadline",
      `Stopped at its deadline of ${formatDuration(options.deadlineSeconds as number)}: ` +
        `SIGTERM sent to its process group${
          killed ? `, SIGKILL after the ${formatDuration(grace)} grace` : ""
        }; it ${how} after ${formatDuration(took)}.`,
      command,
      "deadline",
      false,
    );
  } else if (signal) {
    const message = forwarded
      ? `The supervisor passed on ${forwarded}; the command ${how} after ${formatDuration(took)}.`
      : `The command ${how} after ${formatDuration(took)}.${after}`;
    written = write("end", message, command, forwarded ? "aborted" : "failed", false);
  } else if (code !== 0 || readRecord(file).exists) {
    written = write(
      "end",
      `The command ${how} after ${formatDuration(took)}.${after}`,
      command,
      code === 0 ? "done" : forwarded ? "aborted" : "failed",
      code === 0,
    );
  }
  if (written && deadlineHit) notice(`checkpoint written to ${file}`);

  const r = result({ exitCode, outcome, killed, elapsedSeconds: took, written, goneAt });
  if (code !== null) r.code = code;
  if (signal) r.signal = signal;
  if (forwarded) r.forwarded = forwarded;
  if (written) r.writtenAt = wall();
  if (retried !== undefined) r.retried = retried;
  return r;
}

/** When {@linkcode superviseRetrying} starts a command again. */
export interface RetryOptions {
  /** How many times at most the command is started again. */
  retries: number;
  /** Seconds before the first retry, doubled before each next one. @default {1} */
  delaySeconds?: number;
  /**
   * The exit statuses and signals (`SIGKILL`) that are retried. @default {any
   * signal, and any exit status but 0, 124 and 2}
   */
  on?: { codes: number[]; signals: string[] };
}

/** What {@linkcode superviseRetrying} resolves to: the last attempt's result, and each attempt's. */
export interface RetriedResult extends SupervisorResult {
  /** Every attempt's result, in order; the last is this result itself. */
  attempts: SupervisorResult[];
  /** Why retrying stopped before the command succeeded, when it did (another machine holds the run, the deadline, no retries left). */
  stopped?: string;
}

/** Statuses never retried by default: the deadline's (as timeout(1)) and a usage error's. */
const NOT_RETRIED = [DEADLINE_EXIT, 2];

/**
 * Run a command under {@linkcode supervise}, and start it again with the same
 * run id when it dies (a signal, or an exit status other than 0, 124 and 2,
 * unless `retry.on` names others), up to `retry.retries` times, after
 * `retry.delaySeconds` doubling each time, all inside one overall deadline
 * (`options.deadlineSeconds`) and budget. A library inside the command
 * resumes each retry from where the attempt before it stopped. Each retried
 * attempt's record ends with why it was retried. Retrying stops, and says
 * so, when another machine holds the run (a live attempt of the run id that
 * is not the command's), when the deadline leaves no time, or when no
 * retries are left. The result is the last attempt's.
 *
 * @param options The command and its limits, as {@linkcode supervise} takes them.
 * @param retry How many retries, their delay, and what is retried.
 * @returns The last attempt's result, with every attempt's.
 * @throws {RangeError} When `retry.retries` is not a whole number of at least 0, or the delay is negative.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import process from "node:process";
 * import { superviseRetrying } from "./mod.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * const marker = path.join(home, "tried");
 * const sink = { write: (_c: Uint8Array) => true };
 * const result = await superviseRetrying({
 *   // Fails once, then succeeds.
 *   command: ["sh", "-c", `[ -e ${marker} ] || { touch ${marker}; exit 3; }`],
 *   deadlineSeconds: 60,
 *   runId: "doc-retried",
 *   home,
 *   env: { PATH: process.env.PATH },
 *   stdin: "ignore",
 *   stdout: sink,
 *   stderr: sink,
 *   forwardSignals: false,
 *   notice: () => {},
 * }, { retries: 2, delaySeconds: 0 });
 * assert.equal(result.exitCode, 0);
 * assert.equal(result.attempts.length, 2);
 * assert.match(result.attempts[0]!.retried ?? "", /exited with status 3/);
 * ```
 */
export async function superviseRetrying(
  options: SuperviseOptions,
  retry: RetryOptions,
): Promise<RetriedResult> {
  checkOptions(options);
  if (!Number.isInteger(retry.retries) || retry.retries < 0) {
    throw new RangeError(`retries must be a whole number of at least 0, got ${retry.retries}`);
  }
  const delay0 = retry.delaySeconds ?? 1;
  if (!(Number.isFinite(delay0) && delay0 >= 0)) {
    throw new RangeError(
      `the retry delay must be a number of seconds of at least 0, got ${delay0}`,
    );
  }
  const env: Env = { ...(options.env ?? process.env) };
  const notice = options.notice ??
    ((line: string) => process.stderr.write(`${PLUGIN} run: ${line}\n`));
  // One run id for every attempt, so that each retry resumes the run.
  const runId = env.HERMES_KANBAN_TASK || options.runId || env.AGENT_CHECKPOINT_RUN_ID ||
    freshRunId(Date.now());
  const startedAt = wall();
  const deadlineAt = options.deadlineSeconds === undefined
    ? undefined
    : startedAt + options.deadlineSeconds * 1000;
  const budgetAt = options.budgetSeconds === undefined
    ? undefined
    : startedAt + options.budgetSeconds * 1000;
  const retried = (end: AttemptEnd) => {
    if (retry.on) {
      return end.signal !== undefined
        ? retry.on.signals.includes(end.signal)
        : retry.on.codes.includes(end.code ?? 0);
    }
    return end.signal !== undefined || (end.code !== 0 && !NOT_RETRIED.includes(end.code ?? 0));
  };
  const attempts: SupervisorResult[] = [];
  let delay = delay0;
  let stopped: string | undefined;
  let lastPid: number | undefined;
  for (;;) {
    const left = retry.retries - (attempts.length);
    const now = wall();
    const attempt: SuperviseOptions = {
      ...options,
      env,
      runId,
      notice,
      retryNote: (end) => {
        lastPid = end.pid;
        const how = end.signal !== undefined
          ? `was ended by ${end.signal}`
          : `exited with status ${end.code}`;
        if (!retried(end)) return undefined;
        if (left <= 0) {
          stopped = `no retries left (${retry.retries} made): the command ${how}`;
          return undefined;
        }
        if (deadlineAt !== undefined && wall() + delay * 1000 >= deadlineAt) {
          stopped = `the deadline leaves no time for another retry: the command ${how}`;
          return undefined;
        }
        // The command died; a live attempt of the run now is another machine's.
        const holder = liveHolder({
          ...(options.home ? { home: options.home } : {}),
          env,
          runId,
          pid: end.pid,
          since: end.startedAt,
        });
        if (holder) {
          const r = holder.record;
          stopped = `not retrying: another machine ${
            holder.state === "live" ? "holds" : "finished"
          } run ${runId} (attempt ${r.attempt} on ${r.host.machine}, pid ${r.host.pid}); the command ${how}`;
          return undefined;
        }
        return `retried (retry ${attempts.length + 1} of ${retry.retries}) because it ${how}`;
      },
    };
    if (deadlineAt !== undefined) {
      attempt.deadlineSeconds = Math.max(0.001, (deadlineAt - now) / 1000);
    }
    if (budgetAt !== undefined) attempt.budgetSeconds = Math.max(0.001, (budgetAt - now) / 1000);
    if (
      attempt.budgetSeconds !== undefined && attempt.deadlineSeconds !== undefined &&
      attempt.budgetSeconds > attempt.deadlineSeconds
    ) attempt.budgetSeconds = attempt.deadlineSeconds;
    const r = await supervise(attempt);
    attempts.push(r);
    if (r.retried === undefined) {
      if (stopped !== undefined && r.exitCode !== 0) notice(stopped);
      const out: RetriedResult = { ...r, attempts };
      if (stopped !== undefined && r.exitCode !== 0) out.stopped = stopped;
      return out;
    }
    notice(`${r.retried}; starting it again in ${formatDuration(delay)}`);
    if (delay > 0) await sleep(delay * 1000);
    delay *= 2;
    // Meanwhile another machine may have taken the run, or finished it: a retry would run it twice.
    const taken = lastPid === undefined ? undefined : liveHolder({
      ...(options.home ? { home: options.home } : {}),
      env,
      runId,
      pid: lastPid,
      since: startedAt,
    });
    if (taken) {
      const t = taken.record;
      const line = `not retrying: another machine ${
        taken.state === "live" ? "holds" : "finished"
      } run ${runId} (attempt ${t.attempt} on ${t.host.machine}, pid ${t.host.pid})`;
      notice(line);
      return { ...r, attempts, stopped: line };
    }
  }
}
