/**
 * The run ledger as the core uses it (S20), both threads' sides: a run's
 * record made from shared memory; the watchdog worker's progress writer
 * (every changed run of the process in one commit per interval, plus the
 * heartbeat; fail open with backoff and a bounded backlog); the main thread's
 * feed ({@linkcode LedgerFeed}: the store opened on first use, a run's end, the
 * live runs' records at close and at exit, records the store cannot take kept,
 * bounded, and tried again); and what a run's start reads of an earlier
 * attempt (`_earlier.ts` puts that together).
 *
 * The store itself is a subsystem (`store/`); the core sees it only as the
 * {@linkcode LedgerStore} below, and its records as the types here
 * ({@linkcode RunRecord} and its parts), which the store's contract re-exports.
 *
 * @module
 */
import process from "node:process";
import { clearImmediate, setImmediate } from "node:timers";
import { errorText, failOpen, type Log } from "./log.ts";
import type { EndStatus, RunCaps, ToolCall, TreeRecord, UsageTotals } from "./_record.ts";
import { grownTo, nowMs, type RunTable } from "./_run_table.ts";
import type { Settings } from "./settings.ts";
import { type CheckpointEvent, type RunInfo, usageTotals } from "./_writer.ts";
import type { MessagePort } from "node:worker_threads";
import { formatDuration, formatUsd } from "./template.ts";
import type { TreeRow } from "./_tree.ts";

/**
 * What the core needs of a store, as a few capabilities each offered whole
 * or not at all: every store takes records asynchronously (`write`, `prune`,
 * `close`, both threads); the groups below are tested one at a time, never
 * method by method. The store's side of this (`store/types.ts`) is the
 * asynchronous port a backend implements; a store served by a thread of its
 * own offers these synchronous groups over it.
 */
export interface LedgerStore {
  /** Records, the only required capability: written asynchronously. */
  write(batch: WriteBatch): Promise<void>;
  /** Remove at most `limit` records of ended runs last brought up to date before `before` (ms). */
  prune(before: number, limit: number): Promise<number>;
  /** Close the store. */
  close(): Promise<void>;
  /** Records answered on the caller's thread: a run's start, its earlier attempt, its end. */
  readonly sync?: LedgerSync;
  /** Which attempt holds a run: the records a later attempt's fence refused. */
  readonly leases?: LedgerLeases;
  /** Side effects' intents and receipts, across attempts. */
  readonly effects?: LedgerEffects;
  /** Trees of runs that share a budget. */
  readonly trees?: LedgerTrees;
  /** The embedded store's file: tidied now and then, made anew when deleted or damaged. */
  readonly upkeep?: LedgerUpkeep;
  /** A store served by a thread of its own (the bridge): what is handed to it, and waited for. */
  readonly relay?: LedgerRelay;
  /** The run journal: every model and tool call of an attempt, for a retry to replay. */
  readonly journal?: LedgerJournal;
  /** A graph framework's own checkpoints (LangGraph's), by thread and namespace. */
  readonly checkpoints?: LedgerCheckpoints;
  /** A framework's session transcripts (the Claude Agent SDK's, OpenAI Agents'), by scope and session. */
  readonly sessions?: LedgerSessions;
}

/** Records answered on the caller's thread ({@linkcode LedgerStore.sync}). */
export interface LedgerSync {
  /** Write records (and the heartbeat) now, or hand them on without waiting (a store's thread). */
  write(batch: WriteBatch): void;
  /**
   * One commit of records made as they are written, each dropped before the
   * next is made: the worker's batch never lives whole.
   */
  writeEach(records: Iterable<RunRecord>, heartbeat?: Heartbeat): void;
  /** Record the start of a new attempt (see the store's `startAttempt`). */
  startAttempt(record: RunRecord, options?: StartOptions): AttemptStart;
  /** The newest record of a run id. */
  latest(runId: string): RunView | undefined;
}

/** Which attempt holds a run ({@linkcode LedgerStore.leases}). */
export interface LedgerLeases {
  /**
   * The records refused since the last call because their attempt lost the
   * run to a later one (the store's fencing), each said once.
   */
  takeFenced(): FencedRecord[];
}

/** Side effects' intents and receipts ({@linkcode LedgerStore.effects}). */
export interface LedgerEffects {
  /** Intents and receipts in one durable commit. */
  write(batch: EffectBatch): Promise<void>;
  /** The effects recorded for a run id, every attempt's, the oldest first. */
  read(runId: string): Promise<EffectRow[]>;
  /** The same, on the caller's thread (bounded), at a run's start. */
  readSync(runId: string): EffectRow[];
}

/** The run journal ({@linkcode LedgerStore.journal}). */
export interface LedgerJournal {
  /** Entries in one durable commit (an entry already there is kept as it is). */
  write(batch: JournalBatch): Promise<void>;
  /** The entries of a run id, every attempt's: by attempt, then kind, then index. */
  read(runId: string): Promise<JournalEntry[]>;
}

/**
 * A graph framework's own checkpoints ({@linkcode LedgerStore.checkpoints}):
 * LangGraph's, as its savers keep them. Every body is the framework's own
 * serialization, kept as given.
 */
export interface LedgerCheckpoints {
  /**
   * Keep a checkpoint and the channel values it brings (each kept once per
   * thread, namespace, channel and version), in one durable commit. A
   * checkpoint already there gets the new body and metadata.
   */
  put(put: GraphCheckpointPut): Promise<void>;
  /**
   * Keep a task's pending writes on a checkpoint, in one durable commit. A
   * write of a task and index already there is kept as it is, unless its
   * index is negative (a special channel: an error, an interrupt), which
   * is replaced.
   */
  putWrites(writes: GraphWrites): Promise<void>;
  /**
   * One checkpoint with its channel values and pending writes: `query.id`,
   * or the newest of the thread and namespace (by id); undefined when none.
   */
  get(query: { thread: string; ns: string; id?: string }): Promise<GraphCheckpointRow | undefined>;
  /** Checkpoints, the newest (greatest id) first, with their values and pending writes. */
  list(query: GraphCheckpointQuery): Promise<GraphCheckpointRow[]>;
  /** Remove a thread's checkpoints, values and writes, in every namespace. */
  deleteThread(thread: string): Promise<void>;
}

/**
 * A framework's session transcripts ({@linkcode LedgerStore.sessions}):
 * append-only entries of JSON text under a scope, a session and a subpath
 * (`""` for the main transcript), read back in the order they were kept.
 */
export interface LedgerSessions {
  /**
   * Keep entries at the end of a transcript, in one durable commit. An entry
   * whose `uuid` the transcript already holds (or that an earlier entry of
   * the same batch brings) is left out; one without a uuid is always kept.
   */
  append(key: SessionPath, entries: SessionEntry[]): Promise<void>;
  /**
   * A transcript's entries (JSON text), in order; only the last `last` when
   * given; null when it holds none (never written, deleted or emptied).
   */
  load(key: SessionPath, last?: number): Promise<string[] | null>;
  /** The sessions of a scope (any subpath's entries count) and when each was last written, ms. */
  list(scope: string): Promise<{ sessionId: string; mtime: number }[]>;
  /**
   * Remove a transcript: with subpath `""`, the session's every transcript
   * (its subpaths too); with a subpath, that one alone.
   */
  delete(key: SessionPath): Promise<void>;
  /** The subpaths (not `""`) that hold entries under a session. */
  subkeys(scope: string, sessionId: string): Promise<string[]>;
  /** Remove a transcript's last entry and return it, in one commit; undefined when it has none. */
  pop(key: SessionPath): Promise<string | undefined>;
}

/** Trees of runs that share a budget, on the caller's thread ({@linkcode LedgerStore.trees}). */
export interface LedgerTrees {
  /** The newest attempt of every run in the tree rooted at `root`. */
  readSync(root: string): TreeRow[];
  /** Look at a tree and write the record `decide` makes of it, in one transaction. */
  admitSync(root: string, decide: (rows: TreeRow[]) => RunRecord | undefined): void;
  /** Write a run of a tree's record now (its use, for the tree's other processes). */
  writeSync(record: RunRecord): void;
  /** Record that a run sits in a tree. */
  joinSync(runId: string, root: string, parent: string | undefined): void;
}

/** The embedded store's file ({@linkcode LedgerStore.upkeep}). */
export interface LedgerUpkeep {
  /**
   * Tidy the store now and then (move its log into the database); false
   * when that could not complete, to be tried again soon.
   */
  maintain(): boolean | void;
  /**
   * Whether the store's file is still the one at its path, else open the one
   * there (a new one when it was deleted); given a failed write's error, a
   * damaged file is also set aside (renamed, never deleted) and a new one
   * started. Returns the log line when it did something, else undefined; an
   * empty line when another connection of this process already said it.
   */
  heal(error?: unknown): string | undefined;
}

/** A store served by a thread of its own ({@linkcode LedgerStore.relay}). */
export interface LedgerRelay {
  /** A checkpoint file was written (a store shared by machines keeps its content). */
  fileWritten(event: CheckpointEvent): void;
  /** Wait, bounded, for writes handed to the store's thread to land (the process exits). */
  drainSync(): boolean;
  /** A port the watchdog thread writes through (the store's thread). */
  watchdogPort(): MessagePort | undefined;
  /** Statements sent so far (benchmarks). */
  readonly statements: number;
}

// The run store's records as the core writes them: the core's own types, which the store's
// contract (`store/types.ts`) takes from here.

/** The process a run ran in. */
export interface HostId {
  /** The machine's name (`os.hostname()`). */
  machine: string;
  /** The process id. */
  pid: number;
  /**
   * The process's start time, as an opaque token that tells two processes of
   * the same pid apart on the same machine (on Linux, the boot id and the
   * start time in clock ticks); empty when the platform gives none.
   */
  start: string;
}

/** A tool call that had started and not ended when the record was brought up to date. */
export interface CallInFlight {
  /** The tool's name. */
  tool: string;
  /** The host's id for the call, when it gave one. */
  callId?: string;
  /** When it started, ms since the epoch. */
  startedAt: number;
  /** True once it ran past its deadline (a `tool_timeout` checkpoint names it). */
  timedOut?: boolean;
}

/** A record's status: `live` while its run runs, else how it ended. */
export type RecordStatus = "live" | EndStatus;

/** How a run ended, as its record says. */
export interface RecordEnd {
  /** How it ended. */
  status: EndStatus;
  /** When, ms since the epoch. */
  at: number;
  /** The host's words about it. */
  summary?: string;
}

/** What earlier attempts of the run used, for `resume_budget: remaining`. */
export interface PriorUse {
  /** Model calls the earlier attempts made, together. */
  turns: number;
  /** Seconds the earlier attempts ran, together. */
  seconds: number;
  /** Tokens the earlier attempts reported, together, when any did. */
  tokens?: number;
  /** Dollars the earlier attempts spent, together, when their cost is known. */
  usd?: number;
}

/**
 * One attempt of one run, as the ledger holds it: where it got to, brought up
 * to date at most `progress_interval_seconds` after each change. Its size is
 * bounded: at most `TOOL_RING` finished calls (the run table's ring), the notes as in
 * the checkpoint file, and a file content of at most `store_file_max_kb`.
 */
export interface RunRecord {
  /** The run's id (the kanban task id, or the session id). */
  runId: string;
  /** 1 for a fresh run, n for the n-th attempt of a resumed one. */
  attempt: number;
  /**
   * The attempt that began the run afresh when its id was started again after a done end
   * (the earlier attempts are another run's); absent for 1.
   */
  generation?: number;
  /** `chat`, `kanban`, `goal`, or `command` for a supervisor's record. */
  dialect: string;
  /** The kanban task, when there is one. */
  taskId?: string;
  /** The caps that count, with their sources. */
  caps: RunCaps;
  /** Model calls made so far. */
  turnsUsed: number;
  /** Seconds since the run started. */
  elapsedSeconds: number;
  /** The budget tier reached, 0 for none. */
  tier: number;
  /** When each tier reached was crossed, ms since the epoch (records written before it: none). */
  tierAt?: { 1?: number; 2?: number };
  /** Tool calls started and not ended, oldest first. */
  inFlight: CallInFlight[];
  /** The most recent finished tool calls, oldest first (`startedAt` in seconds after the run's start). */
  recent: ToolCall[];
  /** The notes the host gave, the newest last. */
  notes: string[];
  /** The checkpoint file, when the run has one (it may not exist yet: see `fileState`). */
  checkpointFile?: string;
  /**
   * Whether the checkpoint file holds the run's record: `written` once a
   * write landed, `pending` while the newest write failed (a full disk) and
   * is being tried again; absent while no record was due (no file yet).
   */
  fileState?: "written" | "pending";
  /**
   * The checkpoint file's content at its last write (the block and the
   * agent's own text), up to `store_file_max_kb`, so a retry on another
   * machine can recreate it. A backend may leave it out.
   */
  fileContent?: string;
  /** One-line summaries of the earlier attempts, oldest first. */
  attempts?: string[];
  /** What the earlier attempts used. */
  prior?: PriorUse;
  /** The model use the run reported: tokens, and dollars when known. */
  usage?: UsageTotals;
  /** Its place in a tree of runs sharing a budget, and the tree's totals as it last knew them. */
  tree?: TreeRecord;
  /** The attempt's OpenTelemetry span, when it had one: a later attempt links to it. */
  trace?: { traceId: string; spanId: string };
  /**
   * A fork's attempt (made by a fork, never run): the run, its attempt and the
   * step its journal was copied from (its first `step` steps).
   */
  fork?: ForkOrigin;
  /** The process the run ran in. */
  host: HostId;
  /** `live`, or how it ended. */
  status: RecordStatus;
  /** Set when it ended. */
  end?: RecordEnd;
  /** When the run started, ms since the epoch. */
  startedAt: number;
  /** When the record was last brought up to date, ms since the epoch. */
  updatedAt: number;
}

/** Where a fork's journal came from: a run's attempt, cut after a step. */
export interface ForkOrigin {
  /** The run forked. */
  from: string;
  /** Its attempt whose journal was copied. */
  attempt: number;
  /** The steps copied: a step is a model call and the tool calls made before the next one. */
  step: number;
}

/** A process's sign of life, written with every batch of its records. */
export interface Heartbeat {
  /** The process. */
  host: HostId;
  /** When it was written, ms since the epoch. */
  at: number;
  /** The interval the process writes at, seconds. */
  intervalSeconds: number;
}

/** One durable commit: the changed records of a process and its heartbeat. */
export interface WriteBatch {
  /**
   * The records to bring up to date. A record whose stored status is no
   * longer `live` is left as it is by a `live` one: an end is never undone.
   */
  records: RunRecord[];
  /** The writing process's heartbeat. */
  heartbeat?: Heartbeat;
}

/**
 * A tool call's intent: recorded, durably, before a tool that acts on the
 * world runs (an email, a payment), so a later attempt knows it may have.
 */
export interface EffectIntent {
  /** The run's id. */
  runId: string;
  /** The effect key: the same in every attempt for the same tool and input. */
  key: string;
  /** The tool's name. */
  tool: string;
  /** A sha256 of the input's canonical JSON (hex). */
  inputDigest: string;
  /** The host's id for the call, when it gave one. */
  callId?: string;
  /** The attempt that made the call. */
  attempt: number;
  /** When, ms since the epoch. */
  at: number;
}

/** A tool call's receipt: what came of a call whose intent was recorded. */
export interface EffectReceipt {
  /** The run's id. */
  runId: string;
  /** The effect key. */
  key: string;
  /** The tool's name (a receipt whose intent is missing still names it). */
  tool: string;
  /** Whether the call succeeded. */
  ok: boolean;
  /**
   * The result as JSON text (a failed call: its error's text), at most
   * `effect_result_max_bytes`; longer ones are cut and marked `truncated`.
   */
  result?: string;
  /** True when `result` was cut to the bound. */
  truncated?: boolean;
  /** The attempt that made it. */
  attempt: number;
  /** When, ms since the epoch. */
  at: number;
}

/** Intents and receipts written together in one durable commit. */
export interface EffectBatch {
  /** Intents, written first. */
  intents: EffectIntent[];
  /** Receipts. */
  receipts: EffectReceipt[];
}

/** One effect of a run as the store holds it: its newest intent and, once it ended, its receipt. */
export interface EffectRow {
  /** The run's id. */
  runId: string;
  /** The effect key. */
  key: string;
  /** The tool's name. */
  tool: string;
  /** A sha256 of the input's canonical JSON (hex); empty when only a receipt was recorded. */
  inputDigest: string;
  /** The call id of the newest intent, when it had one. */
  callId?: string;
  /** The attempt of the newest intent. */
  attempt: number;
  /** When the newest intent was made, ms since the epoch. */
  at: number;
  /** The receipt, once the call ended; without one, its outcome is unknown. */
  receipt?: Omit<EffectReceipt, "runId" | "key" | "tool">;
}

/**
 * One entry of a run's journal: a model call (the digest of its request and
 * the response) or a tool call (its call key and result), of one attempt, in
 * the order the attempt made them.
 */
export interface JournalEntry {
  /** The run's id. */
  runId: string;
  /** The attempt that made the call (or replayed it). */
  attempt: number;
  /** A model call or a tool call. */
  kind: "model" | "tool";
  /** Its place among the attempt's calls of its kind, from 0. */
  index: number;
  /** A model call: the sha256 of its request's canonical JSON (hex); a tool call: its call key. */
  key: string;
  /** A tool call: the tool's name. */
  tool?: string;
  /** The response (a tool call: the result) as JSON text. */
  body: string;
  /** A model call's use as JSON text, when given. */
  usage?: string;
  /** When, ms since the epoch. */
  at: number;
  /** A replayed call: the attempt whose entry answered it (absent for a live call). */
  replayed?: number;
  /** A live call: its duration, ms, from just before the call to its response (absent when replayed). */
  ms?: number;
}

/** Journal entries written together in one durable commit. */
export interface JournalBatch {
  /** The entries. */
  entries: JournalEntry[];
}

/** A body in a framework's own serialization: its type tag and bytes. */
export interface TypedBytes {
  /** The serializer's type tag (LangGraph's `json`, `bytes`, …). */
  type: string;
  /** The serialized value. */
  bytes: Uint8Array;
}

/** One channel's value at a version, as a checkpoint brings it. */
export interface GraphChannelValue {
  /** The channel's name. */
  channel: string;
  /** The channel's version, as text. */
  version: string;
  /** The serializer's type tag; `empty` when the channel has no value at this version. */
  type: string;
  /** The serialized value; absent when `type` is `empty`. */
  bytes?: Uint8Array;
}

/** A checkpoint to keep ({@linkcode LedgerCheckpoints.put}). */
export interface GraphCheckpointPut {
  /** The thread (LangGraph's `thread_id`). */
  thread: string;
  /** The namespace (`checkpoint_ns`; `""` at the root). */
  ns: string;
  /** The checkpoint's id (ordered: a later one is greater). */
  id: string;
  /** The checkpoint it follows, when any. */
  parent?: string;
  /** The checkpoint without its channel values. */
  checkpoint: TypedBytes;
  /** Its metadata. */
  metadata: TypedBytes;
  /** The version of every channel it holds, as text: its values are read back by these. */
  versions: Record<string, string>;
  /** The channel values it brings (those whose version is new). */
  values: GraphChannelValue[];
}

/** One pending write of a task on a checkpoint. */
export interface GraphWrite {
  /** The task's id. */
  taskId: string;
  /** Its place among the task's writes; negative for a special channel (an error, an interrupt). */
  index: number;
  /** The channel written. */
  channel: string;
  /** The serializer's type tag. */
  type: string;
  /** The serialized value. */
  bytes: Uint8Array;
  /** The task's path (`""` when not given). */
  taskPath: string;
}

/** A task's pending writes on one checkpoint ({@linkcode LedgerCheckpoints.putWrites}). */
export interface GraphWrites {
  /** The thread. */
  thread: string;
  /** The namespace. */
  ns: string;
  /** The checkpoint's id. */
  id: string;
  /** The writes. */
  writes: GraphWrite[];
}

/** A checkpoint as read back, with the values of its channels' versions and its pending writes. */
export interface GraphCheckpointRow {
  /** The thread. */
  thread: string;
  /** The namespace. */
  ns: string;
  /** The checkpoint's id. */
  id: string;
  /** The checkpoint it follows, when any. */
  parent?: string;
  /** The checkpoint without its channel values. */
  checkpoint: TypedBytes;
  /** Its metadata. */
  metadata: TypedBytes;
  /** The values kept for its channels' versions (an `empty` one included), by channel name. */
  values: GraphChannelValue[];
  /** Its pending writes, by task path, task id, then index. */
  writes: GraphWrite[];
}

/** Which checkpoints {@linkcode LedgerCheckpoints.list} reads. */
export interface GraphCheckpointQuery {
  /** Only this thread's; every thread's when left out. */
  thread?: string;
  /** Only this namespace's; every namespace's when left out. */
  ns?: string;
  /** Only the checkpoint of this id. */
  id?: string;
  /** Only checkpoints of an id less than this. */
  before?: string;
  /** The most returned. */
  limit?: number;
}

/** Where a session transcript lives ({@linkcode LedgerSessions}). */
export interface SessionPath {
  /** The caller's scope (a project, a tenant, a framework). */
  scope: string;
  /** The session's id. */
  sessionId: string;
  /** `""` for the main transcript, else a sub-transcript's name (a subagent's). */
  subpath: string;
}

/** One transcript entry to keep ({@linkcode LedgerSessions.append}). */
export interface SessionEntry {
  /** The entry as JSON text, kept as given. */
  json: string;
  /** Its idempotency key, when it has one. */
  uuid?: string;
}

/** A run as read back: its newest record, its process's heartbeat, and its state now. */
export interface RunView {
  /** The record. */
  record: RunRecord;
  /** The heartbeat of the record's process, when the store has it. */
  heartbeat?: Heartbeat;
  /** Live, ended or cut off, decided when read. */
  state: RunState;
  /**
   * Whether its process still holds its lease in the store (the fleet store:
   * its connection's lock), when the store can tell: a live record whose
   * lease is `free` is cut off at once.
   */
  lease?: LeaseState;
}

/** A lease as the store sees it: `held` by a process that is there, or `free`. */
export type LeaseState = "held" | "free";

/** What a second start of a live run does: setting `on_duplicate`. */
export type OnDuplicate = "warn" | "refuse" | "take-over";

/** What a start may ask of the store's `startAttempt`. */
export interface StartOptions {
  /** The attempt number at least (the local file's count + 1). */
  minAttempt?: number;
  /** Start afresh as `minAttempt`, whatever the store holds (resume off). */
  fresh?: boolean;
  /** The starting process's heartbeat, written with the start. */
  heartbeat?: Heartbeat;
  /**
   * When the newest attempt is live and its process holds its lease:
   * `warn` (start anyway, the lease left with it), `refuse` (write nothing:
   * the answer is `refused`) or `take-over` (start, and take the lease: the
   * old attempt's later records are refused). Whatever it says, a start
   * whose earlier attempt is not live takes the lease. @default {"warn"}
   */
  onDuplicate?: OnDuplicate;
}

/** What the store's `startAttempt` gives the new attempt. */
export interface AttemptStart {
  /** The attempt number the store gave it: distinct even for concurrent starts. */
  attempt: number;
  /** The newest earlier record of the run id, when there was one. */
  previous?: RunView;
  /**
   * True when the start was refused (`onDuplicate: "refuse"` and a live
   * holder, named by `previous`): nothing was written.
   */
  refused?: boolean;
  /**
   * True when this attempt took the run from a live record: every earlier
   * attempt's later records are refused by the store (a fencing token).
   */
  fenced?: boolean;
}

/** A record the store refused: its attempt lost the run to a later one. */
export interface FencedRecord {
  /** The run id. */
  runId: string;
  /** The attempt whose record was refused. */
  attempt: number;
  /** The attempt that holds the run now. */
  holder: number;
}

/** Live, ended or cut off. */
export type RunState = "live" | "ended" | "cut-off";

/** Ended runs whose end row waits for their file to be written, at most. */
const MAX_UNWRITTEN = 1024;
/** The most records the worker keeps while the store cannot take them. */
export const MAX_BACKLOG = 50_000;
/** The longest wait between two tries of a failing store (an open, a commit, a connection), ms. */
export const MAX_BACKOFF_MS = 30_000;
/** The wait before the next try of a store that failed `failures` times in a row: 1 s, doubling. */
export const backoffMs = (failures: number): number =>
  Math.min(MAX_BACKOFF_MS, 1000 * 2 ** Math.min(16, failures - 1));
/** Ended runs a process prunes at start. */
export const PRUNE_AT_START = 500;

/** A run's record as it stands now in shared memory. */
export function recordOf(
  info: RunInfo,
  shared: RunTable,
  host: HostId,
  now: number,
): RunRecord {
  const slot = info.slot;
  const start = shared.start(slot);
  const inFlight: CallInFlight[] = [];
  const recent: ToolCall[] = [];
  for (const t of shared.tools(slot)) {
    // Built field by field (an object rest here costs more than the rest of the loop).
    const call: ToolCall = { tool: t.tool, status: t.status, startedAt: t.startedAt };
    if (t.callId !== undefined) call.callId = t.callId;
    if (t.durationMs !== undefined) call.durationMs = t.durationMs;
    if (t.timedOut) call.timedOut = true;
    const seq = t.seq;
    if (call.status === "in flight") {
      const c: CallInFlight = {
        tool: call.tool,
        startedAt: Math.round(start + call.startedAt * 1000),
      };
      if (call.callId !== undefined) c.callId = call.callId;
      if (call.timedOut) c.timedOut = true;
      inFlight.push(c);
    } else {
      // Rounded: a record is rewritten every interval, and its size is what that costs.
      call.startedAt = Math.round(call.startedAt * 1000) / 1000;
      if (call.durationMs !== undefined) call.durationMs = Math.round(call.durationMs * 10) / 10;
      const error = info.toolErrors?.[seq];
      recent.push(error === undefined ? call : { ...call, error });
    }
  }
  const record: RunRecord = {
    runId: info.runId,
    attempt: info.attempt ?? 1,
    dialect: info.dialect,
    caps: info.caps,
    turnsUsed: shared.turns(slot),
    elapsedSeconds: Math.max(0, Math.round(now - start) / 1000),
    tier: shared.tierClaimed(slot, 2) ? 2 : shared.tierClaimed(slot, 1) ? 1 : 0,
    inFlight,
    recent,
    notes: [...info.notes],
    checkpointFile: info.checkpointFile,
    host,
    status: "live",
    startedAt: Math.round(start),
    // Never before the run's last hook call: a record the watchdog made from a look that began
    // before the run did, or before its latest call, is newer than the rows the host's thread
    // wrote by then (its start row among them), which the store must not keep over it.
    updatedAt: Math.round(Math.max(now, shared.activity(slot))),
  };
  if (info.taskId !== undefined) record.taskId = info.taskId;
  if (info.generation !== undefined && info.generation > 1) record.generation = info.generation;
  const fileState = shared.fileState(slot);
  if (fileState !== undefined) record.fileState = fileState;
  const tier1 = shared.tierAt(slot, 1);
  const tier2 = shared.tierAt(slot, 2);
  if (tier1 !== undefined || tier2 !== undefined) {
    record.tierAt = {};
    if (tier1 !== undefined) record.tierAt[1] = Math.round(tier1);
    if (tier2 !== undefined) record.tierAt[2] = Math.round(tier2);
  }
  if (info.attempts?.length) record.attempts = info.attempts;
  if (info.prior) record.prior = info.prior;
  if (info.tree) record.tree = info.tree;
  if (info.trace) record.trace = info.trace;
  const usage = usageTotals(shared, slot, info.unknownPrices);
  if (usage) record.usage = usage;
  return record;
}

/** The record of a run that ends now. */
export function endRecord(
  record: RunRecord,
  status: EndStatus,
  summary: string | undefined,
  now: number,
): RunRecord {
  const end: RunRecord["end"] = { status, at: Math.round(now) };
  if (summary !== undefined) end.summary = summary;
  return { ...record, status, end, updatedAt: Math.round(now) };
}

const key = (r: RunRecord) => `${r.attempt}\u0000${r.runId}`;

/** The attempts said to have lost their run, per log: each said once (bounded). */
const lostSaid = new WeakMap<Log, Set<string>>();

/**
 * Say, once per attempt, which records the store refused because a later
 * attempt took their run over (its fencing).
 */
export function sayLost(store: LedgerStore, log: Log): void {
  const fenced = store.leases?.takeFenced();
  if (!fenced || fenced.length === 0) return;
  const said = lostSaid.get(log) ?? new Set<string>();
  lostSaid.set(log, said);
  for (const f of fenced) {
    const k = `${f.attempt}\u0000${f.runId}`;
    if (said.has(k)) continue;
    if (said.size > 10_000) said.clear();
    said.add(k);
    log(
      "warn",
      `run id ${f.runId}: attempt ${f.attempt} lost the run to attempt ${f.holder}, which took it over; the store refuses this attempt's records from now on`,
      f.runId,
    );
  }
}

/**
 * The worker's side: bring every changed run's record up to date once per
 * interval, in one commit with the heartbeat. A store that fails is tried
 * again with a growing wait; its records wait in memory (the newest of each
 * run, at most {@linkcode MAX_BACKLOG}), and what the bound dropped is said.
 */
export class LedgerProgress {
  readonly #store: LedgerStore;
  readonly #log: Log;
  readonly #host: HostId;
  /**
   * The fingerprint each slot's record was last taken at, with its
   * generation, by slot; `#known` says which slots have one. Typed arrays, not
   * a map of objects: one entry per live run stays for the run's life, and at
   * 20,000 runs the map's entries were ~1 MiB of the worker's old space.
   */
  #gens = new Int32Array(0);
  #marks = new Int32Array(0);
  #known = new Uint8Array(0);
  /**
   * The changed slots of the last collect, not yet made into records: slot
   * and fingerprint, in pairs. Their records are made while they are written
   * (see {@linkcode LedgerProgress.flush}); a batch of 20,000 records made
   * whole outlived the worker's young collections and grew its heap ~2×.
   */
  #due = new Int32Array(0);
  #dueCount = 0;
  #source:
    | { shared: RunTable; infoOf: (slot: number) => RunInfo | undefined; now: number }
    | undefined;
  /** Records not yet written, by run and attempt: after a failed write, or for a store that takes whole batches. */
  #backlog = new Map<string, RunRecord>();
  #dropped = 0;
  #failures = 0;
  #retryAt = 0;
  #writing = false;

  constructor(store: LedgerStore, log: Log, host: HostId) {
    this.#store = store;
    this.#log = log;
    this.#host = host;
  }

  /** Commits made so far. */
  commits = 0;

  /** Records waiting for the store. */
  get backlog(): number {
    return this.#backlog.size + this.#dueCount;
  }

  /**
   * Take in the changed runs; `infoOf` gives a live slot's description, and
   * is asked only for a slot whose fingerprint changed, when its record is
   * made. Returns how many runs are live.
   */
  collect(
    shared: RunTable,
    infoOf: (slot: number) => RunInfo | undefined,
    now: number,
  ): number {
    let live = 0;
    this.#heal();
    const slots = shared.slots;
    shared.refresh(); // after reading the count: the views cover every slot counted
    // Slots still due from an earlier collect (no flush came between) become records first,
    // before the arrays may grow.
    if (this.#dueCount > 0) this.#materialize();
    this.#fit(slots);
    const known = this.#known, gens = this.#gens, marks = this.#marks;
    for (let slot = 0; slot < slots; slot++) {
      if (!shared.live(slot)) {
        known[slot] = 0;
        continue;
      }
      live++;
      const stamp = shared.changeStamp(slot);
      if (known[slot] === 1 && gens[slot] === shared.gen(slot) && marks[slot] === stamp) continue;
      this.#due[this.#dueCount++] = slot;
      this.#due[this.#dueCount++] = stamp;
    }
    this.#source = { shared, infoOf, now };
    return live;
  }

  /**
   * The store's file deleted or replaced under this process (or, after a
   * failed write, found damaged): the store opens the one at the path, and
   * every live run's record is written to it at this interval.
   */
  #heal(error?: unknown): boolean {
    const healed = failOpen(
      () => this.#store.upkeep?.heal(error),
      (e) => {
        this.#log("warn", `the run ledger could not be made anew: ${errorText(e)}`);
        return undefined;
      },
    );
    if (healed === undefined) return false;
    if (healed !== "") this.#log("warn", `${healed}; every live run's record is written to it`);
    this.#known.fill(0);
    this.#retryAt = 0;
    return true;
  }

  /** Room for `slots` slots in the per-slot arrays. */
  #fit(slots: number): void {
    if (this.#known.length >= slots) return;
    const size = Math.max(slots, this.#known.length * 2, 64);
    this.#known = grownTo(this.#known, size);
    this.#gens = grownTo(this.#gens, size);
    this.#marks = grownTo(this.#marks, size);
    this.#due = new Int32Array(2 * size); // empty whenever it grows: collect made it so
  }

  /** The due slots' records, one at a time, each as it is made. */
  *#made(): Generator<RunRecord> {
    const source = this.#source;
    const count = this.#dueCount;
    if (!source) return;
    const { shared, infoOf } = source;
    // Stamped when they are made, not when the look began: a look may wait (a busy machine, the
    // store's first open) while the host's thread records a start or a tree's use, and the store
    // keeps no record of a live run over a newer one. Made now, what they show is newer.
    const now = Math.max(source.now, nowMs());
    const due = this.#due;
    for (let i = 0; i < count; i += 2) {
      const slot = due[i]!, stamp = due[i + 1]!;
      const info = infoOf(slot);
      if (!info) continue;
      const record = recordOf(info, shared, this.#host, now);
      // Made from a slot that was let go meanwhile: the run ended, and its end is written.
      if (!shared.live(slot) || shared.gen(slot) !== info.gen) continue;
      this.#known[slot] = 1;
      this.#gens[slot] = info.gen;
      this.#marks[slot] = stamp;
      yield record;
    }
  }

  /** A record made elsewhere (the host's thread found the store busy): written at the next flush. */
  take(record: RunRecord): void {
    this.#keep(record);
  }

  /** The due slots made into records that wait in the backlog. */
  #materialize(): void {
    for (const record of this.#made()) this.#keep(record);
    this.#dueCount = 0;
  }

  #keep(record: RunRecord): void {
    const k = key(record);
    // An attempt that ended stays ended: a record made from its slot while the slot was still
    // due (the host's thread handed its end over meanwhile) must not make it live again, or
    // the run's end would never land.
    if (record.status === "live" && (this.#backlog.get(k)?.status ?? "live") !== "live") return;
    this.#backlog.delete(k); // re-inserted last: the oldest run first out at the bound
    this.#backlog.set(k, record);
    while (this.#backlog.size > MAX_BACKLOG) {
      const oldest = this.#backlog.keys().next().value as string;
      this.#backlog.delete(oldest);
      this.#dropped++;
    }
  }

  /**
   * Write what is waiting, with the heartbeat, in one commit; nothing when a
   * failing store's wait has not passed, unless this is the `last` chance (the
   * keeper's close). Never rejects.
   */
  async flush(now: number, intervalSeconds: number, beat: boolean, last = false): Promise<void> {
    if (this.#writing || (!last && now < this.#retryAt)) {
      // Kept as records, as they were when taken in, for the write that comes.
      if (this.#dueCount > 0) this.#materialize();
      return;
    }
    if (this.#backlog.size === 0 && this.#dueCount === 0 && !beat) return;
    const heartbeat = beat ? { host: this.#host, at: Math.round(now), intervalSeconds } : undefined;
    // The usual case, in order: nothing left over, and a store that takes records as they
    // are made. Each record is made, written and dropped, so it dies young.
    const sync = this.#store.sync;
    if (sync && this.#backlog.size === 0) {
      this.#writing = true;
      try {
        sync.writeEach(this.#made(), heartbeat);
        this.#dueCount = 0;
        this.#written();
        sayLost(this.#store, this.#log);
      } catch (error) {
        // Rolled back, and the records made for it are gone: made again, they wait in memory
        // as a whole batch's would.
        this.#materialize();
        this.#failed(error, now);
      } finally {
        this.#writing = false;
      }
      return;
    }
    if (this.#dueCount > 0) this.#materialize();
    const batch = this.#backlog;
    this.#backlog = new Map();
    this.#writing = true;
    try {
      const records = [...batch.values()];
      const write: WriteBatch = { records };
      if (heartbeat) write.heartbeat = heartbeat;
      await this.#store.write(write);
      this.#written();
      sayLost(this.#store, this.#log);
    } catch (error) {
      // Back in, behind anything newer taken meanwhile.
      const newer = this.#backlog;
      this.#backlog = new Map();
      for (const record of batch.values()) this.#keep(record);
      for (const record of newer.values()) this.#keep(record);
      this.#failed(error, now);
    } finally {
      this.#writing = false;
    }
  }

  #written(): void {
    this.commits++;
    // After a single busy commit nothing was said: nothing to take back either.
    const said = this.#failures > 1 || (this.#failures === 1 && !this.#busyOnce);
    if (said || this.#dropped > 0) {
      this.#log(
        "info",
        `the run ledger takes records again${
          this.#dropped > 0
            ? `; ${this.#dropped} record update(s) were dropped meanwhile (at most ${MAX_BACKLOG} wait in memory)`
            : ""
        }`,
      );
    }
    this.#failures = 0;
    this.#dropped = 0;
  }

  /** The last failure was a first one, busy, and not said. */
  #busyOnce = false;

  #failed(error: unknown, now: number): void {
    this.#failures++;
    // Busy once (another process's commit outlasted the wait for its lock, as on a loaded
    // machine with several processes in a home): tried again at the next interval, said if it
    // fails again. A 1 s wait here had kept the records 2 s from the disk, past a kill.
    const once = this.#failures === 1 && busy(error);
    this.#busyOnce = once;
    const wait = once ? 0 : backoffMs(this.#failures);
    this.#retryAt = now + wait;
    // A damaged file is set aside and a new one started: tried again at the next interval.
    if (this.#heal(error) || once) return;
    if (this.#failures === 1 || Number.isInteger(Math.log2(this.#failures))) {
      this.#log(
        "warn",
        `the run ledger could not be written (${
          errorText(error)
        }); ${this.#backlog.size} record(s) wait in memory, next try in ${
          formatDuration(wait / 1000)
        }`,
      );
    }
  }
}

/** Ledger records the main thread keeps while the store cannot take them. */
export const LEDGER_PENDING = 10_000;
/** How long `close()` goes on trying to write the records kept in memory, ms. */
const CLOSE_PENDING_MS = 3000;

/** What the feed works with. @internal */
export interface LedgerFeedParts {
  /**
   * Open the store without waiting on a lock; undefined when it cannot now
   * (tried again later), null when it never can (no driver, no store
   * subsystem). Its reasons go to `log`. `closing`: the keeper's close, when
   * the records waiting have no later chance, so a damaged file is set aside
   * here (else the watchdog's thread does that).
   */
  open(settings: Settings, log: Log, closing?: boolean): LedgerStore | undefined | null;
  /**
   * Hand records the store was busy for to the watchdog's thread, whose next
   * commit writes them; false when it does not run.
   */
  handOn?(records: RunRecord[]): boolean;
  /** This process, as run records name it. */
  host(): HostId;
  log: Log;
  /** The settings in force at a time. */
  settingsAt(now: number): Settings;
  /** The shared run table, whose live runs' records go at close and at exit. */
  shared: RunTable;
  /** The run in each slot of the shared table. */
  runs(): readonly (RunInfo | undefined)[];
}

/**
 * Whether a write failed only because the store was busy: another connection's
 * transaction (`SQLITE_BUSY`), or its log long until the next checkpoint.
 */
export const busy = (error: unknown): boolean =>
  (error as { handedOn?: unknown } | undefined)?.handedOn === true ||
  /database is (locked|busy)|SQLITE_BUSY/i.test(errorText(error));

/** The feeds whose live runs' records are written when the process exits. */
const exiting = new Set<WeakRef<LedgerFeed>>();

/** Write a feed's live runs' records when the process exits; one listener for them all. */
let listening = false;
function atExit(feed: LedgerFeed): void {
  if (!listening) {
    listening = true;
    process.on("exit", () => {
      for (const ref of exiting) ref.deref()?.live("the live runs at exit", true);
      // A store that writes from another thread (the fleet store): a bounded wait for it.
      for (const ref of exiting) ref.deref()?.drain();
    });
  }
  for (const ref of exiting) if (ref.deref() === undefined) exiting.delete(ref);
  exiting.add(new WeakRef(feed));
}

/**
 * The main thread's side of the run ledger, for one keeper. It never waits
 * on the store: a store that cannot be opened, or is locked or failing, costs
 * the records it could not take a place in memory (at most
 * {@linkcode LEDGER_PENDING}, the oldest dropped first and counted in the
 * log); they are tried again, with the open, with a growing wait, and at
 * close. The live runs' records are the watchdog worker's: it reads them
 * from shared memory. @internal
 *
 * @example
 * ```ts
 * import { LedgerFeed } from "./_ledger.ts";
 * import { RunTable } from "./_run_table.ts";
 * import { loadSettings } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * const settings = loadSettings({ home: "/nonexistent", env: {} }).settings;
 * const feed = new LedgerFeed({
 *   open: () => null, // no store to be had, ever
 *   host: () => ({ machine: "m", pid: 1, start: "" }),
 *   log: () => {},
 *   settingsAt: () => settings,
 *   shared: new RunTable(undefined, 1),
 *   runs: () => [],
 * });
 * assert.equal(feed.open(settings), undefined);
 * await feed.close();
 * ```
 */
export class LedgerFeed {
  readonly #parts: LedgerFeedParts;
  /**
   * The store, once opened; undefined before, after a failure to open, and after close. Set
   * only by the feed: a field, not a getter, so the writer's sinks read it at each write
   * without running the feed's code.
   */
  store: LedgerStore | undefined;
  /** No store can ever be had. */
  #never = false;
  #openFailures = 0;
  #retryAt = 0;
  #pending: RunRecord[] = [];
  #dropped = 0;
  #failures = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  /** In close(): the records waiting have no later chance. */
  #closing = false;
  /** The process exits: nothing is handed to the watchdog's thread any more. */
  #exiting = false;
  /** The end rows of ended runs whose file was not written yet, by file. */
  #unwritten = new Map<string, RunRecord>();

  /** @param parts What the feed works with. */
  constructor(parts: LedgerFeedParts) {
    this.#parts = parts;
  }

  /** Whether a store is open or may yet be (the worker then keeps the live runs' records). */
  get wanted(): boolean {
    return !this.#never && !this.#closed;
  }

  /** Records waiting in memory for the store. */
  get pending(): number {
    return this.#pending.length;
  }

  /**
   * The store: opened on first use, never waiting on a lock; after a failure
   * to open, tried again with a growing wait. A store whose file was deleted
   * or replaced meanwhile opens the one at its path.
   */
  open(settings: Settings): LedgerStore | undefined {
    const open = this.store;
    if (open !== undefined) {
      failOpen(() => {
        const healed = open.upkeep?.heal();
        if (healed) this.#parts.log("warn", healed);
      }, (error) => ledgerFailed(this.#parts.log, "a new ledger file", error));
      return open;
    }
    if (this.#never || this.#closed || nowMs() < this.#retryAt) return undefined;
    const first = this.#openFailures === 0;
    const store = this.#parts.open(
      settings,
      (level, message, runId) => {
        // The first failure is said, then every doubling of them: not one line per try.
        if (first || Number.isInteger(Math.log2(this.#openFailures + 1))) {
          this.#parts.log(level, message, runId);
        }
      },
      this.#closing,
    );
    if (store === null) {
      this.#never = true;
      this.#pending = [];
      return undefined;
    }
    if (!store) {
      this.#openFailures++;
      this.#retryAt = nowMs() + backoffMs(this.#openFailures);
      this.#schedule();
      return undefined;
    }
    if (this.#openFailures > 0) {
      this.#parts.log(
        "info",
        `the run ledger opened after ${this.#openFailures} failed tr${
          this.#openFailures === 1 ? "y" : "ies"
        }`,
      );
    }
    this.#openFailures = 0;
    this.store = store;
    atExit(this);
    return store;
  }

  /** The live runs' records as they stand; `exiting`: the watchdog's thread writes no more. */
  live(what: string, exiting?: boolean): void {
    if (exiting) this.#exiting = true;
    if (this.#never || (!this.store && this.#pending.length === 0 && this.#openFailures === 0)) {
      return; // never asked for: nothing was started while the ledger was wanted
    }
    failOpen(() => {
      const now = nowMs();
      const host = this.#parts.host();
      const records: RunRecord[] = [];
      for (const info of this.#parts.runs()) {
        if (info) records.push(recordOf(info, this.#parts.shared, host, now));
      }
      this.write(records, what);
    }, (error) => ledgerFailed(this.#parts.log, what, error));
  }

  /** The process exits: a bounded wait for a store thread's writes to land. */
  drain(): void {
    failOpen(() => {
      this.store?.relay?.drainSync();
    }, () => {/* exiting: nothing more can be done */});
  }

  /** Record a run's end, when the settings keep the ledger: at once, or kept until it can be. */
  end(table: RunTable, info: RunInfo, end: { status: EndStatus; summary?: string }): void {
    failOpen(() => {
      const now = nowMs();
      const settings = this.#parts.settingsAt(now);
      if (!settings.enabled || !settings.ledger || this.#never) return;
      const record = endRecord(
        recordOf(info, table, this.#parts.host(), now),
        end.status,
        end.summary,
        now,
      );
      this.write([record], "the run's end");
      if (record.fileState !== "written" && record.checkpointFile !== undefined) {
        // Its end record may still land (a write tried again): the row then says so.
        if (this.#unwritten.size >= MAX_UNWRITTEN) {
          this.#unwritten.delete(this.#unwritten.keys().next().value!);
        }
        this.#unwritten.set(record.checkpointFile, record);
      }
    }, (error) => ledgerFailed(this.#parts.log, "the run's end", error, info.runId));
  }

  /**
   * A checkpoint file was written: a run that ended before its file was
   * (a write tried again after a full disk) gets its row again, saying so.
   */
  written(file: string): void {
    const record = this.#unwritten.get(file);
    if (record === undefined) return;
    this.#unwritten.delete(file);
    this.write([{ ...record, fileState: "written" }], "the run's end");
  }

  /**
   * Write records on the main thread (a start, an end): at once when the
   * store takes them without waiting; else they wait, bounded, and are tried
   * again with a growing wait.
   */
  write(records: RunRecord[], what: string): void {
    if (this.#never) return;
    // A retry is already due: these wait behind the others, at no cost now (each try makes every
    // waiting record's row again).
    if (this.#timer !== undefined && records.length > 0) {
      for (const record of records) this.#pending.push(record);
      const over = this.#pending.length - LEDGER_PENDING;
      if (over > 0) {
        this.#pending.splice(0, over);
        this.#dropped += over;
        if (this.#dropped === over) {
          ledgerFailed(
            this.#parts.log,
            `${what} (at most ${LEDGER_PENDING} records wait in memory; the oldest are dropped)`,
            new Error("the store has not taken them yet"),
          );
        }
      }
      return;
    }
    const batch = this.#pending.length === 0 ? records : [...this.#pending, ...records];
    if (batch.length === 0) return;
    const store = this.store ?? this.open(this.#parts.settingsAt(nowMs()));
    if (!store) {
      this.#keep(batch, what, new Error("the store is not open yet"));
      return;
    }
    const keep = (error: unknown) => {
      if (busy(error) && this.handOn(batch)) this.#pending = [];
      else this.#keep(batch, what, error);
    };
    failOpen(() => {
      store.upkeep?.heal();
      if (store.sync) {
        store.sync.write({ records: batch });
        sayLost(store, this.#parts.log);
      } else {
        store.write({ records: batch }).catch(keep);
      }
      this.#pending = [];
      if (this.#failures > 0) {
        this.#failures = 0;
        this.#parts.log(
          "info",
          `the run ledger takes the main thread's records again${
            this.#dropped > 0
              ? `; ${this.#dropped} record(s) were dropped meanwhile (at most ${LEDGER_PENDING} wait in memory)`
              : ""
          }`,
        );
        this.#dropped = 0;
      }
    }, keep);
  }

  /**
   * Records the store was busy for (most often this process's own watchdog
   * committing) go to the watchdog's next commit, at most an interval away,
   * rather than waiting here for a retry; never at close, when that thread
   * stops. False when they could not be handed on.
   */
  handOn(records: RunRecord[]): boolean {
    if (this.#closing || this.#closed || this.#exiting || records.length === 0) return false;
    return failOpen(() => this.#parts.handOn?.(records) ?? false, () => false);
  }

  #keep(batch: RunRecord[], what: string, error: unknown): void {
    const dropped = Math.max(0, batch.length - LEDGER_PENDING);
    this.#pending = dropped > 0 ? batch.slice(dropped) : batch;
    this.#dropped += dropped;
    this.#failures++;
    if (this.#failures === 1 || dropped > 0) {
      ledgerFailed(
        this.#parts.log,
        `${what} (${this.#pending.length} record(s) wait in memory, at most ${LEDGER_PENDING}${
          dropped > 0 ? `; ${dropped} dropped, the oldest` : ""
        })`,
        error,
      );
    }
    this.#schedule();
  }

  /** A try of the open and of the records kept, after a growing wait. */
  #schedule(): void {
    if (this.#timer !== undefined || this.#closed || this.#pending.length === 0) return;
    const wait = this.store ? backoffMs(this.#failures) : Math.max(10, this.#retryAt - nowMs());
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#pending.length > 0) this.write([], "records kept in memory");
    }, wait);
    (this.#timer as { unref?: () => void }).unref?.();
  }

  /**
   * At close: the live runs' records as they stand, and those kept in memory,
   * tried for a bounded while; then the store closed. What could not be
   * written is said.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    const settings = this.#parts.settingsAt(nowMs());
    this.#closing = true;
    // A store never opened while the settings keep no ledger: none is made now.
    const wanted = this.store !== undefined || (settings.enabled && settings.ledger);
    if (!this.#never && wanted) {
      this.#retryAt = 0;
      this.open(settings);
      this.live("the live runs at close");
      const end = nowMs() + CLOSE_PENDING_MS;
      for (
        let wait = 20;
        this.#pending.length > 0 && nowMs() < end;
        wait = Math.min(500, wait * 2)
      ) {
        await new Promise((r) => setTimeout(r, wait));
        if (this.#timer !== undefined) clearTimeout(this.#timer);
        this.#timer = undefined;
        this.#retryAt = 0;
        this.write([], "records kept in memory");
      }
      if (this.#pending.length > 0) {
        this.#parts.log(
          "warn",
          `the run ledger could not take ${this.#pending.length} record(s) before close(); they are lost`,
        );
      }
    }
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    const store = this.store;
    if (!store) return;
    this.store = undefined;
    // A store thread (the fleet store) writes what waits first, bounded.
    return store.close().catch(() => {});
  }
}

/**
 * Capped values less what earlier attempts used, for `resume_budget: remaining`.
 *
 * @example
 * ```ts
 * import { remainingCaps } from "./_ledger.ts";
 * import assert from "node:assert/strict";
 *
 * const caps = remainingCaps({ turns: { value: 12, source: "host" } }, { turns: 5, seconds: 40 });
 * assert.equal(caps.turns?.value, 7);
 * ```
 */
export function remainingCaps(caps: RunCaps, prior: PriorUse): RunCaps {
  const out: RunCaps = {};
  if (caps.turns) {
    out.turns = {
      value: Math.max(1, caps.turns.value - prior.turns),
      source: `${caps.turns.source}, less ${prior.turns} used by earlier attempts`,
    };
  }
  if (caps.time) {
    out.time = {
      value: Math.max(1, caps.time.value - prior.seconds),
      source: `${caps.time.source}, less ${formatDuration(prior.seconds)} used by earlier attempts`,
    };
  }
  // Tokens and dollars: less what the earlier attempts reported (kept whole when they did not).
  if (caps.tokens) {
    const used = prior.tokens ?? 0;
    out.tokens = used > 0
      ? {
        value: Math.max(1, caps.tokens.value - used),
        source: `${caps.tokens.source}, less ${used} used by earlier attempts`,
      }
      : caps.tokens;
  }
  if (caps.usd) {
    const spent = prior.usd ?? 0;
    out.usd = spent > 0
      ? {
        value: Math.max(0.01, caps.usd.value - spent),
        source: `${caps.usd.source}, less $${formatUsd(spent)} spent by earlier attempts`,
      }
      : caps.usd;
  }
  return out;
}

/** A call in flight when an attempt stopped, and for how long it had run. */
export interface UnknownCall {
  tool: string;
  callId?: string;
  runningSeconds: number;
  /** True once it ran past its deadline. */
  timedOut?: boolean;
}

/** When an attempt was last heard of: its end, or its last record or heartbeat. */
export function lastSeen(view: RunView, now: number): number {
  if (view.record.end) return view.record.end.at;
  if (view.state === "live") return now;
  return Math.max(view.record.updatedAt, view.heartbeat?.at ?? 0);
}

/** The calls in flight when the attempt of `view` stopped (or now, while it is live). */
export function unknownCalls(view: RunView, now: number): UnknownCall[] {
  const seen = lastSeen(view, now);
  return view.record.inFlight.map((c) => {
    const out: UnknownCall = {
      tool: c.tool,
      runningSeconds: Math.max(0, (seen - c.startedAt) / 1000),
    };
    if (c.callId !== undefined) out.callId = c.callId;
    if (c.timedOut) out.timedOut = true;
    return out;
  });
}

const callText = (c: UnknownCall) =>
  `${c.tool} (${c.callId !== undefined ? `call id ${c.callId}, ` : ""}for ${
    formatDuration(c.runningSeconds)
  }${c.timedOut ? ", past its deadline" : ""})`;

/** Characters of a one-line summary. */
const SUMMARY_CHARS = 300;

/**
 * One line saying where an earlier attempt got to, from its ledger record:
 * cut off, still live, or how it ended.
 */
export function ledgerSummary(view: RunView, now: number): string {
  const r = view.record;
  const turns = `${r.turnsUsed}${r.caps.turns ? ` of ${r.caps.turns.value}` : ""} turns`;
  const seen = lastSeen(view, now);
  const elapsed = Math.max(r.elapsedSeconds, (seen - r.startedAt) / 1000);
  // Floored, a kill within the first second would read as an attempt that took no time.
  const time = `${elapsed > 0 && elapsed < 1 ? "under 1s" : formatDuration(elapsed)}${
    r.caps.time ? ` of ${formatDuration(r.caps.time.value)}` : ""
  }`;
  const how = view.state === "ended"
    ? `ended ${r.status}`
    : view.state === "live"
    ? `is still live on ${r.host.machine} (pid ${r.host.pid}) at`
    : "cut off after";
  let text = `attempt ${r.attempt} ${how}${
    view.state === "ended" ? " after" : ""
  } ${turns} and ${time}`;
  if (r.usage) {
    const tokens = r.usage.inputTokens + r.usage.outputTokens;
    text += `, ${tokens}${r.caps.tokens ? ` of ${r.caps.tokens.value}` : ""} tokens`;
    if (r.usage.usd !== undefined) {
      text += ` and $${formatUsd(r.usage.usd)}${
        r.caps.usd ? ` of $${formatUsd(r.caps.usd.value)}` : ""
      }`;
    }
  }
  const calls = unknownCalls(view, now);
  if (view.state !== "ended" && calls.length > 0) {
    text += `, inside tool ${calls.map(callText).join(", ")}`;
  }
  // A finished call that had timed out is named too (one in flight is, above).
  const timedOut = r.recent.find((c) => c.timedOut);
  if (timedOut) {
    text += `; tool call ${timedOut.tool}${
      timedOut.callId === undefined ? "" : ` (call id ${timedOut.callId})`
    } ran past its deadline`;
  }
  if (r.end?.summary) text += `: ${r.end.summary}`;
  const chars = Array.from(text.replace(/\s*[\r\n]+\s*/g, " "));
  return chars.length <= SUMMARY_CHARS
    ? chars.join("")
    : chars.slice(0, SUMMARY_CHARS - 1).join("") + "…";
}

/**
 * The sentences a resume text adds for calls whose outcome is unknown, and for a shrunk budget.
 *
 * @example
 * ```ts
 * import { resumeNote } from "./_ledger.ts";
 * import assert from "node:assert/strict";
 *
 * const note = resumeNote([{ tool: "deploy", callId: "c4", runningSeconds: 12 }], undefined, true);
 * assert.match(note!, /outcome unknown: deploy \(call id c4, for 12s\)/);
 * ```
 */
export function resumeNote(
  calls: UnknownCall[],
  remaining: RunCaps | undefined,
  hasFile: boolean,
): string | undefined {
  const parts: string[] = [];
  if (!hasFile) {
    parts.push(
      "It stopped before it wrote a checkpoint file; the figures above are from the run ledger. " +
        "Continue from where it stopped, and do not redo finished work.",
    );
  }
  if (calls.length > 0) {
    parts.push(
      `Tool calls in flight when it stopped, outcome unknown: ${
        calls.map(callText).join("; ")
      }. Check whether each took effect before you repeat it.`,
    );
  }
  if (remaining) {
    const axes = [
      remaining.turns ? `${remaining.turns.value} turns` : undefined,
      remaining.time ? formatDuration(remaining.time.value) : undefined,
    ].filter((a) => a !== undefined);
    if (axes.length > 0) {
      parts.push(`This attempt has only what the earlier attempts left: ${axes.join(" and ")}.`);
    }
  }
  return parts.length > 0 ? parts.join(" ") : undefined;
}

/** Effects of each kind a resume text names; the rest are counted. */
const NOTE_UNKNOWN = 50;
const NOTE_DONE = 20;
/** Characters of a receipt's result a resume text quotes. */
const NOTE_RESULT_CHARS = 80;

/**
 * The sentences a resume text adds for the earlier attempts' side effects:
 * those whose outcome is unknown (an intent, no receipt), then those done,
 * each with its effect key, so the agent checks before it repeats one.
 *
 * @example
 * ```ts
 * import { effectsNote } from "./_ledger.ts";
 * import assert from "node:assert/strict";
 *
 * const note = effectsNote([
 *   { runId: "r", key: "ek_1", tool: "send_email", inputDigest: "d", attempt: 1, at: 1 },
 *   {
 *     runId: "r", key: "ek_2", tool: "pay", inputDigest: "d", attempt: 1, at: 2,
 *     receipt: { ok: true, result: '{"id":"tx_1"}', attempt: 1, at: 3 },
 *   },
 * ]);
 * assert.match(note!, /outcome is unknown: send_email \(effect key ek_1, attempt 1\)/);
 * assert.match(note!, /done by earlier attempts: pay \(effect key ek_2, attempt 1\): ok, \{"id":"tx_1"\}/);
 * ```
 */
export function effectsNote(rows: EffectRow[]): string | undefined {
  if (rows.length === 0) return undefined;
  const unknown = rows.filter((r) => !r.receipt);
  const done = rows.filter((r) => r.receipt);
  const parts: string[] = [];
  const more = (n: number, what: string) => (n > 0 ? `; and ${n} more ${what}` : "");
  if (unknown.length > 0) {
    const named = unknown.slice(-NOTE_UNKNOWN);
    parts.push(
      `Side effects of earlier attempts whose outcome is unknown: ${
        named.map((r) =>
          `${r.tool} (effect key ${r.key}, attempt ${r.attempt}${
            r.callId === undefined ? "" : `, call id ${r.callId}`
          })`
        ).join("; ")
      }${
        more(unknown.length - named.length, "")
      }. Each started and has no receipt: check whether it took effect before you repeat it.`,
    );
  }
  if (done.length > 0) {
    const named = done.slice(-NOTE_DONE);
    parts.push(
      `Side effects already done by earlier attempts: ${
        named.map((r) => {
          const receipt = r.receipt!;
          const text = receipt.result === undefined
            ? ""
            : Array.from(receipt.result.replace(/\s+/g, " "));
          const quoted = text === ""
            ? ""
            : `, ${
              text.length > NOTE_RESULT_CHARS
                ? text.slice(0, NOTE_RESULT_CHARS - 1).join("") + "…"
                : text.join("")
            }`;
          return `${r.tool} (effect key ${r.key}, attempt ${receipt.attempt}): ${
            receipt.ok ? "ok" : "failed"
          }${quoted}`;
        }).join("; ")
      }${more(done.length - named.length, "done")}. Do not repeat them.`,
    );
  }
  return parts.join(" ");
}

/** How often the same failure of the main thread's ledger writes is said again, ms. */
const SAY_AGAIN_MS = 30_000;
/** When each log last said each failure, and how many times it kept quiet since. */
const said = new WeakMap<Log, Map<string, { at: number; quiet: number }>>();

/**
 * Log a failure of the main thread's ledger write: the first of a kind at
 * once, then at most once per {@linkcode SAY_AGAIN_MS} with how many were
 * not said (a locked ledger fails every start: not a line each).
 */
export function ledgerFailed(log: Log, what: string, error: unknown, runId?: string): void {
  // Rows the store handed on (its log is long until the next checkpoint) are written later: no loss.
  if ((error as { handedOn?: unknown } | undefined)?.handedOn === true) return;
  const text = errorText(error);
  const kinds = said.get(log) ?? new Map<string, { at: number; quiet: number }>();
  said.set(log, kinds);
  const kind = `${what}\u0000${text}`;
  const last = kinds.get(kind);
  const now = nowMs();
  if (last && now - last.at < SAY_AGAIN_MS) {
    last.quiet++;
    return;
  }
  if (kinds.size > 100) kinds.clear();
  kinds.set(kind, { at: now, quiet: 0 });
  const more = last && last.quiet > 0
    ? ` (and ${last.quiet} more like it since the last line)`
    : "";
  log("warn", `the run ledger could not record ${what}: ${text}${more}`, runId);
}

/** The most intents and receipts that wait in memory for the store. */
export const MAX_EFFECTS_WAITING = 10_000;
/** How long an intent or receipt is tried before its promise says it was not recorded, ms. */
export const EFFECT_GIVE_UP_MS = 10_000;
/**
 * How long a journal entry holds its call while the store cannot take it, ms:
 * past it the call returns and the entry waits in memory for the store (a
 * lost entry costs a retry one model call, not a repeated effect).
 */
export const JOURNAL_HOLD_MS = 1_000;
/** The most bytes of journal entries that wait in memory for the store. */
export const MAX_JOURNAL_WAITING_BYTES = 64 * 1024 * 1024;

/** What the effect log works with. @internal */
export interface EffectLogParts {
  /** The run ledger's store, opened on first use; undefined: not now; null: never (ledger off). */
  store(): LedgerStore | undefined | null;
  log: Log;
}

/** One intent or receipt on its way, with the promise's resolver. */
type EffectEntry =
  & { resolve: (recorded: boolean) => void; since: number; held?: boolean }
  & ({ intent: EffectIntent } | { receipt: EffectReceipt } | { journal: JournalEntry });

/** The bytes a journal entry holds in memory (its texts, as UTF-16 code units; a bound, not a count). */
const journalSize = (e: JournalEntry) =>
  e.body.length + e.key.length + (e.usage?.length ?? 0) + e.runId.length + 64;

const entryText = (e: EffectEntry) =>
  "intent" in e
    ? `the intent of ${e.intent.tool} (effect key ${e.intent.key})`
    : "receipt" in e
    ? `the receipt of ${e.receipt.tool} (effect key ${e.receipt.key})`
    : `the journal's ${e.journal.kind} call ${e.journal.index} of run ${e.journal.runId}`;

/**
 * Intents, receipts and journal entries on their way to the run ledger: each
 * resolves once committed, and every one taken in the same moment (the same
 * turn of the event loop, or while a commit is under way) shares one commit. The commit
 * is made off the hook that asked for it, on a timer. A store that fails is
 * tried again with a growing wait; past {@linkcode EFFECT_GIVE_UP_MS}, or
 * past {@linkcode MAX_EFFECTS_WAITING}, the promise resolves `false` and the
 * log says what was not recorded: the host never waits without end.
 */
export class EffectLog {
  readonly #parts: EffectLogParts;
  #waiting: EffectEntry[] = [];
  #timer: ReturnType<typeof setTimeout> | ReturnType<typeof setImmediate> | undefined;
  #writing = false;
  #failures = 0;
  /** What the log said is not recorded (the ledger off, or a store without its group): once each. */
  #saidOff = new Set<"effects" | "journal">();
  /** Entries refused since the queue filled up (said once, then counted). */
  #refused = 0;
  /** The entries of the commit under way. */
  #inFlight: EffectEntry[] = [];
  /** Bytes of journal entries waiting or in flight. */
  #journalBytes = 0;
  /** Since when the store has not taken a commit (undefined: it takes them). */
  #downSince: number | undefined;
  /** Whether the log said, in this outage, that journal entries past the bound were dropped. */
  #saidJournalFull = false;
  #holdTimer: ReturnType<typeof setTimeout> | undefined;

  /** @internal */
  constructor(parts: EffectLogParts) {
    this.#parts = parts;
  }

  /** Commits made so far. */
  commits = 0;

  /** Whether intents or receipts wait, or a commit is under way. */
  get busy(): boolean {
    return this.#waiting.length > 0 || this.#writing;
  }

  /** Record an intent; resolves true once it is committed, false when it could not be. */
  intent(intent: EffectIntent): Promise<boolean> {
    return this.#add((resolve, since) => ({ intent, resolve, since }));
  }

  /** Record a receipt; resolves like {@linkcode EffectLog.intent}. */
  receipt(receipt: EffectReceipt): Promise<boolean> {
    return this.#add((resolve, since) => ({ receipt, resolve, since }));
  }

  /**
   * Record a journal entry: resolves true once it is committed. While the
   * store cannot take it, the entry holds its call at most
   * {@linkcode JOURNAL_HOLD_MS} (at once when the store is already known to
   * be away): it resolves false then and waits in memory, in order, until
   * the store takes it, up to {@linkcode MAX_JOURNAL_WAITING_BYTES}.
   */
  journal(entry: JournalEntry): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const size = journalSize(entry);
      if (this.#journalBytes + size > MAX_JOURNAL_WAITING_BYTES) {
        if (!this.#saidJournalFull) {
          this.#saidJournalFull = true;
          this.#parts.log(
            "warn",
            `the run journal is not recorded while the run ledger cannot take it: ${
              MAX_JOURNAL_WAITING_BYTES / 1024 / 1024
            } MiB of its entries already wait in memory; a retry makes the later calls again`,
            entry.runId,
          );
        }
        resolve(false);
        return;
      }
      const now = nowMs();
      const held = this.#downSince !== undefined && now - this.#downSince >= JOURNAL_HOLD_MS;
      if (held) resolve(false); // the store is away: the call goes on, its entry waits
      const queued = this.#queue({ journal: entry, resolve, since: now, held });
      if (!queued) return;
      this.#journalBytes += size;
      if (!held) this.#armHold();
    });
  }

  /**
   * The journal of a run id, every attempt's, from the store; tried again as
   * {@linkcode EffectLog.read} is; undefined when it cannot be read (or the
   * store keeps none).
   */
  readJournal(runId: string): Promise<JournalEntry[] | undefined> {
    return this.#readOf(
      runId,
      "what earlier attempts' model calls answered",
      (store) => store.journal?.read(runId),
    );
  }

  /**
   * The effects recorded for a run id, from the store; tried again, with a
   * growing wait, while the store cannot be opened or read (locked, away),
   * for at most {@linkcode EFFECT_GIVE_UP_MS}: undefined then, with a log
   * line, and at once when there is no ledger.
   */
  read(runId: string): Promise<EffectRow[] | undefined> {
    return this.#readOf(runId, "what earlier attempts did", (store) => store.effects?.read(runId));
  }

  async #readOf<T>(
    runId: string,
    what: string,
    read: (store: LedgerStore) => Promise<T> | undefined,
  ): Promise<T | undefined> {
    const end = nowMs() + EFFECT_GIVE_UP_MS;
    let error: unknown = new Error("the run ledger is not open yet");
    for (let wait = 10;; wait = Math.min(500, wait * 2)) {
      const store = failOpen(() => this.#parts.store(), () => undefined);
      if (store === null) return undefined;
      if (store) {
        try {
          // undefined: a store that keeps none
          return await read(store);
        } catch (e) {
          // kept, and said in the one log line if every try until the bound fails
          error = e;
        }
      }
      if (nowMs() + wait > end) break;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
    this.#parts.log(
      "warn",
      `the run ledger could not say ${what} within ${EFFECT_GIVE_UP_MS / 1000}s (${
        errorText(error)
      }): calls of this run run as if none were done before`,
      runId,
    );
    return undefined;
  }

  #add(
    make: (resolve: (recorded: boolean) => void, since: number) => EffectEntry,
  ): Promise<boolean> {
    return new Promise<boolean>((resolve) => void this.#queue(make(resolve, nowMs())));
  }

  /** An entry in the queue, for the next commit; false (resolved so) when the queue is full. */
  #queue(entry: EffectEntry): boolean {
    if (this.#waiting.length >= MAX_EFFECTS_WAITING) {
      // Said once until a commit lands again (the ones after it are counted then).
      if (this.#refused++ === 0) {
        this.#parts.log(
          "warn",
          `${
            entryText(entry)
          } is not recorded: ${MAX_EFFECTS_WAITING} intents, receipts and journal entries already wait for the run ledger (the next ones refused are counted, and said once the ledger takes commits again)`,
        );
      }
      entry.resolve(false);
      return false;
    }
    this.#waiting.push(entry);
    this.#schedule(0);
    return true;
  }

  /**
   * A journal entry's call is held at most {@linkcode JOURNAL_HOLD_MS}: a
   * timer of its own lets it go, whether the commit failed or hangs.
   */
  #armHold(): void {
    if (this.#holdTimer !== undefined) return;
    this.#holdTimer = setTimeout(() => {
      this.#holdTimer = undefined;
      this.#letGo();
    }, JOURNAL_HOLD_MS);
    (this.#holdTimer as { unref?: () => void }).unref?.();
  }

  /** Journal entries held past {@linkcode JOURNAL_HOLD_MS} resolve false, and keep waiting. */
  #letGo(): void {
    const now = nowMs();
    let more = false;
    for (const e of [...this.#inFlight, ...this.#waiting]) {
      if (!("journal" in e) || e.held) continue;
      if (now - e.since >= JOURNAL_HOLD_MS) {
        e.held = true;
        e.resolve(false);
      } else more = true;
    }
    if (more) this.#armHold();
  }

  /** A journal entry leaves the queue: committed, dropped or given up. */
  #gone(entries: EffectEntry[]): void {
    for (const e of entries) if ("journal" in e) this.#journalBytes -= journalSize(e.journal);
  }

  #schedule(wait: number): void {
    if (this.#timer !== undefined || this.#writing) return;
    this.#immediate = wait === 0;
    if (wait === 0) {
      // Right after this turn of the event loop (a 0 ms timer waits a millisecond or more): every
      // intent and receipt taken until then is in the commit.
      this.#timer = setImmediate(() => {
        this.#timer = undefined;
        void this.#flush();
      });
      return;
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#flush();
    }, wait);
  }

  async #flush(): Promise<void> {
    if (this.#writing || this.#waiting.length === 0) return;
    const store = failOpen(() => this.#parts.store(), () => undefined);
    if (store === null) {
      for (const e of this.#waiting) {
        this.#off(
          "journal" in e ? "journal" : "effects",
          `${
            "journal" in e ? "the run journal is" : "side effects are"
          } not recorded: the run ledger is off (the setting ledger)`,
        );
      }
      this.#settle(false);
      return;
    }
    // A store without a group takes none of its entries: those resolve false, said once.
    if (store && (!store.effects || !store.journal)) {
      const lacks = (e: EffectEntry) => "journal" in e ? !store.journal : !store.effects;
      const refused = this.#waiting.filter(lacks);
      this.#waiting = this.#waiting.filter((e) => !lacks(e));
      this.#gone(refused);
      for (const e of refused) {
        this.#off(
          "journal" in e ? "journal" : "effects",
          `${
            "journal" in e ? "the run journal is" : "side effects are"
          } not recorded: the run ledger's store keeps none`,
        );
        e.resolve(false);
      }
      if (this.#waiting.length === 0) return;
    }
    const entries = this.#waiting;
    this.#waiting = [];
    const batch: EffectBatch = { intents: [], receipts: [] };
    const journal: JournalBatch = { entries: [] };
    for (const e of entries) {
      if ("intent" in e) batch.intents.push(e.intent);
      else if ("receipt" in e) batch.receipts.push(e.receipt);
      else journal.entries.push(e.journal);
    }
    this.#writing = true;
    this.#inFlight = entries;
    try {
      if (!store) throw new Error("the run ledger is not open yet");
      if (batch.intents.length > 0 || batch.receipts.length > 0) await store.effects!.write(batch);
      if (journal.entries.length > 0) await store.journal!.write(journal);
      this.commits++;
      if (this.#failures > 0) this.#parts.log("info", "the run ledger takes side effects again");
      this.#failures = 0;
      this.#downSince = undefined;
      this.#saidJournalFull = false;
      if (this.#refused > 1) {
        this.#parts.log(
          "warn",
          `${this.#refused} intents, receipts and journal entries in all were not recorded while the run ledger's queue was full`,
        );
      }
      this.#refused = 0;
      this.#gone(entries);
      for (const e of entries) e.resolve(true);
    } catch (error) {
      this.#failures++;
      const now = nowMs();
      this.#downSince ??= now;
      // Back in front of anything newer; what waited too long is given up, and said. A journal
      // entry is not given up: it waits in memory (bounded) until the store takes it.
      const given = entries.filter((e) => !("journal" in e) && now - e.since >= EFFECT_GIVE_UP_MS);
      const kept = entries.filter((e) => "journal" in e || now - e.since < EFFECT_GIVE_UP_MS);
      if (given.length > 0) {
        this.#parts.log(
          "warn",
          `the run ledger could not record ${given.length} side effect(s) within ${
            EFFECT_GIVE_UP_MS / 1000
          }s (${errorText(error)}): ${given.slice(0, 3).map(entryText).join("; ")}${
            given.length > 3 ? "; …" : ""
          }; the tools run without them`,
        );
        for (const e of given) e.resolve(false);
      } else if (this.#failures === 1) {
        this.#parts.log(
          "warn",
          `the run ledger could not record side effects yet (${errorText(error)}); tried again`,
        );
      }
      this.#waiting = [...kept, ...this.#waiting];
      this.#letGo();
    } finally {
      this.#writing = false;
      this.#inFlight = [];
    }
    if (this.#waiting.length > 0) {
      this.#schedule(this.#failures === 0 ? 0 : Math.min(1000, 10 * 2 ** (this.#failures - 1)));
    }
  }

  /** The log says, once for effects and once for the journal, why they are not recorded. */
  #off(kind: "effects" | "journal", line: string): void {
    if (this.#saidOff.has(kind)) return;
    this.#saidOff.add(kind);
    this.#parts.log("warn", line);
  }

  #settle(recorded: boolean): void {
    const entries = this.#waiting;
    this.#waiting = [];
    this.#gone(entries);
    for (const e of entries) e.resolve(recorded);
  }

  /** The keeper closes: a last commit of what waits, bounded. */
  async close(): Promise<void> {
    this.#clear();
    const end = nowMs() + 2000;
    while ((this.#waiting.length > 0 || this.#writing) && nowMs() < end) {
      if (!this.#writing) await this.#flush();
      if (this.#waiting.length > 0 || this.#writing) await new Promise((r) => setTimeout(r, 20));
      this.#clear();
    }
    if (this.#holdTimer !== undefined) clearTimeout(this.#holdTimer);
    this.#holdTimer = undefined;
    const lost = this.#waiting.filter((e) => "journal" in e).length;
    if (lost > 0) {
      this.#parts.log(
        "warn",
        `${lost} run journal entr${
          lost === 1 ? "y was" : "ies were"
        } not recorded before the keeper closed (the run ledger could not take them): a retry makes those calls again`,
      );
    }
    this.#settle(false);
  }

  #clear(): void {
    const timer = this.#timer;
    this.#timer = undefined;
    if (timer === undefined) return;
    // Each by its own kind: clearing an immediate as a timer (or the reverse) is not a no-op in Node.
    if (this.#immediate) clearImmediate(timer as ReturnType<typeof setImmediate>);
    else clearTimeout(timer as ReturnType<typeof setTimeout>);
  }
  #immediate = false;
}
