/**
 * What the plugin's block says (S8): a header line, the message, the run's
 * figures, recent tool calls and notes, and the same in JSON. Pure.
 *
 * @module
 */
import { BLOCK_BEGIN, BLOCK_END, DATA_PREFIX, findBlock } from "./persist.ts";
import { formatDuration } from "./template.ts";

/** A cap and where it was found. */
export interface CapSource {
  /** Turns, or seconds. */
  value: number;
  /** Where it was found: `host`, `kanban db`, `TERMINAL_TIMEOUT`, `caps.turns` … */
  source: string;
}

/** A run's caps after S4, per axis. */
export interface RunCaps {
  /** The turn cap. */
  turns?: CapSource;
  /** The time cap, in seconds. */
  time?: CapSource;
}

/** A tool call the host reported. */
export interface ToolCall {
  tool: string;
  status: "in flight" | "ok" | "failed" | "done";
  /** Seconds after the run started. */
  startedAt: number;
  durationMs?: number;
}

/** Why a checkpoint was persisted. */
export type RecordKind = "tier" | "uncapped" | "stall";
/** Which surface persisted it. */
export type RecordSource = "pre_tool_call" | "post_tool_call" | "watchdog";

/** Everything a persisted checkpoint records. */
export interface CheckpointRecord {
  kind: RecordKind;
  source: RecordSource;
  runId: string;
  dialect: string;
  turnsUsed: number;
  elapsedSeconds: number;
  caps: RunCaps;
  tier: number;
  /** The uncapped multiple (S9). */
  multiple?: number;
  intervalSeconds?: number;
  /** Seconds of silence before a stall checkpoint (S10). */
  silentSeconds?: number;
  persistedAt: string;
  message: string;
  tools: ToolCall[];
  notes: string[];
}

/** The plugin's name, heading every block and comment. */
export const PLUGIN = "agent-checkpoint";

/** The header line: plugin, kind and source. */
export function headerLine(r: CheckpointRecord): string {
  const what = r.kind === "tier"
    ? `budget tier ${r.tier} checkpoint persisted mid-run`
    : r.kind === "uncapped"
    ? `uncapped-run checkpoint ${r.multiple ?? 1} persisted`
    : "stall checkpoint persisted";
  return `${PLUGIN}: ${what} (source: ${r.source})`;
}

const capLine = (label: string, cap: CapSource | undefined, unit: (n: number) => string) =>
  `- ${label}: ${cap ? `${unit(cap.value)} (${cap.source})` : "none"}`;

/** The human-readable part of the block, also the kanban comment's text. */
export function recordText(r: CheckpointRecord): string {
  const lines = [
    `## ${headerLine(r)}`,
    "",
    r.message,
    "",
    `- Run: ${r.runId}`,
    `- Dialect: ${r.dialect}`,
    `- Turns so far: ${r.turnsUsed}`,
    `- Elapsed: ${formatDuration(r.elapsedSeconds)}`,
    capLine("Turn cap", r.caps.turns, String),
    capLine("Time cap", r.caps.time, formatDuration),
    `- Tier: ${r.tier}`,
  ];
  if (r.kind === "uncapped" && r.intervalSeconds !== undefined) {
    lines.push(
      `- Uncapped interval: ${formatDuration(r.intervalSeconds)} (checkpoint ${r.multiple})`,
    );
  }
  lines.push(`- Persisted at: ${r.persistedAt}`);
  if (r.tools.length > 0) {
    lines.push("", "Recent tool calls:");
    for (const t of r.tools) {
      const took = t.durationMs === undefined ? "" : `, ${Math.round(t.durationMs)} ms`;
      lines.push(`- ${t.tool} (${t.status}${took}, at ${formatDuration(t.startedAt)})`);
    }
  }
  if (r.notes.length > 0) {
    lines.push("", "Notes:");
    for (const n of r.notes) lines.push(`- ${n.replace(/\s*\n\s*/g, " ")}`);
  }
  return lines.join("\n");
}

// JSON inside an HTML comment must not close it: `<` and `>` are escaped.
const embed = (value: unknown) =>
  JSON.stringify(value).replace(/</g, "\\u003c").replace(/>/g, "\\u003e");

/** The whole block, markers included. */
export function renderBlock(r: CheckpointRecord): string {
  return [
    BLOCK_BEGIN,
    recordText(r),
    "",
    `${DATA_PREFIX}${embed({ v: 1, ...r })} -->`,
    BLOCK_END,
  ].join("\n");
}

const COMMENT_LIMIT = 4000;

/**
 * The kanban comment for a record: its text headed with the plugin's name,
 * cut to 4,000 characters without splitting a character.
 */
export function commentBody(r: CheckpointRecord): string {
  const body = `# ${PLUGIN}\n\n${recordText(r)}`;
  const chars = Array.from(body);
  if (chars.length <= COMMENT_LIMIT) return body;
  return chars.slice(0, COMMENT_LIMIT - 1).join("") + "…";
}

/**
 * The record in a checkpoint file's block, or undefined when the file holds
 * no intact block (only the agent's text, empty, truncated, not UTF-8 …).
 */
export function parseRecord(bytes: Uint8Array): CheckpointRecord | undefined {
  const at = findBlock(bytes);
  if (!at) return undefined;
  const block = new TextDecoder().decode(bytes.subarray(at.start, at.end));
  const line = block.split("\n").find((l) => l.startsWith(DATA_PREFIX));
  if (!line?.endsWith(" -->")) return undefined;
  try {
    const data = JSON.parse(line.slice(DATA_PREFIX.length, -4));
    return data && typeof data === "object" && data.v === 1 ? data : undefined;
  } catch {
    return undefined;
  }
}
