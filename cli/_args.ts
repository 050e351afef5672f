/**
 * A command's arguments: the usage error, the parser (`node:util`'s, with
 * the command line's messages) and the options that take seconds.
 *
 * @module
 */
import { parseArgs as nodeParseArgs } from "node:util";
import { parseDuration } from "../template.ts";

/**
 * A usage error: the main loop prints `agent-checkpoint: MESSAGE (see
 * agent-checkpoint SEE)` on stderr and exits 2.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { UsageError } from "./_args.ts";
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
 * import { parseArgs, UsageError } from "./_args.ts";
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
 * import { wantsHelp } from "./_args.ts";
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
 * The seconds an option such as `--budget 90` or `--budget 15m` names; a
 * {@link UsageError} unless it is a duration (or bare seconds) greater than 0
 * (or ≥ 0 with `allowZero`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { secondsOption, UsageError } from "./_args.ts";
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
