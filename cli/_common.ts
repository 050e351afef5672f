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
import { parseArgs as nodeParseArgs } from "node:util";
import { type Env, envOf, loadSettings, resolveHome } from "../config.ts";

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
  const options: NodeParseArgsOptions = {
    home: { type: "string" },
    help: { type: "boolean", short: "h" },
  };
  for (const flag of spec.values ?? []) options[flag.replace(/^--/, "")] = { type: "string" };
  for (const flag of spec.switches ?? []) options[flag.replace(/^--/, "")] = { type: "boolean" };
  for (const [short, long] of Object.entries(spec.aliases ?? {})) {
    const option = options[long.replace(/^--/, "")];
    if (option && /^-[A-Za-z0-9]$/.test(short)) option.short = short.slice(1);
  }
  let parsed: ReturnType<typeof nodeParseArgs>;
  try {
    parsed = nodeParseArgs({ args, options, strict: true, allowPositionals: true, tokens: true });
  } catch (error) {
    if (wantsHelp(args)) return { values: {}, switches: new Set(), positional: [], help: true };
    throw usageOf(error, spec, options);
  }
  const out: ParsedArgs = { values: {}, switches: new Set(), positional: [], help: false };
  for (const token of parsed.tokens ?? []) {
    if (token.kind === "option-terminator") {
      if (spec.rest) {
        out.rest = args.slice(token.index + 1);
        break;
      }
    } else if (token.kind === "positional") out.positional.push(token.value);
    else if (token.name === "help") out.help = true;
    else if (options[token.name]?.type === "boolean") out.switches.add(`--${token.name}`);
    else {
      const value = token.value ?? "";
      if (value === "") throw new UsageError(`--${token.name} needs a value`);
      out.values[`--${token.name}`] = value;
    }
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

type NodeParseArgsOptions = Record<
  string,
  { type: "string" | "boolean"; short?: string }
>;

/**
 * Whether `--help`/`-h` is among a command's own options (not after `--`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { wantsHelp } from "./_common.ts";
 *
 * assert.equal(wantsHelp(["ls", "-h"]), true);
 * assert.equal(wantsHelp(["--", "sh", "--help"]), false);
 * ```
 */
export function wantsHelp(args: string[]): boolean {
  for (const arg of args) {
    if (arg === "--") return false;
    if (arg === "--help" || arg === "-h") return true;
  }
  return false;
}

/** `node:util`'s parse error as the command line words it. */
function usageOf(error: unknown, spec: ArgSpec, options: NodeParseArgsOptions): Error {
  const code = (error as { code?: unknown })?.code;
  const message = error instanceof Error ? error.message : String(error);
  // The option named first in the message: '--home <value>', '-y, --yes', '-x'.
  const named = /--[^\s'<,]+/.exec(message)?.[0] ?? /'(-[^\s'<,]*)/.exec(message)?.[1] ?? "";
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") {
    return new UsageError(`unknown option ${named} for ${spec.command}`);
  }
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") {
    return options[named.replace(/^--/, "")]?.type === "boolean"
      ? new UsageError(`${named} takes no value`)
      : new UsageError(`${named} needs a value`);
  }
  return new UsageError(message.split("\n")[0] ?? message);
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

// C0 controls, DEL, C1 controls, and the Unicode line, paragraph and
// bidirectional-override characters that can make a line read other than it is.
// deno-lint-ignore no-control-regex
const UNSAFE = /[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
// deno-lint-ignore no-control-regex
const UNSAFE_BUT_LINES = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const NAMED: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };
const escaped = (c: string) =>
  NAMED[c] ??
    `\\${c.charCodeAt(0) < 0x100 ? "x" : "u"}${
      c.charCodeAt(0).toString(16).padStart(c.charCodeAt(0) < 0x100 ? 2 : 4, "0")
    }`;

/**
 * Text the command line did not write itself (a run id, a file name, a
 * summary, the agent's notes, an error) made safe to print on a terminal:
 * every control character is shown escaped (`ESC` as `\x1b`, `\n`, `\t`,
 * `\r`, others as `\xHH` or `\uHHHH`), so that no escape sequence in the data can clear the screen,
 * retitle the window or write the clipboard. One line by default (a newline
 * shows as `\n`); with `lines`, newlines and tabs stay and a `\r` before a
 * newline is dropped. Every command prints data through it; `--json` output
 * needs none, JSON escapes control characters itself.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { terminalSafe } from "./_common.ts";
 *
 * assert.equal(terminalSafe("run\x1b[2J-1"), "run\\x1b[2J-1");
 * assert.equal(terminalSafe("a\nb\x07"), "a\\nb\\x07");
 * assert.equal(terminalSafe("notes\r\n\tdone\n", { lines: true }), "notes\n\tdone\n");
 * assert.equal(terminalSafe("café ✓"), "café ✓");
 * ```
 */
export function terminalSafe(text: string, options: { lines?: boolean } = {}): string {
  const s = String(text);
  return options.lines
    ? s.replace(/\r\n/g, "\n").replace(UNSAFE_BUT_LINES, escaped)
    : s.replace(UNSAFE, escaped);
}

/**
 * Columns padded to their widest cell; `paint` styles the first row. Every
 * cell is printed through {@link terminalSafe}.
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
  rows = rows.map((r) => r.map((cell) => terminalSafe(cell)));
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
 * The `--home` a command was given, resolved against `io.cwd` (the one way
 * every command resolves it); undefined when it was not given (then
 * `$HERMES_HOME`, else `~/.hermes`, applies).
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
export function homeOption(
  parsed: Pick<ParsedArgs, "values">,
  io: Pick<CliIo, "cwd">,
): string | undefined {
  const home = parsed.values["--home"];
  return home === undefined ? undefined : path.resolve(io.cwd, home);
}

/**
 * The home directory a command works in: `--home` resolved against
 * `io.cwd`, else `$HERMES_HOME`, else `~/.hermes`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { homeDir, memoryIo } from "./_common.ts";
 *
 * const { io } = memoryIo({ cwd: "/work", env: { HERMES_HOME: "/srv/h" } });
 * assert.equal(homeDir({ values: { "--home": "h" } }, io), "/work/h");
 * assert.equal(homeDir({ values: {} }, io), "/srv/h");
 * ```
 */
export function homeDir(
  parsed: Pick<ParsedArgs, "values">,
  io: Pick<CliIo, "cwd" | "env">,
): string {
  return resolveHome(homeOption(parsed, io), io.env);
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
