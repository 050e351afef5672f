/**
 * The command line (S14): `agent-checkpoint explain | ls | show | audit`.
 * `main()` takes its arguments and I/O as parameters and returns the exit
 * code, so it runs the same from the npm bin, `deno task cli` and tests.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { type Env, envOf, loadSettings } from "./discover.ts";
import { explain, type Explanation, type TierSchedule } from "./explain.ts";
import { type CheckpointFile, listCheckpoints } from "./inspect.ts";
import { checkpointFileName } from "./persist.ts";
import { formatDuration } from "./template.ts";

/** Where the command line reads and writes. */
export interface CliIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  env: Env;
  /** Whether stdout is a terminal: colour only then, and never with NO_COLOR set. */
  isTTY: boolean;
  now: () => number;
}

const NAME = "agent-checkpoint";

const HELP: Record<string, string> = {
  "": `${NAME}: durable progress checkpoints for budget-capped agent runs

Usage: ${NAME} <command> [options]

Commands:
  explain   show the wiring for a run started here, and what would silently not work
  ls        list the checkpoint files, newest first
  show RUN  print one run's checkpoint file
  audit     summarize the checkpoint directory

Every command takes --home DIR (default $HERMES_HOME, else ~/.hermes) and --json.
Exit codes: 0 fine, 1 explain found a problem, 2 a usage error.
Run '${NAME} <command> --help' for a command's options.`,
  explain: `Usage: ${NAME} explain [--home DIR] [--session ID] [--task ID] [--json]

Shows, for a run started now in this environment: every setting and where it
came from, every warning, the dialect, each cap and its source, when each tier
fires on each surface, the checkpoint file and whether its directory can be
written, the SQLite driver, and the watchdog, uncapped and stall settings.

Exits 1 when something would silently not work: an unwritable directory, a
kanban board that cannot be read, or settings that fell back to defaults.

  --session ID   the session id to explain (default "explain")
  --task ID      explain a kanban run for this task id
  --json         one JSON object instead of text`,
  ls: `Usage: ${NAME} ls [--home DIR] [--json]

Lists the checkpoint files, newest first: run id, when last persisted, kind,
tier and source, whether the agent wrote its own text there, whether it is
marked INCOMPLETE, and size. Files without a readable record are listed too.`,
  show: `Usage: ${NAME} show RUN [--home DIR] [--json]

Prints the checkpoint file of run RUN (a kanban task id or a session id).`,
  audit: `Usage: ${NAME} audit [--since DURATION] [--home DIR] [--json]

Summarizes the checkpoint directory: runs with a record, by kind, source and
tier; how many hold the agent's own text; how many are marked INCOMPLETE.

  --since DURATION   only checkpoints persisted in the last DURATION (90s, 30m, 12h, 7d, 2w)`,
};

const FLAGS: Record<string, { values: string[]; switches: string[]; positional: string[] }> = {
  explain: { values: ["--home", "--session", "--task"], switches: ["--json"], positional: [] },
  ls: { values: ["--home"], switches: ["--json"], positional: [] },
  show: { values: ["--home"], switches: ["--json"], positional: ["RUN"] },
  audit: { values: ["--home", "--since"], switches: ["--json"], positional: [] },
};

class UsageError extends Error {}

interface Parsed {
  command: string;
  options: Record<string, string>;
  json: boolean;
  help: boolean;
  positional: string[];
}

function parse(args: string[]): Parsed {
  const [command = "", ...rest] = args;
  if (command === "" || command === "--help" || command === "-h" || command === "help") {
    return { command: "", options: {}, json: false, help: true, positional: rest };
  }
  const spec = FLAGS[command];
  if (!spec) throw new UsageError(`unknown command "${command}"`);
  const parsed: Parsed = { command, options: {}, json: false, help: false, positional: [] };
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i] as string;
    const [flag, inline] = arg.startsWith("--") && arg.includes("=")
      ? [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)]
      : [arg, undefined];
    if (flag === "--help" || flag === "-h") parsed.help = true;
    else if (spec.switches.includes(flag)) parsed.json = true;
    else if (spec.values.includes(flag)) {
      const value = inline ?? rest[++i];
      if (value === undefined || value === "") throw new UsageError(`${flag} needs a value`);
      parsed.options[flag] = value;
    } else if (flag.startsWith("-")) {
      throw new UsageError(`unknown option ${flag} for ${command}`);
    } else parsed.positional.push(arg);
  }
  if (parsed.help) return parsed;
  if (parsed.positional.length < spec.positional.length) {
    throw new UsageError(`${command} needs ${spec.positional.join(" ")}`);
  }
  if (parsed.positional.length > spec.positional.length) {
    throw new UsageError(`unexpected argument "${parsed.positional[spec.positional.length]}"`);
  }
  return parsed;
}

/** Seconds in a DURATION such as `90s`, `30m`, `12h`, `7d`, `2w`. */
export function parseDuration(text: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)([smhdw])$/.exec(text.trim());
  if (!m) return undefined;
  const unit = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 }[m[2] as "s"];
  return Number(m[1]) * unit;
}

/** "just now", "45s ago", "3m ago", "2h ago", "5d ago". */
export function ago(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

const size = (bytes: number) =>
  bytes < 1024
    ? `${bytes} B`
    : bytes < 1048576
    ? `${(bytes / 1024).toFixed(1)} KiB`
    : `${(bytes / 1048576).toFixed(1)} MiB`;

/** Columns padded to their widest cell. */
function table(rows: string[][], paint: (s: string) => string = (s) => s): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? "").length)));
  return rows.map((r, i) => {
    const line = r.map((cell, c) => c === r.length - 1 ? cell : cell.padEnd(widths[c]!)).join(
      "  ",
    );
    return i === 0 ? paint(line) : line;
  }).join("\n");
}

interface Paint {
  bold: (s: string) => string;
  red: (s: string) => string;
  green: (s: string) => string;
  dim: (s: string) => string;
}

function paint(io: CliIo): Paint {
  // no-color.org: NO_COLOR set to anything but the empty string turns colour off.
  const on = io.isTTY && !io.env.NO_COLOR;
  const wrap = (code: number, reset: number) => (s: string) =>
    on ? `\x1b[${code}m${s}\x1b[${reset}m` : s;
  return { bold: wrap(1, 22), red: wrap(31, 39), green: wrap(32, 39), dim: wrap(2, 22) };
}

const show = (value: unknown) =>
  value === null || value === undefined
    ? "none"
    : typeof value === "string" && value.length > 60
    ? `${value.slice(0, 57)}…`
    : typeof value === "string"
    ? value
    : JSON.stringify(value);

function whenText(t: TierSchedule): { prologue: string; midRun: string } {
  if (!t.fires) return { prologue: "never", midRun: "never" };
  const time = t.atSeconds === undefined ? undefined : formatDuration(t.atSeconds);
  const or = (a: string | undefined, b: string | undefined) =>
    [a, b].filter((x) => x !== undefined).join(", or ");
  return {
    prologue: or(
      t.prologueModelCall === undefined
        ? undefined
        : `model call ${t.prologueModelCall} (${t.prologueModelCall - 1} turns used)`,
      time === undefined ? undefined : `the first model call after ${time}`,
    ),
    midRun: or(
      t.midRunAfterModelCall === undefined
        ? undefined
        : `tool calls after model call ${t.midRunAfterModelCall}`,
      time === undefined ? undefined : `${time} (the watchdog, even if the main thread is blocked)`,
    ),
  };
}

function explainText(e: Explanation, p: Paint): string {
  const out: string[] = [];
  const heading = (s: string) => out.push("", p.bold(s));
  out.push(`${p.bold(`${NAME} explain`)}  home ${e.home}`);
  heading("Settings");
  out.push(
    table([
      ["key", "value", "from"],
      ...e.settings.map((s) => [s.key, show(s.value), s.source]),
    ], p.dim).replace(/^/gm, "  "),
  );
  if (e.warnings.length > 0) {
    heading("Warnings");
    for (const w of e.warnings) out.push(`  ${p.red("!")} ${w}`);
  }
  heading("This run");
  const cap = (c: { value: number; source: string } | undefined, unit: (n: number) => string) =>
    c ? `${unit(c.value)}  (${c.source})` : "none";
  out.push(
    table([
      ["dialect", `${e.run.dialect}${e.run.taskId ? `  (task ${e.run.taskId})` : ""}`],
      ["run id", e.run.runId],
      ["turn cap", cap(e.run.caps.turns, String)],
      ["time cap", cap(e.run.caps.time, formatDuration)],
      ...e.run.dropped.map((d) => ["not counted", d]),
    ]).replace(/^/gm, "  "),
  );
  heading("Schedule");
  if (e.run.capless) {
    out.push(
      `  capless: no tiers. ${
        e.watchdog.uncappedIntervalSeconds > 0
          ? `The watchdog persists a checkpoint every ${
            formatDuration(e.watchdog.uncappedIntervalSeconds)
          }.`
          : "uncapped_interval_seconds is 0: no interval checkpoints."
      }`,
    );
  } else {
    out.push(
      table([
        ["tier", "prologue (preLlmCall returns the text)", "mid-run (the file is written)"],
        ...e.schedule.map((t) => {
          const w = whenText(t);
          return [String(t.tier), w.prologue, w.midRun];
        }),
      ], p.dim).replace(/^/gm, "  "),
    );
  }
  heading("Checkpoint file");
  out.push(
    `  ${e.checkpointFile}`,
    `  directory writable: ${e.writable.ok ? p.green("yes") : p.red(`no (${e.writable.error})`)}`,
  );
  heading("Runtime");
  out.push(
    table([
      ["SQLite driver", e.sqliteDriver ?? "none (better-sqlite3 is not installed)"],
      [
        "watchdog",
        e.watchdog.enabled ? `on, polls every ${formatDuration(e.watchdog.pollSeconds)}` : "off",
      ],
      [
        "uncapped runs",
        e.watchdog.uncappedIntervalSeconds > 0
          ? `a checkpoint every ${formatDuration(e.watchdog.uncappedIntervalSeconds)}`
          : "off",
      ],
      [
        "stalls",
        e.watchdog.stallWindowSeconds > 0
          ? `a checkpoint after ${formatDuration(e.watchdog.stallWindowSeconds)} of silence`
          : "off",
      ],
    ]).replace(/^/gm, "  "),
  );
  if (e.notes.length > 0) {
    heading("Notes");
    for (const n of e.notes) out.push(`  - ${n}`);
  }
  out.push("");
  if (e.problems.length === 0) out.push(p.green("No problems found."));
  else {
    out.push(p.red(`${e.problems.length} problem${e.problems.length === 1 ? "" : "s"}:`));
    for (const problem of e.problems) out.push(`  ${p.red("✗")} ${problem}`);
  }
  return out.join("\n") + "\n";
}

function checkpointDir(home: string | undefined, env: Env): string {
  return loadSettings(home === undefined ? { env } : { home, env }).settings.checkpoint_dir;
}

const kindText = (f: CheckpointFile) =>
  f.record
    ? f.record.kind === "tier"
      ? `tier ${f.record.tier}`
      : f.record.kind === "uncapped"
      ? `uncapped #${f.record.multiple ?? "?"}`
      : "stall"
    : f.state;

function lsText(files: CheckpointFile[], dir: string, io: CliIo, p: Paint): string {
  if (files.length === 0) return `No checkpoint files in ${dir}.\n`;
  const yes = (b: boolean) => (b ? "yes" : "-");
  const rows = files.map((f) => [
    f.runId,
    f.record ? ago(io.now() - f.at) : "-",
    kindText(f),
    f.record?.source ?? "-",
    yes(f.agentText),
    f.incomplete ? "INCOMPLETE" : "-",
    size(f.size) + (f.utf8 ? "" : "  (not UTF-8)"),
  ]);
  const withRecord = files.filter((f) => f.record).length;
  return [
    table([
      ["RUN", "PERSISTED", "KIND", "SOURCE", "AGENT TEXT", "MARKED", "SIZE"],
      ...rows,
    ], p.bold),
    "",
    `${files.length} checkpoint file${
      files.length === 1 ? "" : "s"
    } in ${dir}: ${withRecord} with a record, ${
      files.filter((f) => f.agentText).length
    } with the agent's own text, ${files.filter((f) => f.incomplete).length} marked INCOMPLETE`,
  ].join("\n") + "\n";
}

function audit(files: CheckpointFile[]) {
  const count = (keys: string[]) => {
    const out: Record<string, number> = {};
    for (const k of keys) out[k] = (out[k] ?? 0) + 1;
    return out;
  };
  const records = files.filter((f) => f.record);
  return {
    files: files.length,
    withRecord: records.length,
    byKind: count(records.map((f) => f.record!.kind)),
    bySource: count(records.map((f) => f.record!.source)),
    byTier: count(
      records.filter((f) => f.record!.kind === "tier").map((f) => String(f.record!.tier)),
    ),
    agentText: files.filter((f) => f.agentText).length,
    incomplete: files.filter((f) => f.incomplete).length,
    withoutRecord: count(files.filter((f) => !f.record).map((f) => f.state)),
  };
}

function auditText(a: ReturnType<typeof audit>, dir: string, since: string | undefined): string {
  const list = (o: Record<string, number>, label = (k: string) => k) =>
    Object.keys(o).length === 0 ? "-" : Object.entries(o).sort((x, y) => y[1] - x[1]).map((
      [k, n],
    ) => `${label(k)}: ${n}`).join(" · ");
  return table([
    ["checkpoints", `${dir}${since ? ` (persisted in the last ${since})` : ""}`],
    ["runs with a record", String(a.withRecord)],
    ["  by kind", list(a.byKind)],
    ["  by source", list(a.bySource)],
    ["  by tier", list(a.byTier, (k) => `tier ${k}`)],
    ["agent's own text", `${a.agentText} of ${a.files}`],
    ["marked INCOMPLETE", String(a.incomplete)],
    ["files without a record", list(a.withoutRecord)],
  ]) + "\n";
}

function defaultIo(): CliIo {
  return {
    stdout: (t) => void process.stdout.write(t),
    stderr: (t) => void process.stderr.write(t),
    env: envOf(undefined),
    isTTY: Boolean(process.stdout.isTTY),
    now: () => Date.now(),
  };
}

/**
 * Run the command line with `args` (without the program name).
 *
 * @returns The exit code: 0 fine, 1 `explain` found a problem, 2 a usage error.
 */
export function main(args: string[], io: CliIo = defaultIo()): number {
  let parsed: Parsed;
  try {
    parsed = parse(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.stderr(`${NAME}: ${error.message} (see ${NAME} --help)\n`);
    return 2;
  }
  if (parsed.help) {
    io.stdout(`${HELP[parsed.command]}\n`);
    return 0;
  }
  const p = paint(io);
  const home = parsed.options["--home"];
  const json = (value: unknown) => io.stdout(JSON.stringify(value, null, 2) + "\n");

  if (parsed.command === "explain") {
    const options: Parameters<typeof explain>[0] = { env: io.env };
    if (home !== undefined) options.home = home;
    if (parsed.options["--session"] !== undefined) options.sessionId = parsed.options["--session"];
    if (parsed.options["--task"] !== undefined) options.taskId = parsed.options["--task"];
    const e = explain(options);
    if (parsed.json) json(e);
    else io.stdout(explainText(e, p));
    return e.problems.length > 0 ? 1 : 0;
  }

  const dir = checkpointDir(home, io.env);
  if (parsed.command === "ls") {
    const files = listCheckpoints(dir);
    if (parsed.json) json({ dir, files });
    else io.stdout(lsText(files, dir, io, p));
    return 0;
  }

  if (parsed.command === "show") {
    const runId = parsed.positional[0] as string;
    const files = listCheckpoints(dir);
    const named = path.join(dir, checkpointFileName(runId));
    const found = files.find((f) => f.file === named) ??
      files.find((f) => f.runId === runId || path.basename(f.file) === runId);
    if (!found) {
      io.stderr(`${NAME}: no checkpoint file for run "${runId}" in ${dir} (see ${NAME} ls)\n`);
      return 2;
    }
    if (parsed.json) {
      json(found);
      return 0;
    }
    let text = "";
    try {
      text = new TextDecoder().decode(fs.readFileSync(found.file));
    } catch (error) {
      text = `(cannot read: ${(error as Error).message})`;
    }
    const at = found.at ? ago(io.now() - found.at) : "never";
    io.stdout(
      `${p.bold(found.file)}\n${
        p.dim(
          `${kindText(found)}, persisted ${at}, ${size(found.size)}${
            found.utf8 ? "" : ", not valid UTF-8 (shown with replacement characters)"
          }`,
        )
      }\n\n${text}${text.endsWith("\n") ? "" : "\n"}`,
    );
    return 0;
  }

  // audit
  let files = listCheckpoints(dir);
  const since = parsed.options["--since"];
  if (since !== undefined) {
    const seconds = parseDuration(since);
    if (seconds === undefined) {
      io.stderr(
        `${NAME}: --since takes a duration such as 30m, 12h or 7d, not "${since}" (see ${NAME} audit --help)\n`,
      );
      return 2;
    }
    files = files.filter((f) => io.now() - f.at <= seconds * 1000);
  }
  const summary = audit(files);
  if (parsed.json) json({ dir, since: since ?? null, ...summary });
  else io.stdout(auditText(summary, dir, since));
  return 0;
}
