/**
 * One reader of the process's stdin for the questions commands ask, which
 * never keeps the program alive.
 *
 * @module
 */
import process from "node:process";
import * as readline from "node:readline";

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
export function askStdin(question: string): Promise<string> {
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
 * import { releaseStdin } from "./_stdin.ts";
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
