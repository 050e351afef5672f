/**
 * The home directory a command works in (`--home`, resolved against the
 * current directory, else `$HERMES_HOME`, else `~/.hermes`) and its
 * checkpoint directory.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { type Env, loadSettings, resolveHome } from "../config.ts";
import type { ParsedArgs } from "./_args.ts";
import type { CliIo } from "./_io.ts";
import { moveIn } from "../_home.ts";
import { UsageError } from "./_args.ts";

/**
 * The `--home` a command was given, resolved against `io.cwd` (the one way
 * every command resolves it); undefined when it was not given (then
 * `$HERMES_HOME`, else `~/.hermes`, applies).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { homeOption } from "./_home.ts";
 * import { memoryIo } from "./_io.ts";
 * import { parseArgs } from "./_args.ts";
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
 * `io.cwd`, else `$HERMES_HOME`, else `~/.hermes`. A home that is not a
 * directory is a usage error naming it: a mistyped `--home` must not read as
 * an empty one.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { homeDir } from "./_home.ts";
 * import { memoryIo } from "./_io.ts";
 *
 * const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "ac-home-doc-"));
 * fs.mkdirSync(path.join(cwd, "h"));
 * const { io } = memoryIo({ cwd, env: { HERMES_HOME: path.join(cwd, "h") } });
 * assert.equal(homeDir({ values: { "--home": "h" } }, io), path.join(cwd, "h"));
 * assert.equal(homeDir({ values: {} }, io), path.join(cwd, "h"));
 * assert.throws(() => homeDir({ values: { "--home": "typo" } }, io), /does not exist/);
 * ```
 */
export function homeDir(
  parsed: Pick<ParsedArgs, "values">,
  io: Pick<CliIo, "cwd" | "env"> & Partial<Pick<CliIo, "stderr">>,
): string {
  const home = resolveHome(homeOption(parsed, io), io.env);
  let isDir: boolean | undefined;
  try {
    isDir = fs.statSync(home).isDirectory();
  } catch (error) {
    if ((error as { code?: unknown }).code !== "ENOENT") isDir = true; // unreadable: its reader says why
  }
  if (isDir !== true) {
    const given = parsed.values["--home"] !== undefined
      ? "--home"
      : io.env.HERMES_HOME
      ? "$HERMES_HOME"
      : "the default home";
    throw new UsageError(
      `the home ${home} (${given}) ${isDir === false ? "is not a directory" : "does not exist"}`,
    );
  }
  // State an earlier version left in Hermes's folder is moved in before a command reads it.
  moveIn(home, (_level, message) => io.stderr?.(`agent-checkpoint: ${message}\n`));
  return home;
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
 * import { checkpointDir } from "./_home.ts";
 *
 * const home = path.join(os.tmpdir(), "ac-cli-doc");
 * assert.equal(checkpointDir(home, {}), path.join(home, "agent-checkpoints"));
 * ```
 */
export function checkpointDir(home: string | undefined, env: Env): string {
  return loadSettings(home === undefined ? { env } : { home, env }).settings.checkpoint_dir;
}
