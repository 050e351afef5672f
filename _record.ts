/**
 * What a checkpoint records, and how it reads: the record's shape, the
 * human-readable text of the block (also the kanban comment), the block with
 * its JSON data line as bytes in a file (where it lies, how a new block
 * replaces it), a one-line summary of an attempt, and the parser that reads a
 * record back. Pure: no I/O, no clock.
 *
 * A marker counts only alone on its line (from the line's first byte, with
 * trailing spaces, tabs or a `\r` allowed), so agent text that quotes a
 * marker inline is never mistaken for the block, and a block counts only
 * with the library's data line as its last line, so markers the agent copied
 * without one are its own text. When the file holds more than one such block
 * (the agent copied an old one into its notes), the plugin's own is the one
 * whose data line is valid and newest; on a tie, or when no data line is
 * valid, the first.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { formatDuration, formatUsd } from "./template.ts";

/** What a run's stored record says of its use: what an axis reads its own figure from. */
export interface UseReport {
  /** Model calls made. */
  turnsUsed?: unknown;
  /** Seconds since the run started. */
  elapsedSeconds?: unknown;
  /** The model use reported, added up. */
  usage?: { inputTokens?: unknown; outputTokens?: unknown; usd?: unknown } | undefined;
}

/** One budget axis, described once: see {@linkcode AXES}. */
export interface BudgetAxis {
  /** Its name: the key of a run's caps, of a tree's totals, of `enabled_axes` and `enforce`. */
  readonly name: string;
  /** Its key under the `caps` setting. */
  readonly setting: string;
  /** The `caps` setting's text for it. */
  readonly settingDoc: string;
  /** Whether a cap on it is a whole number. */
  readonly integer: boolean;
  /** Its cap's label in a checkpoint file: `Turn cap`. */
  readonly capLabel: string;
  /** Its unit in a sentence, plural: `turns`. */
  readonly unit: string;
  /** A figure on it, as a reader sees it: `12`, `4m10s`, `$1.25`. */
  readonly show: (n: number) => string;
  /** A figure on it with its unit, as a sentence says it: `12 turns`, `4m10s`, `$1.25`. */
  readonly amount: (n: number) => string;
  /** Which tier-2 fraction applies to it: `tier2_time_fraction` or `tier2_turn_fraction`. */
  readonly tier2: "time" | "turn";
  /**
   * Whether the runs of a tree share it (their use is added up against an
   * ancestor's cap); false for time, which each run has of its own.
   */
  readonly shared: boolean;
  /** Its use as a run's stored record says it; undefined when the record says none. */
  readonly used: (report: UseReport) => number | undefined;
}

const finite = (v: unknown): number | undefined =>
  typeof v === "number" && Number.isFinite(v) ? v : undefined;

/**
 * The budget axes: one table, as `SETTINGS` (settings.ts) is one of the settings.
 * A run's caps, the `caps`, `enabled_axes` and `enforce` settings, a tree's
 * totals, a budget stop's axis and the lines a checkpoint shows of them are
 * all made from it; what is special to an axis (dollars of unknown cost, the
 * clock of the time axis) stays with the code that needs it.
 *
 * @example
 * ```ts
 * import { AXES } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(AXES.map((a) => a.name), ["time", "turns", "tokens", "usd"]);
 * const usd = AXES.find((a) => a.name === "usd")!;
 * assert.equal(usd.show(1.5), "$1.50");
 * assert.equal(usd.used({ usage: { inputTokens: 3, outputTokens: 4, usd: 0.25 } }), 0.25);
 * ```
 */
export const AXES = [
  {
    name: "time",
    setting: "time_seconds",
    settingDoc: "A time cap in seconds for runs whose own cap is not found.",
    integer: false,
    capLabel: "Time cap",
    unit: "seconds",
    show: formatDuration,
    amount: formatDuration,
    tier2: "time",
    shared: false,
    used: (r) => finite(r.elapsedSeconds),
  },
  {
    name: "turns",
    setting: "turns",
    settingDoc: "A turn cap for runs whose own cap is not found.",
    integer: true,
    capLabel: "Turn cap",
    unit: "turns",
    show: String,
    amount: (n) => `${n} turns`,
    tier2: "turn",
    shared: true,
    used: (r) => Number(r.turnsUsed) || 0,
  },
  {
    name: "tokens",
    setting: "tokens",
    settingDoc: "A token cap (input + output) for runs whose host gives none.",
    integer: true,
    capLabel: "Token cap",
    unit: "tokens",
    show: String,
    amount: (n) => `${n} tokens`,
    tier2: "turn",
    shared: true,
    used: (r) =>
      r.usage ? (Number(r.usage.inputTokens) || 0) + (Number(r.usage.outputTokens) || 0) : 0,
  },
  {
    name: "usd",
    setting: "usd",
    settingDoc: "A cost cap in US dollars for runs whose host gives none.",
    integer: false,
    capLabel: "Cost cap",
    unit: "dollars",
    show: (n) => `$${formatUsd(n)}`,
    amount: (n) => `$${formatUsd(n)}`,
    tier2: "turn",
    shared: true,
    // Absent, or not a number: the cost is unknown (never $0).
    used: (r) => {
      const usd = finite(r.usage?.usd);
      return usd !== undefined && usd >= 0 ? usd : undefined;
    },
  },
] as const satisfies readonly BudgetAxis[];

/** A budget axis's name. */
export type Axis = (typeof AXES)[number]["name"];

/** The axes the runs of a tree share (all but time). */
export type SharedAxis = Extract<(typeof AXES)[number], { shared: true }>["name"];

/** The names of the budget axes, in the table's order. */
export const AXIS_NAMES: readonly Axis[] = AXES.map((a) => a.name);

/** The axes the runs of a tree share, in the table's order. */
export const SHARED_AXES: readonly (BudgetAxis & { name: SharedAxis })[] = AXES.filter(
  (a): a is Extract<(typeof AXES)[number], { shared: true }> => a.shared,
);

/** A cap and where it was found. */
export interface CapSource {
  /** Turns, or seconds. */
  value: number;
  /** Where it was found: `host`, `kanban db`, `TERMINAL_TIMEOUT`, `caps.turns` … */
  source: string;
}

/** A run's caps after discovery, per axis (time in seconds, usd in US dollars). */
export type RunCaps = { [A in Axis]?: CapSource };

/** The model use a run reported, added up. */
export interface UsageTotals {
  /** Input tokens. */
  inputTokens: number;
  /** Output tokens. */
  outputTokens: number;
  /**
   * The cost in US dollars of the calls whose cost is known; absent (in
   * records of earlier versions) when it is not known.
   */
  usd?: number;
  /**
   * The models of the calls whose cost is unknown (no valid cost given and no
   * price; `(no model named)` when none was): `usd` is then a lower bound.
   */
  unpriced?: string[];
}

/** A tool call that ran past its deadline. */
export interface TimedOutCall {
  /** The tool's name. */
  tool: string;
  /** The host's id for the call, when it gave one. */
  callId?: string;
  /** The deadline it ran past, in seconds from its start. */
  timeoutSeconds: number;
  /** Seconds after the run started that it started. */
  startedAt: number;
}

/** A tool call the host reported. */
export interface ToolCall {
  /** The tool's name. */
  tool: string;
  /** The host's id for this call, when it gave one. */
  callId?: string;
  /** Where the call stands. */
  status: "in flight" | "ok" | "failed" | "done";
  /** Seconds after the run started. */
  startedAt: number;
  /** How long it took, once it ended. */
  durationMs?: number;
  /** What the host reported of a failed call's error. */
  error?: string;
  /** True when the call ran past its deadline. */
  timedOut?: boolean;
}

/** Why a checkpoint was persisted. */
export type RecordKind =
  | "tier"
  | "uncapped"
  | "stall"
  | "manual"
  | "deadline"
  | "end"
  | "tool_timeout"
  | "budget";
/** Which surface persisted it. */
export type RecordSource =
  | "pre_llm_call"
  | "post_llm_call"
  | "pre_tool_call"
  | "post_tool_call"
  | "watchdog"
  | "host"
  | "supervisor";
/**
 * The statuses a run can end with (`run.end({ status })`), the one list the
 * type {@linkcode EndStatus} is made from: check a status from elsewhere
 * against it.
 *
 * @example
 * ```ts
 * import { END_STATUSES, type EndStatus } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * const given: string = "deadline";
 * const status = (END_STATUSES as readonly string[]).includes(given)
 *   ? given as EndStatus
 *   : "failed";
 * assert.equal(status, "deadline");
 * ```
 */
export const END_STATUSES = ["done", "capped", "failed", "aborted", "deadline"] as const;

/** How a run ended: `done`, `capped`, `failed`, `aborted` or `deadline`. */
export type EndStatus = typeof END_STATUSES[number];

/** How a run ended, as its last record says. */
export interface RunEnd {
  /** How it ended. */
  status: EndStatus;
  /** When, as an ISO 8601 time. */
  at: string;
  /** The host's words about it. */
  summary?: string;
}

/** What a supervisor recorded of the command it ran. */
export interface CommandRecord {
  /** The command and its arguments. */
  argv: string[];
  /** How it stopped. */
  outcome: "exited" | "signaled" | "deadline" | "not started";
  /** Its exit code, when it exited. */
  exitCode?: number;
  /** The signal that ended it, when one did. */
  signal?: string;
  /** The last lines of its output. */
  tail: string[];
}

/** Everything a persisted checkpoint records. */
export interface CheckpointRecord {
  /** Why it was persisted. */
  kind: RecordKind;
  /** Which surface persisted it. */
  source: RecordSource;
  /** The run's id. */
  runId: string;
  /** The run's dialect: `chat`, `kanban` or `goal`. */
  dialect: string;
  /** Model calls made so far. */
  turnsUsed: number;
  /** Seconds since the run started. */
  elapsedSeconds: number;
  /** The run's caps. */
  caps: RunCaps;
  /** The budget tier reached, 0 for none. */
  tier: number;
  /** The uncapped multiple. */
  multiple?: number;
  /** The uncapped interval, in seconds. */
  intervalSeconds?: number;
  /** Seconds of silence before a stall checkpoint. */
  silentSeconds?: number;
  /** When it was persisted, as an ISO 8601 time. */
  persistedAt: string;
  /** The message: what the agent is asked, or what happened. */
  message: string;
  /** The most recent tool calls. */
  tools: ToolCall[];
  /** The notes the host gave. */
  notes: string[];
  /** 1 for a fresh run, n for the n-th attempt of a resumed one. */
  attempt?: number;
  /** One-line summaries of the earlier attempts, oldest first. */
  attempts?: string[];
  /** Set when the run ended. */
  end?: RunEnd;
  /** The workspace snapshot that matches this record. */
  workspace?: { snapshot: string; project: string };
  /** A supervisor's record of its command. */
  command?: CommandRecord;
  /** The model use reported so far, when any was. */
  usage?: UsageTotals;
  /** The tool call a `tool_timeout` record is about. */
  timedOut?: TimedOutCall;
  /** The run's place in a tree of runs sharing a budget, and the tree's totals. */
  tree?: TreeRecord;
  /** The enforced cap a `budget` record is about. */
  budget?: BudgetStop;
  /** Models whose calls came with no cost and have no price: their dollars are unknown, never $0. */
  unknownPrices?: string[];
}

/** A run's place in a tree of runs that share one budget, as its record shows it. */
export interface TreeRecord {
  /** The tree's root run. */
  root: string;
  /** The run's parent, unless it is the root. */
  parent?: string;
  /**
   * What the whole tree used, as this run last knew it; `unpriced` names the
   * models of calls whose cost is unknown (`usd` is then a lower bound).
   */
  totals?: Omit<{ [A in SharedAxis]: number }, "usd"> & { usd?: number; unpriced?: string[] };
  /** What the run's model call in flight reserves of the tree's caps, and since when (ms). */
  reserved?: { [A in SharedAxis]: number } & { at: number };
  /** The run's last model call's tokens and dollars: what a call of the tree is expected to cost. */
  perCall?: { tokens: number; usd: number };
}

/** The enforced cap that stopped a run. */
export interface BudgetStop {
  /** The axis. */
  axis: Axis;
  /** Its cap. */
  cap: number;
  /** What was used against it (the tree's total when the cap is an ancestor's). */
  used: number;
  /** The run whose cap it is: this run, or an ancestor. */
  runId: string;
  /**
   * What other model calls in flight reserved when a call was refused
   * (`used` and this reach the cap): those calls spend the rest.
   */
  inFlight?: number;
  /**
   * A dollar cap stopped by a call of unknown cost: the model it named
   * (`(no model named)` when none was). `used` is then what the known costs add up to.
   */
  unpriced?: string;
}

/**
 * The record kinds, in the order they were introduced.
 *
 * @example
 * ```ts
 * import { RECORD_KINDS } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(RECORD_KINDS.includes("deadline"));
 * ```
 */
export const RECORD_KINDS: readonly RecordKind[] = [
  "tier",
  "uncapped",
  "stall",
  "manual",
  "deadline",
  "end",
  "tool_timeout",
  "budget",
];
/**
 * The record sources: the surfaces that persist a checkpoint.
 *
 * @example
 * ```ts
 * import { RECORD_SOURCES } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(RECORD_SOURCES.includes("supervisor"));
 * ```
 */
export const RECORD_SOURCES: readonly RecordSource[] = [
  "pre_llm_call",
  "pre_tool_call",
  "post_tool_call",
  "watchdog",
  "host",
  "supervisor",
  "post_llm_call",
];

/**
 * The plugin's name, heading every block and comment.
 *
 * @example
 * ```ts
 * import { PLUGIN } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(PLUGIN, "agent-checkpoint");
 * ```
 */
export const PLUGIN = "agent-checkpoint";

// deno-lint-ignore no-control-regex
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f]/g;
/** One line of text, safe inside the block: whitespace runs with a newline collapse, controls shown as �. */
const line = (text: unknown) =>
  escapeText(String(text).replace(/\s*[\r\n]+\s*/g, " ").replace(CONTROL, "\uFFFD"));

/**
 * The header line: plugin, kind and source.
 *
 * @example
 * ```ts
 * import { headerLine } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   headerLine({ kind: "stall", source: "watchdog", tier: 0 }),
 *   "agent-checkpoint: stall checkpoint persisted (source: watchdog)",
 * );
 * ```
 */
export function headerLine(
  r: Pick<CheckpointRecord, "kind" | "source" | "tier" | "multiple" | "end">,
): string {
  const what = r.kind === "tier"
    ? `budget tier ${r.tier} checkpoint persisted mid-run`
    : r.kind === "uncapped"
    ? `uncapped-run checkpoint ${r.multiple ?? 1} persisted`
    : r.kind === "stall"
    ? "stall checkpoint persisted"
    : r.kind === "manual"
    ? "checkpoint persisted on request"
    : r.kind === "deadline"
    ? "deadline checkpoint persisted before the hard deadline"
    : r.kind === "tool_timeout"
    ? "tool call timed out; checkpoint persisted"
    : r.kind === "budget"
    ? "enforced budget cap passed; checkpoint persisted before the stop"
    : `run ended${r.end ? ` (${line(r.end.status)})` : ""}`;
  return `${PLUGIN}: ${what} (source: ${line(r.source)})`;
}

const capLine = (label: string, cap: CapSource | undefined, unit: (n: number) => string) =>
  `- ${label}: ${cap ? `${unit(cap.value)} (${line(cap.source)})` : "none"}`;

const dollars = (n: number) => `$${formatUsd(n)}`;

/** A model whose call's cost is unknown, in words: `unknown price for M`, or that none was named. */
export const unpricedText = (model: string): string =>
  model === NO_MODEL
    ? "no cost was reported and no model was named"
    : `unknown price for ${line(model)}`;

/** What stands for the model of a call that named none. */
export const NO_MODEL = "(no model named)";

/** A tree's totals in words: `5 turns, 150 tokens and at least $0.75`. */
function treeFigures(t: Record<string, unknown>): string {
  const figures = SHARED_AXES.map((a) => {
    const n = t[a.name];
    if (a.name !== "usd") return `${num(n)} ${a.unit}`;
    // Calls of unknown cost are never $0: what the known ones cost is a floor.
    if (typeof n !== "number" || !Number.isFinite(n)) return "unknown dollars";
    return `${Array.isArray(t.unpriced) && t.unpriced.length > 0 ? "at least " : ""}${a.show(n)}`;
  });
  return `${figures.slice(0, -1).join(", ")} and ${figures.at(-1)}`;
}

/** The token and cost lines: shown when the run has such a cap or reported use. */
function usageLines(r: CheckpointRecord): string[] {
  const out: string[] = [];
  const u = isObject(r.usage) ? r.usage : undefined;
  if (u) {
    const inTokens = num(u.inputTokens);
    const outTokens = num(u.outputTokens);
    out.push(`- Tokens so far: ${inTokens + outTokens} (${inTokens} in, ${outTokens} out)`);
  }
  if (r.caps?.tokens) out.push(capLine("Token cap", r.caps.tokens, String));
  const unpriced = u && Array.isArray(u.unpriced) && u.unpriced.length > 0;
  if (u && typeof u.usd === "number" && Number.isFinite(u.usd)) {
    // Calls of unknown cost are never $0: what the known ones cost is a floor.
    out.push(
      `- Cost so far: ${unpriced ? "at least " : ""}${dollars(u.usd)}${
        unpriced ? " (some calls' cost is unknown)" : ""
      }`,
    );
  } else if (u && r.caps?.usd) out.push("- Cost so far: unknown (no cost reported, no price)");
  if (r.caps?.usd) out.push(capLine("Cost cap", r.caps.usd, dollars));
  if (Array.isArray(r.unknownPrices) && r.unknownPrices.length > 0) {
    out.push(
      `- Cost unknown: ${r.unknownPrices.map((m) => unpricedText(String(m))).join("; ")}`,
    );
  }
  const tree = isObject(r.tree) ? r.tree : undefined;
  if (tree && isString(tree.root)) {
    const t = isObject(tree.totals) ? tree.totals : undefined;
    out.push(
      `- Tree: root ${line(tree.root)}${
        isString(tree.parent) ? `, parent ${line(tree.parent)}` : ""
      }${t ? `; the tree has used ${treeFigures(t)}` : ""}`,
    );
  }
  const b = isObject(r.budget) ? r.budget : undefined;
  if (b && isString(b.axis) && isNumber(b.cap) && isNumber(b.used)) {
    const unit = AXES.find((a) => a.name === b.axis)?.show ?? String;
    out.push(
      `- Stopped by: the enforced ${line(b.axis)} cap ${unit(b.cap)}${
        isString(b.runId) && b.runId !== r.runId ? ` of ${line(b.runId)}` : ""
      } (used ${isString(b.unpriced) ? "at least " : ""}${unit(b.used)}${
        isNumber(b.inFlight) ? `, ${unit(b.inFlight)} reserved by calls in flight` : ""
      }${isString(b.unpriced) ? `; a call of unknown cost: ${unpricedText(b.unpriced)}` : ""})`,
    );
  }
  return out;
}

/**
 * A tool call's deadline in seconds as records show it: to the hundredth
 * under ten seconds (`2.5s`), else as a duration.
 *
 * @example
 * ```ts
 * import { formatTimeout } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(formatTimeout(0.25), "0.25s");
 * assert.equal(formatTimeout(90), "1m30s");
 * ```
 */
export const formatTimeout = (seconds: number): string =>
  seconds < 10 && !Number.isInteger(seconds)
    ? `${Number(Math.max(0, seconds).toFixed(2))}s`
    : formatDuration(seconds);

/** A timed-out tool call, in words. */
function timedOutText(t: TimedOutCall): string {
  const id = t.callId === undefined ? "" : ` [${line(t.callId)}]`;
  return `${line(t.tool)}${id} ran past its ${
    formatTimeout(num(t.timeoutSeconds))
  } deadline (started at ${formatDuration(num(t.startedAt))})`;
}

const SAFE_ARG = /^[A-Za-z0-9_/.,:=@%+-]+$/;
// deno-lint-ignore no-control-regex
const HAS_CONTROL = /[\x00-\x1f\x7f]/;
/** An argument as a shell would need it quoted. */
const quoteArg = (arg: string) =>
  SAFE_ARG.test(arg)
    ? arg
    : HAS_CONTROL.test(arg)
    ? JSON.stringify(arg)
    : `'${arg.replaceAll("'", `'\\''`)}'`;

const TAIL_LINES = 200;
const TAIL_CHARS = 1000;

/** A fence of backticks longer than any run of backticks in the lines. */
function fenced(lines: string[]): string[] {
  let longest = 0;
  for (const l of lines) {
    for (const run of l.match(/`+/g) ?? []) longest = Math.max(longest, run.length);
  }
  const fence = "`".repeat(Math.max(3, longest + 1));
  return [fence, ...lines, fence];
}

function commandLines(c: CommandRecord): string[] {
  const outcome = c.outcome === "exited"
    ? `exited with code ${c.exitCode ?? "unknown"}`
    : c.outcome === "signaled"
    ? `ended by ${line(c.signal ?? "a signal")}`
    : c.outcome === "deadline"
    ? `stopped at its deadline${c.signal ? ` (${line(c.signal)})` : ""}`
    : "not started";
  const argv = Array.isArray(c.argv) ? c.argv : [];
  const out = [
    "",
    `- Command: ${line(argv.map((a) => quoteArg(String(a))).join(" "))}`,
    `- Outcome: ${outcome}`,
  ];
  const tail = (Array.isArray(c.tail) ? c.tail : []).slice(-TAIL_LINES).map((l) => {
    const chars = Array.from(String(l).replace(/\r$/, ""));
    const cut = chars.length > TAIL_CHARS ? chars.slice(0, TAIL_CHARS).join("") + "…" : l;
    return escapeText(String(cut).replace(/\r/g, "").replace(CONTROL, "\uFFFD"));
  });
  if (tail.length > 0) out.push("", "Output tail:", ...fenced(tail));
  return out;
}

/**
 * The human-readable part of the block, also the kanban comment's text. Text
 * from the host, the agent or a command is escaped (`<!--` becomes `&lt;!--`)
 * and kept to one line where the layout needs it, so it cannot forge the
 * block's markers.
 *
 * @param r The record.
 * @returns Markdown, without the block's markers or data line.
 *
 * @example
 * ```ts
 * import { recordText } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * const text = recordText({
 *   kind: "end", source: "host", runId: "r1", dialect: "chat", turnsUsed: 3,
 *   elapsedSeconds: 75, caps: {}, tier: 0, persistedAt: "2026-01-01T00:00:00.000Z",
 *   message: "Finished.", tools: [], notes: [], attempt: 2,
 *   attempts: ["attempt 1 cut off after 9 turns and 1m00s"],
 *   end: { status: "capped", at: "2026-01-01T00:00:00.000Z", summary: "out of turns" },
 * });
 * assert.match(text, /^## agent-checkpoint: run ended \(capped\) \(source: host\)/);
 * assert.match(text, /- Attempt 2 \(earlier: attempt 1 cut off after 9 turns and 1m00s\)/);
 * assert.match(text, /- Ended: capped at 2026-01-01T00:00:00.000Z — out of turns/);
 * ```
 */
export function recordText(r: CheckpointRecord): string {
  const lines = [
    `## ${headerLine(r)}`,
    "",
    escapeText(String(r.message).replace(CONTROL, "\uFFFD")),
    "",
    `- Run: ${line(r.runId)}`,
  ];
  const earlier = Array.isArray(r.attempts) ? r.attempts : [];
  if ((r.attempt ?? 1) > 1 || earlier.length > 0) {
    lines.push(
      `- Attempt ${r.attempt ?? earlier.length + 1}${
        earlier.length > 0 ? ` (earlier: ${earlier.map(line).join("; ")})` : ""
      }`,
    );
  }
  lines.push(
    `- Dialect: ${line(r.dialect)}`,
    `- Turns so far: ${r.turnsUsed}`,
    `- Elapsed: ${formatDuration(r.elapsedSeconds)}`,
    capLine("Turn cap", r.caps?.turns, String),
    capLine("Time cap", r.caps?.time, formatDuration),
  );
  lines.push(...usageLines(r));
  lines.push(`- Tier: ${r.tier}`);
  if (r.timedOut) lines.push(`- Timed out: ${timedOutText(r.timedOut)}`);
  if (r.kind === "uncapped" && r.intervalSeconds !== undefined) {
    lines.push(
      `- Uncapped interval: ${formatDuration(r.intervalSeconds)} (checkpoint ${r.multiple})`,
    );
  }
  if (r.end) {
    lines.push(
      `- Ended: ${line(r.end.status)} at ${line(r.end.at)}${
        r.end.summary ? ` — ${line(r.end.summary)}` : ""
      }`,
    );
  }
  if (r.workspace) {
    lines.push(
      `- Workspace snapshot: ${line(r.workspace.snapshot)} (project ${line(r.workspace.project)})`,
    );
  }
  lines.push(`- Persisted at: ${line(r.persistedAt)}`);
  if (r.command) lines.push(...commandLines(r.command));
  if (r.tools.length > 0) {
    lines.push("", "Recent tool calls:");
    for (const t of r.tools) {
      const took = t.durationMs === undefined ? "" : `, ${Math.round(t.durationMs)} ms`;
      const id = t.callId === undefined ? "" : ` [${line(t.callId)}]`;
      const error = (t.timedOut ? ", timed out" : "") +
        (t.error === undefined ? "" : `: ${line(t.error)}`);
      lines.push(
        `- ${line(t.tool)}${id} (${line(t.status)}${took}, at ${
          formatDuration(t.startedAt)
        })${error}`,
      );
    }
  }
  if (r.notes.length > 0) {
    lines.push("", "Notes:");
    for (const n of r.notes) lines.push(`- ${line(n)}`);
  }
  return lines.join("\n");
}

/**
 * The whole block: begin marker, the record's text, the JSON data line
 * (`v: 1`), end marker.
 *
 * @param r The record.
 * @returns The block, without a trailing newline.
 *
 * @example
 * ```ts
 * import { parseRecord, renderBlock, type CheckpointRecord } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * const record: CheckpointRecord = {
 *   kind: "manual", source: "host", runId: "r1", dialect: "chat", turnsUsed: 1,
 *   elapsedSeconds: 2, caps: {}, tier: 0, persistedAt: "2026-01-01T00:00:00.000Z",
 *   message: "<!-- agent-checkpoint:end -->", tools: [], notes: [],
 * };
 * const block = renderBlock(record);
 * assert.deepEqual(parseRecord(new TextEncoder().encode(`notes\n${block}\n`)), record);
 * ```
 */
export function renderBlock(r: CheckpointRecord): string {
  return [
    BLOCK_BEGIN,
    recordText(r),
    "",
    `${DATA_PREFIX}${embedJson({ v: 1, ...r })} -->`,
    BLOCK_END,
  ].join("\n");
}

const COMMENT_LIMIT = 4000;

/**
 * The kanban comment for a record: its text headed with the plugin's name,
 * cut to 4,000 characters without splitting a character.
 *
 * @example
 * ```ts
 * import { commentBody } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * const body = commentBody({
 *   kind: "tier", source: "watchdog", runId: "t1", dialect: "kanban", turnsUsed: 5,
 *   elapsedSeconds: 60, caps: { turns: { value: 10, source: "kanban db" } }, tier: 1,
 *   persistedAt: "2026-01-01T00:00:00.000Z", message: "x".repeat(9000), tools: [], notes: [],
 * });
 * assert.ok(body.startsWith("# agent-checkpoint\n"));
 * assert.equal(Array.from(body).length, 4000);
 * ```
 */
export function commentBody(r: CheckpointRecord): string {
  const body = `# ${PLUGIN}\n\n${recordText(r)}`;
  const chars = Array.from(body);
  if (chars.length <= COMMENT_LIMIT) return body;
  return chars.slice(0, COMMENT_LIMIT - 1).join("") + "…";
}

const SUMMARY_CHARS = 300;

/**
 * How many earlier attempts' summaries a record keeps (`attempts`, the
 * oldest dropped first), by the library and the supervisor alike.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { MAX_ATTEMPTS } from "./_record.ts";
 *
 * assert.equal(MAX_ATTEMPTS, 5);
 * ```
 */
export const MAX_ATTEMPTS = 5;

/**
 * A one-line summary of the attempt a record describes, for `{previous}` in
 * the resume text and for a later record's `attempts`: the attempt number,
 * whether it ended (and how) or was cut off, its turns and time against its
 * caps, its last checkpoint, and the host's end summary. At most 300
 * characters, escaped like the block's text.
 *
 * @param r The attempt's last record.
 * @returns One line, no newline.
 *
 * @example
 * ```ts
 * import { summaryLine } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   summaryLine({
 *     kind: "tier", source: "watchdog", runId: "r1", dialect: "chat", turnsUsed: 18,
 *     elapsedSeconds: 250, caps: { turns: { value: 20, source: "host" } }, tier: 2,
 *     persistedAt: "2026-01-01T00:04:10.000Z", message: "", tools: [], notes: [],
 *   }),
 *   "attempt 1 cut off after 18 of 20 turns and 4m10s; last checkpoint: budget tier 2 " +
 *     "(watchdog) at 2026-01-01T00:04:10.000Z",
 * );
 * ```
 */
export function summaryLine(r: CheckpointRecord): string {
  const turns = `${r.turnsUsed}${r.caps?.turns ? ` of ${r.caps.turns.value}` : ""} turns`;
  const time = `${formatDuration(r.elapsedSeconds)}${
    r.caps?.time ? ` of ${formatDuration(r.caps.time.value)}` : ""
  }`;
  const how = r.end ? `ended ${r.end.status}` : "cut off";
  const what = r.kind === "tier"
    ? `budget tier ${r.tier}`
    : r.kind === "uncapped"
    ? `uncapped checkpoint ${r.multiple ?? 1}`
    : r.kind === "tool_timeout" && isObject(r.timedOut)
    ? `tool call ${timedOutText(r.timedOut)}`
    : r.kind;
  let text = `attempt ${r.attempt ?? 1} ${how} after ${turns} and ${time}`;
  if (isObject(r.usage)) {
    const tokens = num(r.usage.inputTokens) + num(r.usage.outputTokens);
    text += `, ${tokens}${r.caps?.tokens ? ` of ${r.caps.tokens.value}` : ""} tokens`;
    if (typeof r.usage.usd === "number" && Number.isFinite(r.usage.usd)) {
      const floor = Array.isArray(r.usage.unpriced) && r.usage.unpriced.length > 0;
      text += ` and ${floor ? "at least " : ""}${dollars(r.usage.usd)}${
        r.caps?.usd ? ` of ${dollars(r.caps.usd.value)}` : ""
      }`;
    }
  }
  // A call that timed out is named even when a later record (its end) replaced the timeout's.
  const timedOut = r.kind === "tool_timeout" ? undefined : r.tools?.find((t) => t.timedOut);
  if (timedOut) {
    text += `; tool call ${line(timedOut.tool)}${
      timedOut.callId === undefined ? "" : ` [${line(timedOut.callId)}]`
    } timed out`;
  }
  text += r.end?.summary
    ? `: ${r.end.summary}`
    : `; last checkpoint: ${what} (${r.source}) at ${r.persistedAt}`;
  const chars = Array.from(line(text));
  return chars.length <= SUMMARY_CHARS
    ? chars.join("")
    : chars.slice(0, SUMMARY_CHARS - 1).join("") + "…";
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v);
const isNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isString = (v: unknown): v is string => typeof v === "string";
const num = (v: unknown) => (isNumber(v) ? v : 0);
const TOOL_STATUSES: readonly unknown[] = ["in flight", "ok", "failed", "done"];
const OUTCOMES: readonly unknown[] = ["exited", "signaled", "deadline", "not started"];

/**
 * Reads an earlier record's fields: a field of the wrong type (a forged or
 * damaged data line) is dropped and named, so nothing downstream meets an
 * object where it expects text or a number.
 */
class Fields {
  readonly dropped: string[] = [];

  /** Keep `o[key]` when `ok` says so or it is absent; else drop it, naming `at`. */
  keep(o: Record<string, unknown>, key: string, ok: (v: unknown) => boolean, at: string): void {
    if (o[key] === undefined || ok(o[key])) return;
    delete o[key];
    this.dropped.push(at);
  }

  /** A list of strings; a wrong entry is dropped. */
  strings(v: unknown, at: string): string[] {
    if (v === undefined) return [];
    if (!Array.isArray(v)) {
      this.dropped.push(at);
      return [];
    }
    const kept = v.filter(isString);
    if (kept.length !== v.length) this.dropped.push(`${at} (${v.length - kept.length} entries)`);
    return kept;
  }

  /** A number, else 0. */
  number(v: unknown, at: string): number {
    if (isNumber(v)) return v;
    if (v !== undefined) this.dropped.push(at);
    return 0;
  }

  caps(v: unknown): RunCaps {
    if (v === undefined) return {};
    if (!isObject(v)) {
      this.dropped.push("caps");
      return {};
    }
    const caps: RunCaps = {};
    for (const axis of AXIS_NAMES) {
      const c = v[axis];
      if (c === undefined) continue;
      if (isObject(c) && isNumber(c.value) && isString(c.source)) {
        caps[axis] = { value: c.value, source: c.source };
      } else this.dropped.push(`caps.${axis}`);
    }
    return caps;
  }

  tools(v: unknown): ToolCall[] {
    if (v === undefined) return [];
    if (!Array.isArray(v)) {
      this.dropped.push("tools");
      return [];
    }
    const tools: ToolCall[] = [];
    v.forEach((t, i) => {
      if (!isObject(t) || !isString(t.tool)) {
        this.dropped.push(`tools[${i}]`);
        return;
      }
      const call = { ...t };
      this.keep(call, "callId", isString, `tools[${i}].callId`);
      this.keep(call, "durationMs", isNumber, `tools[${i}].durationMs`);
      this.keep(call, "error", isString, `tools[${i}].error`);
      this.keep(call, "timedOut", (b) => b === true, `tools[${i}].timedOut`);
      if (!TOOL_STATUSES.includes(call.status)) {
        if (call.status !== undefined) this.dropped.push(`tools[${i}].status`);
        call.status = "done";
      }
      call.startedAt = this.number(call.startedAt, `tools[${i}].startedAt`);
      tools.push(call as unknown as ToolCall);
    });
    return tools;
  }

  command(v: Record<string, unknown>): CommandRecord | undefined {
    if (!OUTCOMES.includes(v.outcome)) {
      this.dropped.push("command");
      return undefined;
    }
    const c = { ...v };
    c.argv = this.strings(c.argv, "command.argv");
    c.tail = this.strings(c.tail, "command.tail");
    this.keep(c, "exitCode", isNumber, "command.exitCode");
    this.keep(c, "signal", isString, "command.signal");
    return c as unknown as CommandRecord;
  }
}

/**
 * The record in a checkpoint file's block, or undefined when the file holds
 * no intact block (only the agent's text, empty, truncated, not UTF-8, a data
 * line that is not a record …). Records written by earlier versions (kinds
 * `tier`, `uncapped` and `stall` only, no attempts or end) are read as they
 * are; missing lists read as empty. A field of the wrong type (a forged or
 * damaged data line) is dropped, and its name added to `dropped`.
 *
 * @param bytes The file's content.
 * @param dropped Told the names of the fields dropped, when given.
 * @returns The record, without the data line's version field.
 *
 * @example
 * ```ts
 * import { parseRecord } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * const old = '<!-- agent-checkpoint:begin -->\n## text\n\n<!-- agent-checkpoint:data {"v":1,' +
 *   '"kind":"stall","source":"watchdog","runId":"r","dialect":"chat","turnsUsed":2,' +
 *   '"elapsedSeconds":9,"caps":{},"tier":0,"persistedAt":"2026-01-01T00:00:00.000Z",' +
 *   '"message":"m","tools":[],"notes":[],"end":{"status":"failed","at":"x",' +
 *   '"summary":{"toString":1}}} -->\n<!-- agent-checkpoint:end -->\n';
 * const dropped: string[] = [];
 * const record = parseRecord(new TextEncoder().encode(old), dropped);
 * assert.equal(record?.kind, "stall");
 * assert.deepEqual(record?.end, { status: "failed", at: "x" });
 * assert.deepEqual(dropped, ["end.summary"]);
 * assert.equal(parseRecord(new TextEncoder().encode("just notes")), undefined);
 * ```
 */
export function parseRecord(bytes: Uint8Array, dropped?: string[]): CheckpointRecord | undefined {
  const at = findBlock(bytes);
  if (!at) return undefined;
  const data = blockData(bytes, at);
  if (!data) return undefined;
  const { v: _v, ...r } = data;
  if (!RECORD_KINDS.includes(r.kind as RecordKind)) return undefined;
  if (!RECORD_SOURCES.includes(r.source as RecordSource)) return undefined;
  if (!isString(r.runId) || !isString(r.persistedAt)) return undefined;
  const f = new Fields();
  if (!isString(r.dialect)) {
    if (r.dialect !== undefined) f.dropped.push("dialect");
    r.dialect = "chat";
  }
  if (!isString(r.message)) {
    if (r.message !== undefined) f.dropped.push("message");
    r.message = "";
  }
  r.turnsUsed = f.number(r.turnsUsed, "turnsUsed");
  r.elapsedSeconds = f.number(r.elapsedSeconds, "elapsedSeconds");
  r.tier = f.number(r.tier, "tier");
  for (const key of ["multiple", "intervalSeconds", "silentSeconds"]) f.keep(r, key, isNumber, key);
  r.caps = f.caps(r.caps);
  r.tools = f.tools(r.tools);
  r.notes = f.strings(r.notes, "notes");
  if (r.attempts !== undefined) r.attempts = f.strings(r.attempts, "attempts");
  f.keep(r, "attempt", (n) => Number.isInteger(n) && (n as number) >= 1, "attempt");
  if (r.end !== undefined) {
    const end = r.end;
    if (isObject(end) && END_STATUSES.includes(end.status as EndStatus) && isString(end.at)) {
      r.end = { ...end };
      f.keep(r.end as Record<string, unknown>, "summary", isString, "end.summary");
    } else {
      delete r.end;
      f.dropped.push("end");
    }
  }
  if (r.command !== undefined) {
    if (isObject(r.command)) r.command = f.command(r.command);
    else f.dropped.push("command");
    if (r.command === undefined) delete r.command;
  }
  f.keep(
    r,
    "workspace",
    (w) => isObject(w) && isString(w.snapshot) && isString(w.project),
    "workspace",
  );
  f.keep(
    r,
    "usage",
    (u) => isObject(u) && isNumber(u.inputTokens) && isNumber(u.outputTokens),
    "usage",
  );
  if (isObject(r.usage)) {
    f.keep(r.usage, "usd", isNumber, "usage.usd");
    if (r.usage.unpriced !== undefined) {
      r.usage.unpriced = f.strings(r.usage.unpriced, "usage.unpriced");
    }
  }
  f.keep(
    r,
    "timedOut",
    (t) => isObject(t) && isString(t.tool) && isNumber(t.timeoutSeconds),
    "timedOut",
  );
  f.keep(r, "tree", (t) => isObject(t) && isString(t.root), "tree");
  f.keep(
    r,
    "budget",
    (b) => isObject(b) && isString(b.axis) && isNumber(b.cap) && isNumber(b.used),
    "budget",
  );
  if (r.unknownPrices !== undefined) r.unknownPrices = f.strings(r.unknownPrices, "unknownPrices");
  dropped?.push(...f.dropped);
  return r as unknown as CheckpointRecord;
}

// The block, as bytes in a checkpoint file.

/**
 * The line that opens the plugin's block.
 *
 * @example
 * ```ts
 * import { BLOCK_BEGIN } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(BLOCK_BEGIN, "<!-- agent-checkpoint:begin -->");
 * ```
 */
export const BLOCK_BEGIN = "<!-- agent-checkpoint:begin -->";

/**
 * The line that closes the plugin's block.
 *
 * @example
 * ```ts
 * import { BLOCK_END } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(BLOCK_END, "<!-- agent-checkpoint:end -->");
 * ```
 */
export const BLOCK_END = "<!-- agent-checkpoint:end -->";

/**
 * The start of the machine-readable line, the last line before the end marker.
 *
 * @example
 * ```ts
 * import { DATA_PREFIX } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(DATA_PREFIX.startsWith("<!--"));
 * ```
 */
export const DATA_PREFIX = "<!-- agent-checkpoint:data ";

const BEGIN = Buffer.from(BLOCK_BEGIN);
const END = Buffer.from(BLOCK_END);
const DATA = Buffer.from(DATA_PREFIX);
const NL = 0x0a;

/** Where a block lies: `start` at its begin marker, `end` just after its end marker. */
export interface BlockSpan {
  /** Offset of the begin marker's first byte. */
  start: number;
  /** Offset just past the end marker's last byte (its line's newline is not part of it). */
  end: number;
}

const asBuffer = (bytes: Uint8Array) =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

/** Whether `marker` at `at` stands alone on its line; returns the offset past it, else -1. */
function markerLine(buf: Buffer, at: number, marker: Buffer): number {
  if (at > 0 && buf[at - 1] !== NL) return -1;
  let i = at + marker.length;
  while (i < buf.length && (buf[i] === 0x20 || buf[i] === 0x09 || buf[i] === 0x0d)) i++;
  return i === buf.length || buf[i] === NL ? at + marker.length : -1;
}

/** Offsets of every line that is `marker` alone, in order. */
function markerLines(buf: Buffer, marker: Buffer): number[] {
  const found: number[] = [];
  for (let at = buf.indexOf(marker); at !== -1; at = buf.indexOf(marker, at + 1)) {
    if (markerLine(buf, at, marker) !== -1) found.push(at);
  }
  return found;
}

/**
 * Every well-formed block in the bytes: a begin line, then an end line, with
 * no other begin line between them. In file order.
 *
 * @param bytes A checkpoint file's content.
 * @returns The spans, first to last; empty when there is none.
 *
 * @example
 * ```ts
 * import { BLOCK_BEGIN, BLOCK_END, findBlocks } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * const text = `quoted inline: ${BLOCK_BEGIN}\n${BLOCK_BEGIN}\nx\n${BLOCK_END}\n`;
 * const [span] = findBlocks(new TextEncoder().encode(text));
 * assert.equal(span?.start, text.indexOf(`\n${BLOCK_BEGIN}`) + 1);
 * ```
 */
export function findBlocks(bytes: Uint8Array): BlockSpan[] {
  const buf = asBuffer(bytes);
  const begins = markerLines(buf, BEGIN);
  if (begins.length === 0) return [];
  const ends = markerLines(buf, END);
  const spans: BlockSpan[] = [];
  let e = 0;
  for (let b = 0; b < begins.length; b++) {
    const start = begins[b]!;
    while (e < ends.length && ends[e]! < start) e++;
    if (e === ends.length) break;
    const end = ends[e]!;
    const next = begins[b + 1];
    if (next !== undefined && next < end) continue;
    spans.push({ start, end: end + END.length });
    e++;
  }
  return spans;
}

/**
 * The data line's JSON text inside a block (the last line before the end
 * marker), or undefined when that line is not a data line.
 *
 * @param bytes A checkpoint file's content.
 * @param span A block in it, from {@linkcode findBlocks}.
 * @returns The JSON text, unparsed.
 *
 * @example
 * ```ts
 * import { dataText, findBlock } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * const bytes = new TextEncoder().encode(
 *   "<!-- agent-checkpoint:begin -->\n<!-- agent-checkpoint:data {\"v\":1} -->\n" +
 *     "<!-- agent-checkpoint:end -->",
 * );
 * assert.equal(dataText(bytes, findBlock(bytes)!), '{"v":1}');
 * ```
 */
export function dataText(bytes: Uint8Array, span: BlockSpan): string | undefined {
  const buf = asBuffer(bytes);
  const endLine = span.end - END.length;
  let lineEnd = endLine - 1; // the newline before the end marker
  if (lineEnd <= span.start || buf[lineEnd] !== NL) return undefined;
  if (buf[lineEnd - 1] === 0x0d) lineEnd--;
  const lineStart = buf.lastIndexOf(NL, lineEnd - 1) + 1;
  if (lineStart <= span.start) return undefined;
  const line = buf.subarray(lineStart, lineEnd);
  if (!line.subarray(0, DATA.length).equals(DATA)) return undefined;
  const text = line.toString("utf8");
  return text.endsWith(" -->") ? text.slice(DATA_PREFIX.length, -4) : undefined;
}

/**
 * The parsed data line of a block when it is a version-1 object, else undefined.
 *
 * @param bytes A checkpoint file's content.
 * @param span A block in it.
 * @returns The data, `v` included, unchecked beyond its version.
 *
 * @example
 * ```ts
 * import { blockData, findBlock } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * const block = (data: string) =>
 *   new TextEncoder().encode(
 *     `<!-- agent-checkpoint:begin -->\n<!-- agent-checkpoint:data ${data} -->\n` +
 *       "<!-- agent-checkpoint:end -->",
 *   );
 * const ok = block('{"v":1,"kind":"stall"}');
 * assert.deepEqual(blockData(ok, findBlock(ok)!), { v: 1, kind: "stall" });
 * const future = block('{"v":2}');
 * assert.equal(blockData(future, findBlock(future)!), undefined);
 * ```
 */
export function blockData(bytes: Uint8Array, span: BlockSpan): Record<string, unknown> | undefined {
  const text = dataText(bytes, span);
  if (text === undefined) return undefined;
  try {
    const data = JSON.parse(text);
    return data !== null && typeof data === "object" && !Array.isArray(data) && data.v === 1
      ? data
      : undefined;
  } catch {
    // not a record's JSON: no record, as for a file without a block
    return undefined;
  }
}

/**
 * Where the plugin's own block lies in a file. Only a well-formed block whose
 * last line is the library's data line counts: markers the agent copied
 * without one are the agent's text. Among those, the one with a valid data
 * line and the latest `persistedAt`; on a tie, or when no data line is
 * valid, the first of them.
 *
 * @param bytes A checkpoint file's content, in any encoding.
 * @returns The block's span, or undefined when there is none.
 *
 * @example
 * ```ts
 * import { BLOCK_BEGIN, BLOCK_END, DATA_PREFIX, findBlock } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * const ours = `${BLOCK_BEGIN}\nx\n${DATA_PREFIX}{"v":1} -->\n${BLOCK_END}`;
 * const bytes = new TextEncoder().encode(`notes\n${ours}\n`);
 * assert.deepEqual(findBlock(bytes), { start: 6, end: bytes.length - 1 });
 * // Markers the agent copied into its notes, without a data line, are not the library's.
 * assert.equal(findBlock(new TextEncoder().encode(`${BLOCK_BEGIN}\nx\n${BLOCK_END}\n`)), undefined);
 * ```
 */
export function findBlock(bytes: Uint8Array): BlockSpan | undefined {
  let first: BlockSpan | undefined;
  let best: BlockSpan | undefined;
  let bestAt = -Infinity;
  for (const span of findBlocks(bytes)) {
    if (dataText(bytes, span) === undefined) continue;
    first ??= span;
    const data = blockData(bytes, span);
    if (!data) continue;
    const at = typeof data.persistedAt === "string" ? Date.parse(data.persistedAt) : NaN;
    const score = Number.isFinite(at) ? at : -Number.MAX_VALUE;
    if (score > bestAt) {
      best = span;
      bestAt = score;
    }
  }
  return best ?? first;
}

/**
 * Put `block` into a file's bytes: over the plugin's own block when there is
 * one, else appended after a blank line. Every other byte is kept as it was,
 * whatever its encoding.
 *
 * @param existing The file's current content, or undefined for a new file.
 * @param block The new block, markers included (see `renderBlock`).
 * @returns The new content.
 *
 * @example
 * ```ts
 * import { BLOCK_BEGIN, BLOCK_END, mergeBlock } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * const data = `<!-- agent-checkpoint:data {"v":1} -->`;
 * const block = `${BLOCK_BEGIN}\nnew\n${data}\n${BLOCK_END}`;
 * const old = new TextEncoder().encode(`mine\n${BLOCK_BEGIN}\nold\n${data}\n${BLOCK_END}\nmore`);
 * assert.equal(new TextDecoder().decode(mergeBlock(old, block)), `mine\n${block}\nmore`);
 * ```
 */
export function mergeBlock(existing: Uint8Array | undefined, block: string): Buffer {
  const fresh = Buffer.from(block);
  if (!existing || existing.byteLength === 0) return Buffer.concat([fresh, Buffer.from("\n")]);
  const old = asBuffer(existing);
  const at = findBlock(old);
  if (at) return Buffer.concat([old.subarray(0, at.start), fresh, old.subarray(at.end)]);
  const gap = old[old.length - 1] === NL ? "\n" : "\n\n";
  return Buffer.concat([old, Buffer.from(gap), fresh, Buffer.from("\n")]);
}

/**
 * Text made safe to render inside the block: an HTML comment opener becomes
 * `&lt;!--`, so no note, tool name, run id or command output can forge a
 * marker or data line, and the block's comment syntax stays closed.
 *
 * @param text Any text from the host, the agent or a command.
 * @returns The text with every `<!--` escaped.
 *
 * @example
 * ```ts
 * import { BLOCK_END, escapeText } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(escapeText(BLOCK_END), "&lt;!-- agent-checkpoint:end -->");
 * ```
 */
export function escapeText(text: string): string {
  return text.includes("<!--") ? text.replaceAll("<!--", "&lt;!--") : text;
}

/**
 * A value as JSON that cannot end an HTML comment or start one: `<` and `>`
 * are written as `\u003c` and `\u003e`.
 *
 * @example
 * ```ts
 * import { embedJson } from "./_record.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(embedJson({ a: "-->" }), '{"a":"--\\u003e"}');
 * assert.deepEqual(JSON.parse(embedJson({ a: "-->" })), { a: "-->" });
 * ```
 */
export function embedJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, "\\u003c").replace(/>/g, "\\u003e")
    .replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
}
