/**
 * `agent-checkpoint ls`, `show RUN` and `audit`: reading the checkpoint
 * directory back, telling runs that ended from runs that were cut off.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { ago, type Paint, paint, size, table, terminalSafe } from "./_format.ts";
import { type CliIo, type Command, NAME, writeJson } from "./_io.ts";
import { homeDir } from "./_home.ts";
import { parseArgs } from "./_args.ts";
import { type CheckpointFile, listCheckpoints } from "./_inspect.ts";
import { showSteps } from "./_steps.ts";

export type { CheckpointFile };
import { checkpointFileName, readCheckpoint, readCheckpointBytes } from "../persist.ts";
import { errorText } from "../log.ts";
import { formatUsd } from "../template.ts";
import type { EffectRow, RunView } from "../store/types.ts";
import { treeSummaries, type TreeSummary } from "../store/trees.ts";
import {
  attemptCounts,
  homeSettings,
  ledgerAuditText,
  ledgerLsText,
  ledgerShowText,
  limitOption,
  openLedger,
  runJson,
  sinceOption,
  statusOption,
  treesOf,
  usageCell,
} from "./_ledger.ts";

/** The most runs of trees `audit` reads to sum them up, the most recently started first. */
const AUDIT_TREE_RUNS = 10_000;
import { END_STATUSES, type EndStatus } from "../_record.ts";

/** What a record says about the run's end and attempt, read defensively. */
export interface RunState {
  /** `ended` when the record has an end, `cut off` when it has none, undefined without a record. */
  state?: "ended" | "cut off";
  /** The end's status, when it ended. */
  status?: EndStatus;
  /** When it ended (ISO), when it did. */
  endedAt?: string;
  /** The summary given to `end()`, when any. */
  summary?: string;
  /** The attempt number, when the record names one. */
  attempt?: number;
}

/**
 * Whether a file's run ended (and how) or was cut off, and its attempt.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runState } from "./_checkpoints.ts";
 *
 * const record = { kind: "end", end: { status: "capped", at: "2026-01-01T00:00:00Z" }, attempt: 2 };
 * assert.deepEqual(runState({ record } as never), {
 *   state: "ended",
 *   status: "capped",
 *   endedAt: "2026-01-01T00:00:00Z",
 *   attempt: 2,
 * });
 * assert.deepEqual(runState({ record: { kind: "tier" } } as never), { state: "cut off" });
 * assert.deepEqual(runState({} as never), {});
 * ```
 */
export function runState(file: Pick<CheckpointFile, "record">): RunState {
  const record = file.record as
    | (CheckpointFile["record"] & { end?: unknown; attempt?: unknown })
    | undefined;
  if (!record) return {};
  const out: RunState = {};
  const end = record.end as { status?: unknown; at?: unknown; summary?: unknown } | undefined;
  if (end && typeof end === "object") {
    out.state = "ended";
    out.status =
      typeof end.status === "string" && (END_STATUSES as readonly string[]).includes(end.status)
        ? end.status as EndStatus
        : "done";
    if (typeof end.at === "string") out.endedAt = end.at;
    if (typeof end.summary === "string" && end.summary !== "") out.summary = end.summary;
  } else out.state = "cut off";
  if (typeof record.attempt === "number" && Number.isInteger(record.attempt)) {
    out.attempt = record.attempt;
  }
  return out;
}

/**
 * The KIND cell: the last checkpoint's kind for a run cut off, `ended STATUS`
 * for a run that ended, the file's state without a record; `, attempt N` for
 * a later attempt.
 */
function kindText(f: CheckpointFile): string {
  const r = f.record;
  if (!r) return f.state;
  const s = runState(f);
  const kind = r.kind as string;
  const text = s.state === "ended"
    ? `ended ${s.status}`
    : kind === "tier"
    ? `tier ${r.tier}`
    : kind === "uncapped"
    ? `uncapped #${r.multiple ?? "?"}`
    : typeof kind === "string"
    ? kind
    : "?";
  return s.attempt !== undefined && s.attempt > 1 ? `${text}, attempt ${s.attempt}` : text;
}

/**
 * A file as `ls --json` and `show --json` give it: inspect's description, with
 * `run` ("ended", "cut off", or null without a record), `ended` (the end's
 * status) and `attempt` (1 for a fresh run, null without a record).
 */
function described(f: CheckpointFile) {
  const s = runState(f);
  return {
    ...f,
    run: s.state ?? null,
    ...(s.status ? { ended: s.status } : {}),
    attempt: s.attempt ?? (f.record ? 1 : null),
  };
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** How many cut-off runs the summary line of `ls` names; the rest are counted. */
export const LS_NAMED_CUT_OFF = 5;

/**
 * The run ids of `ls`'s summary line: at most {@link LS_NAMED_CUT_OFF}, then
 * "and N more".
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { namedRuns } from "./_checkpoints.ts";
 *
 * assert.equal(namedRuns(["a", "b"]), "a, b");
 * assert.equal(namedRuns(["1", "2", "3", "4", "5", "6", "7"]), "1, 2, 3, 4, 5 and 2 more");
 * ```
 */
export function namedRuns(ids: string[]): string {
  const shown = ids.slice(0, LS_NAMED_CUT_OFF).map((id) => terminalSafe(id)).join(", ");
  const more = ids.length - LS_NAMED_CUT_OFF;
  return more > 0 ? `${shown} and ${more} more` : shown;
}

function lsText(files: CheckpointFile[], dir: string, io: CliIo, p: Paint): string {
  if (files.length === 0) return `No checkpoint files in ${terminalSafe(dir)}.\n`;
  const yes = (b: boolean) => (b ? "yes" : "-");
  // Tokens and cost get a column when any run reported use or had such a cap.
  const usage = files.map((f) => usageCell(f.record));
  const withUsage = usage.some((u) => u !== undefined);
  const rows = files.map((f, i) => [
    f.runId,
    f.record ? ago(io.now() - f.at) : "-",
    kindText(f),
    (f.record?.source as string | undefined) ?? "-",
    yes(f.agentText),
    f.incomplete ? "INCOMPLETE" : "-",
    size(f.size) + (f.utf8 ? "" : "  (not UTF-8)"),
    ...(withUsage ? [usage[i] ?? "-"] : []),
  ]);
  const withRecord = files.filter((f) => f.record);
  const ended = withRecord.filter((f) => runState(f).state === "ended").length;
  const cutOff = withRecord.filter((f) => runState(f).state === "cut off");
  const lines = [
    table([
      [
        "RUN",
        "PERSISTED",
        "KIND",
        "SOURCE",
        "AGENT TEXT",
        "MARKED",
        "SIZE",
        ...(withUsage ? ["TOKENS, COST"] : []),
      ],
      ...rows,
    ], p.bold),
    "",
  ];
  if (withRecord.length > 0) {
    lines.push(
      `${plural(ended, "run")} ended, ${plural(cutOff.length, "run")} cut off${
        cutOff.length > 0 ? ` (no end recorded: ${namedRuns(cutOff.map((f) => f.runId))})` : ""
      }`,
    );
  }
  lines.push(
    `${files.length} checkpoint file${files.length === 1 ? "" : "s"} in ${
      terminalSafe(dir)
    }: ${withRecord.length} with a record, ${
      files.filter((f) => f.agentText).length
    } with the agent's own text, ${files.filter((f) => f.incomplete).length} marked INCOMPLETE`,
  );
  return lines.join("\n") + "\n";
}

const LS_HELP =
  `Usage: ${NAME} ls [--status STATE] [--since DURATION] [--store URL] [--host MACHINE] [--files] [--home DIR] [--json]

Lists every run the run ledger holds, the most recently started first: live,
ended (and how) or cut off (its process is gone and it never recorded an
end), with or without a checkpoint file: its attempt (with how many retries
led to it, for a run --retries started again: "4 (3 retries)"), turns, tier,
the tool calls in flight, when it was last heard of, and its host
(machine:pid). A run
of a tree of runs sharing one budget shows its parent, and each tree shown gets
a line of its totals against its root's caps. It reads the ledger's index, not
the checkpoint files.

  --status STATE     only runs that are live, ended or cut-off
  --since DURATION   only runs heard of in the last DURATION (90s, 30m, 12h, 7d, 2w)
  --limit N          the N most recently started (default 100; 0 lists every run)
  --files            list the checkpoint files instead (as without a ledger)
  --store URL        read the fleet store at this postgres:// URL (default: the
                     store setting, or AGENT_CHECKPOINT_STORE)
  --host MACHINE     only runs of this machine

Without a run ledger (or with --files), it lists the checkpoint files, newest first: run id, when last persisted, kind,
tier and source, whether the agent wrote its own text there, whether it is
marked INCOMPLETE, and size; and, when any run reported model use or had a
token or dollar cap, its tokens and cost (against its caps). Files without a
readable record are listed too.

KIND tells a run that ended ("ended done", "ended capped", "ended failed",
"ended aborted", "ended deadline") from a run that was cut off: a run that
never recorded its end shows its last checkpoint's kind ("tier 2", "stall",
"deadline" …) and is named in the "cut off" line. A later attempt of a
resumed run adds ", attempt N".

  --home DIR   the profile directory (default $HERMES_HOME, else ~/.hermes)
  --json       one JSON object: { store, counts, shown, limit, runs } from the
               ledger, paged like the table: runs holds the newest --limit runs
               (100 by default; limit is null with --limit 0), shown how many,
               and counts every run (each run with state: "live" | "ended" |
               "cut-off", attemptCount: its attempts since it last started
               afresh, and retries: how many of them were retried), and trees (each with root, members, totals and
               caps) when any run shown is in one; { dir, files } for the files (each file with run:
               "ended" | "cut off" | null, ended: its end status, and attempt)`;

/**
 * `agent-checkpoint ls`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { lsCommand } from "./_checkpoints.ts";
 * import { memoryIo } from "./_io.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * const m = memoryIo();
 * assert.equal(await lsCommand.run(["--home", home], m.io), 0);
 * assert.match(m.stdout(), /^No checkpoint files in /);
 * ```
 */
export const lsCommand: Command = {
  name: "ls",
  summary: "list every run: live, ended or cut off (the run ledger), or the checkpoint files",
  help: LS_HELP,
  async run(args: string[], io: CliIo): Promise<number> {
    const parsed = parseArgs(args, {
      command: "ls",
      switches: ["--json", "--files"],
      values: ["--status", "--since", "--limit", "--store", "--host"],
    });
    const home = homeDir(parsed, io);
    const settings = homeSettings(home, io);
    const state = statusOption(parsed.values["--status"], "ls");
    const since = sinceOption(parsed.values["--since"], "ls", io.now());
    const ledger = parsed.switches.has("--files")
      ? undefined
      : openLedger(home, settings, io, parsed.values["--store"]);
    if (ledger) {
      try {
        const limit = limitOption(parsed.values["--limit"], "ls");
        const query: Parameters<typeof ledger.list>[0] = {
          limit: limit === 0 ? Number.MAX_SAFE_INTEGER : limit,
        };
        if (parsed.values["--host"] !== undefined) query.machine = parsed.values["--host"];
        if (state !== undefined) query.state = state;
        if (since !== undefined) query.since = since;
        const runs = await ledger.list(query);
        const filter: Parameters<typeof ledger.summary>[0] = {};
        if (since !== undefined) filter.since = since;
        if (query.machine !== undefined) filter.machine = query.machine;
        const counts = await ledger.summary(filter);
        const trees = await treesOf(ledger, runs);
        const attempts = await attemptCounts(ledger, runs);
        // Each run's attempts since it last started afresh, and how many of them were retries.
        const counted = (v: RunView) => ({
          attemptCount: attempts.get(v.record.runId)?.attempts ?? 1,
          retries: attempts.get(v.record.runId)?.retries ?? 0,
        });
        if (parsed.switches.has("--json")) {
          writeJson(io, {
            store: ledger.location,
            counts: counts.byState,
            // Paged like the table: the newest `limit` runs (null: every run), `shown` of them.
            shown: runs.length,
            limit: limit === 0 ? null : limit,
            runs: runs.map((v) => ({ ...runJson(v), ...counted(v) })),
            ...(trees.length > 0 ? { trees } : {}),
          });
        } else {
          io.stdout(ledgerLsText(runs, counts, ledger.location, io, paint(io), trees, attempts));
        }
      } finally {
        await ledger.close();
      }
      return 0;
    }
    const dir = settings.checkpoint_dir;
    let files = listCheckpoints(dir);
    if (since !== undefined) files = files.filter((f) => f.at >= since);
    if (state === "ended") files = files.filter((f) => runState(f).state === "ended");
    else if (state === "cut-off") files = files.filter((f) => runState(f).state === "cut off");
    else if (state === "live") files = []; // without a ledger, no run can be told live
    if (parsed.switches.has("--json")) writeJson(io, { dir, files: files.map(described) });
    else io.stdout(lsText(files, dir, io, paint(io)));
    return 0;
  },
};

const SHOW_HELP =
  `Usage: ${NAME} show RUN [--steps] [--store URL] [--host MACHINE] [--home DIR] [--json]

Prints run RUN (a kanban task id, a session id, or the file's name): its
record in the run ledger (live, ended or cut off; turns, tier, the tool calls
in flight, its host; in a tree of runs sharing one budget, its parent, its
children and the tree's totals), then its checkpoint file when it has one (from the
fleet store, when the run ran on another machine), headed by whether the run
ended (and how) or was cut off. Control characters are shown
escaped. Exits 1 when there is no such run.

  --steps      each attempt's calls from the run journal, in order: each
               model call live (tokens, duration) or replayed from an earlier
               attempt, each tool call with a line of its result, the tiers
               crossed, where the attempt stopped and its totals
  --store URL  read the fleet store at this postgres:// URL (default: the
               store setting, or AGENT_CHECKPOINT_STORE)
  --host NAME  the run's newest attempt on this machine (with --steps: the
               attempts that ran on it)
  --home DIR   the profile directory (default $HERMES_HOME, else ~/.hermes)
  --json       the file's description as JSON instead of its text, with the
               ledger's record under "ledger"`;

/**
 * The file of run `runId` in `dir`: its own file name first (`RUN.md`, or
 * `RUN` as a file name), without listing the directory; else the file whose
 * record names that run.
 */
function findRun(dir: string, runId: string): CheckpointFile | undefined {
  const names = [checkpointFileName(runId)];
  if (runId.endsWith(".md") && !names.includes(runId)) names.push(runId);
  for (const name of names) {
    const file = path.join(dir, name);
    if (path.dirname(file) !== dir) continue;
    let exists = false;
    try {
      fs.lstatSync(file);
      exists = true;
    } catch {
      // Not there.
    }
    if (exists) return readCheckpoint(file);
  }
  return listCheckpoints(dir).find((f) => f.runId === runId);
}

/**
 * Whose the file on this machine is, when it is not the newest attempt's: the
 * attempt it records, and where the newest one ran.
 */
function localFileNote(local: CheckpointFile): string {
  const mine = local.record
    ? `attempt ${local.record.attempt ?? 1}'s`
    : "one with no record of this run's attempts";
  return `the checkpoint file on this machine, ${terminalSafe(local.file)}, is ${mine}`;
}

/** Where a record's attempt ran: `machine (pid N)`. */
const ranOn = (view: RunView) =>
  `${terminalSafe(view.record.host.machine)} (pid ${view.record.host.pid})`;

/** The line heading `show`: how the run ended, or that it was cut off. */
function stateLine(f: CheckpointFile): string | undefined {
  const s = runState(f);
  if (!s.state) return undefined;
  const attempt = s.attempt !== undefined && s.attempt > 1 ? `, attempt ${s.attempt}` : "";
  const run = terminalSafe(f.runId);
  if (s.state === "cut off") {
    return `Run ${run}${attempt}: cut off (its run never recorded an end)`;
  }
  const at = s.endedAt ? ` at ${terminalSafe(s.endedAt)}` : "";
  const summary = s.summary ? `: ${terminalSafe(s.summary.replace(/\s*\n\s*/g, " "))}` : "";
  return `Run ${run}${attempt}: ended ${s.status}${at}${summary}`;
}

/**
 * What a file that is not a regular file is, for `show`: a symbolic link
 * (and where it points), a FIFO, a directory, a socket or a device.
 */
function notRegularText(f: CheckpointFile): string {
  let target: string | undefined;
  try {
    target = fs.readlinkSync(f.file);
  } catch {
    // Not a link (or gone): the reader's own words say what it is.
  }
  return target === undefined
    ? `${f.error ?? "not a regular file"}; not opened`
    : `a symbolic link to ${target}, not a regular file; links are never followed`;
}

/**
 * What `show` says under a ledger record that has no checkpoint file: the
 * record above is what there is, and when a file would come.
 */
function noFileNote(view: { state: string }): string {
  return view.state === "ended"
    ? "(no checkpoint file: the run ended before a tier, a stall or a deadline called for one; the ledger's record above is its record)"
    : view.state === "live"
    ? "(no checkpoint file yet: the ledger's record above is kept at every step; a file is written at a tier, a stall, a deadline or the end)"
    : "(no checkpoint file yet: the run was cut off before a tier, a stall or a deadline wrote one; the ledger's record above is its last state)";
}

/**
 * `agent-checkpoint show RUN`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { showCommand } from "./_checkpoints.ts";
 * import { memoryIo } from "./_io.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * fs.mkdirSync(path.join(home, "agent-checkpoints"));
 * fs.writeFileSync(path.join(home, "agent-checkpoints", "r1.md"), "my notes\n");
 * const m = memoryIo();
 * assert.equal(await showCommand.run(["r1", "--home", home], m.io), 0);
 * assert.match(m.stdout(), /my notes\n$/);
 * assert.equal(await showCommand.run(["r2", "--home", home], m.io), 1); // not found
 * ```
 */
export const showCommand: Command = {
  name: "show",
  summary: "print one run: its ledger record and its checkpoint file",
  help: SHOW_HELP,
  async run(args: string[], io: CliIo): Promise<number> {
    const parsed = parseArgs(args, {
      command: "show",
      switches: ["--json", "--steps"],
      values: ["--store", "--host"],
      positional: ["RUN"],
    });
    const home = homeDir(parsed, io);
    const settings = homeSettings(home, io);
    const dir = settings.checkpoint_dir;
    const runId = parsed.positional[0] as string;
    const ledger = openLedger(home, settings, io, parsed.values["--store"]);
    const machine = parsed.values["--host"];
    if (parsed.switches.has("--steps")) {
      if (!ledger) {
        io.stderr(
          `${NAME}: no run ledger in ${
            terminalSafe(home)
          }: --steps reads the run journal, kept in the run ledger\n`,
        );
        return 1;
      }
      try {
        return await showSteps(ledger, runId, machine, parsed.switches.has("--json"), io);
      } finally {
        await ledger.close();
      }
    }
    let view;
    let tree: TreeSummary | undefined;
    let stored: string | undefined;
    let effects: EffectRow[] = [];
    let earlier: RunView[] = [];
    if (ledger) {
      try {
        view = machine === undefined
          ? await ledger.latest(runId)
          : (await ledger.list({ runId, machine, limit: 1 }))[0];
        if (view?.record.tree) [tree] = await treesOf(ledger, [view]);
        // Every attempt kept, the ones before a done end and a fresh start included.
        if (view) {
          earlier = (await ledger.list({ earlierOf: [view.record.runId] }))
            .filter((e) => e.record.attempt !== view!.record.attempt);
        }
        // What the run did to the world, by effect key: a store of an older version has none.
        if (view) {
          effects = await ledger.effects?.read(view.record.runId).catch(() => []) ?? [];
        }
        // The fleet store keeps the file of a run that ran on another machine.
        if (view && ledger.files) {
          stored = await ledger.files.read(view.record.runId, view.record.attempt);
        }
      } finally {
        await ledger.close();
      }
    }
    const local = findRun(dir, runId);
    // A file here that is another attempt's (the newest ran on another machine of the fleet) does
    // not go under the newest attempt's header: the store's copy of that attempt's file does.
    const localAttempt = local?.record ? local.record.attempt ?? 1 : undefined;
    const otherAttempt = view !== undefined && local !== undefined &&
      localAttempt !== view.record.attempt;
    const found = otherAttempt && stored !== undefined ? undefined : local;
    const whose = otherAttempt && local ? localFileNote(local) : undefined;
    if (view && !found) {
      if (parsed.switches.has("--json")) {
        writeJson(io, {
          runId,
          ledger: runJson(view),
          ...(earlier.length > 0 ? { attempts: earlier.map(runJson) } : {}),
          ...(tree ? { tree } : {}),
          ...(effects.length > 0 ? { effects } : {}),
          ...(stored !== undefined ? { fileContent: stored } : {}),
        });
      } else if (stored !== undefined) {
        io.stdout(
          `${ledgerShowText(view, io, tree, effects, earlier)}\n${
            paint(io).dim(
              `(its checkpoint file, as the fleet store keeps it; written on ${
                whose ? ranOn(view) : terminalSafe(view.record.host.machine)
              }${whose ? `; ${whose}` : ""})`,
            )
          }\n${terminalSafe(stored, { lines: true })}\n`,
        );
      } else {
        io.stdout(
          `${ledgerShowText(view, io, tree, effects, earlier)}\n${
            paint(io).dim(noFileNote(view))
          }\n`,
        );
      }
      return 0;
    }
    if (!found) {
      io.stderr(
        `${NAME}: no such run "${terminalSafe(runId)}": ${
          ledger ? "not in the run ledger, and" : "no run ledger, and"
        } no checkpoint file in ${terminalSafe(dir)} (see ${NAME} ls)\n`,
      );
      return 1;
    }
    if (parsed.switches.has("--json")) {
      writeJson(
        io,
        view
          ? {
            ...described(found),
            ledger: runJson(view),
            ...(earlier.length > 0 ? { attempts: earlier.map(runJson) } : {}),
            ...(tree ? { tree } : {}),
            ...(effects.length > 0 ? { effects } : {}),
          }
          : described(found),
      );
      return 0;
    }
    const p = paint(io);
    // The ledger knows whether a run without an end is live or cut off; the file alone cannot.
    const state = view ? undefined : stateLine(found);
    const head = `${view ? `${ledgerShowText(view, io, tree, effects, earlier)}\n` : ""}${
      state ? `${p.bold(state)}\n` : ""
    }${
      whose
        ? `${
          p.dim(
            `(${whose}; attempt ${view!.record.attempt} ran on ${
              ranOn(view!)
            }, and neither this machine nor the store has its file)`,
          )
        }\n`
        : ""
    }${p.bold(terminalSafe(found.file))}\n`;
    if (found.state === "not a regular file") {
      io.stdout(`${head}${p.dim(terminalSafe(notRegularText(found)))}\n`);
      return 0;
    }
    let text = "";
    try {
      text = new TextDecoder().decode(readCheckpointBytes(found.file));
    } catch (error) {
      text = `(cannot read: ${errorText(error)})`;
    }
    const at = `${found.record ? "persisted" : "modified"} ${
      found.at ? ago(io.now() - found.at) : "never"
    }`;
    text = terminalSafe(text, { lines: true });
    io.stdout(
      `${head}${
        p.dim(
          `${terminalSafe(kindText(found))}, ${at}, ${size(found.size)}${
            found.utf8 ? "" : ", not valid UTF-8 (shown with replacement characters)"
          }`,
        )
      }\n\n${text}${text.endsWith("\n") ? "" : "\n"}`,
    );
    return 0;
  },
};

/** What `audit` counts. */
export interface AuditSummary {
  /** Checkpoint files. */
  files: number;
  /** Files with a readable record (one per run). */
  withRecord: number;
  /** Runs that recorded their end, by status. */
  ended: Record<string, number>;
  /** Runs with a record but no end: cut off. */
  cutOff: number;
  /** Records by kind. */
  byKind: Record<string, number>;
  /** Records by source. */
  bySource: Record<string, number>;
  /** Tier records by tier. */
  byTier: Record<string, number>;
  /** Runs on a later attempt (resumed), by attempt number. */
  byAttempt: Record<string, number>;
  /** Files with the agent's own text. */
  agentText: number;
  /** Files marked INCOMPLETE. */
  incomplete: number;
  /** Files without a record, by state. */
  withoutRecord: Record<string, number>;
  /** Tokens the runs reported: how many runs reported use, input and output tokens in all. */
  tokens: { runs: number; input: number; output: number };
  /** Dollars the runs spent, over the runs whose cost is known; `unknown`: runs with use but no cost. */
  usd: { runs: number; total: number; unknown: number };
}

/**
 * Counts over checkpoint files, as `audit` shows them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { auditSummary } from "./_checkpoints.ts";
 *
 * const a = auditSummary([
 *   { record: { kind: "end", source: "host", tier: 0, end: { status: "done" } } },
 *   { record: { kind: "tier", source: "watchdog", tier: 1 } },
 * ] as never);
 * assert.deepEqual(a.ended, { done: 1 });
 * assert.equal(a.cutOff, 1);
 * ```
 */
export function auditSummary(files: CheckpointFile[]): AuditSummary {
  const count = (keys: string[]) => {
    const out: Record<string, number> = {};
    for (const k of keys) out[k] = (out[k] ?? 0) + 1;
    return out;
  };
  const records = files.filter((f) => f.record);
  const states = records.map(runState);
  return {
    files: files.length,
    withRecord: records.length,
    ended: count(states.filter((s) => s.state === "ended").map((s) => s.status as string)),
    cutOff: states.filter((s) => s.state === "cut off").length,
    byKind: count(records.map((f) => String(f.record!.kind))),
    bySource: count(records.map((f) => String(f.record!.source))),
    byTier: count(
      records.filter((f) => f.record!.kind === "tier").map((f) => String(f.record!.tier)),
    ),
    byAttempt: count(
      states.filter((s) => s.attempt !== undefined && s.attempt > 1).map((s) => String(s.attempt)),
    ),
    agentText: files.filter((f) => f.agentText).length,
    incomplete: files.filter((f) => f.incomplete).length,
    withoutRecord: count(files.filter((f) => !f.record).map((f) => f.state)),
    ...usageTotals(records),
  };
}

function usageTotals(records: CheckpointFile[]): Pick<AuditSummary, "tokens" | "usd"> {
  const tokens = { runs: 0, input: 0, output: 0 };
  const usd = { runs: 0, total: 0, unknown: 0 };
  const n = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
  for (const f of records) {
    const u = f.record!.usage;
    if (!u || typeof u !== "object") continue;
    tokens.runs++;
    tokens.input += n(u.inputTokens);
    tokens.output += n(u.outputTokens);
    // A run with calls of unknown cost has only a floor: it counts as unknown, never as known.
    const unpriced = Array.isArray(u.unpriced) && u.unpriced.length > 0;
    if (typeof u.usd === "number" && Number.isFinite(u.usd) && !unpriced) {
      usd.runs++;
      usd.total += u.usd;
    } else usd.unknown++;
  }
  return { tokens, usd };
}

function auditText(a: AuditSummary, dir: string, since: string | undefined): string {
  const list = (o: Record<string, number>, label = (k: string) => k) =>
    Object.keys(o).length === 0 ? "-" : Object.entries(o).sort((x, y) => y[1] - x[1]).map((
      [k, n],
    ) => `${label(k)}: ${n}`).join(" · ");
  const endedTotal = Object.values(a.ended).reduce((x, y) => x + y, 0);
  return table([
    ["checkpoint files", `${dir}${since ? ` (persisted in the last ${since})` : ""}`],
    ["runs with a record", String(a.withRecord)],
    ["  ended", endedTotal === 0 ? "0" : `${endedTotal}  (${list(a.ended)})`],
    ["  cut off", String(a.cutOff)],
    ["  by kind", list(a.byKind)],
    ["  by source", list(a.bySource)],
    ["  by tier", list(a.byTier, (k) => `tier ${k}`)],
    ["  resumed", list(a.byAttempt, (k) => `attempt ${k}`)],
    ["agent's own text", `${a.agentText} of ${a.files}`],
    ["marked INCOMPLETE", String(a.incomplete)],
    ["files without a record", list(a.withoutRecord)],
    [
      "tokens",
      a.tokens.runs === 0
        ? "-"
        : `${a.tokens.input + a.tokens.output} over ${
          plural(a.tokens.runs, "run")
        } (${a.tokens.input} in, ${a.tokens.output} out)`,
    ],
    [
      "cost",
      a.usd.runs === 0 && a.usd.unknown === 0
        ? "-"
        : `$${formatUsd(a.usd.total)} over ${plural(a.usd.runs, "run")}${
          a.usd.unknown > 0 ? ` (${plural(a.usd.unknown, "run")} with no known cost)` : ""
        }`,
    ],
  ]) + "\n";
}

const AUDIT_HELP =
  `Usage: ${NAME} audit [--since DURATION] [--store URL] [--host MACHINE] [--files] [--home DIR] [--json]

Summarizes the run ledger: every run, how many are live, how many ended (by
status: done, capped, failed, aborted, deadline) and how many were cut off
(their process is gone and they never recorded an end), in all and by
machine; and each tree of runs sharing one budget with its totals. It reads
the ledger's index, not the checkpoint files.

Without a run ledger (or with --files), it summarizes the checkpoint directory: runs with a record, how many ended (by
status: done, capped, failed, aborted, deadline) and how many were cut off
(no end recorded); by kind, source and tier; resumed runs by attempt; how
many hold the agent's own text; how many are marked INCOMPLETE; the tokens
and dollars the runs reported.

  --since DURATION   only runs heard of (checkpoints persisted) in the last DURATION (90s, 30m, 12h, 7d, 2w)
  --store URL        read the fleet store at this postgres:// URL (default: the
                     store setting, or AGENT_CHECKPOINT_STORE); runs are summed
                     by machine and state
  --host MACHINE     only runs of this machine
  --files            summarize the checkpoint files instead (as without a ledger)
  --home DIR         the profile directory (default $HERMES_HOME, else ~/.hermes)
  --json             one JSON object instead of text`;

/**
 * `agent-checkpoint audit`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { auditCommand } from "./_checkpoints.ts";
 * import { memoryIo } from "./_io.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * const m = memoryIo();
 * assert.equal(await auditCommand.run(["--home", home, "--json"], m.io), 0);
 * assert.equal(JSON.parse(m.stdout()).cutOff, 0);
 * ```
 */
export const auditCommand: Command = {
  name: "audit",
  summary: "summarize every run: live, ended, cut off, by machine (or the checkpoint files)",
  help: AUDIT_HELP,
  async run(args: string[], io: CliIo): Promise<number> {
    const parsed = parseArgs(args, {
      command: "audit",
      values: ["--since", "--store", "--host"],
      switches: ["--json", "--files"],
    });
    const home = homeDir(parsed, io);
    const settings = homeSettings(home, io);
    const since = parsed.values["--since"];
    const after = sinceOption(since, "audit", io.now());
    const ledger = parsed.switches.has("--files")
      ? undefined
      : openLedger(home, settings, io, parsed.values["--store"]);
    if (ledger) {
      try {
        // audit also sums the tokens and dollars (ls does not: it reads every record).
        const filter: Parameters<typeof ledger.summary>[0] = { usage: true };
        if (after !== undefined) filter.since = after;
        if (parsed.values["--host"] !== undefined) filter.machine = parsed.values["--host"];
        const s = await ledger.summary(filter);
        const trees = ledger.trees
          ? treeSummaries(await ledger.trees.list({ limit: AUDIT_TREE_RUNS }))
          : [];
        if (parsed.switches.has("--json")) {
          writeJson(io, {
            store: ledger.location,
            since: since ?? null,
            ...s,
            ended: s.byEnd,
            cutOff: s.byState["cut-off"],
            ...(trees.length > 0 ? { trees } : {}),
          });
        } else io.stdout(ledgerAuditText(s, ledger.location, since, trees));
      } finally {
        await ledger.close();
      }
      return 0;
    }
    const dir = settings.checkpoint_dir;
    let files = listCheckpoints(dir);
    if (after !== undefined) files = files.filter((f) => f.at >= after);
    const summary = auditSummary(files);
    if (parsed.switches.has("--json")) writeJson(io, { dir, since: since ?? null, ...summary });
    else io.stdout(auditText(summary, dir, since));
    return 0;
  },
};
