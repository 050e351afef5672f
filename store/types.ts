/**
 * The run store's contract: what a record of a run holds, what a process's
 * heartbeat holds, and the {@linkcode RunStore} interface every backend
 * implements (the embedded SQLite store, and a PostgreSQL one). Engine-neutral:
 * times are milliseconds since the epoch, lists are plain arrays, and a
 * backend decides how it lays them out.
 *
 * Whether a run is live, ended or cut off is not stored: it is decided when
 * read, by {@linkcode runState}, from the record and its process's heartbeat.
 *
 * @module
 */
import type { EndStatus } from "../_record.ts";
import type { TreeRow } from "../_tree.ts";
import type {
  AttemptStart,
  EffectBatch,
  EffectRow,
  FencedRecord,
  Heartbeat,
  HostId,
  JournalBatch,
  JournalEntry,
  LeaseState,
  LedgerCheckpoints,
  LedgerSessions,
  RunRecord,
  RunState,
  RunView,
  StartOptions,
  WriteBatch,
} from "../_ledger.ts";

// The records of runs as the core writes them: its own types (the core imports no subsystem),
// the store's contract through them.
export type {
  AttemptStart,
  CallInFlight,
  EffectBatch,
  EffectIntent,
  EffectReceipt,
  EffectRow,
  FencedRecord,
  ForkOrigin,
  GraphChannelValue,
  GraphCheckpointPut,
  GraphCheckpointQuery,
  GraphCheckpointRow,
  GraphWrite,
  GraphWrites,
  Heartbeat,
  HostId,
  JournalBatch,
  JournalEntry,
  LeaseState,
  LedgerCheckpoints,
  LedgerEffects,
  LedgerJournal,
  LedgerLeases,
  LedgerRelay,
  LedgerSessions,
  LedgerStore,
  LedgerSync,
  LedgerTrees,
  LedgerUpkeep,
  OnDuplicate,
  PriorUse,
  RecordEnd,
  RecordStatus,
  RunRecord,
  RunState,
  RunView,
  SessionEntry,
  SessionPath,
  StartOptions,
  TypedBytes,
  WriteBatch,
} from "../_ledger.ts";

/**
 * An effect from its table's columns (`run_id`, `key`, `tool`,
 * `input_digest`, `call_id`, `attempt`, `at`, `receipt_*`), as either
 * backend reads them back.
 *
 * @example
 * ```ts
 * import { effectOf } from "./types.ts";
 * import assert from "node:assert/strict";
 *
 * const row = effectOf({
 *   run_id: "r", key: "k", tool: "send_email", input_digest: "ab", call_id: null,
 *   attempt: 1, at: 5, receipt_ok: 1, receipt_result: "\"sent\"", receipt_truncated: 0,
 *   receipt_attempt: 1, receipt_at: 6,
 * });
 * assert.equal(row.receipt?.ok, true);
 * assert.equal(row.receipt?.result, '"sent"');
 * ```
 */
export function effectOf(row: Record<string, unknown>): EffectRow {
  const out: EffectRow = {
    runId: String(row.run_id),
    key: String(row.key),
    tool: String(row.tool),
    inputDigest: String(row.input_digest),
    attempt: Number(row.attempt),
    at: Number(row.at),
  };
  if (typeof row.call_id === "string") out.callId = row.call_id;
  if (row.receipt_at !== null && row.receipt_at !== undefined) {
    const receipt: NonNullable<EffectRow["receipt"]> = {
      ok: Boolean(Number(row.receipt_ok)) || row.receipt_ok === true,
      attempt: Number(row.receipt_attempt),
      at: Number(row.receipt_at),
    };
    if (typeof row.receipt_result === "string") receipt.result = row.receipt_result;
    if (Number(row.receipt_truncated) === 1 || row.receipt_truncated === true) {
      receipt.truncated = true;
    }
    out.receipt = receipt;
  }
  return out;
}

/** The states a listing can be filtered by. */
export const RUN_STATES: readonly RunState[] = ["live", "ended", "cut-off"];

/** Which runs {@linkcode TreesPort.list} reads. */
export interface TreeQuery {
  /** The tree's root run id; every tree when left out. */
  root?: string;
  /** The most runs read. @default {1000} */
  limit?: number;
}

/** What to list. */
export interface ListQuery {
  /** Only runs in this state now. */
  state?: RunState;
  /** Only runs brought up to date at or after this time, ms since the epoch. */
  since?: number;
  /** Only runs of this machine. */
  machine?: string;
  /** Only this run id (every attempt kept). */
  runId?: string;
  /** Only the earlier attempts (every one but the newest) of these run ids; wins over `runId`. */
  earlierOf?: string[];
  /** The most runs returned, the newest first. @default {1000} */
  limit?: number;
}

/** Which runs a summary counts, and whether it sums their model use. */
export type SummaryQuery = Omit<ListQuery, "state" | "limit" | "runId"> & {
  /** Also sum the tokens and dollars the runs reported (`usage`): this reads every record. */
  usage?: boolean;
};

/** Counts of runs, by machine and state. */
export interface StoreSummary {
  /** Runs counted. */
  total: number;
  /** Runs per state. */
  byState: Record<RunState, number>;
  /** Runs per end status, for the ended ones. */
  byEnd: Partial<Record<EndStatus, number>>;
  /** Runs per machine, per state. */
  byMachine: Record<string, Record<RunState, number>>;
  /**
   * The model use of the runs that reported any: how many, their tokens, and
   * their dollars over the `usdRuns` whose cost is known. A backend may leave
   * it out.
   */
  usage?: { runs: number; inputTokens: number; outputTokens: number; usd: number; usdRuns: number };
}

/**
 * A run store: the ledger of every run's newest state, as the port every
 * backend implements (the embedded SQLite store, the PostgreSQL one, the
 * in-memory one of the tests). Records are the one required capability,
 * the store's own methods; each other capability is a group a backend
 * offers whole or not at all, and a caller tests the group, never a method
 * of it. Every method may reject (a locked, corrupt, read-only, full or
 * unreachable store): the caller reports it and carries on.
 *
 * The port is asynchronous; a backend over the network is carried to the
 * host's thread, whose hooks are synchronous, by the store's bridge (see
 * `openBridge`).
 */
export interface RunStore {
  /** Which engine: `sqlite`, `postgres` or `memory`. */
  readonly engine: string;
  /** Where it is: a file, or a URL without its password. */
  readonly location: string;
  /** Write a batch of records and the heartbeat in one durable commit. */
  write(batch: WriteBatch): Promise<void>;
  /**
   * Record the start of a new attempt of `record.runId`, atomically: the
   * attempt number is one more than the newest record's (or `minAttempt`,
   * when that is larger), unless that record ended `done` or there is none,
   * when the run starts afresh as attempt 1 (`minAttempt` aside) and older
   * records of the id are replaced. The record is stored with the attempt
   * given; the newest earlier record comes back as `previous`.
   */
  startAttempt(record: RunRecord, options?: StartOptions): Promise<AttemptStart>;
  /** The newest record of a run id, or undefined. */
  latest(runId: string): Promise<RunView | undefined>;
  /** Runs, the most recently started first: the newest attempt of each run id unless `runId` is given. */
  list(query?: ListQuery): Promise<RunView[]>;
  /** Counts of runs (the newest attempt of each run id), by state and machine. */
  summary(query?: SummaryQuery): Promise<StoreSummary>;
  /** Remove at most `limit` records of ended runs last brought up to date before `before` (ms); how many went. */
  prune(before: number, limit: number): Promise<number>;
  /** Close the store. */
  close(): Promise<void>;
  /** Which attempt holds a run, and which process holds its runs. */
  readonly leases?: LeasesPort;
  /** Side effects' intents and receipts, across attempts. */
  readonly effects?: EffectsPort;
  /** Trees of runs that share a budget. */
  readonly trees?: TreesPort;
  /** The content of checkpoint files, for a store shared by machines. */
  readonly files?: FilesPort;
  /** The run journal: every model and tool call of an attempt, for a retry to replay. */
  readonly journal?: JournalPort;
  /** A graph framework's own checkpoints (LangGraph's), by thread and namespace. */
  readonly checkpoints?: CheckpointsPort;
  /** A framework's session transcripts (the Claude Agent SDK's, OpenAI Agents'), by scope and session. */
  readonly sessions?: SessionsPort;
  /** Statements sent so far, when the backend counts them (benchmarks). */
  readonly roundTrips?: number;
}

/** What opening a store of a backend needs. */
export interface BackendOptions {
  /** The URL the `store` setting gives (the backend reads its own parameters from it). */
  url: string;
  /** A heartbeat older than this many seconds means its process is gone. */
  hostTimeoutSeconds: number;
  /** The most file content kept per record, KiB (a store that keeps files). */
  fileMaxKb: number;
}

/**
 * A store backend: the one thing a backend's module exports (as `backend`)
 * beside its store. The store's bridge opens it on a thread of its own, by
 * importing `module`, so a backend over the network is this one module.
 */
export interface Backend {
  /** Which engine, as its stores say it. */
  readonly engine: string;
  /** The URL of the module that exports this as `backend` (its `import.meta.url`). */
  readonly module: string;
  /** Whether a `store` setting names a store of this backend. */
  accepts(url: string): boolean;
  /** Where the store a URL names is, to show: without its password. Throws on a URL it cannot read. */
  locate(url: string): string;
  /**
   * Open a store (it connects on first use). With `lease`, its connection
   * holds the process's lease, and `lease.lost` is told when it loses it.
   */
  open(options: BackendOptions, lease?: { host: HostId; lost(): void }): RunStore;
}

/** Leases: which attempt holds a run (fencing), which process holds its runs. */
export interface LeasesPort {
  /**
   * The records refused since the last call because their attempt lost the
   * run to a later one, each once.
   */
  takeFenced(): FencedRecord[];
  /** Whether this connection holds its process's lease (always, for a store with no server). */
  readonly held: boolean;
  /** Reach the store, and take this process's lease again when it was lost. */
  renew(): Promise<void>;
}

/** Side effects' intents and receipts ({@linkcode RunStore.effects}). */
export interface EffectsPort {
  /**
   * Write intents and receipts in one durable commit (an intent is kept
   * until its receipt; a receipt is never undone by a later intent).
   */
  write(batch: EffectBatch): Promise<void>;
  /** The effects recorded for a run id, every attempt's, the oldest first. */
  read(runId: string): Promise<EffectRow[]>;
}

/**
 * The run journal ({@linkcode RunStore.journal}): each attempt's model and
 * tool calls, their bodies kept once by content (compressed), removed with
 * the run's records.
 */
export interface JournalPort {
  /**
   * Write entries in one durable commit; an entry already there (the same
   * run, attempt, kind and index) is kept as it is.
   */
  write(batch: JournalBatch): Promise<void>;
  /** The entries of a run id, every attempt's: by attempt, then kind (model first), then index. */
  read(runId: string): Promise<JournalEntry[]>;
}

/**
 * A graph framework's own checkpoints ({@linkcode RunStore.checkpoints}):
 * LangGraph's, by thread and namespace, each channel value kept once per
 * version, bodies as the framework serialized them. They belong to threads,
 * not runs: a prune leaves them, and `deleteThread` removes them.
 */
export type CheckpointsPort = LedgerCheckpoints;

/**
 * A framework's session transcripts ({@linkcode RunStore.sessions}):
 * append-only entries of JSON text by scope, session and subpath. They belong
 * to sessions, not runs: a prune leaves them, and `delete` removes them.
 */
export type SessionsPort = LedgerSessions;

/** Trees of runs that share a budget ({@linkcode RunStore.trees}). */
export interface TreesPort {
  /**
   * The newest attempt of every run in a tree: the tree rooted at
   * `query.root`, or every tree; the most recently started first, at most
   * `query.limit` (1000 by default).
   */
  list(query?: TreeQuery): Promise<RunView[]>;
  /** The newest attempt of every run in the tree rooted at `root`, as the tree's seats read it. */
  read(root: string): Promise<TreeRow[]>;
  /** Record that a run sits in a tree. */
  join(runId: string, root: string, parent: string | undefined): Promise<void>;
  /**
   * Look at a tree and write the record `decide` makes of it, in one
   * transaction that holds the tree's lock, so that model calls of the tree
   * on any machine are admitted one at a time.
   */
  admit(
    root: string,
    decide: (rows: TreeRow[]) => Promise<RunRecord | undefined> | RunRecord | undefined,
  ): Promise<void>;
}

/** The content of checkpoint files ({@linkcode RunStore.files}). */
export interface FilesPort {
  /** Keep the content of runs' files (each run's newest attempt of `host`), bounded by the store. */
  write(host: HostId, files: { runId: string; content: string }[]): Promise<void>;
  /** The content kept for an attempt, when any. */
  read(runId: string, attempt: number): Promise<string | undefined>;
}

/** What {@linkcode runState} needs to know of where it is read. */
export interface Vantage {
  /** Now, ms since the epoch. */
  now: number;
  /** A heartbeat older than this many seconds means its process is gone. */
  hostTimeoutSeconds: number;
  /** This machine's name. */
  machine: string;
  /**
   * The start token of a process of this machine ({@linkcode HostId.start}),
   * `null` when no process of that pid runs, `undefined` when it cannot be told.
   */
  processStart(pid: number): string | null | undefined;
}

/**
 * Whether a run is live, ended or cut off, from its record and its process's
 * heartbeat. A run that ended is never cut off. A live record is cut off when
 * its process is gone: when the store says its lease is `free` (the fleet
 * store: the server saw its connection end), at once, on every machine; on
 * the same machine, its pid no longer runs with the same start time; from
 * anywhere else, its heartbeat (or, without one, the record itself) is older
 * than `hostTimeoutSeconds`. On its own machine, a process that still runs
 * (same pid and start time) keeps its runs live. Pure: where it is read comes in as `vantage`.
 *
 * @param record The run's record.
 * @param heartbeat Its process's heartbeat, when known.
 * @param vantage Now, the timeout, and this machine.
 * @param lease Whether its process still holds its lease, when the store can tell.
 * @returns `live`, `ended` or `cut-off`.
 *
 * @example
 * ```ts
 * import { type RunRecord, runState } from "./types.ts";
 * import assert from "node:assert/strict";
 *
 * const host = { machine: "m1", pid: 42, start: "boot/100" };
 * const record = { status: "live", host, updatedAt: 1_000 } as RunRecord;
 * const vantage = {
 *   now: 5_000,
 *   hostTimeoutSeconds: 30,
 *   machine: "m2",
 *   processStart: () => undefined,
 * };
 * assert.equal(runState(record, { host, at: 4_000, intervalSeconds: 1 }, vantage), "live");
 * assert.equal(runState(record, { host, at: 4_000, intervalSeconds: 1 }, { ...vantage, now: 40_000 }), "cut-off");
 * // On its own machine: the pid runs no more.
 * assert.equal(
 *   runState(record, { host, at: 4_000, intervalSeconds: 1 }, { ...vantage, machine: "m1", processStart: () => null }),
 *   "cut-off",
 * );
 * // On its own machine, running still: live, however old its heartbeat.
 * assert.equal(
 *   runState(record, undefined, { ...vantage, now: 40_000, machine: "m1", processStart: () => "boot/100" }),
 *   "live",
 * );
 * assert.equal(runState({ ...record, status: "done" }, undefined, vantage), "ended");
 * // Its lease is free: the store's server saw its process go.
 * assert.equal(runState(record, { host, at: 4_000, intervalSeconds: 1 }, vantage, "free"), "cut-off");
 * ```
 */
export function runState(
  record: Pick<RunRecord, "status" | "host" | "updatedAt">,
  heartbeat: Heartbeat | undefined,
  vantage: Vantage,
  lease?: LeaseState,
): RunState {
  if (record.status !== "live") return "ended";
  // Its process's lease is gone (the store's server saw its connection end): at once.
  if (lease === "free") return "cut-off";
  const host = record.host;
  if (host.machine === vantage.machine && host.pid > 0) {
    const start = vantage.processStart(host.pid);
    if (start === null) return "cut-off";
    if (start !== undefined && host.start !== "" && start !== host.start) return "cut-off";
    // Its process runs (the same pid, started at the same moment): live, however old its
    // heartbeat. A busy machine can delay its watchdog's first commit or its next one past the
    // timeout, and a run read as cut off while it runs invites a second attempt.
    if (start !== undefined && host.start !== "" && start === host.start) return "live";
  }
  const seen = Math.max(heartbeat?.at ?? 0, record.updatedAt);
  return vantage.now - seen > vantage.hostTimeoutSeconds * 1000 ? "cut-off" : "live";
}

/** What opening a store needs. */
export interface StoreOptions {
  /** The profile directory: the embedded store is `<home>/agent-checkpoint/runs.db`. */
  home: string;
  /** The settings in force (`host_timeout_seconds`, and the store's own). */
  settings: { host_timeout_seconds: number } & Record<string, unknown>;
  /** Where the store's log lines go. */
  log?: (level: "info" | "warn" | "error", message: string) => void;
}
