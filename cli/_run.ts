/**
 * The `run` command: the supervisor's command line.
 *
 * @module
 */
import * as path from "node:path";
import { type CliIo, type Command, NAME } from "./_io.ts";
import { parseArgs, secondsOption, UsageError } from "./_args.ts";
import { supervise, type SuperviseOptions } from "../supervise/mod.ts";

const HELP = `Usage: ${NAME} run [--deadline S] [--budget S] [--grace S] [--run-id ID]
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

COMMAND gets AGENT_CHECKPOINT_RUN_ID and AGENT_CHECKPOINT_DEADLINE (the budget's
end in ms since the epoch) in its environment. stdin, stdout and stderr pass
through; SIGINT, SIGTERM and SIGHUP are passed on to its process group.

The checkpoint file (<checkpoint_dir>/<run id>.md) gets a record of the command,
how it ended, its exit status or signal, the elapsed time and its last lines of
output, keeping whatever the command and its agent wrote there. It is written at
the deadline, when the command fails or dies by a signal, and after a clean exit
only when the file already exists.

Exit status: the command's; 128+N when signal N ended it; 124 at the deadline;
126 or 127 when it could not start; 2 for a usage error.

Example (CI):
  ${NAME} run --deadline 900 -- node agent.js`;

/** The supervisor's options from `run`'s arguments; undefined for `--help`. */
function runOptions(args: string[], io: CliIo): SuperviseOptions | undefined {
  if (!args.includes("--") && !args.includes("--help") && !args.includes("-h")) {
    throw new UsageError(`run needs -- and a command, as in: ${NAME} run --deadline 900 -- CMD`);
  }
  const p = parseArgs(args, {
    command: "run",
    values: ["--deadline", "--budget", "--grace", "--run-id"],
    rest: true,
  });
  if (p.help) return undefined;
  if (p.rest === undefined) {
    throw new UsageError(`run needs -- and a command, as in: ${NAME} run --deadline 900 -- CMD`);
  }
  if (p.rest.length === 0) throw new UsageError("run needs a command after --");
  const v = p.values;
  const options: SuperviseOptions = { command: p.rest, env: io.env, cwd: io.cwd };
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
    let options: SuperviseOptions | undefined;
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
    return (await supervise(options)).exitCode;
  },
};
