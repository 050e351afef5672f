/**
 * `agent-checkpoint rollback` and `agent-checkpoint snapshots`: restoring a
 * project from its workspace snapshots, and looking after the store.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { type CliIo, type Command, NAME, writeJson } from "./_io.ts";
import { homeDir } from "./_home.ts";
import { paint, size, table } from "./_format.ts";
import { parseArgs, UsageError } from "./_args.ts";
import { loadSettings } from "../config.ts";
import {
  clearStore,
  listProjects,
  listSnapshots,
  pruneStore,
  rollback,
  rollbackDiff,
  type RollbackOptions,
  type RollbackResult,
  type WorkspaceSettings,
} from "../workspace/mod.ts";

const ROLLBACK_HELP =
  `Usage: ${NAME} rollback [N|ID | --run RUN] [PATH] [--all] [--dry-run] [--project DIR] [--home DIR] [--json]
       ${NAME} rollback diff [N|ID | --run RUN] [PATH] [--all] [--project DIR] [--home DIR] [--json]

Rolls the project back to one of its workspace snapshots. N counts back from
the newest of the agent's snapshots (1, the default, is the newest); ID is a
snapshot's commit id or a unique prefix of it ('snapshots list' shows both).
The current tree is snapshotted first, so the rollback can itself be rolled
back: the output names that snapshot's id. A rollback's own snapshots are not
numbered (so N means the same snapshot before and after a rollback); reach
them by id.

Only files whose content is still what the agent last wrote (or that the agent
deleted) are restored; a file the agent created since the snapshot is removed
only if it is still as the agent wrote it. Files edited by hand since, or never
touched by the agent, are left alone and listed. Empty directories are kept as
they were: the snapshot's that are gone are made again, and a directory the
agent made is removed once emptied of its files (both listed with a trailing /).

  --run RUN      undo the whole run RUN: restore the project to before its
                 first snapshot (its oldest in this project), keeping hand
                 edits the same way
  PATH           restore this file (or the files under this directory) alone
  --all          restore everything, hand edits included
  --dry-run      say what would be done, change nothing
  --project DIR  the project holding DIR (default: the current directory)
  --json         one JSON object instead of text

'rollback diff' changes nothing: it shows what the same rollback would do,
and the diff it would apply to the current files.`;

const SNAPSHOTS_HELP = `Usage: ${NAME} snapshots [--home DIR] [--json]
       ${NAME} snapshots list [--project DIR] [--home DIR] [--json]
       ${NAME} snapshots prune [--home DIR] [--json]
       ${NAME} snapshots clear [--yes] [--home DIR]

Lists the projects in the workspace snapshot store, with their snapshot
counts, and the store's size.

  list    one project's snapshots (default: the one holding the current
          directory): number, id, time, reason, and the files each differs
          in from the one before; a rollback's own snapshots are marked
          "rollback" and have no number (use their id)
  prune   keep each project at max_snapshots and the store under
          max_total_size_mb, forget projects whose directory is gone, and
          drop every object no snapshot needs
  clear   delete every snapshot of every project; asks first on a terminal,
          and without one refuses unless --yes is given`;

function homeOf(parsed: { values: Record<string, string> }, io: CliIo): string {
  return homeDir(parsed, io);
}

function settingsOf(home: string, io: CliIo): WorkspaceSettings {
  return loadSettings({ home, env: io.env }).settings; // never throws: problems are warnings
}

function looksLikeTarget(word: string): boolean {
  return /^[1-9]\d{0,2}$/.test(word) || /^[0-9a-f]{4,40}$/i.test(word);
}

/**
 * The id of run `runId`'s oldest snapshot in the project: rolling back to it
 * puts the project as it was before the run's first change.
 */
function firstSnapshotOf(runId: string, options: RollbackOptions): string {
  let snapshots: ReturnType<typeof listSnapshots>["snapshots"] = [];
  try {
    snapshots = listSnapshots(options).snapshots;
  } catch (error) {
    if (!(error instanceof RangeError)) throw error;
  }
  const own = snapshots.filter((s) => s.kind === "agent" && s.runId === runId);
  const first = own.at(-1);
  if (first === undefined) {
    const runs = [...new Set(snapshots.flatMap((s) => s.runId === undefined ? [] : [s.runId]))];
    throw new Error(
      `No snapshot of run ${JSON.stringify(runId)} in this project${
        runs.length > 0 ? ` (its snapshots are of ${runs.slice(0, 5).join(", ")})` : ""
      }; '${NAME} snapshots list' shows them`,
    );
  }
  return first.id;
}

function printResult(r: RollbackResult, io: CliIo, title: string): void {
  const p = paint(io);
  const lines = [
    `${p.bold(title)} ${r.snapshot.id.slice(0, 12)} (${r.snapshot.at}, ${r.snapshot.reason})`,
    `project: ${r.project}`,
  ];
  if (r.before) {
    lines.push(
      `snapshot taken first: ${r.before.slice(0, 12)} (to undo: ${NAME} rollback ${
        r.before.slice(0, 12)
      })`,
    );
  }
  const verb = r.dryRun ? "would restore" : "restored";
  for (const f of r.restored) lines.push(`  ${p.green(verb)}  ${f}`);
  for (const f of r.removed) {
    lines.push(`  ${p.green(r.dryRun ? "would remove" : "removed")}  ${f}`);
  }
  if (r.skipped.length) {
    lines.push(`skipped (use --all to restore them anyway):`);
    for (const s of r.skipped) lines.push(`  ${p.yellow("kept")}  ${s.path}  (${s.reason})`);
  }
  if (!r.restored.length && !r.removed.length && !r.skipped.length) {
    lines.push("nothing to do: the files are as in the snapshot");
  }
  io.stdout(lines.join("\n") + "\n");
}

/**
 * `agent-checkpoint rollback`: restore a project from a workspace snapshot,
 * keeping hand edits unless `--all`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { memoryIo } from "./_io.ts";
 * import { rollbackCommand } from "./_workspace.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-rbcli-doc-"));
 * const project = fs.mkdtempSync(path.join(os.tmpdir(), "ac-rbcli-proj-"));
 * const m = memoryIo();
 * const code = await rollbackCommand.run(["--home", home, "--project", project], m.io);
 * assert.equal(code, 1);
 * assert.match(m.stderr(), /no snapshots/i);
 * ```
 */
export const rollbackCommand: Command = {
  name: "rollback",
  summary: "restore the files the agent changed from a workspace snapshot",
  help: ROLLBACK_HELP,
  // deno-lint-ignore require-await
  async run(args: string[], io: CliIo): Promise<number> {
    const parsed = parseArgs(args, {
      command: "rollback",
      values: ["--project", "--run"],
      switches: ["--all", "--dry-run", "--json"],
      aliases: { "-n": "--dry-run" },
      optional: ["N|ID", "PATH", "PATH"],
    });
    if (parsed.help) {
      io.stdout(ROLLBACK_HELP + "\n");
      return 0;
    }
    const words = [...parsed.positional];
    const diff = words[0] === "diff";
    if (diff) words.shift();
    let target: string | undefined;
    if (words.length === 2 || (words[0] !== undefined && looksLikeTarget(words[0]))) {
      target = words.shift();
      if (target !== undefined && !looksLikeTarget(target)) {
        throw new UsageError(
          `"${target}" is neither a snapshot number nor an id`,
          "rollback --help",
        );
      }
    }
    const runId = parsed.values["--run"];
    if (runId !== undefined && target !== undefined) {
      throw new UsageError(
        `--run ${runId} names the snapshot already: drop "${target}"`,
        "rollback --help",
      );
    }
    if (runId !== undefined && words.length === 2) {
      throw new UsageError(`unexpected argument "${words[0]}"`, "rollback --help");
    }
    if (words.length > 1) {
      throw new UsageError(`unexpected argument "${words[1]}"`, "rollback --help");
    }
    if (diff && parsed.switches.has("--dry-run")) {
      throw new UsageError(
        "rollback diff changes nothing already: drop --dry-run",
        "rollback --help",
      );
    }
    const home = homeOf(parsed, io);
    const projectDir = path.resolve(io.cwd, parsed.values["--project"] ?? ".");
    if (!fs.existsSync(projectDir)) {
      throw new UsageError(`--project ${projectDir} does not exist`, "rollback --help");
    }
    const options: RollbackOptions = {
      home,
      project: projectDir,
      cwd: io.cwd,
      env: io.env,
      settings: settingsOf(home, io),
      all: parsed.switches.has("--all"),
      dryRun: parsed.switches.has("--dry-run"),
      ...(target === undefined ? {} : { target }),
      ...(words[0] === undefined ? {} : { path: words[0] }),
    };
    try {
      if (runId !== undefined) options.target = firstSnapshotOf(runId, options);
      if (diff) {
        const d = rollbackDiff(options);
        if (parsed.switches.has("--json")) writeJson(io, d);
        else {
          printResult(d, io, "rollback diff: to snapshot");
          io.stdout(d.patch);
        }
        return 0;
      }
      const r = rollback(options);
      if (parsed.switches.has("--json")) writeJson(io, r);
      else {printResult(
          r,
          io,
          r.dryRun ? "dry run: rollback to snapshot" : "rolled back to snapshot",
        );}
      return 0;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      io.stderr(`${NAME} rollback: ${message.charAt(0).toLowerCase()}${message.slice(1)}\n`);
      return 1;
    }
  },
};

function snapshotTable(
  project: string,
  snapshots: ReturnType<typeof listSnapshots>["snapshots"],
  p: ReturnType<typeof paint>,
): string {
  const rows = [["N", "ID", "TIME", "REASON", "FILES CHANGED"]];
  for (const s of snapshots) {
    const why = [s.reason];
    if (s.runId !== undefined) why.push(`run ${s.runId}`);
    const shown = s.files.slice(0, 3).join(", ") + (s.files.length > 3 ? ", …" : "");
    rows.push([
      s.number === undefined ? "rollback" : String(s.number),
      s.short,
      s.at,
      why.join(", "),
      `${s.files.length}${shown ? ` (${shown})` : ""}`,
    ]);
  }
  return `snapshots of ${project}, newest first\n${table(rows, p.bold)}\n` +
    `roll back with: ${NAME} rollback N (or ID)\n`;
}

/**
 * `agent-checkpoint snapshots [list|prune|clear]`: the workspace snapshot store's
 * projects and size, pruning it, or deleting it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { memoryIo } from "./_io.ts";
 * import { snapshotsCommand } from "./_workspace.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-snap-doc-"));
 * const m = memoryIo();
 * assert.equal(await snapshotsCommand.run(["--home", home, "--json"], m.io), 0);
 * assert.deepEqual(JSON.parse(m.stdout()).projects, []);
 * ```
 */
export const snapshotsCommand: Command = {
  name: "snapshots",
  summary: "list, prune or clear the workspace snapshot store",
  help: SNAPSHOTS_HELP,
  async run(args: string[], io: CliIo): Promise<number> {
    const parsed = parseArgs(args, {
      command: "snapshots",
      values: ["--project"],
      switches: ["--json", "--yes"],
      aliases: { "-y": "--yes" },
      optional: ["list|prune|clear"],
    });
    if (parsed.help) {
      io.stdout(SNAPSHOTS_HELP + "\n");
      return 0;
    }
    const sub = parsed.positional[0];
    if (sub !== undefined && sub !== "prune" && sub !== "clear" && sub !== "list") {
      throw new UsageError(`unknown snapshots action "${sub}"`, "snapshots --help");
    }
    if (parsed.values["--project"] !== undefined && sub !== "list") {
      throw new UsageError("--project goes with 'snapshots list'", "snapshots --help");
    }
    const home = homeOf(parsed, io);
    const json = parsed.switches.has("--json");
    try {
      if (sub === "list") {
        const l = listSnapshots({
          home,
          env: io.env,
          project: path.resolve(io.cwd, parsed.values["--project"] ?? "."),
        });
        if (json) writeJson(io, l);
        else io.stdout(snapshotTable(l.project, l.snapshots, paint(io)));
        return 0;
      }
      if (sub === "clear") {
        const summary = listProjects({ home, env: io.env });
        const count = summary.projects.reduce((n, p) => n + p.snapshots, 0);
        if (!parsed.switches.has("--yes")) {
          if (!io.stdinIsTTY) {
            throw new UsageError(
              "snapshots clear deletes every snapshot; without a terminal to ask on, pass --yes",
              "snapshots --help",
            );
          }
          const answer = await io.ask(
            `Delete ${count} snapshot(s) of ${summary.projects.length} project(s) (${
              size(summary.bytes)
            }) in ${path.dirname(summary.store)}? [y/N] `,
          );
          if (!/^y(es)?$/i.test(answer.trim())) {
            io.stdout("nothing deleted\n");
            return 0;
          }
        }
        clearStore({ home });
        if (json) writeJson(io, { cleared: true, snapshots: count, bytes: summary.bytes });
        else io.stdout(`deleted ${count} snapshot(s), ${size(summary.bytes)}\n`);
        return 0;
      }
      if (sub === "prune") {
        const r = pruneStore({ home, env: io.env, settings: settingsOf(home, io) });
        if (json) writeJson(io, r);
        else {
          const lines = [
            `dropped ${r.dropped} snapshot(s); store ${size(r.bytesBefore)} -> ${
              size(r.bytesAfter)
            }`,
            ...r.forgotten.map((f) => `forgot ${f} (the directory is gone)`),
          ];
          io.stdout(lines.join("\n") + "\n");
        }
        return 0;
      }
      const s = listProjects({ home, env: io.env });
      if (json) {
        writeJson(io, s);
        return 0;
      }
      if (s.projects.length === 0) {
        io.stdout(`no workspace snapshots in ${path.dirname(s.store)}\n`);
        return 0;
      }
      const p = paint(io);
      const rows = [["PROJECT", "SNAPSHOTS", "NEWEST", "AGENT FILES"]];
      for (const pr of s.projects) {
        rows.push([
          pr.exists ? pr.project : `${pr.project} (gone)`,
          String(pr.snapshots),
          pr.newest ?? "-",
          String(pr.ledgerFiles),
        ]);
      }
      io.stdout(
        `${table(rows, p.bold)}\n${s.projects.length} project(s), store ${
          size(s.bytes)
        } at ${s.store}\n`,
      );
      return 0;
    } catch (error) {
      if (error instanceof UsageError) throw error;
      const message = error instanceof Error ? error.message : String(error);
      io.stderr(`${NAME} snapshots: ${message}\n`);
      return 1;
    }
  },
};
