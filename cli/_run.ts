/**
 * The `run` command: the supervisor's command line.
 *
 * @module
 */
import * as path from "node:path";
import { type CliIo, type Command, NAME } from "./_io.ts";
import { parseArgs, secondsOption, UsageError } from "./_args.ts";
import * as os from "node:os";
import {
  type RetryOptions,
  supervise,
  type SuperviseOptions,
  superviseRetrying,
} from "../supervise/mod.ts";

const HELP = `Usage: ${NAME} run [--deadline S] [--budget S] [--grace S] [--run-id ID]
                          [--retries N [--retry-delay S] [--retry-on LIST]]
                          [--home DIR] -- COMMAND [ARG...]

Runs COMMAND under a deadline, and leaves a checkpoint file when it is cut off.
A budget is a nudge; a deadline is a stop.

  --deadline S   the hard stop: at S seconds (or 90s, 15m, 2h) the command's whole
                 process group gets SIGTERM, then SIGKILL after the grace, and this
                 exits 124, as timeout(1) does
  --budget S     the time the command should plan to finish in (default: the
                 deadline). A library inside the command takes it as its time cap
                 and tells the model to wrap up before it; it never kills anything
  --grace S      seconds between SIGTERM and SIGKILL at the deadline (default 10)
  --run-id ID    the run id, naming the checkpoint file (default:
                 $AGENT_CHECKPOINT_RUN_ID, else a fresh run-<time>-<random>; in a
                 kanban task, always the task id)
  --home DIR     the profile directory; also the command's HERMES_HOME
  --retries N    when the command dies, start it again with the same run id, up
                 to N times, all inside the one --deadline; each retry resumes
                 where the attempt before it stopped. Retrying stops when another
                 machine holds the run (and says so)
  --retry-delay S  seconds before the first retry, doubled each time (default 1)
  --retry-on LIST  what is retried, as exit statuses and signals, comma-separated
                 (as in 1,3,SIGKILL); default: any signal, and any exit status
                 but 0, 124 (the deadline) and 2 (a usage error)

COMMAND gets AGENT_CHECKPOINT_RUN_ID and AGENT_CHECKPOINT_DEADLINE (the budget's
end in ms since the epoch) in its environment. stdin, stdout and stderr pass
through; SIGINT, SIGTERM and SIGHUP are passed on to its process group.

The checkpoint file (<checkpoint_dir>/<run id>.md) gets a record of the command,
how it ended, its exit status or signal, the elapsed time and its last lines of
output, keeping whatever the command and its agent wrote there. It is written at
the deadline, when the command fails or dies by a signal, and after a clean exit
only when the file already exists.

Exit status: the command's (with --retries, its last attempt's); 128+N when
signal N ended it; 124 at the deadline; 126 or 127 when it could not start; 2
for a usage error.

Example (CI):
  ${NAME} run --deadline 900 -- node agent.js`;

/** `--retries`, `--retry-delay` and `--retry-on`, when given. */
function retryOptions(v: Record<string, string | undefined>): RetryOptions | undefined {
  const n = v["--retries"];
  if (n === undefined) {
    for (const flag of ["--retry-delay", "--retry-on"]) {
      if (v[flag] !== undefined) throw new UsageError(`${flag} needs --retries N`);
    }
    return undefined;
  }
  if (!/^\d+$/.test(n) || Number(n) > 1000) {
    throw new UsageError(`--retries must be a whole number from 0 to 1000, got ${n}`);
  }
  const retry: RetryOptions = { retries: Number(n) };
  if (v["--retry-delay"] !== undefined) {
    retry.delaySeconds = secondsOption("--retry-delay", v["--retry-delay"], { allowZero: true });
  }
  const on = v["--retry-on"];
  if (on !== undefined) {
    const codes: number[] = [];
    const signals: string[] = [];
    const known = os.constants.signals as Record<string, number | undefined>;
    for (const item of on.split(",").map((x) => x.trim()).filter((x) => x !== "")) {
      if (/^\d+$/.test(item) && Number(item) <= 255) codes.push(Number(item));
      else {
        const name = item.toUpperCase().startsWith("SIG")
          ? item.toUpperCase()
          : `SIG${item.toUpperCase()}`;
        if (known[name] === undefined) {
          throw new UsageError(
            `--retry-on takes exit statuses (0 to 255) and signal names (SIGKILL), got ${item}`,
          );
        }
        signals.push(name);
      }
    }
    if (codes.length + signals.length === 0) {
      throw new UsageError("--retry-on needs at least one exit status or signal");
    }
    retry.on = { codes, signals };
  }
  return retry;
}

/** The supervisor's options from `run`'s arguments; undefined for `--help`. */
function runOptions(
  args: string[],
  io: CliIo,
): (SuperviseOptions & { retry?: RetryOptions }) | undefined {
  if (!args.includes("--") && !args.includes("--help") && !args.includes("-h")) {
    throw new UsageError(`run needs -- and a command, as in: ${NAME} run --deadline 900 -- CMD`);
  }
  const p = parseArgs(args, {
    command: "run",
    values: [
      "--deadline",
      "--budget",
      "--grace",
      "--run-id",
      "--retries",
      "--retry-delay",
      "--retry-on",
    ],
    rest: true,
  });
  if (p.help) return undefined;
  if (p.rest === undefined) {
    throw new UsageError(`run needs -- and a command, as in: ${NAME} run --deadline 900 -- CMD`);
  }
  if (p.rest.length === 0) throw new UsageError("run needs a command after --");
  const v = p.values;
  const options: SuperviseOptions & { retry?: RetryOptions } = {
    command: p.rest,
    env: io.env,
    cwd: io.cwd,
  };
  const retry = retryOptions(v);
  if (retry) options.retry = retry;
  if (v["--deadline"] !== undefined) {
    options.deadlineSeconds = secondsOption("--deadline", v["--deadline"]);
  }
  if (v["--budget"] !== undefined) {
    options.budgetSeconds = secondsOption("--budget", v["--budget"]);
  }
  if (v["--grace"] !== undefined) {
    options.graceSeconds = secondsOption("--grace", v["--grace"], { allowZero: true });
  }
  if (v["--run-id"] !== undefined) options.runId = v["--run-id"];
  if (v["--home"] !== undefined) options.home = path.resolve(io.cwd, v["--home"]);
  if (
    options.budgetSeconds !== undefined && options.deadlineSeconds !== undefined &&
    options.budgetSeconds > options.deadlineSeconds
  ) {
    throw new UsageError(
      `--budget ${v["--budget"]} is past --deadline ${
        v["--deadline"]
      }: a nudge after the stop never reaches the model`,
    );
  }
  return options;
}

/**
 * The `run` command of the command line: parses its arguments and runs
 * {@linkcode supervise} with this process's stdio; resolves to the exit
 * status to leave with.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runCommand } from "./_run.ts";
 * import { memoryIo } from "./_io.ts";
 * import { UsageError } from "./_args.ts";
 *
 * const { io } = memoryIo();
 * await assert.rejects(runCommand.run(["--deadline", "0", "--", "true"], io), UsageError);
 * await assert.rejects(runCommand.run(["--deadline", "9", "true"], io), /needs --/);
 * ```
 */
export const runCommand: Command = {
  name: "run",
  summary: "run a command under a deadline; leave a checkpoint when it is cut off",
  help: HELP,
  async run(args: string[], io: CliIo): Promise<number> {
    let options: (SuperviseOptions & { retry?: RetryOptions }) | undefined;
    try {
      options = runOptions(args, io);
    } catch (error) {
      // Point at this command's help, not the program's.
      if (error instanceof UsageError && error.see === "--help") {
        throw new UsageError(error.message, "run --help");
      }
      throw error;
    }
    if (options === undefined) {
      io.stdout(HELP + "\n");
      return 0;
    }
    options.notice = (line) => io.stderr(`${NAME} run: ${line}\n`);
    const { retry, ...supervised } = options;
    if (retry) return (await superviseRetrying(supervised, retry)).exitCode;
    return (await supervise(supervised)).exitCode;
  },
};
