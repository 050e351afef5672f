/**
 * `agent-checkpoint explain`: the wiring for a run started here, as text or JSON.
 *
 * @module
 */
import { type CliIo, type Command, NAME, writeJson } from "./_io.ts";
import { homeOption } from "./_home.ts";
import { type Paint, paint, table, terminalSafe } from "./_format.ts";
import { parseArgs } from "./_args.ts";
import {
  explain,
  type ExplainOptions,
  type Explanation,
  type TierSchedule,
} from "./_explain_report.ts";
import { formatDuration, formatUsd } from "../template.ts";

const HELP = `Usage: ${NAME} explain [--home DIR] [--session ID] [--task ID] [--json]

Shows, for a run started now in this environment: every setting and where it
came from, every warning, the dialect, each cap and its source (a supervisor's
deadline included), for a kanban run the board file chosen and why and when its
time axis starts, when each tier fires on each surface, the checkpoint file
and whether its directory can be written, the SQLite driver, and the watchdog,
uncapped and stall settings.

Exits 1 when something would silently not work: an unwritable directory, a
kanban board that cannot be found or read, or settings that fell back to
defaults. Notes (exit 0) say when Hermes's plugins.enabled / plugins.disabled
lists leave Hermes's own Python plugin off, which this library does not need.

  --home DIR     the profile directory (default $HERMES_HOME, else ~/.hermes)
  --session ID   the session id to explain (default "explain")
  --task ID      explain a kanban run for this task id
  --json         one JSON object instead of text`;

/** A value as one table cell: strings as they are, long ones cut, the rest as JSON. */
const cell = (value: unknown) =>
  value === null || value === undefined
    ? "none"
    : typeof value === "string" && value.length > 60
    ? `${value.slice(0, 57).replace(/\s*\n\s*/g, " ")}…`
    : typeof value === "string"
    ? value.replace(/\s*\n\s*/g, " ")
    : JSON.stringify(value);

/** A crossing shown at the whole second it falls in or before: 1800 s is 30m00s, 457.5 s is 7m38s. */
const crossing = (seconds: number) => formatDuration(Math.ceil(seconds - 1e-6));

function whenText(t: TierSchedule, base: number): { prologue: string; midRun: string } {
  if (!t.fires) return { prologue: "never", midRun: "never" };
  const time = t.atSeconds === undefined ? undefined : crossing(t.atSeconds);
  const spent = [
    t.atTokens === undefined ? undefined : `${t.atTokens} tokens`,
    t.atUsd === undefined ? undefined : `$${formatUsd(t.atUsd)}`,
  ].filter((x) => x !== undefined).join(" or ");
  const usage = spent === "" ? undefined : `the run.postLlmCall() that reaches ${spent}`;
  const or = (...parts: Array<string | undefined>) =>
    parts.filter((x) => x !== undefined).join(", or ");
  return {
    prologue: or(
      t.prologueModelCall === undefined
        ? undefined
        : `model call ${t.prologueModelCall} (${t.prologueModelCall - 1 + base} turns used)`,
      time === undefined ? undefined : `the first model call after ${time}`,
      spent === "" ? undefined : `the first model call after ${spent}`,
    ),
    midRun: or(
      t.midRunAfterModelCall === undefined
        ? undefined
        : `tool calls after model call ${t.midRunAfterModelCall}`,
      time === undefined ? undefined : `${time} (the watchdog, even if the main thread is blocked)`,
      usage,
    ),
  };
}

function supervisorText(s: NonNullable<Explanation["supervisor"]>): string {
  if (s.at === undefined) return `"${s.raw}" is not a time (AGENT_CHECKPOINT_DEADLINE)`;
  const left = s.secondsLeft ?? 0;
  const when = left > 0 ? `in ${formatDuration(Math.ceil(left))}` : "passed";
  return `${new Date(s.at).toISOString()}, ${when}  (AGENT_CHECKPOINT_DEADLINE)`;
}

/**
 * The text `explain` prints for an explanation.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { explain } from "./_explain_report.ts";
 * import { explainText } from "./_explain.ts";
 * import { paint } from "./_format.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * const text = explainText(explain({ home, env: {} }), paint({ isTTY: false, env: {} }));
 * assert.match(text, /^ {2}mode +snapshot +default$/m);
 * ```
 */
export function explainText(e: Explanation, p: Paint): string {
  const out: string[] = [];
  const heading = (s: string) => out.push("", p.bold(s));
  const indent = (s: string) => s.replace(/^/gm, "  ");
  out.push(`${p.bold(`${NAME} explain`)}  home ${terminalSafe(e.home)}`);
  heading("Settings");
  out.push(indent(table([
    ["key", "value", "from"],
    ...e.settings.map((s) => [s.key, cell(s.value), s.source]),
  ], p.dim)));
  if (e.warnings.length > 0) {
    heading("Warnings");
    for (const w of e.warnings) out.push(`  ${p.red("!")} ${terminalSafe(w)}`);
  }
  heading("This run");
  const cap = (c: { value: number; source: string } | undefined, unit: (n: number) => string) =>
    c ? `${unit(c.value)}  (${c.source})` : "none";
  const rows = [
    ["dialect", `${e.run.dialect}${e.run.taskId ? `  (task ${e.run.taskId})` : ""}`],
    ["run id", e.run.runId],
    ["turn cap", cap(e.run.caps.turns, String)],
    ["time cap", cap(e.run.caps.time, formatDuration)],
  ];
  if (e.run.turnsUsed) {
    rows.push(["turns used", `${e.run.turnsUsed.value}  (${e.run.turnsUsed.source})`]);
  }
  if (e.run.dialect === "kanban") {
    const b = e.run.board;
    rows.push([
      "kanban board",
      b?.file ? `${b.file}  (${b.why})` : `none  (${b?.why ?? "no task id"})`,
    ]);
    const o = e.run.origin;
    rows.push([
      "time origin",
      o ? `${new Date(o.atMs).toISOString()}  (${o.source})` : "when startRun is called",
    ]);
  }
  if (e.run.caps.tokens) rows.push(["token cap", cap(e.run.caps.tokens, String)]);
  if (e.run.caps.usd) rows.push(["cost cap", cap(e.run.caps.usd, (n) => `$${formatUsd(n)}`)]);
  if (e.supervisor) rows.push(["supervisor deadline", supervisorText(e.supervisor)]);
  if (e.supervisor?.runId) {
    rows.push(["supervisor run id", `${e.supervisor.runId}  (AGENT_CHECKPOINT_RUN_ID)`]);
  }
  for (const d of e.run.dropped) rows.push(["not counted", d]);
  out.push(indent(table(rows)));
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
    out.push(indent(table([
      ["tier", "prologue (preLlmCall returns the text)", "mid-run (the file is written)"],
      ...e.schedule.map((t) => {
        const w = whenText(t, e.run.turnsUsed?.value ?? 0);
        return [String(t.tier), w.prologue, w.midRun];
      }),
    ], p.dim)));
  }
  heading("Checkpoint file");
  out.push(
    `  ${terminalSafe(e.checkpointFile)}`,
    `  directory writable: ${
      e.writable.ok ? p.green("yes") : p.red(`no (${terminalSafe(e.writable.error ?? "")})`)
    }`,
  );
  heading("Runtime");
  out.push(indent(table([
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
  ])));
  if (e.notes.length > 0) {
    heading("Notes");
    for (const n of e.notes) out.push(`  - ${terminalSafe(n)}`);
  }
  out.push("");
  if (e.problems.length === 0) out.push(p.green("No problems found."));
  else {
    out.push(p.red(`${e.problems.length} problem${e.problems.length === 1 ? "" : "s"}:`));
    for (const problem of e.problems) out.push(`  ${p.red("✗")} ${terminalSafe(problem)}`);
  }
  return out.join("\n") + "\n";
}

/**
 * `agent-checkpoint explain`: exits 1 when something would silently not work.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { explainCommand } from "./_explain.ts";
 * import { memoryIo } from "./_io.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * const m = memoryIo();
 * assert.equal(await explainCommand.run(["--home", home, "--json"], m.io), 0);
 * assert.equal(JSON.parse(m.stdout()).home, home);
 * ```
 */
export const explainCommand: Command = {
  name: "explain",
  summary: "show the wiring for a run started here, and what would silently not work",
  help: HELP,
  run(args: string[], io: CliIo): Promise<number> {
    const parsed = parseArgs(args, {
      command: "explain",
      values: ["--session", "--task"],
      switches: ["--json"],
    });
    const options: ExplainOptions = { env: io.env, now: io.now() };
    const home = homeOption(parsed, io);
    if (home !== undefined) options.home = home;
    if (parsed.values["--session"] !== undefined) options.sessionId = parsed.values["--session"];
    if (parsed.values["--task"] !== undefined) options.taskId = parsed.values["--task"];
    const e = explain(options);
    if (parsed.switches.has("--json")) writeJson(io, e);
    else io.stdout(explainText(e, paint(io)));
    return Promise.resolve(e.problems.length > 0 ? 1 : 0);
  },
};
