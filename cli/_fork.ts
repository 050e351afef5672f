/**
 * `agent-checkpoint fork RUN --at STEP --as NEW`: a new run whose journal is
 * RUN's first STEP steps, so its first start replays them and goes live at
 * step STEP + 1.
 *
 * @module
 */
import * as fs from "node:fs";
import { ForkError, forkRun } from "../run/_fork.ts";
import { isPostgresUrl, openStore, type RunStore, storeFile, thisHost } from "../store/mod.ts";
import { terminalSafe } from "./_format.ts";
import { type CliIo, type Command, NAME, writeJson } from "./_io.ts";
import { homeDir } from "./_home.ts";
import { parseArgs, UsageError } from "./_args.ts";
import { homeSettings, openLedger } from "./_ledger.ts";

const FORK_HELP =
  `Usage: ${NAME} fork RUN --at STEP --as NEW [--attempt N] [--store URL] [--home DIR] [--json]

Makes run NEW, whose run journal is RUN's first STEP steps: NEW's first start
replays them (no model call, no tool run) and goes live at step STEP + 1. A
step is a model call and the tool calls made after it, before the next model
call. NEW is written as one ended attempt, forked from RUN, so its first start
is its attempt 2 (show NEW --steps lists both).

  --at STEP     the steps copied, from 1 (at most RUN's steps)
  --as NEW      the new run's id: not a run the ledger knows
  --attempt N   RUN's attempt to copy (default: the one that got furthest, as a
                retry's replay picks it)
  --store URL   the fleet store at this postgres:// URL (default: the store
                setting, or AGENT_CHECKPOINT_STORE)
  --home DIR    the profile directory (default $HERMES_HOME, else ~/.hermes)
  --json        one JSON object: { runId, from, attempt, step, steps, models, tools }`;

/** A whole number of an option, else a usage error. */
function wholeOption(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  if (!/^-?\d+$/.test(text.trim())) {
    throw new UsageError(`${flag} takes a whole number, not "${text}"`, "fork --help");
  }
  return Number(text);
}

/** The run ledger opened to write: the fleet store, else the home's embedded one (or none). */
function ledgerToWrite(home: string, io: CliIo, store: string | undefined): RunStore | undefined {
  const settings = homeSettings(home, io);
  // The fleet store (`--store URL`, else the setting), opened as `ls` opens it: it writes too.
  if (store !== undefined || isPostgresUrl(settings.store)) {
    return openLedger(home, settings, io, store);
  }
  if (!settings.ledger || !fs.existsSync(storeFile(home))) return undefined;
  return openStore({
    home,
    settings,
    log: (_level, message) => io.stderr(`${NAME}: ${terminalSafe(message)}\n`),
  });
}

/**
 * `agent-checkpoint fork`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { forkCommand } from "./_fork.ts";
 * import { memoryIo } from "./_io.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * const m = memoryIo();
 * assert.equal(await forkCommand.run(["a", "--at", "0", "--as", "b", "--home", home], m.io), 1);
 * assert.match(m.stderr(), /a fork's step is a whole number from 1, not 0/);
 * assert.equal(await forkCommand.run(["a", "--at", "1", "--as", "b", "--home", home], m.io), 1);
 * assert.match(m.stderr(), /no such run "a"/);
 * ```
 */
export const forkCommand: Command = {
  name: "fork",
  summary: "make a new run whose journal is a run's first steps (its start replays them)",
  help: FORK_HELP,
  async run(args: string[], io: CliIo): Promise<number> {
    const parsed = parseArgs(args, {
      command: "fork",
      switches: ["--json"],
      values: ["--at", "--as", "--attempt", "--store"],
      positional: ["RUN"],
    });
    const runId = parsed.positional[0]!;
    const as = parsed.values["--as"];
    const at = wholeOption(parsed.values["--at"], "--at");
    if (at === undefined) throw new UsageError("fork needs --at STEP", "fork --help");
    if (as === undefined || as === "") throw new UsageError("fork needs --as NEW", "fork --help");
    const attempt = wholeOption(parsed.values["--attempt"], "--attempt");
    const say = (message: string) => {
      io.stderr(`${NAME}: fork: ${terminalSafe(message)}\n`);
      return 1;
    };
    if (at < 1) return say(`a fork's step is a whole number from 1, not ${at}`);
    const home = homeDir(parsed, io);
    const store = ledgerToWrite(home, io, parsed.values["--store"]);
    if (!store) return say(`no such run "${runId}": no run ledger in ${home}`);
    try {
      const made = await forkRun(store, runId, {
        at,
        as,
        ...(attempt !== undefined ? { attempt } : {}),
        host: thisHost(),
        now: io.now(),
      });
      if (parsed.switches.has("--json")) writeJson(io, { ...made });
      else {
        io.stdout(
          `Forked ${
            terminalSafe(runId)
          } at step ${at} (its attempt ${made.attempt}, of ${made.steps} steps) as ${
            terminalSafe(as)
          }: ${made.models} model call(s) and ${made.tools} tool call(s) copied. Its first start replays them and goes live at step ${
            at + 1
          }.\n`,
        );
      }
      return 0;
    } catch (error) {
      if (error instanceof ForkError || error instanceof RangeError) return say(error.message);
      throw error;
    } finally {
      await store.close();
    }
  },
};
