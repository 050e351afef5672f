/**
 * The one checkpoint writer, the same on the main thread, in the watchdog
 * worker and in the supervisor: read the run's figures from shared memory,
 * build its record and render the block, take the run's file lock, replace
 * the block in the file while keeping every byte the agent wrote, log a
 * failure, post the kanban comment, and tell the host. Only the sinks differ
 * between the threads. Every checkpoint file is written by the file-write
 * steps of `_write_steps.ts` ({@linkcode persistBlock}, or
 * {@linkcode persistBlocks} for a burst), under its lock. A write that
 * fails (a full disk) is kept and tried again, 1 s doubling to 30 s, until
 * it or a newer record for the file lands; the run's file state in shared
 * memory says which, for its ledger record.
 *
 * The main thread's sinks are here too ({@linkcode hostSinks}): a written
 * file goes to the run ledger's store (the fleet store keeps its content) and
 * to the host's `onCheckpoint` listener, a kanban comment to the host's
 * `postComment`, else to its comment module. Each goes through the writer's
 * one guard for code not its own, so a throw or a rejection there costs a log
 * line, never the write, and a hook's write runs no module but the writer's.
 *
 * @module
 */
import * as path from "node:path";
import { clearTimeout, setTimeout } from "node:timers";
import { errorText, failOpen, isThenable, type Log } from "./log.ts";
import {
  AXES,
  type BudgetStop,
  type CheckpointRecord,
  commentBody,
  type EndStatus,
  formatTimeout,
  type RecordKind,
  type RecordSource,
  renderBlock,
  type RunCaps,
  type TimedOutCall,
  type TreeRecord,
  unpricedText,
  type UsageTotals,
} from "./_record.ts";
import type { Settings } from "./settings.ts";
import { INFO_BYTES, nowMs, type RunTable } from "./_run_table.ts";
import { cutBytes } from "./persist.ts";
import { formatDuration, renderTemplate, type TemplateValues } from "./template.ts";
import {
  ensureDir,
  FILE_LOCK_WAIT_MS,
  type FileLock,
  isMainThread,
  persistBlock,
  persistSteps,
  RefusedError,
  runAsync,
  runSync,
  SKIPPED,
  stuckBytes,
  writeBurst,
} from "./_write_steps.ts";

/** What the worker must know of a run that shared memory does not hold. */
export interface RunInfo {
  slot: number;
  gen: number;
  runId: string;
  dialect: string;
  taskId?: string;
  caps: RunCaps;
  checkpointFile: string;
  /** The host's notes, oldest first: {@linkcode NO_NOTES} until the first, a new array at each. */
  notes: readonly string[];
  /** 1 for a fresh run, else the earlier attempt's number + 1. */
  attempt?: number;
  /** The attempt that began the run afresh after a done end of its id (absent: 1). */
  generation?: number;
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
  /** The session whose stored goal's `turns_used` the run's turn count follows (the watchdog reads it). */
  goalSession?: string;
  /** The run's place in a tree of runs sharing a budget, and the tree's totals as last known. */
  tree?: TreeRecord;
  /** Models whose calls had no valid cost and no price: the run's dollars are a lower bound. */
  unknownPrices?: string[];
  /** The attempt's OpenTelemetry span, for the run ledger. */
  trace?: { traceId: string; spanId: string };
}

/** Notes kept per run. */
export const MAX_NOTES = 10;

const encoder = new TextEncoder();

/** The notes of a run that has none: one frozen array that every such run shares. @internal */
export const NO_NOTES: readonly string[] = Object.freeze([]);

/** Bytes of a task id, model name or goal session kept in a description too large with them whole. */
const LONG_FIELD_BYTES = 128;

/** The head of a long text, marked as cut. */
const head = (text: string | undefined) => {
  if (text === undefined) return undefined;
  const cut = cutBytes(text, LONG_FIELD_BYTES);
  return cut === text ? text : `${cut}…`;
};

/**
 * The last ways to make a description fit, taken once each and in order: every
 * field that a host or an environment can make long, cut by bytes. The run id
 * is not among them (it keys the run's records, and is bounded where it is made).
 */
const SHORTER: ((info: RunInfo) => RunInfo)[] = [
  (info) => info.taskId === undefined ? info : { ...info, taskId: head(info.taskId)! },
  (info) => {
    const { unknownPrices: _, ...rest } = info;
    if (rest.model !== undefined) rest.model = head(rest.model)!;
    if (rest.goalSession !== undefined) rest.goalSession = head(rest.goalSession)!;
    return rest;
  },
  (info) => {
    const { workspace: _, ...rest } = info;
    return rest;
  },
];

/**
 * A run's description as the worker reads it from shared memory. When it does
 * not fit, the oldest notes go first, then the last one is shortened, then the
 * earlier attempts' summaries and the tool errors, then the long fields are
 * cut; undefined when even that leaves it too large. Every step shortens it or
 * is taken once, so it ends, whatever the run's ids hold.
 */
export function encodeRunInfo(info: RunInfo): Uint8Array | undefined {
  let notes = info.notes;
  let trimmed: RunInfo = info;
  let shortened = 0;
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
    } else if (shortened < SHORTER.length) trimmed = SHORTER[shortened++]!(trimmed);
    else return undefined;
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
    if (info.unknownPrices?.length) {
      // Calls of unknown cost: the known dollars are a floor, and with none known, no figure.
      if (values.usdUsed === 0) values.usdUsed = NaN;
      else values.usdAtLeast = true;
    }
  }
  return values;
}

/**
 * The run's use as a record shows it (its tokens, and its cost when known),
 * or undefined when none was reported.
 */
export function usageTotals(
  shared: RunTable,
  slot: number,
  unpriced?: readonly string[],
): UsageTotals | undefined {
  const u = shared.usage(slot);
  const unknown = unpriced !== undefined && unpriced.length > 0;
  if (u.inputTokens === 0 && u.outputTokens === 0 && u.usd === 0 && !unknown) return undefined;
  const out: UsageTotals = { inputTokens: u.inputTokens, outputTokens: u.outputTokens };
  // The known costs always count; calls of unknown cost make them a lower bound, never $0 (with
  // nothing known, the dollars are left out: unknown, as earlier versions' readers take it).
  if (Number.isFinite(u.usd) && !(unknown && u.usd === 0)) out.usd = u.usd;
  if (unknown) out.unpriced = [...unpriced];
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
  | { kind: "tool_timeout"; call: TimedOutCall }
  | { kind: "budget"; stop: BudgetStop };

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
    case "budget": {
      const b = event.stop;
      const unit = AXES.find((a) => a.name === b.axis)?.amount ?? String;
      if (b.unpriced !== undefined) {
        return `The enforced ${b.axis} cap${b.runId === info.runId ? "" : ` of ${b.runId}`} (${
          unit(b.cap)
        }) cannot be kept: a model call${
          b.runId === info.runId ? "" : " of its tree"
        } is of unknown cost (${unpricedText(b.unpriced)}), never counted as $0; at least ${
          unit(b.used)
        } used. The run's budget signal aborts it now; this record is where it got to.`;
      }
      return `The enforced ${b.axis} cap${b.runId === info.runId ? "" : ` of ${b.runId}`} (${
        unit(b.cap)
      }) is ${b.inFlight === undefined ? "passed" : "taken"}: ${unit(b.used)} used${
        b.runId === info.runId ? "" : " by its tree"
      }${
        b.inFlight === undefined ? "" : ` and ${unit(b.inFlight)} reserved by calls in flight`
      }. The run's budget signal aborts it now; this record is where it got to.`;
    }
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
    notes: [...info.notes],
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
  const usage = usageTotals(shared, slot, info.unknownPrices);
  if (usage) record.usage = usage;
  if (event.kind === "tool_timeout") record.timedOut = event.call;
  if (event.kind === "budget") record.budget = event.stop;
  if (info.tree) record.tree = info.tree;
  if (info.unknownPrices?.length) record.unknownPrices = info.unknownPrices;
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
  /**
   * A file was written that a failed write had left owed (after a full
   * disk): told after `written`, so a run that ended meanwhile gets its
   * ledger row again. Never called on a write that landed at its first try.
   */
  writtenLate?(event: CheckpointEvent): void;
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
  /** Its number among the records made for the run's file (0 when the run no longer held its slot). */
  seq: number;
}

/** A write that failed, tried again until it (or a newer record for the file) lands. */
interface Owed {
  prepared: Prepared;
  /** Failed tries so far. */
  failures: number;
  /** When the next try is due, ms on the shared clock. */
  at: number;
}

/** The longest wait between two tries of a failed checkpoint write, ms. */
const MAX_RETRY_MS = 30_000;
/** The wait before the next try of a write that failed `failures` times: 1 s, doubling to 30 s. */
export const retryMs = (failures: number): number =>
  Math.min(MAX_RETRY_MS, 1000 * 2 ** Math.min(15, failures - 1));

/** Failed checkpoint writes kept for another try, at most, per writer (the oldest go first). */
const MAX_OWED = 65_536;

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
  /** Failed writes to try again, by file: the newest record for each. */
  readonly #owed = new Map<string, Owed>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #retrying = false;
  #stopped = false;

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
   * Write a record made earlier by {@linkcode CheckpointWriter.prepare};
   * `owed` when the file was owed a record (see {@linkcode CheckpointWriter.owes}).
   * Returns the file written, or undefined.
   */
  commit(prepared: Prepared, owed = false): string | undefined {
    const info = prepared.item.info;
    const written = failOpen((): true | undefined => {
      persistBlock(info.checkpointFile, prepared.block, this.#lock(prepared));
      return true;
    }, (error) => this.#failed(prepared, error));
    return written && this.#landed(prepared, undefined, owed);
  }

  /**
   * Whether the run's file is owed a record: a write failed (on this thread
   * or the other) and no record as new has landed since.
   */
  owes(info: RunInfo): boolean {
    return (this.#holds(info) && this.#shared.fileState(info.slot) === "pending") ||
      this.#owed.has(info.checkpointFile);
  }

  /** Failed writes waiting for another try. */
  get owed(): number {
    return this.#owed.size;
  }

  /**
   * Stop trying failed writes again, after one last try of each now (the
   * keeper closes); what still fails is said, once per file.
   */
  settle(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const [file, owed] of [...this.#owed]) {
      this.#owed.delete(file);
      const { prepared } = owed;
      const written = failOpen((): true | undefined => {
        const held = this.#holds(prepared.item.info);
        if (held && this.#shared.fileLanded(prepared.item.info.slot) >= prepared.seq) return;
        persistBlock(file, prepared.block, held ? this.#lock(prepared) : undefined);
        return true;
      }, (error) => {
        this.#sinks.log(
          "error",
          `the checkpoint to ${file} was not written (${owed.failures + 1} tries; the last: ${
            errorText(error)
          })`,
          prepared.item.info.runId,
        );
        return undefined;
      });
      if (written) this.#landed(prepared, owed);
    }
  }

  /** Whether the run still holds the slot it was given (its shared figures are its own). */
  #holds(info: RunInfo): boolean {
    return this.#shared.live(info.slot) && this.#shared.gen(info.slot) === info.gen;
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
   * would, its run's file lock held. For the watchdog's thread: only the
   * flushes wait on its event loop, the other steps run at once. Never rejects.
   */
  async writeMany(items: PendingWrite[]): Promise<void> {
    if (items.length === 0) return;
    // Each record is made as its lane comes to it: the first files land while later ones wait.
    // Until then the run's slot says a record is due, so a run that ends first writes its end
    // record, file or no file (a record is never made from a slot its run let go).
    const prepared: Array<Prepared | undefined> = items.map(() => undefined);
    const due = items.map((item) => this.#holds(item.info));
    const firsts = new Set<string>();
    items.forEach((item, i) => due[i] && this.#shared.writesDue(item.info.slot, 1));
    let results: Array<Error | undefined | typeof SKIPPED>;
    try {
      results = await writeBurst(
        items.map((item) => item.info.checkpointFile),
        (i) => {
          const item = items[i]!;
          if (!this.#holds(item.info)) return undefined; // ended: its end record says it all
          const p = prepared[i] = this.prepare(item);
          if (due[i]) {
            due[i] = false;
            this.#shared.writesDue(item.info.slot, -1);
          }
          if (!p) return undefined;
          // The run's first record of a first attempt, none failed: its file is most likely new.
          const file = item.info.checkpointFile;
          const fresh = !firsts.has(file) && this.#shared.fileLanded(item.info.slot) === 0 &&
            this.#shared.fileState(item.info.slot) === undefined && (item.info.attempt ?? 1) === 1;
          firsts.add(file);
          return { block: p.block, lock: this.#lock(p), fresh };
        },
        BATCH_CONCURRENCY,
        undefined,
        // The watchdog's thread: only the flushes wait on the event loop.
        true,
      );
    } catch (error) {
      results = items.map(() => error instanceof Error ? error : new Error(String(error)));
    }
    items.forEach((item, i) => {
      if (due[i] && this.#holds(item.info)) this.#shared.writesDue(item.info.slot, -1);
    });
    prepared.forEach((p, i) => {
      const result = results[i];
      if (p === undefined || result === SKIPPED) return;
      if (result) this.#failed(p, result);
      else this.#landed(p);
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
    return failOpen((): Prepared => {
      const record = buildRecord(info, this.#shared, settings, event, source, now);
      const seq = this.#holds(info) ? this.#shared.nextFileSeq(info.slot) : 0;
      return { item, record, block: renderBlock(record), seq };
    }, (error) => {
      this.#sinks.log(
        "error",
        `could not make the checkpoint for ${info.checkpointFile}: ${errorText(error)}`,
        info.runId,
      );
      return undefined;
    });
  }

  /**
   * A write failed: said, and kept to try again (1 s, doubling to 30 s) until
   * it or a newer record for the file lands. A file the library refuses to
   * touch (a FIFO, a file with several links, one too large) is not tried again.
   */
  #failed(prepared: Prepared, error: unknown): undefined {
    const info = prepared.item.info;
    const file = info.checkpointFile;
    const held = this.#holds(info);
    if (held) this.#shared.fileWrite(info.slot, prepared.seq, false);
    const retried = !(error instanceof RefusedError) && !this.#stopped;
    const now = nowMs();
    const owed = this.#owed.get(file);
    if (owed?.prepared === prepared) {
      owed.failures++;
      owed.at = now + retryMs(owed.failures);
      // Said again at 2, 4, 8 … tries: a disk full for hours costs a few lines.
      if (Number.isInteger(Math.log2(owed.failures))) {
        this.#sinks.log(
          "warn",
          `the checkpoint to ${file} is still not written after ${owed.failures} tries: ${
            errorText(error)
          }; next try in ${Math.round(retryMs(owed.failures) / 1000)}s`,
          info.runId,
        );
      }
    } else {
      // A newer record for the file replaces an older one waiting (the run's, or a later run's).
      const older = owed !== undefined && held && this.#holds(owed.prepared.item.info) &&
        owed.prepared.seq > prepared.seq;
      if (retried && !older) {
        this.#owed.delete(file);
        if (this.#owed.size >= MAX_OWED) this.#owed.delete(this.#owed.keys().next().value!);
        this.#owed.set(file, { prepared, failures: 1, at: now + retryMs(1) });
      }
      this.#sinks.log(
        "error",
        `could not persist the checkpoint to ${file}: ${errorText(error)}${
          retried ? "; it is tried again in 1s, and until it lands" : ""
        }`,
        info.runId,
      );
    }
    this.#arm();
    return undefined;
  }

  /**
   * After a write landed: the run's file state, the write no longer owed,
   * then {@linkcode #done}; `late` when the file was owed a record (a run's
   * end record, written after its earlier write failed).
   */
  #landed(prepared: Prepared, settled?: Owed, late = false): string {
    const info = prepared.item.info;
    const file = info.checkpointFile;
    const held = this.#holds(info);
    const stuck = stuckBytes(file);
    if (stuck > 0 && held && !this.#stopped) {
      // Lines the agent appended during the write could not follow it (a full disk): the file
      // is written again, with them, until they are in it.
      if (this.#owed.get(file)?.prepared !== prepared) {
        this.#owed.set(file, { prepared, failures: 0, at: nowMs() + retryMs(1) });
        this.#sinks.log(
          "warn",
          `${stuck} bytes appended to ${file} during its write are not in it yet (the disk refused them); it is written again until they are`,
          info.runId,
        );
      } else this.#owed.get(file)!.at = nowMs() + retryMs(2);
      this.#arm();
    }
    if (held && this.#shared.fileState(info.slot) === "pending") late = true;
    if (held) this.#shared.fileWrite(info.slot, prepared.seq, true);
    const owed = this.#owed.get(file) ?? settled;
    if (owed !== undefined) late = true;
    if (
      stuck === 0 && owed !== undefined &&
      (owed.prepared === prepared || owed.prepared.seq <= prepared.seq ||
        !this.#holds(owed.prepared.item.info))
    ) {
      this.#owed.delete(file);
      if (owed.prepared === prepared) {
        this.#sinks.log(
          "info",
          owed.failures === 0
            ? `the lines appended to ${file} during its write are in it now`
            : `the checkpoint to ${file} is written, after ${owed.failures} failed tr${
              owed.failures === 1 ? "y" : "ies"
            }`,
          info.runId,
        );
      }
    }
    const written = this.#done(prepared);
    if (late && this.#sinks.writtenLate) {
      const tell = this.#sinks.writtenLate;
      failOpen(() => tell(this.#eventOf(prepared)), () => {/* the sink logs its own */});
    }
    return written;
  }

  /** The next try of the failed writes, at the earliest one's time. */
  #arm(): void {
    if (this.#timer !== undefined || this.#retrying || this.#stopped || this.#owed.size === 0) {
      return;
    }
    let at = Infinity;
    for (const owed of this.#owed.values()) at = Math.min(at, owed.at);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#retry();
    }, Math.max(0, Math.ceil(at - nowMs())));
    // The host's process is not kept alive by it (its close() tries each write once more).
    (this.#timer as { unref?: () => void }).unref?.();
  }

  /** One synchronous try of a failed write (the main thread's), its run's file lock held. */
  #retrySync(owed: Owed, lock: FileLock | undefined): void {
    const { prepared } = owed;
    const info = prepared.item.info;
    const file = info.checkpointFile;
    const locked = lock?.take(FILE_LOCK_WAIT_MS) ?? false;
    let written = false;
    try {
      if (this.#owed.get(file) !== owed) return; // a newer record took its place meanwhile
      if (
        lock && this.#shared.fileLanded(info.slot) >= prepared.seq && stuckBytes(file) === 0
      ) {
        this.#owed.delete(file); // a record as new is in the file already
        return;
      }
      ensureDir(path.dirname(file));
      runSync(persistSteps(file, prepared.block, true));
      written = true;
    } catch (error) {
      this.#failed(prepared, error);
    } finally {
      if (locked) lock!.release();
    }
    if (written) this.#landed(prepared);
  }

  /** Try the failed writes that are due, one at a time, off the thread's hot path. */
  async #retry(): Promise<void> {
    if (this.#retrying || this.#stopped) return;
    this.#retrying = true;
    try {
      const now = nowMs();
      for (const owed of [...this.#owed.values()]) {
        if (this.#stopped || this.#shared.closing()) break;
        if (owed.at <= now) await this.#retryOne(owed);
      }
    } finally {
      this.#retrying = false;
      this.#arm();
    }
  }

  async #retryOne(owed: Owed): Promise<void> {
    const { prepared } = owed;
    const info = prepared.item.info;
    const file = info.checkpointFile;
    const held = this.#holds(info);
    if (!held && !isMainThread()) {
      // The run ended: its end record (the main thread's) carries what this one would have.
      this.#owed.delete(file);
      return;
    }
    const lock = held ? this.#lock(prepared) : undefined;
    let locked = false;
    if (isMainThread()) {
      // On the host's thread a try is one synchronous write, as a hook's is: a lock held across
      // an await there would make the next hook's write of the file wait out the lock.
      this.#retrySync(owed, lock);
      return;
    }
    try {
      locked = (await lock?.takeAsync(FILE_LOCK_WAIT_MS)) ?? false;
      if (this.#owed.get(file) !== owed) return; // a newer record took its place meanwhile
      if (held && this.#shared.fileLanded(info.slot) >= prepared.seq && stuckBytes(file) === 0) {
        this.#owed.delete(file); // a record as new is in the file already
        return;
      }
      // Counted as the watchdog's write in flight: a run's end waits for it, a close stops it.
      if (!isMainThread() && !this.#shared.writing(true)) return;
      try {
        ensureDir(path.dirname(file));
        await runAsync(persistSteps(file, prepared.block, true));
      } finally {
        if (!isMainThread()) this.#shared.writing(false);
      }
    } catch (error) {
      this.#failed(prepared, error);
      return;
    } finally {
      if (locked) lock!.release();
    }
    this.#landed(prepared);
  }

  /** What the host is told of a written record. */
  #eventOf({ item, record }: Prepared): CheckpointEvent {
    const { info, event, source } = item;
    const written: CheckpointEvent = {
      runId: info.runId,
      file: info.checkpointFile,
      kind: record.kind,
      source,
      persistedAt: record.persistedAt,
    };
    if (event.kind === "tier") written.tier = event.tier;
    return written;
  }

  /** After a write: tell the host, and post the kanban comment. */
  #done(prepared: Prepared): string {
    const { item, record } = prepared;
    const { info } = item;
    this.#sinks.written(this.#eventOf(prepared));
    const once = COMMENT_ONCE[record.kind];
    if (
      info.taskId !== undefined && record.kind !== "end" &&
      (once === undefined || this.#shared.claimComment(info.slot, once))
    ) this.#sinks.comment({ taskId: info.taskId, body: commentBody(record) }, info.runId);
    return info.checkpointFile;
  }
}

// The main thread's sinks.

/** A kanban task comment, as the sinks hand it on. @internal */
export interface KanbanComment {
  /** The kanban task to comment on. */
  taskId: string;
  /** The comment. */
  body: string;
}

/** The host's callbacks the sinks call, as the host gave them. @internal */
export interface HostCallbacks {
  /** Posts a kanban task comment; may return a promise. */
  postComment?: (comment: KanbanComment) => unknown;
  /** An ES module exporting `postComment`, used when there is no `postComment`. */
  commentModule?: string | URL;
  /** Called after every write of a checkpoint file. */
  onCheckpoint?: (event: CheckpointEvent) => void;
}

/**
 * Who besides the host hears of each write, read at each write (plain fields, so a write
 * runs no code of theirs until one listens): the run ledger's store once open (the fleet
 * store keeps the file's content), the tracer once a run has a span. @internal
 */
export interface WriteListeners {
  /** The run ledger's main-thread feed: its store, while open. */
  readonly ledger: {
    readonly store: { readonly relay?: { fileWritten(event: CheckpointEvent): void } } | undefined;
    /** A file landed after a failed write: an ended run's row says so again. */
    written?(file: string): void;
  };
  /** The tracer, told of every write once `spans` (it never throws). */
  readonly tracing: { written(event: CheckpointEvent): void } | undefined;
  /** Whether a run has a span. */
  readonly spans: boolean;
}

/** The writer's sinks on the main thread; a comment needs no run id (the watchdog's come without one). @internal */
export interface HostSinks extends WriterSinks {
  /** Post a kanban task comment. */
  comment(comment: KanbanComment): void;
}

/**
 * Where code not the writer's own is called: what `call` throws, or its
 * promise rejects with, goes to `failed`, never back to the write.
 */
function callOut(call: () => unknown, failed: (error: unknown, threw: boolean) => void): void {
  failOpen(() => {
    const result = call();
    if (isThenable(result)) Promise.resolve(result).catch((error) => failed(error, false));
  }, (error) => failed(error, true));
}

/**
 * The writer's sinks on the main thread. @internal
 *
 * @param log Where failures of the host's code go.
 * @param host The host's callbacks.
 * @param listeners Who else hears of each write, as they are at that write
 * (the run ledger's feed also of a write that landed after a failed one: an
 * ended run whose file was written late gets its row again).
 * @returns The sinks.
 *
 * @example
 * ```ts
 * import { hostSinks } from "./_writer.ts";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const files: string[] = [];
 * const ledger = {
 *   store: { relay: { fileWritten: (event: { file: string }) => void files.push(event.file) } },
 * };
 * const sinks = hostSinks((_level, message) => lines.push(message), {
 *   onCheckpoint: () => {
 *     throw new Error("boom");
 *   },
 * }, { ledger, tracing: undefined, spans: false });
 * sinks.written({ runId: "r", file: "/c/r.md" } as Parameters<typeof sinks.written>[0]);
 * assert.deepEqual(files, ["/c/r.md"]);
 * assert.match(lines[0]!, /^onCheckpoint threw: .*boom/);
 * ```
 */
export function hostSinks(
  log: Log,
  host: HostCallbacks,
  listeners: WriteListeners = { ledger: { store: undefined }, tracing: undefined, spans: false },
): HostSinks {
  return {
    log,
    comment: (comment) => postComment(log, host, comment),
    writtenLate: (event) => listeners.ledger.written?.(event.file),
    written: (event) => {
      const relay = listeners.ledger.store?.relay;
      if (relay) {
        callOut(() => relay.fileWritten(event), (error) =>
          log(
            "warn",
            `the run ledger's store could not take the file: ${errorText(error)}`,
            event.runId,
          ));
      }
      if (listeners.spans) listeners.tracing?.written(event);
      const listener = host.onCheckpoint;
      if (!listener) return;
      callOut(() => listener(event), (error, threw) =>
        log(
          "warn",
          `onCheckpoint ${threw ? "threw" : "failed"}: ${errorText(error)}`,
          event.runId,
        ));
    },
  };
}

/** Post a comment through the host's sink, else the comment module. */
function postComment(log: Log, host: HostCallbacks, comment: KanbanComment): void {
  callOut(
    () => {
      const sink = host.postComment;
      if (sink) return sink(comment);
      if (host.commentModule !== undefined) {
        return import(String(host.commentModule)).then((mod) => mod.postComment(comment));
      }
    },
    (error) => log("warn", `posting the task comment failed: ${errorText(error)}`, comment.taskId),
  );
}
