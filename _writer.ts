/**
 * The one checkpoint writer, the same on the main thread and in the watchdog
 * worker: read the run's figures from shared memory, render the block, write
 * the file, log a failure, post the kanban comment, and tell the host. Only
 * the sinks differ between the threads.
 *
 * @module
 */
import { errorText, type Log } from "./log.ts";
import { type FileLock, persistBlock, persistBlocks } from "./persist.ts";
import {
  type CheckpointRecord,
  commentBody,
  type EndStatus,
  formatTimeout,
  type RecordKind,
  type RecordSource,
  renderBlock,
  type RunCaps,
  type TimedOutCall,
  type UsageTotals,
} from "./_record.ts";
import type { Settings } from "./settings.ts";
import { INFO_BYTES, type RunTable } from "./_run_table.ts";
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
  /** 1 for a fresh run, else the earlier attempt's number + 1. */
  attempt?: number;
  /** One-line summaries of the earlier attempts, oldest first. */
  attempts?: string[];
  /** The errors of failed tool calls, by their sequence number. */
  toolErrors?: Record<string, string>;
  /** The newest workspace snapshot of the run's project. */
  workspace?: { snapshot: string; project: string };
  /** The model the run uses, for the `prices` setting, when the host named it. */
  model?: string;
  /** What the earlier attempts used, for the run ledger. */
  prior?: { turns: number; seconds: number; tokens?: number; usd?: number };
}

/** Characters of a run id kept in the watchdog's records when the id is too long for its slot. */
const LONG_ID = 256;

/** Notes kept per run. */
export const MAX_NOTES = 10;

const encoder = new TextEncoder();

/**
 * A run's description as the worker reads it from shared memory. When it does
 * not fit, the oldest notes go first, then the last one is shortened, then the
 * earlier attempts' summaries and the tool errors, then a very long run id;
 * undefined when even that leaves it too large.
 */
export function encodeRunInfo(info: RunInfo): Uint8Array | undefined {
  let notes = info.notes;
  let trimmed: RunInfo = info;
  for (;;) {
    const bytes = encoder.encode(JSON.stringify({ ...trimmed, notes }));
    if (bytes.length <= INFO_BYTES) return bytes;
    if (notes.length > 1) notes = notes.slice(1);
    else if (notes.length === 1 && notes[0]!.length > 40) {
      const chars = Array.from(notes[0]!);
      notes = [chars.slice(0, Math.floor(chars.length / 2)).join("") + "…"];
    } else if (notes.length === 1) notes = [];
    else if (trimmed.attempts?.length) {
      trimmed = { ...trimmed, attempts: trimmed.attempts.slice(1) };
    } else if (trimmed.toolErrors) {
      const { toolErrors: _, ...rest } = trimmed;
      trimmed = rest;
    } else if (trimmed.runId.length > LONG_ID) {
      // The file name is settled already; the watchdog's records show the id's head.
      trimmed = { ...trimmed, runId: Array.from(trimmed.runId).slice(0, LONG_ID).join("") + "…" };
    } else return undefined;
  }
}

/** The template values of a run at a moment, with its tokens and dollars when it has those caps. */
export function templateValues(
  info: RunInfo,
  turnsUsed: number,
  elapsedSeconds: number,
  usage?: { tokens: number; usd: number },
): TemplateValues {
  const values: TemplateValues = {
    turnsUsed,
    elapsedSeconds,
    checkpointFile: info.checkpointFile,
  };
  if (info.caps.turns) values.turnsCap = info.caps.turns.value;
  if (info.caps.time) values.timeCapSeconds = info.caps.time.value;
  if (info.caps.tokens) {
    values.tokensCap = info.caps.tokens.value;
    values.tokensUsed = usage?.tokens ?? 0;
  }
  if (info.caps.usd) {
    values.usdCap = info.caps.usd.value;
    values.usdUsed = usage?.usd ?? 0;
  }
  return values;
}

/**
 * The run's use as a record shows it (its tokens, and its cost when known),
 * or undefined when none was reported.
 */
export function usageTotals(shared: RunTable, slot: number): UsageTotals | undefined {
  const u = shared.usage(slot);
  if (u.inputTokens === 0 && u.outputTokens === 0 && u.usd === 0) return undefined;
  const out: UsageTotals = { inputTokens: u.inputTokens, outputTokens: u.outputTokens };
  if (Number.isFinite(u.usd)) out.usd = u.usd;
  return out;
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
  | { kind: "stall"; silentSeconds: number }
  | { kind: "manual"; message?: string }
  | { kind: "deadline"; atSeconds: number }
  | { kind: "end"; status: EndStatus; summary?: string }
  | { kind: "tool_timeout"; call: TimedOutCall };

/** The highest tier the mid-run surface has persisted. */
const tierReached = (shared: RunTable, slot: number) =>
  shared.tierClaimed(slot, 2) ? 2 : shared.tierClaimed(slot, 1) ? 1 : 0;

/** The message of a record, by its kind. */
function messageOf(
  info: RunInfo,
  shared: RunTable,
  settings: Settings,
  event: PersistEvent,
  turnsUsed: number,
  elapsedSeconds: number,
  tools: CheckpointRecord["tools"],
): string {
  switch (event.kind) {
    case "tier":
      return tierMessage(
        settings,
        event.tier,
        templateValues(info, turnsUsed, elapsedSeconds, {
          tokens: shared.tokens(info.slot),
          usd: shared.usd(info.slot),
        }),
      );
    case "tool_timeout": {
      const c = event.call;
      return `Tool call ${c.tool}${c.callId === undefined ? "" : ` (${c.callId})`} ran past its ${
        formatTimeout(c.timeoutSeconds)
      } deadline; its signal aborts it now. This record is where the run got to.`;
    }
    case "uncapped":
      return `This run has no discoverable turn or time cap, so no budget tiers apply; ` +
        `this checkpoint was persisted on the uncapped interval (${
          formatDuration(event.intervalSeconds)
        }) to leave a durable record. Elapsed at persist: ${formatDuration(elapsedSeconds)}.`;
    case "stall": {
      const inFlight = tools.filter((t) => t.status === "in flight").at(-1);
      return `No hook call for ${formatDuration(event.silentSeconds)} (stall window ${
        formatDuration(settings.stall_window_seconds)
      }); the run may be stuck.` +
        (inFlight
          ? ` Tool call still in flight: ${inFlight.tool}${
            inFlight.callId ? ` (${inFlight.callId})` : ""
          }, started ${formatDuration(elapsedSeconds - inFlight.startedAt)} ago.`
          : " No tool call is in flight.");
    }
    case "manual":
      return event.message ?? "Checkpoint persisted at the host's request.";
    case "deadline":
      return `The run's hard deadline passed at ${
        formatDuration(event.atSeconds)
      }; the host's deadline signal aborts it now. This record is where it got to.`;
    case "end":
      return event.summary ?? `The run ended: ${event.status}.`;
  }
}

/** Build the record of a run as it stands now. */
export function buildRecord(
  info: RunInfo,
  shared: RunTable,
  settings: Settings,
  event: PersistEvent,
  source: RecordSource,
  now: number,
): CheckpointRecord {
  const slot = info.slot;
  const turnsUsed = shared.turns(slot);
  const elapsedSeconds = Math.max(0, (now - shared.start(slot)) / 1000);
  const tools = shared.tools(slot).map(({ seq, ...call }) => {
    const error = info.toolErrors?.[seq];
    return error === undefined ? call : { ...call, error };
  });
  const record: CheckpointRecord = {
    kind: event.kind as RecordKind,
    source,
    runId: info.runId,
    dialect: info.dialect,
    turnsUsed,
    elapsedSeconds,
    caps: info.caps,
    tier: event.kind === "tier" ? event.tier : tierReached(shared, slot),
    persistedAt: new Date().toISOString(),
    message: messageOf(info, shared, settings, event, turnsUsed, elapsedSeconds, tools),
    tools,
    notes: info.notes,
  };
  if (event.kind === "uncapped") {
    record.multiple = event.multiple;
    record.intervalSeconds = event.intervalSeconds;
  } else if (event.kind === "stall") record.silentSeconds = event.silentSeconds;
  else if (event.kind === "end") {
    record.end = { status: event.status, at: record.persistedAt };
    if (event.summary !== undefined) record.end.summary = event.summary;
  }
  if (info.attempt !== undefined) record.attempt = info.attempt;
  if (info.attempts?.length) record.attempts = info.attempts;
  if (info.workspace) record.workspace = info.workspace;
  const usage = usageTotals(shared, slot);
  if (usage) record.usage = usage;
  if (event.kind === "tool_timeout") record.timedOut = event.call;
  return record;
}

/** What a host's `onCheckpoint` listener is told after each write of a checkpoint file. */
export interface CheckpointEvent {
  /** The run whose file was written. */
  runId: string;
  /** The checkpoint file. */
  file: string;
  /** Why it was written: `tier`, `uncapped`, `stall`, `manual`, `deadline`, `tool_timeout` or `end`. */
  kind: RecordKind;
  /** The budget tier, for tier checkpoints. */
  tier?: 1 | 2;
  /** Who wrote it: `pre_llm_call`, `pre_tool_call`, `post_tool_call`, `watchdog`, `host` … */
  source: RecordSource;
  /** When, as an ISO 8601 time. */
  persistedAt: string;
}

/** Where a writer's side effects go: the thread it runs on decides. */
export interface WriterSinks {
  log: Log;
  /** Post a kanban task comment (S8). */
  comment(comment: { taskId: string; body: string }, runId: string): void;
  /** Tell the host a file was written. */
  written(event: CheckpointEvent): void;
}

/** One write a watchdog look found due. */
export interface PendingWrite {
  info: RunInfo;
  settings: Settings;
  event: PersistEvent;
  source: RecordSource;
  now: number;
}

/** A record made, ready to write. */
export interface Prepared {
  item: PendingWrite;
  record: CheckpointRecord;
  block: string;
}

/** Writes of one burst in flight at once. */
const BATCH_CONCURRENCY = 16;

/** Bits of the per-kind "first comment went out" state in shared memory. */
const COMMENT_ONCE: Partial<Record<RecordKind, number>> = { uncapped: 1 };

/**
 * Writes checkpoint files for the runs of one `AgentCheckpoint`, on one
 * thread. Never throws: a failure is a log line and an undefined result.
 */
export class CheckpointWriter {
  readonly #shared: RunTable;
  readonly #sinks: WriterSinks;

  constructor(shared: RunTable, sinks: WriterSinks) {
    this.#shared = shared;
    this.#sinks = sinks;
  }

  /**
   * Persist a record of the run now, unless the mode is `log-only` (then a
   * log line says what was due). Returns the file written, or undefined.
   */
  write(
    info: RunInfo,
    settings: Settings,
    event: PersistEvent,
    source: RecordSource,
    now: number,
  ): string | undefined {
    const prepared = this.prepare({ info, settings, event, source, now });
    return prepared && this.commit(prepared);
  }

  /**
   * Write a record made earlier by {@linkcode CheckpointWriter.prepare}.
   * Returns the file written, or undefined.
   */
  commit(prepared: Prepared): string | undefined {
    try {
      persistBlock(prepared.item.info.checkpointFile, prepared.block, this.#lock(prepared));
    } catch (error) {
      this.#failed(prepared.item.info, error);
      return undefined;
    }
    return this.#done(prepared);
  }

  /** The run's file lock in the shared table: one thread at a time rewrites a run's file. */
  #lock(prepared: Prepared): FileLock {
    const shared = this.#shared;
    const slot = prepared.item.info.slot;
    return {
      take: (ms) => shared.lockFile(slot, ms),
      takeAsync: (ms) => shared.lockFileAsync(slot, ms),
      release: () => shared.unlockFile(slot),
    };
  }

  /**
   * Persist a burst of records concurrently (a bounded number in flight, one
   * directory flush per batch), each as {@linkcode CheckpointWriter.write}
   * would, its run's file lock held. Never rejects.
   */
  async writeMany(items: PendingWrite[]): Promise<void> {
    const prepared = items.map((item) => this.prepare(item)).filter((p) => p !== undefined);
    if (prepared.length === 0) return;
    let results: Array<Error | undefined>;
    try {
      results = await persistBlocks(
        prepared.map((p) => ({
          file: p.item.info.checkpointFile,
          block: p.block,
          lock: this.#lock(p),
        })),
        { concurrency: BATCH_CONCURRENCY },
      );
    } catch (error) {
      results = prepared.map(() => error instanceof Error ? error : new Error(String(error)));
    }
    prepared.forEach((p, i) => {
      const error = results[i];
      if (error) this.#failed(p.item.info, error);
      else this.#done(p);
    });
  }

  /**
   * Make the record of a write now, from the run's figures as they stand
   * (or log what log-only mode would have written); undefined when there is
   * nothing to write.
   */
  prepare(item: PendingWrite): Prepared | undefined {
    const { info, settings, event, source, now } = item;
    if (settings.mode === "log-only") {
      const what = event.kind === "tier" ? `tier ${event.tier}` : event.kind;
      const where = source === "watchdog" ? "(watchdog)" : `on the mid-run surface (${source})`;
      this.#sinks.log("info", `${what} due ${where}`, info.runId);
      return undefined;
    }
    try {
      const record = buildRecord(info, this.#shared, settings, event, source, now);
      return { item, record, block: renderBlock(record) };
    } catch (error) {
      this.#failed(info, error);
      return undefined;
    }
  }

  #failed(info: RunInfo, error: unknown): void {
    this.#sinks.log(
      "error",
      `could not persist the checkpoint to ${info.checkpointFile}: ${errorText(error)}`,
      info.runId,
    );
  }

  /** After a write: tell the host, and post the kanban comment. */
  #done({ item, record }: Prepared): string {
    const { info, event, source } = item;
    const written: CheckpointEvent = {
      runId: info.runId,
      file: info.checkpointFile,
      kind: record.kind,
      source,
      persistedAt: record.persistedAt,
    };
    if (event.kind === "tier") written.tier = event.tier;
    this.#sinks.written(written);
    const once = COMMENT_ONCE[record.kind];
    if (
      info.taskId !== undefined && record.kind !== "end" &&
      (once === undefined || this.#shared.claimComment(info.slot, once))
    ) this.#sinks.comment({ taskId: info.taskId, body: commentBody(record) }, info.runId);
    return info.checkpointFile;
  }
}
