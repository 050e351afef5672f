/**
 * What a part of a run gets from its run, and what the run's hooks tell it.
 * A run (`Run`, in run.ts) is a thin handle: its hooks stay on it,
 * and each concern is a part with its own state (effects, budget, time,
 * workspace, journal) that imports this module, never run.ts. Adding a part: a class
 * that takes a {@linkcode RunHost}, has the methods of {@linkcode RunPart} for what
 * it wants to hear, and calls `host.engage(this)` once it has state to look
 * after; the hooks then notify it.
 *
 * Also here: what stops a run ({@linkcode StopReason}), with the error an
 * enforced cap gives.
 *
 * @module
 */
import type { Log } from "../log.ts";
import type { Settings } from "../settings.ts";
import type { RunTable } from "../_run_table.ts";
import type { TierPlan, TierPlans } from "../tier.ts";
import type { TreeSeats } from "../_tree.ts";
import type { EffectIntent, EffectReceipt, EffectRow, JournalEntry } from "../_ledger.ts";
import type { CheckpointWriter, RunInfo } from "../_writer.ts";
import type { Axis, RecordSource, RunCaps } from "../_record.ts";

/** What a part reads of the context its run shares with the runs of one run table. @internal */
export interface PartContext {
  readonly shared: RunTable;
  readonly writer: CheckpointWriter;
  readonly log: Log;
  /** The settings' version, which changes when they are reloaded. */
  readonly version: number;
  readonly plans: TierPlans;
  /** Models whose price was said to be unknown (one log line each). */
  readonly unknownPrices: Set<string>;
  readonly trees: TreeSeats | undefined;
  readonly effects: EffectSink | undefined;
  readonly journal: JournalSink | undefined;
  readonly workspaces: WorkspaceHooks | undefined;
  /** The settings in force. */
  at(now: number): Settings;
  /** A hook saw these settings: the watchdog starts when they want it. */
  contact(settings: Settings): void;
  /** The run's description, for the watchdog. */
  publish(info: RunInfo): void;
}

/** How a tool call ended, as `postToolCall` tells the run's engaged parts. @internal */
export interface ToolEnd {
  tool: string;
  callId: string | undefined;
  /** Its sequence number in shared memory; -1 when unknown. */
  seq: number;
  ok: boolean | undefined;
  error: unknown;
  result: unknown;
}

/**
 * A part of a run, as its hooks notify it once it is engaged (`host.engage`):
 * each method optional. @internal
 */
export interface RunPart {
  /** A tool call ended (whether or not the settings are enabled: `settings.enabled` says). */
  toolEnd?(ctx: PartContext, settings: Settings, end: ToolEnd): void;
  /** The run ends: let go of timers and seats. `ctx` is undefined when the run lost its slot. */
  ended?(ctx: PartContext | undefined): void;
}

/** What a part gets from its run: its description, its guard, its record. @internal */
export interface RunHost {
  /** The run's description, as the watchdog and the writer read it. */
  readonly info: RunInfo;
  readonly runId: string;
  readonly caps: RunCaps;
  readonly attempt: number;
  /** True once `end()` was called. */
  readonly ended: boolean;
  /** Sequence numbers of the tool calls in flight, by call id. */
  readonly calls: Map<string, number> | undefined;
  /** The context of a run still holding its slot. */
  live(): PartContext | undefined;
  /** The guard and liveness: any throw becomes a log line and `neutral`. */
  guard<T>(name: string, neutral: T, body: (ctx: PartContext) => T): T;
  /** The guard alone. */
  safe<T>(name: string, neutral: T, body: () => T): T;
  /** A hook's failure, as a log line. */
  fail(hook: string, error: unknown): void;
  log(level: "info" | "warn" | "error", message: string): void;
  /** Seconds since the run started. */
  elapsed(ctx: PartContext, now: number): number;
  /** The run's tier plan for the settings in force. */
  planFor(ctx: PartContext, settings: Settings): TierPlan;
  /** The mid-run surface: persist a due tier once, whichever surface sees it first. */
  midRun(
    ctx: PartContext,
    settings: Settings,
    tier: 1 | 2,
    now: number,
    source: RecordSource,
  ): void;
  /** Stop the run: `run.signal` aborts with `abort`, and `run.stopReason` says why (the first stop). */
  stop(reason: StopReason, abort: DOMException): void;
  /** `run.signal`. */
  signal(): AbortSignal;
  /** From now on the hooks notify `part` (once per part). */
  engage(part: RunPart): void;
}

/**
 * Why a run stopped, as `run.stopReason` says: an enforced cap
 * (the error an adapter throws for it), or the run's deadline (the time cap
 * plus `deadline_grace_seconds`), at that many seconds into the run.
 */
export type StopReason =
  | { kind: "budget"; error: BudgetExceededError }
  | { kind: "deadline"; atSeconds: number };

/** Where a run's intents and receipts go: the run ledger's effect log. @internal */
export interface EffectSink {
  /** Resolves true once the intent is committed, false when it could not be (and the log says so). */
  intent(intent: EffectIntent): Promise<boolean>;
  /** The same for a receipt. */
  receipt(receipt: EffectReceipt): Promise<boolean>;
  /** The effects recorded for a run id; undefined when they cannot be read. */
  read(runId: string): Promise<EffectRow[] | undefined>;
  /** Record the run's progress now (its turns, spend and time), ahead of an intent. */
  progress?(info: RunInfo): void;
}

/** Where a run's journal goes: the run ledger's, through the same commits as its effects. @internal */
export interface JournalSink {
  /** Resolves true once the entry is committed, false when it could not be (and the log says so). */
  write(entry: JournalEntry): Promise<boolean>;
  /** The journal of a run id, every attempt's; undefined when it cannot be read. */
  read(runId: string): Promise<JournalEntry[] | undefined>;
}

/** What a run calls of the working-tree snapshots (S19). @internal */
export interface WorkspaceHooks {
  beforeWrite(
    dir: string,
    turn: number,
    paths?: string[],
    runId?: string,
  ): unknown;
  beforeTool(
    dir: string,
    turn: number,
    tool: string,
    input: unknown,
    options: { callId?: string; runId?: string },
  ): unknown;
  /** A snapshot now, whatever the turn; an unchanged tree gives the newest one. */
  snapshot(dir: string, reason: string, runId?: string): WorkspaceRef | undefined;
  afterTool(
    dir: string,
    tool: string,
    options: { ok?: boolean; callId?: string; runId?: string },
  ): void;
  afterWrite(dir: string, paths: string[], runId?: string): void;
}

/** A working-tree snapshot, as a record names it. @internal */
export interface WorkspaceRef {
  snapshot: string;
  project: string;
}

/** A run's use when an enforced cap stopped it: its turns, tokens and (when known) dollars. */
export interface BudgetTotals {
  /** Model calls made. */
  turns: number;
  /** Input tokens. */
  inputTokens: number;
  /** Output tokens. */
  outputTokens: number;
  /** US dollars; absent when no cost was known. */
  usd?: number;
}

/**
 * What every adapter throws (or a stream rejects with) when an axis named in
 * the `enforce` setting passed its cap and stopped the run: the same class in
 * every framework, streamed or not. The run has ended `capped` by then; the
 * framework's own error (an abort) is the `cause`.
 *
 * @example Telling a capped run from a failed one
 * ```ts
 * import { BudgetExceededError } from "../mod.ts";
 * import assert from "node:assert/strict";
 *
 * const error: unknown = new BudgetExceededError({
 *   runId: "r1",
 *   axis: "usd",
 *   cap: 1,
 *   used: 1.2,
 *   capRunId: "r1",
 *   totals: { turns: 4, inputTokens: 400, outputTokens: 80, usd: 1.2 },
 * });
 * if (error instanceof BudgetExceededError) {
 *   assert.equal(error.axis, "usd");
 *   assert.equal(error.totals.turns, 4);
 *   assert.match(error.message, /enforced usd cap of 1 is passed/);
 * }
 * ```
 */
export class BudgetExceededError extends Error {
  /** The run it stopped. */
  readonly runId: string;
  /** The axis whose cap was passed. */
  readonly axis: Axis;
  /** That cap. */
  readonly cap: number;
  /** What was used against it (the tree's total when the cap is an ancestor's). */
  readonly used: number;
  /** The run whose cap it is: this run, or an ancestor in its tree. */
  readonly capRunId: string;
  /** The run's own use when it stopped. */
  readonly totals: BudgetTotals;
  /** The framework's steps (or messages) so far, where it has them: the AI SDK's `steps`. */
  readonly steps?: unknown[];

  /**
   * The error for a run an enforced cap stopped (adapters make it with the run's figures).
   *
   * @param details What stopped the run, and its totals.
   * @param options The framework's own error as `cause`.
   */
  constructor(
    details: {
      runId: string;
      axis: Axis;
      cap: number;
      used: number;
      capRunId: string;
      totals: BudgetTotals;
      steps?: unknown[];
    },
    options?: { cause?: unknown },
  ) {
    super(
      `The run's enforced ${details.axis} cap of ${details.cap} is passed (${details.used} used${
        details.capRunId === details.runId ? "" : ` in the tree of ${details.capRunId}`
      }): the run was stopped`,
      options,
    );
    this.name = "BudgetExceededError";
    this.runId = details.runId;
    this.axis = details.axis;
    this.cap = details.cap;
    this.used = details.used;
    this.capRunId = details.capRunId;
    this.totals = details.totals;
    if (details.steps !== undefined) this.steps = details.steps;
  }

  /**
   * The `BudgetExceededError` in `error` or its chain of causes: a framework
   * that wraps what its hooks throw (LangChain's `createAgent` throws a
   * `MiddlewareError` whose `cause` is it) still tells a capped run apart.
   *
   * @param error What the framework threw.
   * @returns The error, or undefined when no enforced cap stopped the run.
   *
   * @example
   * ```ts
   * import { BudgetExceededError } from "../mod.ts";
   * import assert from "node:assert/strict";
   *
   * const capped = new BudgetExceededError({
   *   runId: "r1",
   *   axis: "tokens",
   *   cap: 1000,
   *   used: 1200,
   *   capRunId: "r1",
   *   totals: { turns: 2, inputTokens: 1000, outputTokens: 200 },
   * });
   * const wrapped = new Error("wrapped by the framework", { cause: capped });
   * assert.equal(BudgetExceededError.of(wrapped), capped);
   * assert.equal(BudgetExceededError.of(new Error("other")), undefined);
   * ```
   */
  static of(error: unknown): BudgetExceededError | undefined {
    let e = error;
    for (let depth = 0; depth < 8 && e !== null && typeof e === "object"; depth++) {
      if (e instanceof BudgetExceededError) return e;
      e = (e as { cause?: unknown }).cause;
    }
    return undefined;
  }
}
