/**
 * One mid-run persist, the same on the main thread and in the watchdog: read
 * the run's figures from shared memory, render the block, write the file.
 *
 * @module
 */
import { persistBlock } from "./persist.ts";
import {
  type CheckpointRecord,
  type RecordKind,
  type RecordSource,
  renderBlock,
  type RunCaps,
} from "./record.ts";
import type { Settings } from "./settings.ts";
import { INFO_BYTES, type SharedRuns } from "./shared.ts";
import { formatDuration, renderTemplate, type TemplateValues } from "./template.ts";

/** What the worker must know of a run that shared memory does not hold. */
export interface RunInfo {
  slot: number;
  gen: number;
  runId: string;
  dialect: string;
  taskId?: string;
  caps: RunCaps;
  checkpointFile: string;
  notes: string[];
}

/** Notes kept per run. */
export const MAX_NOTES = 10;

const encoder = new TextEncoder();

/**
 * A run's description as the worker reads it from shared memory. When it does
 * not fit, the oldest notes go first, then the last one is shortened; undefined
 * when even that leaves it too large.
 */
export function encodeRunInfo(info: RunInfo): Uint8Array | undefined {
  let notes = info.notes;
  for (;;) {
    const bytes = encoder.encode(JSON.stringify({ ...info, notes }));
    if (bytes.length <= INFO_BYTES) return bytes;
    if (notes.length > 1) notes = notes.slice(1);
    else if (notes.length === 1 && notes[0]!.length > 40) {
      const chars = Array.from(notes[0]!);
      notes = [chars.slice(0, Math.floor(chars.length / 2)).join("") + "…"];
    } else if (notes.length === 1) notes = [];
    else return undefined;
  }
}

/** The template values of a run at a moment. */
export function templateValues(
  info: RunInfo,
  turnsUsed: number,
  elapsedSeconds: number,
): TemplateValues {
  const values: TemplateValues = {
    turnsUsed,
    elapsedSeconds,
    checkpointFile: info.checkpointFile,
  };
  if (info.caps.turns) values.turnsCap = info.caps.turns.value;
  if (info.caps.time) values.timeCapSeconds = info.caps.time.value;
  return values;
}

/** The budget numbers alone, for `notify` mode. */
export const NOTIFY_TEMPLATE = "Budget checkpoint: {budget}.";

/** The message a due tier puts before the model, by mode (S6). */
export function tierMessage(
  settings: Settings,
  tier: 1 | 2,
  values: TemplateValues,
): string {
  const template = settings.mode === "notify"
    ? NOTIFY_TEMPLATE
    : tier === 1
    ? settings.tier1_template
    : settings.tier2_template;
  return renderTemplate(template, values);
}

/** What to persist. */
export type PersistEvent =
  | { kind: "tier"; tier: 1 | 2 }
  | { kind: "uncapped"; multiple: number; intervalSeconds: number }
  | { kind: "stall"; silentSeconds: number };

/** Build the record of a run as it stands now. */
export function snapshot(
  info: RunInfo,
  shared: SharedRuns,
  settings: Settings,
  event: PersistEvent,
  source: RecordSource,
  now: number,
): CheckpointRecord {
  const turnsUsed = shared.turns(info.slot);
  const elapsedSeconds = Math.max(0, (now - shared.start(info.slot)) / 1000);
  const tools = shared.tools(info.slot);
  let message: string;
  let kind: RecordKind;
  let tier = 0;
  const extra: Partial<CheckpointRecord> = {};
  if (event.kind === "tier") {
    kind = "tier";
    tier = event.tier;
    message = tierMessage(settings, event.tier, templateValues(info, turnsUsed, elapsedSeconds));
  } else if (event.kind === "uncapped") {
    kind = "uncapped";
    extra.multiple = event.multiple;
    extra.intervalSeconds = event.intervalSeconds;
    message = `This run has no discoverable turn or time cap, so no budget tiers apply; ` +
      `this checkpoint was persisted on the uncapped interval (${
        formatDuration(event.intervalSeconds)
      }) to leave a durable record. Elapsed at persist: ${formatDuration(elapsedSeconds)}.`;
  } else {
    kind = "stall";
    extra.silentSeconds = event.silentSeconds;
    const inFlight = tools.filter((t) => t.status === "in flight").at(-1);
    message =
      `No hook call for ${formatDuration(event.silentSeconds)} (stall window ${
        formatDuration(settings.stall_window_seconds)
      }); the run may be stuck.` +
      (inFlight
        ? ` Tool call still in flight: ${inFlight.tool}, started ${
          formatDuration(elapsedSeconds - inFlight.startedAt)
        } ago.`
        : " No tool call is in flight.");
  }
  return {
    kind,
    source,
    runId: info.runId,
    dialect: info.dialect,
    turnsUsed,
    elapsedSeconds,
    caps: info.caps,
    tier,
    ...extra,
    persistedAt: new Date().toISOString(),
    message,
    tools,
    notes: info.notes,
  };
}

/** Write a record into its run's checkpoint file. */
export function persistRecord(info: RunInfo, record: CheckpointRecord): void {
  persistBlock(info.checkpointFile, renderBlock(record));
}
