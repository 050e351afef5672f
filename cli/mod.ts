/**
 * The command line: `agent-checkpoint explain | ls | show | audit | …`.
 * `main()` takes its arguments and I/O as parameters and resolves to the exit
 * code, so it runs the same from the npm bin, `deno task cli` and tests.
 * Each command is a {@link Command} in its own module, listed once in
 * {@link COMMANDS}.
 *
 * @module
 */
import { type CliIo, type Command, NAME, processIo } from "./_io.ts";
import { terminalSafe } from "./_format.ts";
import { UsageError, wantsHelp } from "./_args.ts";
import { auditCommand, lsCommand, showCommand } from "./_checkpoints.ts";
import { explainCommand } from "./_explain.ts";
import { errorText } from "../log.ts";
import { runCommand } from "./_run.ts";
import { rollbackCommand, snapshotsCommand } from "./_workspace.ts";
import { pruneCommand } from "./_ledger.ts";
import { serveCommand } from "./_serve.ts";
import { forkCommand } from "./_fork.ts";

export type { CliIo, Command } from "./_io.ts";
export { ago } from "./_format.ts";
export { parseDuration } from "../template.ts";
export { UsageError } from "./_args.ts";

/**
 * The dispatch table: every command, in the order `--help` lists them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { COMMANDS } from "./mod.ts";
 *
 * assert.ok(COMMANDS.some((c) => c.name === "explain"));
 * ```
 */
export const COMMANDS: readonly Command[] = [
  explainCommand,
  lsCommand,
  showCommand,
  auditCommand,
  pruneCommand,
  forkCommand,
  runCommand,
  rollbackCommand,
  snapshotsCommand,
  serveCommand,
];

function overview(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `${NAME}: durable progress checkpoints for budget-capped agent runs

Usage: ${NAME} <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}   ${c.summary}`).join("\n")}

Every command takes --home DIR (default $HERMES_HOME, else ~/.hermes); those
that list take --json.
Exit codes: 0 fine, 1 explain found a problem (or a command failed, or show
found no such run), 2 a usage error (no command is one); run exits with its command's status (124 at the deadline).
Run '${NAME} <command> --help' or '${NAME} help <command>' for a command's options.`;
}

const find = (name: string) => COMMANDS.find((c) => c.name === name);

/**
 * Runs the command line with `args` (without the program name).
 *
 * @param args The arguments, e.g. `["ls", "--json"]`.
 * @param io Where to read and write; the process's own by default.
 * @returns The exit code: 0 fine, 1 `explain` found a problem, a command
 * failed or what it names is not there, 2 a usage error (no command at all is
 * one: the overview is printed) (its one-line reason and a pointer to `--help` on
 * stderr); a command such as `run` may return its child's own status.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { main } from "./mod.ts";
 * import { memoryIo } from "./_io.ts";
 *
 * const m = memoryIo();
 * assert.equal(await main(["frob"], m.io), 2);
 * assert.equal(m.stderr(), 'agent-checkpoint: unknown command "frob" (see agent-checkpoint --help)\n');
 * assert.equal(await main(["help", "ls"], m.io), 0);
 * assert.match(m.stdout(), /^Usage: agent-checkpoint ls/);
 * assert.equal(await main([], m.io), 2); // no command: the overview, as a usage error
 * ```
 */
export async function main(args: string[], io: CliIo = processIo()): Promise<number> {
  const usage = (error: UsageError) => {
    io.stderr(`${NAME}: ${terminalSafe(error.message)} (see ${NAME} ${error.see})\n`);
    return 2;
  };
  const [name = "", ...rest] = args;
  if (args.length === 0) {
    io.stdout(`${overview()}\n`);
    return 2;
  }
  if (name === "--help" || name === "-h") {
    io.stdout(`${overview()}\n`);
    return 0;
  }
  if (name === "help") {
    const topic = rest[0];
    if (topic === undefined) {
      io.stdout(`${overview()}\n`);
      return 0;
    }
    const command = find(topic);
    if (!command) return usage(new UsageError(`unknown command "${topic}"`));
    io.stdout(`${command.help}\n`);
    return 0;
  }
  const command = find(name);
  if (!command) return usage(new UsageError(`unknown command "${name}"`));
  if (wantsHelp(rest)) {
    io.stdout(`${command.help}\n`);
    return 0;
  }
  try {
    return await command.run(rest, io);
  } catch (error) {
    if (error instanceof UsageError) return usage(error);
    io.stderr(`${NAME}: ${name} failed: ${terminalSafe(errorText(error))}\n`);
    return 1;
  }
}
