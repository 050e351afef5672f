/**
 * Where the command line reads and writes (`CliIo`, the real process's and
 * an in-memory one for tests), the `Command` shape every entry of the
 * dispatch table has, and JSON output.
 *
 * @module
 */
import process from "node:process";
import { type Env, envOf } from "../config.ts";
import { askStdin } from "./_stdin.ts";

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
 * runtime), 2 a usage error. Throwing a `UsageError` is the same as
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
 * Writes `value` as indented JSON and a newline to `io.stdout`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { writeJson } from "./_io.ts";
 *
 * let out = "";
 * writeJson({ stdout: (t: string) => void (out += t) }, { a: 1 });
 * assert.deepEqual(JSON.parse(out), { a: 1 });
 * ```
 */
export function writeJson(io: Pick<CliIo, "stdout">, value: unknown): void {
  io.stdout(JSON.stringify(value, null, 2) + "\n");
}

/**
 * The I/O of the real process: its stdout/stderr, environment, clock, current
 * directory and stdin.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import process from "node:process";
 * import { processIo } from "./_io.ts";
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
 * import { memoryIo } from "./_io.ts";
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
