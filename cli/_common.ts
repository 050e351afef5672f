/**
 * Shared pieces of the command line: the I/O a command runs with, the
 * `Command` shape every entry of the dispatch table has, the usage error, the
 * argument parser and the small formatting helpers the commands share.
 *
 * Commands live in `_cli_*.ts` files (and `supervise.ts`, `_cli_workspace.ts`)
 * and are listed once, in the dispatch table of `cli.ts`.
 *
 * @module
 */
import * as path from "node:path";
import process from "node:process";
import * as readline from "node:readline";
import { type Env, envOf, loadSettings } from "../config.ts";

export type { Env };

/** The program's name, as users type it. */
export const NAME = "agent-checkpoint";

/** Where the command line reads and writes. */
export interface CliIo {
  /** Writes text to standard output (no newline added). */
  stdout(text: string): void;
  /** Writes text to standard error (no newline added). */
  stderr(text: string): void;
  /** The environment the command sees. */
  env: Env;
  /** Whether stdout is a terminal: colour only then, and never with NO_COLOR set. */
  isTTY: boolean;
  /** The clock, ms since the epoch. */
  now(): number;
  /** The current directory. */
  cwd: string;
  /** Whether stdin is a terminal (a command asks before destroying anything only then). */
  stdinIsTTY: boolean;
  /** Prints `question` and resolves to one line read from stdin ("" at its end). */
  ask(question: string): Promise<string>;
}

/**
 * One command of the dispatch table.
 *
 * `run` gets the arguments after the command's name and resolves to the exit
 * code: 0 fine, 1 `explain` found something (or the command failed at
 * runtime), 2 a usage error. Throwing a {@link UsageError} is the same as
 * printing its one-line reason with a pointer to `--help` and returning 2.
 * `--help`/`-h` and `help NAME` are handled before `run` is called.
 */
export interface Command {
  /** What users type: `explain`, `ls`, `run`, … */
  name: string;
  /** One line for the command list of `--help`. */
  summary: string;
  /** The full help text, starting with a `Usage:` line. */
  help: string;
  /** Runs the command. */
  run(args: string[], io: CliIo): Promise<number>;
}

/**
 * A usage error: the main loop prints `agent-checkpoint: MESSAGE (see
 * agent-checkpoint SEE)` on stderr and exits 2.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { UsageError } from "./_common.ts";
 *
 * const e = new UsageError("--since takes a duration", "audit --help");
 * assert.equal(e.see, "audit --help");
 * assert.equal(new UsageError("bad").see, "--help");
 * ```
 */
export class UsageError extends Error {
  /** What the pointer names after the program's name: `--help` (default), `audit --help`, `ls`. */
  readonly see: string;
  /**
   * Makes a usage error.
   *
   * @param message One line, lower-case start, no trailing period.
   * @param see What to point to after `agent-checkpoint`.
   */
  constructor(message: string, see = "--help") {
    super(message);
    this.name = "UsageError";
    this.see = see;
  }
}

/** What {@link parseArgs} accepts. `--home` and `--help`/`-h` are always accepted. */
export interface ArgSpec {
  /** The command's name, for error messages. */
  command: string;
  /** Options that take a value (`--since 30m` or `--since=30m`), e.g. `["--since"]`. */
  values?: string[];
  /** Options without a value, e.g. `["--json", "--all"]`. */
  switches?: string[];
  /** Short aliases, e.g. `{ "-y": "--yes", "-n": "--dry-run" }`. */
  aliases?: Record<string, string>;
  /** Names of the required positional arguments, in order (for messages), e.g. `["RUN"]`. */
  positional?: string[];
  /** Names of optional positional arguments after the required ones. */
  optional?: string[];
  /**
   * Stop at the first `--` and hand everything after it to `rest` untouched
   * (`run ... -- COMMAND ...`). Without it, `--` ends the options and what
   * follows counts as positional arguments.
   */
  rest?: boolean;
}

/** What {@link parseArgs} returns. */
export interface ParsedArgs {
  /** Option values by their long name: `values["--home"]`. The last one given wins. */
  values: Record<string, string>;
  /** The switches given, by their long name: `switches.has("--json")`. */
  switches: Set<string>;
  /** Positional arguments, required then optional. */
  positional: string[];
  /** With `spec.rest`: the arguments after `--` (undefined when there was no `--`). */
  rest?: string[];
  /** Whether `--help` or `-h` was given (then no other check was made). */
  help: boolean;
}

/**
 * Parses a command's arguments; throws {@link UsageError} for an unknown
 * option, a missing value, a missing or extra positional argument.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseArgs, UsageError } from "./_common.ts";
 *
 * const p = parseArgs(["--home=/h", "RUN1", "--json"], {
 *   command: "show",
 *   switches: ["--json"],
 *   positional: ["RUN"],
 * });
 * assert.equal(p.values["--home"], "/h");
 * assert.deepEqual(p.positional, ["RUN1"]);
 * assert.ok(p.switches.has("--json"));
 *
 * const r = parseArgs(["--budget", "60", "--", "sh", "-c", "exit 3"], {
 *   command: "run",
 *   values: ["--budget"],
 *   rest: true,
 * });
 * assert.deepEqual(r.rest, ["sh", "-c", "exit 3"]);
 * assert.throws(() => parseArgs(["--frob"], { command: "ls" }), UsageError);
 * ```
 */
export function parseArgs(args: string[], spec: ArgSpec): ParsedArgs {
  const values = ["--home", ...(spec.values ?? [])];
  const switches = spec.switches ?? [];
  const out: ParsedArgs = { values: {}, switches: new Set(), positional: [], help: false };
  let i = 0;
  for (; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === "--") {
      if (spec.rest) {
        out.rest = args.slice(i + 1);
        break;
      }
      out.positional.push(...args.slice(i + 1));
      break;
    }
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    let flag = eq > 0 ? arg.slice(0, eq) : arg;
    const inline = eq > 0 ? arg.slice(eq + 1) : undefined;
    flag = spec.aliases?.[flag] ?? flag;
    if (flag === "--help" || flag === "-h") out.help = true;
    else if (switches.includes(flag)) {
      if (inline !== undefined) throw new UsageError(`${flag} takes no value`);
      out.switches.add(flag);
    } else if (values.includes(flag)) {
      const value = inline ?? args[++i];
      if (value === undefined || value === "") throw new UsageError(`${flag} needs a value`);
      out.values[flag] = value;
    } else if (flag.startsWith("-") && flag !== "-") {
      throw new UsageError(`unknown option ${flag} for ${spec.command}`);
    } else out.positional.push(arg);
  }
  if (out.help) return out;
  const required = spec.positional ?? [];
  const optional = spec.optional ?? [];
  if (out.positional.length < required.length) {
    throw new UsageError(
      `${spec.command} needs ${required.slice(out.positional.length).join(" ")}`,
    );
  }
  if (out.positional.length > required.length + optional.length) {
    throw new UsageError(
      `unexpected argument "${out.positional[required.length + optional.length]}"`,
    );
  }
  return out;
}

/**
 * Seconds in a DURATION such as `90s`, `30m`, `12h`, `7d`, `2w`; a bare
 * number is seconds only with `bareSeconds`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseDuration } from "./_common.ts";
 *
 * assert.equal(parseDuration("30m"), 1800);
 * assert.equal(parseDuration("90"), undefined);
 * assert.equal(parseDuration("90", { bareSeconds: true }), 90);
 * ```
 */
export function parseDuration(
  text: string,
  options: { bareSeconds?: boolean } = {},
): number | undefined {
  const t = text.trim();
  if (options.bareSeconds && /^\d+(?:\.\d+)?$/.test(t)) return Number(t);
  const m = /^(\d+(?:\.\d+)?)([smhdw])$/.exec(t);
  if (!m) return undefined;
  const unit = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 }[m[2] as "s"];
  return Number(m[1]) * unit;
}

/**
 * The seconds an option such as `--budget 90` or `--budget 15m` names; a
 * {@link UsageError} unless it is a duration (or bare seconds) greater than 0
 * (or ≥ 0 with `allowZero`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { secondsOption, UsageError } from "./_common.ts";
 *
 * assert.equal(secondsOption("--budget", "15m"), 900);
 * assert.equal(secondsOption("--grace", "0", { allowZero: true }), 0);
 * assert.throws(() => secondsOption("--budget", "0"), UsageError);
 * ```
 */
export function secondsOption(
  flag: string,
  value: string,
  options: { allowZero?: boolean } = {},
): number {
  const s = parseDuration(value, { bareSeconds: true });
  if (s === undefined || !Number.isFinite(s) || s < 0 || (s === 0 && !options.allowZero)) {
    throw new UsageError(
      `${flag} takes seconds or a duration such as 90s, 30m or 2h, not "${value}"`,
    );
  }
  return s;
}

/**
 * "just now", "45s ago", "3m ago", "2h ago", "5d ago".
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ago } from "./_common.ts";
 *
 * assert.equal(ago(3 * 60_000), "3m ago");
 * ```
 */
export function ago(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

/**
 * A byte count for people: `512 B`, `1.5 KiB`, `2.0 MiB`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { size } from "./_common.ts";
 *
 * assert.equal(size(1536), "1.5 KiB");
 * ```
 */
export function size(bytes: number): string {
  return bytes < 1024
    ? `${bytes} B`
    : bytes < 1048576
    ? `${(bytes / 1024).toFixed(1)} KiB`
    : bytes < 1073741824
    ? `${(bytes / 1048576).toFixed(1)} MiB`
    : `${(bytes / 1073741824).toFixed(1)} GiB`;
}

/**
 * Columns padded to their widest cell; `paint` styles the first row.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { table } from "./_common.ts";
 *
 * assert.equal(table([["a", "b"], ["long", "c"]]), "a     b\nlong  c");
 * ```
 */
export function table(rows: string[][], paint: (s: string) => string = (s) => s): string {
  if (rows.length === 0) return "";
  const columns = Math.max(...rows.map((r) => r.length));
  const widths = Array.from(
    { length: columns },
    (_, c) => Math.max(...rows.map((r) => (r[c] ?? "").length)),
  );
  return rows.map((r, i) => {
    const line = r.map((cell, c) => c === r.length - 1 ? cell : cell.padEnd(widths[c]!)).join(
      "  ",
    );
    return i === 0 ? paint(line) : line;
  }).join("\n");
}

/** Styles for terminal output; each is the identity when colour is off. */
export interface Paint {
  /** Bold. */
  bold: (s: string) => string;
  /** Red. */
  red: (s: string) => string;
  /** Green. */
  green: (s: string) => string;
  /** Yellow. */
  yellow: (s: string) => string;
  /** Dim. */
  dim: (s: string) => string;
}

/**
 * The styles for `io`: colour only on a terminal and never with `NO_COLOR` set
 * to a non-empty value (no-color.org).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { paint } from "./_common.ts";
 *
 * const p = paint({ isTTY: true, env: { NO_COLOR: "1" } });
 * assert.equal(p.red("x"), "x");
 * ```
 */
export function paint(io: Pick<CliIo, "isTTY" | "env">): Paint {
  const on = io.isTTY && !io.env.NO_COLOR;
  const wrap = (code: number, reset: number) => (s: string) =>
    on ? `\x1b[${code}m${s}\x1b[${reset}m` : s;
  return {
    bold: wrap(1, 22),
    red: wrap(31, 39),
    green: wrap(32, 39),
    yellow: wrap(33, 39),
    dim: wrap(2, 22),
  };
}

/**
 * The `--home` a command was given, resolved against `io.cwd`; undefined when
 * it was not given (then `$HERMES_HOME`, else `~/.hermes`, applies).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { homeOption, memoryIo, parseArgs } from "./_common.ts";
 *
 * const { io } = memoryIo({ cwd: "/work" });
 * assert.equal(homeOption(parseArgs(["--home", "h"], { command: "ls" }), io), "/work/h");
 * assert.equal(homeOption(parseArgs([], { command: "ls" }), io), undefined);
 * ```
 */
export function homeOption(parsed: ParsedArgs, io: Pick<CliIo, "cwd">): string | undefined {
  const home = parsed.values["--home"];
  return home === undefined ? undefined : path.resolve(io.cwd, home);
}

/**
 * The checkpoint directory for `--home` (undefined: `$HERMES_HOME`, else
 * `~/.hermes`) with the settings found there.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as path from "node:path";
 * import * as os from "node:os";
 * import { checkpointDir } from "./_common.ts";
 *
 * const home = path.join(os.tmpdir(), "ac-cli-doc");
 * assert.equal(checkpointDir(home, {}), path.join(home, "agent-checkpoints"));
 * ```
 */
export function checkpointDir(home: string | undefined, env: Env): string {
  return loadSettings(home === undefined ? { env } : { home, env }).settings.checkpoint_dir;
}

/**
 * Writes `value` as indented JSON and a newline to `io.stdout`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { writeJson } from "./_common.ts";
 *
 * let out = "";
 * writeJson({ stdout: (t: string) => void (out += t) }, { a: 1 });
 * assert.deepEqual(JSON.parse(out), { a: 1 });
 * ```
 */
export function writeJson(io: Pick<CliIo, "stdout">, value: unknown): void {
  io.stdout(JSON.stringify(value, null, 2) + "\n");
}

/** Lines read from stdin and not yet asked for, and the questions waiting for one. */
interface StdinLines {
  rl: readline.Interface;
  lines: string[];
  waiting: Array<(line: string) => void>;
  ended: boolean;
}
let stdinLines: StdinLines | undefined;

/** No question waits: Node keeps even a paused pipe alive, so stdin is also unref'd. */
function idle(): void {
  stdinLines?.rl.pause();
  (process.stdin as { unref?: () => void }).unref?.();
  unrefd = true;
}
let unrefd = false;

/**
 * Prints `question` to stderr and resolves to the next line of
 * `process.stdin` ("" at its end). One reader serves every question, so lines
 * piped in together are answered in turn; stdin is paused between questions
 * so that it never keeps the process alive.
 */
function askStdin(question: string): Promise<string> {
  process.stderr.write(question);
  if (!stdinLines) {
    const rl = readline.createInterface({ input: process.stdin, terminal: false });
    const state: StdinLines = { rl, lines: [], waiting: [], ended: false };
    rl.on("line", (line) => {
      const waiter = state.waiting.shift();
      if (waiter) waiter(line);
      else state.lines.push(line);
      if (state.waiting.length === 0) idle();
    });
    rl.on("close", () => {
      state.ended = true;
      for (const waiter of state.waiting.splice(0)) waiter("");
    });
    stdinLines = state;
  }
  const state = stdinLines;
  const line = state.lines.shift();
  if (line !== undefined) return Promise.resolve(line);
  if (state.ended) return Promise.resolve("");
  return new Promise((resolve) => {
    state.waiting.push(resolve);
    // A fresh reader is already reading (and Deno keeps stdin alive once resumed).
    if (unrefd) {
      (process.stdin as { ref?: () => void }).ref?.();
      state.rl.resume();
    }
    unrefd = false;
  });
}

/**
 * Stops reading stdin for {@link CliIo.ask}, so that an input that stays open
 * cannot keep the program alive once its command is done (Deno keeps even a
 * paused stdin open). A no-op when nothing was asked.
 *
 * @example
 * ```ts
 * import { releaseStdin } from "./_common.ts";
 *
 * releaseStdin(); // nothing was asked: nothing to do
 * ```
 */
export function releaseStdin(): void {
  const state = stdinLines;
  if (!state) return;
  stdinLines = undefined;
  state.ended = true;
  for (const waiter of state.waiting.splice(0)) waiter("");
  try {
    state.rl.close();
    process.stdin.destroy();
  } catch {
    // Already closed.
  }
}

/**
 * The I/O of the real process: its stdout/stderr, environment, clock, current
 * directory and stdin.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import process from "node:process";
 * import { processIo } from "./_common.ts";
 *
 * assert.equal(processIo().cwd, process.cwd());
 * ```
 */
export function processIo(): CliIo {
  return {
    stdout: (t) => void process.stdout.write(t),
    stderr: (t) => void process.stderr.write(t),
    env: envOf(undefined),
    isTTY: Boolean(process.stdout.isTTY),
    now: () => Date.now(),
    cwd: process.cwd(),
    stdinIsTTY: Boolean(process.stdin.isTTY),
    ask: askStdin,
  };
}

/**
 * An in-memory {@link CliIo} for tests: output is collected, `answers` are
 * returned by `ask` in turn ("" once they run out), and `overrides` replace
 * any field.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { memoryIo } from "./_common.ts";
 *
 * const m = memoryIo({ answers: ["yes"] });
 * m.io.stdout("hi\n");
 * assert.equal(await m.io.ask("sure? "), "yes");
 * assert.equal(m.stdout(), "hi\n");
 * assert.deepEqual(m.questions, ["sure? "]);
 * ```
 */
export function memoryIo(
  options: { answers?: string[] } & Partial<CliIo> = {},
): { io: CliIo; stdout(): string; stderr(): string; questions: string[] } {
  let out = "";
  let err = "";
  const questions: string[] = [];
  const answers = [...(options.answers ?? [])];
  const { answers: _answers, ...overrides } = options;
  const io: CliIo = {
    stdout: (t) => void (out += t),
    stderr: (t) => void (err += t),
    env: {},
    isTTY: false,
    now: () => Date.now(),
    cwd: process.cwd(),
    stdinIsTTY: false,
    ask: (q) => {
      questions.push(q);
      return Promise.resolve(answers.shift() ?? "");
    },
    ...overrides,
  };
  return { io, stdout: () => out, stderr: () => err, questions };
}
