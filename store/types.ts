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
import type { EndStatus, RunCaps, ToolCall, TreeRecord, UsageTotals } from "../_record.ts";

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
 * bounded: at most {@linkcode RECORD_RECENT} finished calls, the notes as in
 * the checkpoint file, and a file content of at most `store_file_max_kb`.
 */
export interface RunRecord {
  /** The run's id (the kanban task id, or the session id). */
  runId: string;
  /** 1 for a fresh run, n for the n-th attempt of a resumed one. */
  attempt: number;
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
  /** The checkpoint file, when the run has one (it may not exist yet). */
  checkpointFile?: string;
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

/** The most finished tool calls a record keeps. */
export const RECORD_RECENT = 8;

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

/** A run as read back: its newest record, its process's heartbeat, and its state now. */
export interface RunView {
  /** The record. */
  record: RunRecord;
  /** The heartbeat of the record's process, when the store has it. */
  heartbeat?: Heartbeat;
  /** Live, ended or cut off, decided when read. */
  state: RunState;
}

/** What {@linkcode RunStore.startAttempt} gives the new attempt. */
export interface AttemptStart {
  /** The attempt number the store gave it: distinct even for concurrent starts. */
  attempt: number;
  /** The newest earlier record of the run id, when there was one. */
  previous?: RunView;
}

/** Live, ended or cut off. */
export type RunState = "live" | "ended" | "cut-off";

/** The states a listing can be filtered by. */
export const RUN_STATES: readonly RunState[] = ["live", "ended", "cut-off"];

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
 * A run store: the ledger of every run's newest state. The embedded backend
 * is a SQLite database in the home; a PostgreSQL backend implements the same
 * interface. Every method may reject (a locked, corrupt, read-only or full
 * store): the caller reports it and carries on.
 */
export interface RunStore {
  /** Which engine: `sqlite` or `postgres`. */
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
  startAttempt(record: RunRecord, options?: { minAttempt?: number }): Promise<AttemptStart>;
  /** The newest record of a run id, or undefined. */
  latest(runId: string): Promise<RunView | undefined>;
  /** Runs, the most recently started first: the newest attempt of each run id unless `runId` is given. */
  list(query?: ListQuery): Promise<RunView[]>;
  /** Counts of runs (the newest attempt of each run id), by state and machine. */
  summary(query?: SummaryQuery): Promise<StoreSummary>;
  /**
   * Write intents and receipts in one durable commit (an intent is kept
   * until its receipt; a receipt is never undone by a later intent).
   */
  writeEffects(batch: EffectBatch): Promise<void>;
  /** The effects recorded for a run id, every attempt's, the oldest first. */
  effects(runId: string): Promise<EffectRow[]>;
  /** Remove at most `limit` records of ended runs last brought up to date before `before` (ms); how many went. */
  prune(before: number, limit: number): Promise<number>;
  /** Close the store. */
  close(): Promise<void>;
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
 * its process is gone: on the same machine, its pid no longer runs with the
 * same start time; from anywhere, its heartbeat (or, without one, the record
 * itself) is older than `hostTimeoutSeconds`. Pure: where it is read comes in
 * as `vantage`.
 *
 * @param record The run's record.
 * @param heartbeat Its process's heartbeat, when known.
 * @param vantage Now, the timeout, and this machine.
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
 * assert.equal(runState({ ...record, status: "done" }, undefined, vantage), "ended");
 * ```
 */
export function runState(
  record: Pick<RunRecord, "status" | "host" | "updatedAt">,
  heartbeat: Heartbeat | undefined,
  vantage: Vantage,
): RunState {
  if (record.status !== "live") return "ended";
  const host = record.host;
  if (host.machine === vantage.machine && host.pid > 0) {
    const start = vantage.processStart(host.pid);
    if (start === null) return "cut-off";
    if (start !== undefined && host.start !== "" && start !== host.start) return "cut-off";
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
