/**
 * One run's hooks (S6, S13, S15, S16, S18), and the context the runs of one
 * run table share. Every hook is a boundary where the host calls in, so all go
 * through one wrapper (`#hook`): any error becomes a log line and the hook's
 * neutral result. A hook's path to the file is short: the run reads its
 * settings and figures from its context ({@linkcode RunContext}, handed to it
 * once instead of asked of its keeper on every hook: the shared table, the
 * writer, the log, the settings in force with their version, the tool ids,
 * and the working-tree snapshots when the settings turn them on; it follows
 * `config.yaml` itself, a stat at most once per poll interval) and shared
 * memory, and hands a due record to the one checkpoint writer.
 *
 * @module
 */
import { existsSync } from "node:fs";
import { createHash } from "node:crypto";
import { longTimeout, type LongTimer } from "./_timer.ts";
import { errorText, type Log } from "./log.ts";
import {
  type BudgetStop,
  END_STATUSES,
  type EndStatus,
  type RecordKind,
  type RecordSource,
  type RunCaps,
  type TreeRecord,
  type UsageTotals,
} from "./_record.ts";
import { budgetValue, type ModelPrice, type Settings } from "./settings.ts";
import type { SettingsReading, SettingsSource } from "./config.ts";
import { MAX_NAME_BYTES, nowMs, type RunTable } from "./_run_table.ts";
import { renderTemplate, withoutSentencesNaming } from "./template.ts";
import { fireTier, type Tier, tierFor, type TierPlan, TierPlans } from "./tier.ts";
import { passedCap, type TreeRow, type TreeSeat, type TreeSeats, type TreeUse } from "./_tree.ts";
import type { EffectIntent, EffectReceipt, EffectRow } from "./_ledger.ts";
import {
  type CheckpointEvent,
  type CheckpointWriter,
  encodeRunInfo,
  MAX_NOTES,
  type PersistEvent,
  type RunInfo,
  templateValues,
  tierMessage,
  usageTotals,
} from "./_writer.ts";
import { FILE_LOCK_WAIT_MS } from "./_write_steps.ts";

/**
 * The earlier attempt of a resumed run, as the run ledger recorded it (where
 * it was when it stopped), else as its checkpoint file did (S16).
 */
export interface PreviousAttempt {
  /** Its attempt number. */
  attempt: number;
  /** Why its last checkpoint was written; `progress` when it wrote no checkpoint file. */
  kind: RecordKind | "progress";
  /** The budget tier it had reached. */
  tier: number;
  /** Who wrote its last checkpoint; `ledger` when it wrote no checkpoint file. */
  source: RecordSource | "ledger";
  /** Model calls it had made. */
  turnsUsed: number;
  /** Seconds it had run. */
  elapsedSeconds: number;
  /** Its caps. */
  caps: RunCaps;
  /** The model use it reported (tokens, and dollars when known), when it reported any. */
  usage?: UsageTotals;
  /** When its last checkpoint was written, ISO 8601. */
  persistedAt: string;
  /** How it ended, when it ended at all; undefined when it was cut off. */
  endStatus?: EndStatus;
  /** Whether the agent's own text in the file says INCOMPLETE. */
  incomplete: boolean;
  /** One line saying where it got to. */
  summary: string;
  /** From the run ledger: `live` (another process still runs it), `cut-off`, or how it ended. */
  status?: "live" | "cut-off" | EndStatus;
  /**
   * From the run ledger: where it ran, the machine and the process id. As text (`${host}`) it
   * reads `machine (pid N)`; `JSON.stringify` gives `{ machine, pid }`.
   */
  host?: AttemptHost;
  /** From the run ledger: the tool calls in flight when it stopped, whose outcome is unknown. */
  inFlight?: { tool: string; callId?: string; runningSeconds: number; timedOut?: boolean }[];
}

/**
 * Where an earlier attempt ran: its machine and process id, as the run ledger
 * recorded them. `String(host)` reads `machine (pid N)`.
 *
 * @example
 * ```ts
 * import { attemptHost } from "./run.ts";
 * import assert from "node:assert/strict";
 *
 * const host = attemptHost("ci-7", 4121);
 * assert.equal(`${host}`, "ci-7 (pid 4121)");
 * assert.deepEqual(JSON.parse(JSON.stringify(host)), { machine: "ci-7", pid: 4121 });
 * ```
 */
export interface AttemptHost {
  /** The machine's name. */
  machine: string;
  /** The process id on that machine. */
  pid: number;
  /** `machine (pid N)`. */
  toString(): string;
}

/**
 * An {@link AttemptHost}: `{ machine, pid }` with a `toString()` of its own
 * that JSON and `deepEqual` do not see (it is not enumerable). @internal
 *
 * @example
 * ```ts
 * import { attemptHost } from "./run.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(String(attemptHost("m", 1)), "m (pid 1)");
 * ```
 */
export function attemptHost(machine: string, pid: number): AttemptHost {
  const host = { machine, pid } as AttemptHost;
  Object.defineProperty(host, "toString", {
    value: function (this: AttemptHost) {
      return `${this.machine} (pid ${this.pid})`;
    },
  });
  return host;
}

/**
 * Why a start was refused (setting `on_duplicate: refuse`): another attempt
 * of the run id is live and holds the run.
 */
export interface RefusedStart {
  /** The attempt that holds the run. */
  attempt: number;
  /** Where it runs: `String(host)` reads `machine (pid N)`. */
  host: AttemptHost;
  /** The line the log got: who holds the run, and that this start does nothing. */
  reason: string;
}

/** What a run starts with besides its context. @internal */
export interface RunStart {
  info: RunInfo;
  attempt: number;
  /** The run's working tree. */
  workspace?: string;
  previous?: PreviousAttempt;
  /** Sentences the resume text adds (calls of unknown outcome, a shrunk budget). */
  resumeNote?: string;
  /** Its seat in a tree of runs sharing a budget. */
  tree?: TreeSeat;
  /** The run's span, when a tracer listens. */
  trace?: RunTrace;
  /** True when the earlier attempt left no checkpoint file: the resume text names none. */
  noFile?: true;
  /** The start was refused: the run's hooks do nothing. */
  refused?: RefusedStart;
  /** The earlier attempts' effects, when the start read them (else read when first asked for). */
  effects?: EffectRow[];
}

const MAX_NOTE = 2000;
/** How long `end()` waits for a watchdog write in flight before it writes the end. */
const END_WAIT_MS = 5000;
/** Call ids remembered for calls still in flight. */
const MAX_OPEN_CALLS = 64;
/**
 * How long a signal waits for the record the watchdog claimed (`tool_timeout`,
 * `deadline`) before it aborts: the watchdog's write may wait FILE_LOCK_WAIT_MS
 * for the file's lock; thrice that leaves room for a busy machine.
 */
const SETTLE_MS = 3 * FILE_LOCK_WAIT_MS;
const MAX_ERROR = 500;
const fileExists = (file: string) => {
  try {
    return file !== "" && existsSync(file);
  } catch {
    // a path that cannot be checked is taken as gone: no end record committed into it
    return false;
  }
};
/** A deadline signal that never aborts, for runs without a time cap. */
const NEVER = new AbortController().signal;

/** One model call's use, as {@linkcode Run.usage} takes it. */
export interface UsageReport {
  /** Input (prompt) tokens of the call. */
  inputTokens?: number;
  /** Output (completion) tokens of the call. */
  outputTokens?: number;
  /** The call's cost in US dollars, when the framework gives one. */
  usd?: number;
  /** The model called, for the `prices` setting. @default {the model given to startRun} */
  model?: string;
  /**
   * The run's whole cost so far in US dollars, when the framework counts it
   * (the Claude Agent SDK's `total_cost_usd`): it replaces the run's sum.
   */
  totalUsd?: number;
}

/** A whole number of tokens ≥ 0 from what a host reported; anything else counts as 0. */
const tokenCount = (n: unknown): number =>
  typeof n === "number" && Number.isFinite(n) && n > 0 ? Math.floor(n) : 0;

/**
 * A model's price in the `prices` setting: its own entry, else the longest
 * name that begins the model's (`gpt-4o` prices `gpt-4o-2024-08-06`).
 */
function priceOf(prices: Record<string, ModelPrice>, model: string): ModelPrice | undefined {
  if (Object.hasOwn(prices, model)) return prices[model];
  let best: string | undefined;
  for (const name of Object.keys(prices)) {
    if (model.startsWith(name) && (best === undefined || name.length > best.length)) best = name;
  }
  return best === undefined ? undefined : prices[best];
}

/** A tool call whose deadline the main thread keeps. */
interface ToolTimer {
  timer: LongTimer;
  tool: string;
  callId: string | undefined;
  startedAt: number;
  timeoutSeconds: number;
}

/**
 * What an earlier attempt (or this one) recorded of a side effect, by its
 * key: `done`, with the receipt (`ok`, and the `result` as recorded: the
 * value's JSON read back, or, when the receipt cut it to
 * `effect_result_max_bytes`, the cut text with `truncated: true`), or
 * `unknown`: an intent without a receipt, the call started and its outcome
 * is not known.
 */
export type EffectState =
  | {
    state: "done";
    /** Whether the call succeeded. */
    ok: boolean;
    /** The result recorded (a failed call: its error's text). */
    result: unknown;
    /** True when the result was cut to `effect_result_max_bytes`: `result` is then the cut JSON text. */
    truncated?: true;
    /** The tool. */
    tool: string;
    /** The attempt whose receipt it is. */
    attempt: number;
  }
  | {
    state: "unknown";
    /** The tool. */
    tool: string;
    /** The attempt whose intent it is. */
    attempt: number;
  };

/** Where a run's intents and receipts go: the run ledger's effect log. @internal */
export interface EffectSink {
  /** Resolves true once the intent is committed, false when it could not be (and the log says so). */
  intent(intent: EffectIntent): Promise<boolean>;
  /** The same for a receipt. */
  receipt(receipt: EffectReceipt): Promise<boolean>;
  /** The effects recorded for a run id; undefined when they cannot be read. */
  read(runId: string): Promise<EffectRow[] | undefined>;
}

/**
 * A value as canonical JSON: object keys sorted, at every depth; what JSON
 * leaves out (undefined, functions, symbols) left out; `toJSON` honoured; a
 * bigint as its decimal text; a cycle as `"[Circular]"`. Two inputs equal
 * as data give the same text. @internal
 *
 * @example
 * ```ts
 * import { canonicalJson } from "./run.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(canonicalJson({ b: 1, a: [2, { d: 3, c: undefined }] }), '{"a":[2,{"d":3}],"b":1}');
 * assert.equal(canonicalJson({ a: 1, b: 2 }), canonicalJson({ b: 2, a: 1 }));
 * ```
 */
export function canonicalJson(value: unknown): string {
  const seen = new Set<object>();
  const walk = (v: unknown, inArray: boolean): string | undefined => {
    if (
      v !== null && typeof v === "object" &&
      typeof (v as { toJSON?: unknown }).toJSON === "function"
    ) {
      v = (v as { toJSON: () => unknown }).toJSON();
    }
    switch (typeof v) {
      case "string":
      case "boolean":
        return JSON.stringify(v);
      case "number":
        return Number.isFinite(v) ? JSON.stringify(v) : "null";
      case "bigint":
        return JSON.stringify(v.toString());
      case "undefined":
      case "function":
      case "symbol":
        return inArray ? "null" : undefined;
    }
    if (v === null) return "null";
    const o = v as object;
    if (seen.has(o)) return JSON.stringify("[Circular]");
    seen.add(o);
    let out: string;
    if (Array.isArray(o)) out = `[${o.map((x) => walk(x, true)).join(",")}]`;
    else {
      const parts: string[] = [];
      for (const k of Object.keys(o).sort()) {
        const text = walk((o as Record<string, unknown>)[k], false);
        if (text !== undefined) parts.push(`${JSON.stringify(k)}:${text}`);
      }
      out = `{${parts.join(",")}}`;
    }
    seen.delete(o);
    return out;
  };
  return walk(value, false) ?? "null";
}

/** How long after a failed read of the earlier attempts' effects it is tried again, ms. */
const EFFECTS_READ_RETRY_MS = 30_000;

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

/** A run's effects: what the ledger holds of them, and this attempt's own on their way. */
class RunEffects {
  /** Every effect known, by key: the earlier attempts' (from the ledger) and this attempt's own. */
  readonly known = new Map<string, EffectRow>();
  /** Whether the earlier attempts' effects are in `known`. */
  loaded = false;
  loading: Promise<void> | undefined = undefined;
  /** When a failed read of them may be tried again, ms (`nowMs`). */
  retryAt = 0;
  /** This attempt's intents without a receipt yet, by key. */
  readonly pending = new Map<string, Promise<boolean>>();
  /** The keys of calls whose intent a tool hook recorded, by call id. */
  readonly byCall = new Map<string, string>();
  /** The same for calls without a call id, by tool, the oldest first. */
  readonly byTool = new Map<string, string[]>();
  /** A result was cut to the bound: said once per run. */
  saidCut = false;
  /** The `once` calls under way, by key: a second call of the same key waits for the first. */
  readonly running = new Map<string, Promise<unknown>>();
}

/** A result as a receipt keeps it: its JSON, cut to `max` bytes (UTF-8) when longer. */
function receiptText(
  value: unknown,
  max: number,
): { text?: string; truncated?: true; bytes: number } {
  let text: string | undefined;
  try {
    text = value === undefined ? undefined : JSON.stringify(value);
  } catch {
    text = JSON.stringify(String(value));
  }
  if (text === undefined) return { bytes: 0 };
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= max) return { text, bytes: bytes.length };
  const cut = new TextDecoder().decode(bytes.slice(0, max)).replace(/\uFFFD$/, "");
  return { text: cut, truncated: true, bytes: bytes.length };
}

/** What a receipt says, as {@linkcode Run.effect} gives it. */
function stateOf(row: EffectRow | undefined): EffectState | undefined {
  if (!row) return undefined;
  const r = row.receipt;
  if (!r) return { state: "unknown", tool: row.tool, attempt: row.attempt };
  let result: unknown = r.result;
  if (r.result !== undefined && !r.truncated) {
    try {
      result = JSON.parse(r.result);
    } catch { /* kept as the text it is */ }
  }
  const out: EffectState = { state: "done", ok: r.ok, result, tool: row.tool, attempt: r.attempt };
  if (r.truncated) out.truncated = true;
  return out;
}

/** What a run needs only once it asks for a deadline, times a tool call or is priced. */
class RunExtras {
  deadline: AbortController | undefined = undefined;
  deadlineTimer: LongTimer | undefined = undefined;
  /** Main-thread timers of the tool calls with a deadline, by sequence number. */
  toolTimers: Map<number, ToolTimer> | undefined = undefined;
  /** The signals handed out by {@linkcode Run.toolSignal}, by call id. */
  toolSignals: Map<string, AbortController> | undefined = undefined;
  /** The price in force for the run's model, by model name, for one settings version. */
  prices: Map<string, ModelPrice | undefined> | undefined = undefined;
  pricesVersion = -1;
  /** The run's seat in a tree of runs that share a budget. */
  tree: TreeSeat | undefined = undefined;
  /** The budget signal's controller, made when it is first asked for or at the stop. */
  budget: AbortController | undefined = undefined;
  /** The enforced cap that stopped the run, once one did. */
  stopped: BudgetStop | undefined = undefined;
  budgetTimer: LongTimer | undefined = undefined;
  /** Its side effects, once it records or asks for one. */
  effects: RunEffects | undefined = undefined;
}

/**
 * A run: one conversation run or task. Created by
 * {@linkcode AgentCheckpoint.startRun}; the host calls its hooks.
 */
export class Run {
  /** The earlier attempt of a resumed run, as its checkpoint recorded it; else undefined. */
  readonly previous: PreviousAttempt | undefined;
  /** 1 for a fresh run; a resumed run is the earlier attempt's number + 1. */
  readonly attempt: number;
  /**
   * Set when the start was refused (setting `on_duplicate: refuse`): another
   * live attempt holds the run id, and it names that attempt. The run's hooks
   * then do nothing and write nothing; the host should not do the work.
   */
  readonly refused: RefusedStart | undefined;

  // A run's own fields, kept few: every live run holds them (the run id, caps and file are read
  // from its description), and what only some runs need waits in #extras until one does.
  readonly #context: RunContext | undefined;
  readonly #info: RunInfo;
  #plan: TierPlan | undefined;
  #planVersion = -1;
  #prologue = 0;
  /** The resumed run's note until its resume text has gone out; `false` once it has, or for a fresh run. */
  #resume: { note: string | undefined; noFile: boolean } | false;
  /** Sequence numbers of the tool calls in flight, by call id, made on first use. */
  #calls: Map<string, number> | undefined;
  #ended = false;
  readonly #workspace: string;
  #extras: RunExtras | undefined;
  /** The run's span, when a tracer listens (else one undefined field read per tool hook). */
  readonly #trace: RunTrace | undefined;

  /** @internal */
  constructor(ctx: RunContext | undefined, start: RunStart) {
    this.#context = ctx;
    this.#info = start.info;
    this.attempt = start.attempt;
    this.previous = start.previous;
    this.refused = start.refused;
    this.#resume = start.previous !== undefined &&
      { note: start.resumeNote, noFile: start.noFile === true };
    this.#workspace = start.workspace ?? "";
    this.#trace = start.trace;
    if (start.effects) {
      const fx = this.#more.effects = new RunEffects();
      for (const row of start.effects) fx.known.set(row.key, row);
      fx.loaded = true;
    }
    if (start.tree) {
      this.#more.tree = start.tree;
      if (ctx) this.#seatIn(ctx, start.tree);
    }
  }

  /** @internal Whether the settings enforce a cap: adapters then hand the budget signal on. */
  get budgetEnforced(): boolean {
    return this.#guard("budgetEnforced", false, (ctx) => ctx.at(nowMs()).enforce.length !== 0);
  }

  /** @internal Whether an enforced cap stopped the run. */
  get budgetStopped(): boolean {
    return this.#extras?.stopped !== undefined;
  }

  /** @internal Its seat in a tree of runs, for the keeper that starts a child of it. */
  get treeSeat(): TreeSeat | undefined {
    return this.#extras?.tree;
  }

  /** @internal The run becomes the parent (or root) of a tree: its seat there. */
  joinTree(seat: TreeSeat): void {
    this.#guard("joinTree", undefined, (ctx) => {
      this.#more.tree = seat;
      this.#info.tree = seat.place;
      ctx.publish(this.#info);
      this.#seatIn(ctx, seat);
      // What it used before it had children counts from now on, in every process of the tree.
      seat.push?.(this.#info);
    });
  }

  /** Take the run's place in its tree: its use read from shared memory, its stop by a relative. */
  #seatIn(ctx: RunContext, seat: TreeSeat): void {
    const slot = this.#info.slot;
    seat.tree.join(
      this.runId,
      seat.place.parent,
      this.caps,
      () => ({
        turns: ctx.shared.turns(slot),
        tokens: ctx.shared.tokens(slot),
        usd: ctx.shared.usd(slot),
      }),
      (stop) =>
        this.#guard("budget", undefined, (c) => {
          const now = nowMs();
          this.#stop(c, c.at(now), now, "host", stop);
        }),
    );
  }

  /**
   * The environment for a child process whose runs count toward this run's
   * budget: a library there makes each run it starts a child of this one.
   *
   * @returns `AGENT_CHECKPOINT_PARENT` (this run's id) and `AGENT_CHECKPOINT_TREE` (its tree's root).
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "lead", caps: { usd: 1 } });
   * assert.deepEqual(run.childEnv(), {
   *   AGENT_CHECKPOINT_PARENT: "lead",
   *   AGENT_CHECKPOINT_TREE: "lead",
   * });
   * await ac.close();
   * ```
   */
  childEnv(): Record<string, string> {
    // The run counts its children's use from now on: it takes a seat in a tree (its own root).
    if (this.#extras?.tree === undefined) {
      this.#guard("childEnv", undefined, (ctx) => {
        const seat = ctx.trees?.seat(this.runId, { root: this.runId });
        if (seat) this.joinTree(seat);
      });
    }
    return {
      AGENT_CHECKPOINT_PARENT: this.runId,
      AGENT_CHECKPOINT_TREE: this.#extras?.tree?.place.root ?? this.runId,
    };
  }

  /** The kanban task id in the kanban dialect, else the session id. */
  get runId(): string {
    return this.#info.runId;
  }

  /** `chat`, `kanban` or `goal` (S4). */
  get dialect(): "chat" | "kanban" | "goal" {
    return this.#info.dialect as "chat" | "kanban" | "goal";
  }

  /** The caps that count, per axis, with their sources (S4). */
  get caps(): RunCaps {
    return this.#info.caps;
  }

  /** The checkpoint file of this run (S8). */
  get checkpointFile(): string {
    return this.#info.checkpointFile;
  }

  /** What only some runs need, made when one first does. */
  get #more(): RunExtras {
    return this.#extras ??= new RunExtras();
  }

  /** @internal The run's slot in shared memory. */
  get slot(): number {
    return this.#info.slot;
  }

  /** The context of a run still holding its slot. */
  #live(): RunContext | undefined {
    const ctx = this.#context;
    return ctx && ctx.shared.gen(this.#info.slot) === this.#info.gen ? ctx : undefined;
  }

  #planFor(ctx: RunContext, settings: Settings): TierPlan {
    const version = ctx.version;
    if (this.#plan === undefined || version !== this.#planVersion) {
      this.#plan = ctx.plans.get(this.caps, settings, version);
      this.#planVersion = version;
    }
    return this.#plan;
  }

  /**
   * The one opening of the hooks the host calls: the guard (any throw becomes a
   * log line and `neutral`, never the host's), the run's liveness, the activity
   * mark, the settings in force and, unless `disabledToo`, their `enabled`.
   */
  #hook<T>(
    name: string,
    neutral: T,
    body: (ctx: RunContext, settings: Settings, now: number) => T,
    disabledToo = false,
  ): T {
    try {
      const ctx = this.#live();
      if (!ctx) return neutral;
      const now = nowMs();
      ctx.shared.touch(this.#info.slot, now);
      const settings = ctx.at(now);
      if (!disabledToo && !settings.enabled) return neutral;
      return body(ctx, settings, now);
    } catch (error) {
      this.#fail(name, error);
      return neutral;
    }
  }

  /** The guard and liveness alone, for what is not an activity of the run (timers, signals, the end). */
  #guard<T>(name: string, neutral: T, body: (ctx: RunContext) => T): T {
    return this.#safe(name, neutral, () => {
      const ctx = this.#live();
      return ctx ? body(ctx) : neutral;
    });
  }

  /** The guard alone: any throw becomes a log line and `neutral`. */
  #safe<T>(name: string, neutral: T, body: () => T): T {
    try {
      return body();
    } catch (error) {
      this.#fail(name, error);
      return neutral;
    }
  }

  #fail(hook: string, error: unknown): void {
    try {
      this.#context?.log("error", `${hook} failed: ${errorText(error)}`, this.runId);
    } catch { /* the logger itself is guarded; this is the last line */ }
  }

  /** @internal A log line about this run, through the host's logger or the log file (adapters). */
  log(level: "info" | "warn" | "error", message: string): void {
    try {
      this.#context?.log(level, message, this.runId);
    } catch { /* the logger itself is guarded */ }
  }

  #elapsed(ctx: RunContext, now: number): number {
    return (now - ctx.shared.start(this.#info.slot)) / 1000;
  }

  /**
   * Call once before each model call. Returns the text to put before it when
   * a tier is due on the prologue surface (S6), and on a resumed run's first
   * call, where the earlier attempt stopped (S16); else undefined. When a
   * tier is due, the checkpoint file is persisted before this returns, so a
   * run that ends right after its last model call still has its record.
   *
   * @returns The text for the model (snapshot mode), the budget numbers (notify mode) or undefined.
   *
   * @example Tier 2 on the penultimate turn of ten
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { existsSync, mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s1", caps: { turns: 10 } });
   * const texts = Array.from({ length: 10 }, () => run.preLlmCall());
   * assert.equal(texts.findIndex((t) => t !== undefined), 8);
   * assert.match(texts[8]!, /INCOMPLETE/);
   * assert.ok(existsSync(run.checkpointFile)); // persisted before the call returned
   * await ac.close();
   * ```
   */
  preLlmCall(): string | undefined {
    return this.#hook("preLlmCall", undefined, (ctx, settings, now) => {
      const slot = this.#info.slot;
      // Turns count while the library is disabled too: enabled again, it knows where the run is.
      const used = ctx.shared.addTurn(slot);
      if (!settings.enabled) return undefined;
      ctx.contact(settings);
      const elapsed = this.#elapsed(ctx, now);
      let tier = tierFor(
        this.#planFor(ctx, settings),
        used,
        elapsed,
        ctx.shared.tokens(slot),
        ctx.shared.usd(slot),
      );
      if (this.#extras?.tree !== undefined || settings.enforce.length !== 0) {
        tier = this.#budget(ctx, settings, tier, now, "pre_llm_call", used);
      }
      const resume = this.#resume ? this.#resumeText(ctx, settings, used, elapsed) : undefined;
      if (tier === 0) return resume;
      this.#midRun(ctx, settings, tier, now, "pre_llm_call");
      const latch = fireTier(this.#prologue, tier);
      if (latch === undefined) return resume;
      this.#prologue = latch;
      if (settings.mode === "log-only") {
        ctx.log("info", `tier ${tier} due on the prologue surface (turn ${used})`, this.runId);
        return resume;
      }
      const text = tierMessage(
        settings,
        tier,
        templateValues(this.#info, used, elapsed, {
          tokens: ctx.shared.tokens(slot),
          usd: ctx.shared.usd(slot),
        }),
      );
      return resume === undefined ? text : `${resume}\n\n${text}`;
    }, true);
  }

  /** The resume text, once (S16). */
  #resumeText(
    ctx: RunContext,
    settings: Settings,
    used: number,
    elapsed: number,
  ): string | undefined {
    const note = this.#resume ? this.#resume.note : undefined;
    const noFile = this.#resume ? this.#resume.noFile : false;
    this.#resume = false;
    const previous = this.previous;
    if (!previous) return undefined;
    if (settings.mode === "log-only") {
      ctx.log("info", `resumed as attempt ${this.attempt}: ${previous.summary}`, this.runId);
      return undefined;
    }
    // No file to point at: the template's sentences that name one are left out.
    const template = noFile
      ? withoutSentencesNaming(settings.resume_template, "checkpoint_file")
      : settings.resume_template;
    let text = renderTemplate(template, {
      ...templateValues(this.#info, used, elapsed),
      previous: previous.summary,
      attempt: this.attempt,
    });
    if (note !== undefined) text = text === "" ? note : `${text} ${note}`;
    if (this.dialect === "kanban") {
      text += ` The task's comments hold the earlier attempts' checkpoints too.`;
    }
    return text;
  }

  /** The mid-run surface: persist a due tier once, whichever surface sees it first (S6). */
  #midRun(
    ctx: RunContext,
    settings: Settings,
    tier: 1 | 2,
    now: number,
    source: RecordSource,
  ): void {
    if (!settings.mid_run_persist || !ctx.shared.claimTier(this.#info.slot, tier)) return;
    // The record names the working-tree snapshot that matches it.
    const ws = ctx.workspaces;
    const ref = ws && this.#workspace !== ""
      ? ws.snapshot(this.#workspace, `tier ${tier} checkpoint`, this.runId)
      : undefined;
    if (ref && ref.snapshot !== this.#info.workspace?.snapshot) {
      this.#info.workspace = { snapshot: ref.snapshot, project: ref.project };
      ctx.publish(this.#info);
    }
    ctx.writer.write(this.#info, settings, { kind: "tier", tier }, source, now);
  }

  /** Take a working-tree snapshot through `take`, when snapshots are on. */
  #snapshot(
    ctx: RunContext,
    take: (ws: WorkspaceHooks, dir: string, turn: number) => unknown,
  ): void {
    const ws = ctx.workspaces;
    if (ws && this.#workspace !== "") take(ws, this.#workspace, ctx.shared.turns(this.#info.slot));
  }

  /** A tool boundary, with the settings enabled: contact, then the mid-run surface. */
  #boundary(ctx: RunContext, settings: Settings, now: number, source: RecordSource): void {
    ctx.contact(settings);
    const slot = this.#info.slot;
    let tier = tierFor(
      this.#planFor(ctx, settings),
      ctx.shared.turns(slot),
      this.#elapsed(ctx, now),
      ctx.shared.tokens(slot),
      ctx.shared.usd(slot),
    );
    if (this.#extras?.tree !== undefined || settings.enforce.length !== 0) {
      tier = this.#budget(ctx, settings, tier, now, source, ctx.shared.turns(slot));
    }
    if (tier !== 0) this.#midRun(ctx, settings, tier, now, source);
  }

  /**
   * A run in a tree, or under an enforced cap: the tier that the tree's totals
   * make due against the run's own caps and every ancestor's (time is each
   * run's own), and the stop once an enforced cap is passed. `turns` is the
   * run's own count as the calling hook counts it. A model call about to start
   * under an enforced cap is admitted only while what the tree spent and every
   * other call in flight (each reserved at its run's last call's cost) leave
   * room, so the tree overshoots by one call at most; across processes the
   * look and the reservation are one transaction of the run store.
   */
  #budget(
    ctx: RunContext,
    settings: Settings,
    tier: Tier,
    now: number,
    source: RecordSource,
    turns: number,
  ): Tier {
    const slot = this.#info.slot;
    const seat = this.#extras?.tree;
    const elapsed = this.#elapsed(ctx, now);
    const enforce = settings.enforce;
    const own: TreeUse = { turns, tokens: ctx.shared.tokens(slot), usd: ctx.shared.usd(slot) };
    const admitting = enforce.length !== 0 && source === "pre_llm_call" &&
      this.#extras?.stopped === undefined;
    let stop: BudgetStop | undefined;
    /** A call refused: the cap is taken by what the tree spent and its other calls in flight. */
    let refused = false;
    const judge = (levels: { runId: string; caps: RunCaps; use: TreeUse }[], dueToo: boolean) => {
      for (let i = 0; i < levels.length; i++) {
        const level = levels[i]!;
        const plan = i === 0
          ? this.#planFor(ctx, settings)
          : ctx.plans.get(level.caps, settings, ctx.version);
        const use = level.use;
        if (dueToo) {
          const due = tierFor(plan, use.turns, i === 0 ? elapsed : 0, use.tokens, use.usd);
          if (due > tier) tier = due;
        }
        if (enforce.length !== 0 && stop === undefined && this.#extras?.stopped === undefined) {
          const passed = passedCap(plan, enforce, use, i === 0 ? elapsed : undefined);
          if (passed) stop = { ...passed, runId: level.runId };
        }
      }
    };
    if (!seat) judge([{ runId: this.runId, caps: this.caps, use: own }], false);
    else {
      // The calling hook may count this run's turn differently from shared memory (preLlmCall).
      const lag = ctx.shared.turns(slot) - turns;
      const levels = (reservedBy: string | undefined) => {
        const totals = seat.tree.totals(reservedBy);
        return seat.tree.chain(this.runId).map(({ runId, caps }) => {
          const use = totals.get(runId) ?? own;
          return { runId, caps, use: { ...use, turns: use.turns - lag } };
        });
      };
      const decide = (rows: TreeRow[] | undefined): boolean => {
        if (rows) seat.tree.refresh(rows, now);
        judge(levels(undefined), true);
        if (admitting && stop === undefined) {
          const spent = levels(undefined);
          judge(levels(this.runId), false);
          if (stop) {
            refused = true;
            const s = stop as BudgetStop;
            const level = spent.find((l) => l.runId === s.runId);
            const done = level ? (s.axis === "time" ? s.used : level.use[s.axis]) : s.used;
            if (s.used > done) s.inFlight = s.used - done;
            s.used = done;
          }
          // Turns count at the call's start already: a call in flight reserves tokens and dollars.
          seat.tree.reserve(this.runId, stop ? undefined : seat.tree.expected(this.runId));
        }
        const all = seat.tree.totals().get(seat.place.root);
        const tree: TreeRecord = { ...seat.place };
        if (all) {
          tree.totals = { turns: all.turns - lag, tokens: all.tokens };
          if (Number.isFinite(all.usd)) tree.totals.usd = all.usd;
        }
        const reserved = seat.tree.reservedBy(this.runId);
        if (reserved) tree.reserved = { ...reserved, at: Math.round(Date.now()) };
        const perCall = seat.tree.perCallOf(this.runId);
        if (perCall && Number.isFinite(perCall.usd)) {
          tree.perCall = { tokens: perCall.tokens, usd: perCall.usd };
        }
        this.#info.tree = tree;
        // The watchdog's records carry it too, so its next write does not take the reservation back.
        ctx.publish(this.#info);
        return enforce.length !== 0 && source !== "pre_tool_call";
      };
      if (admitting && seat.admit) seat.admit(this.#info, decide);
      else {
        const due = seat.read && (enforce.length !== 0 && source !== "pre_tool_call" &&
            source !== "post_tool_call" ||
          now - seat.tree.refreshedAt >= settings.progress_interval_seconds * 1000);
        if (decide(due ? seat.read!(seat.place.root) : undefined)) seat.push?.(this.#info);
      }
    }
    if (stop) {
      // A tier due now is persisted first (its latch then holds): the budget record is the last word.
      if (tier !== 0) this.#midRun(ctx, settings, tier, now, source);
      this.#stop(ctx, settings, now, source, stop);
      // Passed: every run under that cap stops; refused: the others' calls in flight take the rest.
      if (!refused) seat?.tree.stopUnder(stop.runId, stop, this.runId);
    }
    return tier;
  }

  /**
   * The tree's totals in the run's record, as this process knows them now (no
   * look at the store): a run's record names them even when it never made a
   * model call of its own.
   */
  #treeTotalsNow(ctx: RunContext): void {
    const seat = this.#extras?.tree;
    const tree = this.#info.tree;
    if (!seat || !tree) return;
    const all = seat.tree.totals().get(seat.place.root);
    if (!all) return;
    const totals: NonNullable<TreeRecord["totals"]> = { turns: all.turns, tokens: all.tokens };
    if (Number.isFinite(all.usd)) totals.usd = all.usd;
    this.#info.tree = { ...tree, totals };
    ctx.publish(this.#info);
  }

  /**
   * Stop the run at an enforced cap: the `budget` record first, then the budget
   * signal aborts; the run's end is `capped` unless the host says otherwise.
   */
  #stop(
    ctx: RunContext,
    settings: Settings,
    now: number,
    source: RecordSource,
    stop: BudgetStop,
  ): void {
    const more = this.#more;
    if (more.stopped !== undefined || this.#ended) return;
    more.stopped = stop;
    more.budgetTimer?.clear();
    ctx.log(
      "warn",
      `the enforced ${stop.axis} cap${
        stop.runId === this.runId ? "" : ` of ${stop.runId}`
      } is passed (${stop.used} of ${stop.cap}); the run's budget signal aborts it`,
      this.runId,
    );
    // mid_run_persist: false promises no file writes from the mid-run surface.
    if (settings.enabled && settings.mid_run_persist) {
      this.#treeTotalsNow(ctx); // stopped by a relative before it looked itself: the record says them
      ctx.writer.write(this.#info, settings, { kind: "budget", stop }, source, now);
    }
    (more.budget ??= new AbortController()).abort(
      new DOMException(`The run's enforced ${stop.axis} cap is passed`, "AbortError"),
    );
  }

  /**
   * An `AbortSignal` that aborts once an axis named in the `enforce` setting
   * passes its cap (the run's own, or, in a tree of runs, an ancestor's on the
   * tree's totals), right after a checkpoint of kind `budget` is written.
   * Adapters hand it to the framework; a run stopped by it ends `capped`. It
   * never aborts when nothing is enforced.
   *
   * @example An enforced dollar cap stops the run after the call that passed it
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync, readFileSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({
   *   home: mkdtempSync(join(tmpdir(), "ac-")),
   *   env: {},
   *   settings: { enforce: ["usd"] },
   * });
   * const run = ac.startRun({ sessionId: "spend", caps: { usd: 1 } });
   * let calls = 0;
   * while (!run.budgetSignal.aborted) {
   *   run.preLlmCall();
   *   calls++;
   *   run.usage({ inputTokens: 10, outputTokens: 10, usd: 0.3 });
   * }
   * assert.equal(calls, 4); // $1.20: the fourth call passed the cap
   * assert.match(readFileSync(run.checkpointFile, "utf8"), /enforced budget cap passed/);
   * await run.end();
   * assert.match(readFileSync(run.checkpointFile, "utf8"), /run ended \(capped\)/);
   * await ac.close();
   * ```
   */
  get budgetSignal(): AbortSignal {
    const made = this.#extras?.budget;
    if (made) return made.signal;
    return this.#guard("budgetSignal", NEVER, (ctx) => {
      const more = this.#more;
      const controller = more.budget = new AbortController();
      const now = nowMs();
      const cap = this.caps.time?.value;
      if (cap !== undefined && ctx.at(now).enforce.includes("time")) {
        const at = ctx.shared.start(this.#info.slot) + cap * 1000;
        more.budgetTimer = longTimeout(
          () =>
            this.#guard("budget", undefined, (c) => {
              const t = nowMs();
              const settings = c.at(t);
              if (!settings.enforce.includes("time")) return;
              const stop: BudgetStop = {
                axis: "time",
                cap,
                used: Math.floor(this.#elapsed(c, t)),
                runId: this.runId,
              };
              this.#stop(c, settings, t, "host", stop);
            }),
          Math.max(0, at - now),
          { unref: true },
        );
      }
      return controller.signal;
    });
  }

  /**
   * Report one model call's use, after the call: its input and output
   * tokens, and its cost when the framework gives one (else the `prices`
   * setting prices it from the model's name). The run adds them up; when a
   * token or dollar tier becomes due, the checkpoint file is persisted
   * before this returns (source `post_llm_call`), and the next
   * `preLlmCall()` returns the directive. When neither a cost nor a price is
   * known, the dollar axis is off for the rest of the run, with one log line.
   *
   * @param report The call's `inputTokens`, `outputTokens`, `usd` and `model`.
   *
   * @example A dollar cap of $1: tier 1 at $0.50, tier 2 at $0.90
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({
   *   home: mkdtempSync(join(tmpdir(), "ac-")),
   *   env: {},
   *   settings: { prices: { "small-model": { input: 1, output: 4 } } }, // $ per million tokens
   * });
   * const run = ac.startRun({ sessionId: "cost", caps: { usd: 1 }, model: "small-model" });
   * const texts: (string | undefined)[] = [];
   * for (let call = 0; call < 10; call++) {
   *   texts.push(run.preLlmCall());
   *   run.usage({ inputTokens: 100_000, outputTokens: 0 }); // $0.10 a call
   * }
   * assert.equal(texts.findIndex((t) => t !== undefined), 5); // after $0.50
   * assert.match(texts[9]!, /\$0\.90 of \$1\.00/);
   * await ac.close();
   * ```
   */
  usage(report: UsageReport): void {
    this.#hook("usage", undefined, (ctx, settings, now) => {
      const input = tokenCount(report?.inputTokens);
      const output = tokenCount(report?.outputTokens);
      const slot = this.#info.slot;
      const given = report?.usd;
      const usd = typeof given === "number" && Number.isFinite(given) && given >= 0
        ? given
        : input + output === 0 || typeof report?.totalUsd === "number"
        ? 0
        : this.#price(ctx, settings, report?.model, input, output);
      ctx.shared.addUsage(slot, input, output, usd);
      // The call has landed: in a tree, its reservation gives way to what it cost.
      this.#extras?.tree?.tree.called(this.runId, { turns: 1, tokens: input + output, usd });
      const total = report?.totalUsd;
      if (typeof total === "number" && Number.isFinite(total) && total >= 0) {
        ctx.shared.setUsd(slot, total);
      }
      if (!settings.enabled) return;
      const plan = this.#planFor(ctx, settings);
      const budgeted = this.#extras?.tree !== undefined || settings.enforce.length !== 0;
      if (plan.tokenCap === undefined && plan.usdCap === undefined && !budgeted) return;
      ctx.contact(settings);
      let tier = tierFor(
        plan,
        ctx.shared.turns(slot),
        this.#elapsed(ctx, now),
        ctx.shared.tokens(slot),
        ctx.shared.usd(slot),
      );
      if (budgeted) {
        tier = this.#budget(ctx, settings, tier, now, "post_llm_call", ctx.shared.turns(slot));
      }
      if (tier !== 0) this.#midRun(ctx, settings, tier, now, "post_llm_call");
    }, true);
  }

  /** A call's cost from the `prices` setting, or `NaN` (logged once) when there is no price. */
  #price(
    ctx: RunContext,
    settings: Settings,
    model: unknown,
    input: number,
    output: number,
  ): number {
    const name = typeof model === "string" && model !== "" ? model : this.#info.model ?? "";
    const version = ctx.version;
    const more = this.#more;
    const prices = more.prices ??= new Map();
    if (version !== more.pricesVersion) {
      prices.clear();
      more.pricesVersion = version;
    }
    let price = prices.get(name);
    if (price === undefined && !prices.has(name)) {
      price = name === "" ? undefined : priceOf(settings.prices, name);
      prices.set(name, price);
    }
    if (price) return (input * price.input + output * price.output) / 1e6;
    // Never $0: the run's dollars are unknown from now on, and its record says for which model.
    if (!this.caps.usd && this.#extras?.tree === undefined) return NaN; // no dollar axis to tell
    const label = name === "" ? "(no model named)" : name;
    const unknown = this.#info.unknownPrices ?? [];
    if (!unknown.includes(label) && unknown.length < 8) {
      this.#info.unknownPrices = [...unknown, label];
      ctx.publish(this.#info);
    }
    if (!ctx.unknownPrices.has(label)) {
      ctx.unknownPrices.add(label);
      ctx.log(
        "warn",
        `unknown price for ${label}: the usd axis is off for this run (a model call came with no cost, and ${
          name === "" ? "no model was named" : `the prices setting has no price for ${name}`
        }); its dollars are unknown, never counted as $0 (add one under prices, dollars per million input and output tokens)`,
        this.runId,
      );
    }
    return NaN;
  }

  /**
   * Call before each tool call. Persists the checkpoint file itself when a
   * tier is due on the mid-run surface, so the file is durable before the
   * tool runs. For a tool that acts on the world (named in the setting
   * `effect_tools`, or `effect: true` here) it records the call's intent
   * under its effect key: on the run ledger's next commit, which this does
   * not wait for; to have it durable before the tool runs, await
   * {@linkcode Run.intent} (or use {@linkcode Run.once}) instead.
   *
   * @param tool The tool's name, as the record should show it.
   * @param call The call's id, which matches its end to it when calls run in
   * parallel; its input; its deadline; and `effect`, to mark (or, `false`,
   * unmark) it as a tool that acts on the world.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { existsSync, mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({
   *   home: mkdtempSync(join(tmpdir(), "ac-")),
   *   env: {},
   *   settings: { watchdog: false },
   * });
   * const run = ac.startRun({ sessionId: "s2", caps: { timeSeconds: 3600 } });
   * run.preToolCall("search", { callId: "call_1", input: { q: "tiers" } });
   * run.postToolCall("search", { ok: true, callId: "call_1" });
   * assert.equal(existsSync(run.checkpointFile), false); // nothing due yet
   * await ac.close();
   * ```
   */
  preToolCall(
    tool: string,
    call?: { callId?: string; input?: unknown; timeoutSeconds?: number; effect?: boolean },
  ): void {
    this.#hook("preToolCall", undefined, (ctx, settings, now) => {
      const slot = this.#info.slot;
      const callId = call?.callId === undefined ? undefined : String(call.callId);
      const asked = call?.timeoutSeconds;
      const timeout = !settings.enabled
        ? undefined
        : (asked === undefined ? undefined : budgetValue(asked)) ?? settings.tool_timeout_seconds;
      const deadlineAt = timeout === undefined ? 0 : now + timeout * 1000;
      const seq = ctx.shared.toolStart(slot, ctx.toolId(tool), now, callId, deadlineAt);
      if (callId !== undefined) {
        const calls = this.#calls ??= new Map();
        calls.set(callId, seq);
        // Calls whose end never came: past the ring, their starts are gone from the record too.
        if (calls.size > MAX_OPEN_CALLS) calls.delete(calls.keys().next().value as string);
      }
      if (timeout !== undefined) this.#armToolTimer(ctx, seq, String(tool), callId, now, timeout);
      this.#trace?.toolStart(String(tool), callId, now);
      if (!settings.enabled) return;
      // A tool that acts on the world: its intent goes to the ledger's next commit.
      const effect = call?.effect;
      if (
        effect === true ||
        (effect === undefined && settings.effect_tools.length !== 0 &&
          settings.effect_tools.includes(String(tool)))
      ) this.#effectCall(ctx, String(tool), callId, call?.input);
      if (call?.input !== undefined) {
        // Synchronous: the tool runs next, and must find its tree stored.
        this.#snapshot(ctx, (ws, dir, turn) => {
          const options: { callId?: string; runId: string } = { runId: this.runId };
          if (callId !== undefined) options.callId = callId;
          return ws.beforeTool(dir, turn, String(tool), call.input, options);
        });
      }
      this.#boundary(ctx, settings, now, "pre_tool_call");
    }, true);
  }

  /**
   * Call after each tool call, with its outcome when known. The end is
   * matched to its own start by call id, else to the oldest call of that
   * tool still in flight. Persists like {@linkcode Run.preToolCall} when a
   * tier is due. A call whose intent `preToolCall` recorded gets its receipt:
   * ok or not, and its `result` (or error) as JSON, cut to
   * `effect_result_max_bytes`.
   *
   * @param tool The tool's name.
   * @param outcome Whether it succeeded, how long it took, its call id, its error and its result.
   *
   * @example Two parallel calls of one tool, told apart by call id
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s3" });
   * run.preToolCall("bash", { callId: "a" });
   * run.preToolCall("bash", { callId: "b" });
   * run.postToolCall("bash", { callId: "b", ok: false, error: new Error("exit 1") });
   * run.postToolCall("bash", { callId: "a", ok: true, durationMs: 1200 });
   * await ac.close();
   * ```
   */
  postToolCall(
    tool: string,
    outcome?: {
      ok?: boolean;
      durationMs?: number;
      callId?: string;
      error?: unknown;
      result?: unknown;
    },
  ): void {
    this.#hook("postToolCall", undefined, (ctx, settings, now) => {
      const slot = this.#info.slot;
      const toolId = ctx.toolId(tool);
      const callId = outcome?.callId === undefined ? undefined : String(outcome.callId);
      let seq = -1;
      if (callId !== undefined) {
        seq = this.#calls?.get(callId) ?? -1;
        this.#calls?.delete(callId);
      } else seq = ctx.shared.oldestInFlight(slot, toolId);
      const ok = outcome?.error !== undefined ? false : outcome?.ok;
      const extras = this.#extras;
      if (seq >= 0) extras?.toolTimers?.get(seq)?.timer.clear();
      extras?.toolTimers?.delete(seq);
      if (callId !== undefined) extras?.toolSignals?.delete(callId);
      if (ok === false && outcome?.error !== undefined) {
        this.#toolError(ctx, seq < 0 ? ctx.shared.toolCount(slot) : seq, outcome.error);
      }
      ctx.shared.toolEnd(slot, seq, toolId, ok, outcome?.durationMs ?? -1, now, callId);
      this.#trace?.toolEnd(String(tool), callId, ok, outcome?.error, now);
      if (!settings.enabled) return;
      const fx = extras?.effects;
      if (fx !== undefined && (fx.byCall.size !== 0 || fx.byTool.size !== 0)) {
        this.#effectEnd(ctx, settings, String(tool), callId, ok, outcome);
      }
      const ws = ctx.workspaces;
      if (ws && this.#workspace !== "") {
        const options: { ok?: boolean; callId?: string; runId: string } = { runId: this.runId };
        if (ok !== undefined) options.ok = ok;
        if (callId !== undefined) options.callId = callId;
        ws.afterTool(this.#workspace, String(tool), options);
      }
      this.#boundary(ctx, settings, now, "post_tool_call");
    }, true);
  }

  /** @internal Whether the settings name `tool` in `effect_tools` (adapters await its intent). */
  isEffectTool(tool: string): boolean {
    return this.#guard("isEffectTool", false, (ctx) => {
      const settings = ctx.at(nowMs());
      return settings.enabled && settings.effect_tools.includes(String(tool));
    });
  }

  /**
   * The run's effects, made on first use. What earlier attempts recorded is
   * read from the ledger when first asked for: a start that looked fresh may
   * have been one whose ledger did not answer in time.
   */
  #fx(): RunEffects {
    return this.#more.effects ??= new RunEffects();
  }

  /** A tool hook's effect call: its intent (unless one is on its way or it is done), and its key kept. */
  #effectCall(ctx: RunContext, tool: string, callId: string | undefined, input: unknown): void {
    const sink = ctx.effects;
    if (!sink) return;
    const key = this.effectKey(tool, input);
    const fx = this.#fx();
    if (!fx.pending.has(key)) {
      if (fx.known.get(key)?.receipt?.ok) return; // done before (replayed): nothing to record
      void this.#recordIntent(sink, fx, tool, key, input, callId);
    }
    if (callId !== undefined) {
      fx.byCall.set(callId, key);
      if (fx.byCall.size > MAX_OPEN_CALLS) fx.byCall.delete(fx.byCall.keys().next().value!);
    } else {
      const keys = fx.byTool.get(tool) ?? [];
      keys.push(key);
      if (keys.length > MAX_OPEN_CALLS) keys.shift();
      fx.byTool.set(tool, keys);
    }
  }

  /** A tool hook's effect call ended: its receipt, when its intent is still this attempt's. */
  #effectEnd(
    ctx: RunContext,
    settings: Settings,
    tool: string,
    callId: string | undefined,
    ok: boolean | undefined,
    outcome: { error?: unknown; result?: unknown } | undefined,
  ): void {
    const fx = this.#extras!.effects!;
    let key: string | undefined;
    if (callId !== undefined) {
      key = fx.byCall.get(callId);
      fx.byCall.delete(callId);
    } else {
      const keys = fx.byTool.get(tool);
      key = keys?.shift();
      if (keys?.length === 0) fx.byTool.delete(tool);
    }
    if (key === undefined || !fx.pending.has(key) || !ctx.effects) return;
    const failed = ok === false;
    void this.#recordReceipt(
      ctx,
      settings,
      fx,
      tool,
      key,
      !failed,
      failed ? errorText(outcome?.error ?? "failed") : outcome?.result,
    );
  }

  #recordIntent(
    sink: EffectSink,
    fx: RunEffects,
    tool: string,
    key: string,
    input: unknown,
    callId: string | undefined,
  ): Promise<boolean> {
    const own = fx.pending.get(key);
    if (own) return own;
    const intent: EffectIntent = {
      runId: this.runId,
      key,
      tool,
      inputDigest: sha256(canonicalJson(input)),
      attempt: this.attempt,
      at: Date.now(),
    };
    if (callId !== undefined) intent.callId = callId;
    if (!fx.known.get(key)?.receipt) {
      const row: EffectRow = { ...intent };
      fx.known.set(key, row);
    }
    const recorded = sink.intent(intent);
    fx.pending.set(key, recorded);
    return recorded;
  }

  #recordReceipt(
    ctx: RunContext,
    settings: Settings,
    fx: RunEffects,
    tool: string,
    key: string,
    ok: boolean,
    result: unknown,
  ): Promise<boolean> {
    fx.pending.delete(key);
    const max = settings.effect_result_max_bytes;
    const kept = receiptText(result, max);
    if (kept.truncated && !fx.saidCut) {
      fx.saidCut = true;
      ctx.log(
        "warn",
        `the receipt of ${tool} (effect key ${key}) keeps ${max} of its result's ${kept.bytes} bytes (effect_result_max_bytes); a replay returns the cut text`,
        this.runId,
      );
    }
    const receipt: EffectReceipt = {
      runId: this.runId,
      key,
      tool,
      ok,
      attempt: this.attempt,
      at: Date.now(),
    };
    if (kept.text !== undefined) receipt.result = kept.text;
    if (kept.truncated) receipt.truncated = true;
    const known = fx.known.get(key);
    const row: EffectRow = known ?? {
      runId: this.runId,
      key,
      tool,
      inputDigest: "",
      attempt: this.attempt,
      at: receipt.at,
    };
    const { runId: _r, key: _k, tool: _t, ...stored } = receipt;
    row.receipt = stored;
    fx.known.set(key, row);
    return ctx.effects?.receipt(receipt) ?? Promise.resolve(false);
  }

  /**
   * The effect key of a tool call: the same string in every attempt of this
   * run, on any machine, for the same tool and the same input (its canonical
   * JSON: key order does not matter), and a different one otherwise. Give it
   * to an API as its idempotency key, so that a retried run's repeat of a
   * call is the same request, not a second one.
   *
   * @param tool The tool's name.
   * @param input The call's input (anything JSON can carry).
   * @returns `ek_` and 32 hex digits of a sha256 of the run id, the tool and the input.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "invoice-7" });
   * const key = run.effectKey("send_email", { to: "a@example.com", subject: "Invoice" });
   * assert.match(key, /^ek_[0-9a-f]{32}$/);
   * assert.equal(key, run.effectKey("send_email", { subject: "Invoice", to: "a@example.com" }));
   * assert.notEqual(key, run.effectKey("send_email", { to: "b@example.com", subject: "Invoice" }));
   * // The call passes it on: `fetch(url, { headers: { "Idempotency-Key": key } })`.
   * await ac.close();
   * ```
   */
  effectKey(tool: string, input: unknown): string {
    let text: string;
    try {
      text = canonicalJson(input);
    } catch (error) {
      // An input whose toJSON throws: its text as String gives, never a throw into the host.
      this.#fail("effectKey", error);
      text = JSON.stringify(String(input));
    }
    return `ek_${
      sha256(`agent-checkpoint effect 1\u0000${this.runId}\u0000${String(tool)}\u0000${text}`)
        .slice(0, 32)
    }`;
  }

  /**
   * Record the intent of a call of a tool that acts on the world, and wait
   * until it is durable in the run ledger: one commit shared with every
   * other intent and receipt of that moment. The call's end then gives its
   * receipt: `postToolCall(tool, { callId, result })` with the same call id
   * (or, without one, the tool's oldest call). A later attempt of the run
   * finds the intent: `done` once it has its receipt, else `unknown`.
   *
   * @param tool The tool's name.
   * @param input The call's input.
   * @param options `callId`: the call's id, as `postToolCall` will give it.
   * @returns True once committed; false when the ledger is off or could not take it within 10 s (the log says which).
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "payout-1" });
   * const input = { account: "acct_9", cents: 1200 };
   * assert.equal(await run.intent("pay", input, { callId: "c1" }), true); // durable now
   * assert.deepEqual(await run.effect(run.effectKey("pay", input)), { state: "unknown", tool: "pay", attempt: 1 });
   * run.postToolCall("pay", { callId: "c1", ok: true, result: { id: "tx_1" } });
   * const done = await run.effect(run.effectKey("pay", input));
   * assert.equal(done?.state, "done");
   * await ac.close();
   * ```
   */
  intent(tool: string, input: unknown, options?: { callId?: string }): Promise<boolean> {
    return this.#guard("intent", Promise.resolve(false), (ctx) => {
      const sink = ctx.effects;
      if (!sink || !ctx.at(nowMs()).enabled) return Promise.resolve(false);
      const name = String(tool);
      const callId = options?.callId === undefined ? undefined : String(options.callId);
      const key = this.effectKey(name, input);
      const fx = this.#fx();
      const fresh = !fx.pending.has(key);
      const recorded = this.#recordIntent(sink, fx, name, key, input, callId);
      if (!fresh) return recorded; // a tool hook made it, and keeps its call
      if (callId !== undefined) {
        fx.byCall.set(callId, key);
        if (fx.byCall.size > MAX_OPEN_CALLS) fx.byCall.delete(fx.byCall.keys().next().value!);
      } else {
        const keys = fx.byTool.get(name) ?? [];
        keys.push(key);
        if (keys.length > MAX_OPEN_CALLS) keys.shift();
        fx.byTool.set(name, keys);
      }
      return recorded;
    });
  }

  /**
   * What the run ledger holds of an effect, by its key, from any attempt of
   * this run on any machine sharing the store: `done` with its receipt,
   * `unknown` (an intent without a receipt), or undefined when no attempt
   * recorded it.
   *
   * @param key An effect key ({@linkcode Run.effectKey}).
   * @returns Its state, or undefined.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "never-did" });
   * assert.equal(await run.effect(run.effectKey("send_email", { to: "x" })), undefined);
   * await ac.close();
   * ```
   */
  async effect(key: string): Promise<EffectState | undefined> {
    const ctx = this.#live();
    if (!ctx?.effects) return undefined;
    try {
      const fx = this.#fx();
      // A read that failed (the log says why) is tried again after a while, not at every call.
      if (!fx.loaded && nowMs() >= fx.retryAt) {
        fx.loading ??= ctx.effects.read(this.runId).then((rows) => {
          fx.loading = undefined;
          if (!rows) {
            fx.retryAt = nowMs() + EFFECTS_READ_RETRY_MS;
            return;
          }
          // What the ledger holds wins over this attempt's own intent without a receipt (made
          // before the read: a tool hook's): an earlier attempt's receipt is the answer.
          for (const row of rows) {
            const own = fx.known.get(row.key);
            if (!own || (row.receipt && !own.receipt)) fx.known.set(row.key, row);
          }
          fx.loaded = true;
        });
        await fx.loading;
      }
      return stateOf(fx.known.get(String(key)));
    } catch (error) {
      this.#fail("effect", error);
      return undefined;
    }
  }

  /**
   * Run a tool call that acts on the world at most once across the run's
   * attempts: when an earlier attempt (or this one) has a receipt of a
   * successful call for the same tool and input, its recorded result is
   * returned and `fn` is not run; else the intent is made durable, then
   * `fn(key)` runs (hand `key` to the API as its idempotency key: a call
   * whose outcome is unknown runs again, with the same key), then its
   * receipt is recorded. A replayed result is the recorded value's JSON read
   * back (a `Date` comes back as its text). A call that failed is not a
   * receipt to replay: it runs again.
   *
   * @param tool The tool's name.
   * @param input The call's input.
   * @param fn The call, given the effect key.
   * @param options `callId`: the call's id, for the record.
   * @returns What `fn` returned, now or in the attempt that ran it.
   * @throws What `fn` throws (its receipt then records the failure).
   *
   * @example A retried run does not send the email twice
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const home = mkdtempSync(join(tmpdir(), "ac-"));
   * const sent: string[] = [];
   * const send = (key: string) => {
   *   sent.push(key); // the mail API, with `Idempotency-Key: key`
   *   return { id: "msg_1" };
   * };
   * const first = createAgentCheckpoint({ home, env: {} });
   * const a = first.startRun({ sessionId: "report-9" });
   * await a.once("send_email", { to: "boss@example.com" }, send);
   * await first.close(); // the process dies before the run ends
   *
   * const second = createAgentCheckpoint({ home, env: {} });
   * const b = second.startRun({ sessionId: "report-9" });
   * assert.equal(b.attempt, 2);
   * assert.deepEqual(await b.once("send_email", { to: "boss@example.com" }, send), { id: "msg_1" });
   * assert.equal(sent.length, 1); // replayed from the receipt, not sent again
   * await b.end();
   * await second.close();
   * ```
   */
  async once<T>(
    tool: string,
    input: unknown,
    fn: (key: string) => T | Promise<T>,
    options?: { callId?: string },
  ): Promise<T> {
    const name = String(tool);
    const key = this.effectKey(name, input);
    const ctx = this.#live();
    const sink = ctx?.effects;
    if (!ctx || !sink || !this.#safe("once", false, () => ctx.at(nowMs()).enabled)) {
      return await fn(key);
    }
    const fx = this.#fx();
    // The same call under way in this attempt (parallel tool calls alike): its result, not a second run.
    const running = fx.running.get(key);
    if (running) return await running as T;
    const call = this.#onceRun(ctx, sink, fx, name, key, input, fn, options);
    fx.running.set(key, call);
    try {
      return await call;
    } finally {
      fx.running.delete(key);
    }
  }

  async #onceRun<T>(
    ctx: RunContext,
    sink: EffectSink,
    fx: RunEffects,
    name: string,
    key: string,
    input: unknown,
    fn: (key: string) => T | Promise<T>,
    options: { callId?: string } | undefined,
  ): Promise<T> {
    const known = await this.effect(key);
    if (known?.state === "done" && known.ok) {
      this.log(
        "info",
        `${name} (effect key ${key}) replayed from attempt ${known.attempt}'s receipt; not run again`,
      );
      return known.result as T;
    }
    const callId = options?.callId === undefined ? undefined : String(options.callId);
    await this.#safe(
      "once",
      Promise.resolve(false),
      () => this.#recordIntent(sink, fx, name, key, input, callId),
    );
    let out: T;
    try {
      out = await fn(key);
    } catch (error) {
      await this.#safe(
        "once",
        Promise.resolve(false),
        () => this.#recordReceipt(ctx, ctx.at(nowMs()), fx, name, key, false, errorText(error)),
      );
      throw error;
    }
    await this.#safe(
      "once",
      Promise.resolve(false),
      () => this.#recordReceipt(ctx, ctx.at(nowMs()), fx, name, key, true, out),
    );
    return out;
  }

  /** Keep a failed call's error for the record (the newest few). */
  #toolError(ctx: RunContext, seq: number, error: unknown): void {
    const text = Array.from(errorText(error)).slice(0, MAX_ERROR).join("");
    const errors: Record<string, string> = { ...this.#info.toolErrors, [seq]: text };
    const keys = Object.keys(errors).map(Number).sort((a, b) => a - b);
    for (const old of keys.slice(0, Math.max(0, keys.length - 8))) delete errors[old];
    this.#info.toolErrors = errors;
    ctx.publish(this.#info);
  }

  /**
   * Tell the run it is alive without a model or tool call (streamed output,
   * progress): moves the stall deadline (S10).
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * ac.startRun({ sessionId: "s4" }).activity();
   * await ac.close();
   * ```
   */
  activity(): void {
    this.#hook("activity", undefined, (ctx, settings) => ctx.contact(settings), true);
  }

  /**
   * Add a line to the run's record: it appears in the next checkpoint
   * persisted (the last ten notes are kept).
   *
   * @param text What to remember, such as the step the agent is on.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * ac.startRun({ sessionId: "s5" }).note("cloned the repository; reading the tests");
   * await ac.close();
   * ```
   */
  note(text: string): void {
    this.#hook("note", undefined, (ctx, settings) => {
      let line = String(text);
      if (line.length > MAX_NOTE) line = Array.from(line).slice(0, MAX_NOTE).join("");
      // A new array each time: a run without notes shares the frozen NO_NOTES.
      const notes = [...this.#info.notes, line];
      if (notes.length > MAX_NOTES) notes.splice(0, notes.length - MAX_NOTES);
      this.#info.notes = notes;
      ctx.publish(this.#info);
      ctx.contact(settings);
    }, true);
  }

  /**
   * Persist a checkpoint now (kind `manual`, source `host`), whatever the
   * tiers say.
   *
   * @param message The record's message. @default {"Checkpoint persisted at the host's request."}
   * @returns The checkpoint file, or undefined when nothing was written
   * (the run ended, the library is disabled or in log-only mode, or the write failed: see the log).
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync, readFileSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s7" });
   * const file = await run.checkpoint("tests pass; next: the README");
   * assert.equal(file, run.checkpointFile);
   * assert.match(readFileSync(file!, "utf8"), /tests pass; next: the README/);
   * await ac.close();
   * ```
   */
  checkpoint(message?: string): Promise<string | undefined> {
    return Promise.resolve(this.#hook("checkpoint", undefined, (ctx, settings, now) => {
      ctx.contact(settings);
      const event: PersistEvent = message === undefined
        ? { kind: "manual" }
        : { kind: "manual", message: String(message) };
      return ctx.writer.write(this.#info, settings, event, "host", now);
    }));
  }

  /**
   * The patience to give the next provider request (S18): while a time cap
   * is armed, `min(seconds, max(60, remaining / 2))`, so a request never
   * waits out the budget; never longer than `seconds`. A timeout the user
   * configured (`explicit: true`) is returned unchanged.
   *
   * @param seconds The timeout the request would have.
   * @param options `explicit`: the user set this timeout themselves.
   * @returns Seconds.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s8", caps: { timeSeconds: 600 } });
   * assert.equal(run.requestTimeout(900), 300); // half of the ten minutes left
   * assert.equal(run.requestTimeout(120), 120); // never longer than asked
   * assert.equal(run.requestTimeout(900, { explicit: true }), 900);
   * await ac.close();
   * ```
   */
  requestTimeout(seconds: number, options?: { explicit?: boolean }): number {
    return this.#guard("requestTimeout", seconds, (ctx) => {
      const cap = this.caps.time?.value;
      if (options?.explicit || cap === undefined || !(seconds > 0)) return seconds;
      const remaining = cap - this.#elapsed(ctx, nowMs());
      return Math.min(seconds, Math.max(60, Math.ceil(remaining / 2)));
    });
  }

  /**
   * An `AbortSignal` that aborts at the time cap plus
   * `deadline_grace_seconds`, or never when the run has no time cap (S18).
   * Just before it aborts, a checkpoint of kind `deadline` is written (by the
   * watchdog when the main thread is blocked; when the watchdog's write is
   * held up, the signal waits for it at most 6 s, then aborts and logs a
   * warning). Its reason is a `TimeoutError` `DOMException`. Its timer never
   * keeps the process alive.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s9", caps: { timeSeconds: 0.2 } });
   * const work = setInterval(() => {}, 50); // the host's own work keeps the process alive
   * await new Promise((resolve) => run.deadline.addEventListener("abort", resolve));
   * clearInterval(work);
   * assert.equal((run.deadline.reason as DOMException).name, "TimeoutError");
   * await ac.close();
   * ```
   */
  get deadline(): AbortSignal {
    const made = this.#extras?.deadline;
    if (made) return made.signal;
    this.#guard("deadline", undefined, (ctx) => {
      const cap = this.caps.time?.value;
      if (cap === undefined) return;
      const more = this.#more;
      more.deadline = new AbortController();
      const settings = ctx.at(nowMs());
      const grace = Number(
        (settings as unknown as Record<string, unknown>).deadline_grace_seconds ?? 0,
      );
      const at = ctx.shared.start(this.#info.slot) + (cap + (grace > 0 ? grace : 0)) * 1000;
      ctx.shared.armDeadline(this.#info.slot, at);
      const wait = at - nowMs();
      if (wait <= 0) this.#fireDeadline();
      else more.deadlineTimer = longTimeout(() => this.#fireDeadline(), wait, { unref: true });
    });
    // Made above unless the run has no time cap or ended (or making it failed, which is logged).
    return this.#extras?.deadline?.signal ?? NEVER;
  }

  /** Write the deadline checkpoint unless the watchdog did, then abort once it is written. */
  #fireDeadline(): void {
    const controller = this.#extras?.deadline;
    if (!controller || controller.signal.aborted) return;
    const slot = this.#info.slot;
    this.#guard("deadline", undefined, (ctx) => {
      if (ctx.shared.claimDeadline(slot)) {
        const now = nowMs();
        const settings = ctx.at(now);
        const atSeconds = (ctx.shared.deadlineAt(slot) - ctx.shared.start(slot)) / 1000;
        // mid_run_persist: false promises no file writes from timers.
        if (settings.enabled && settings.mid_run_persist) {
          ctx.writer.write(this.#info, settings, { kind: "deadline", atSeconds }, "host", now);
        }
        ctx.shared.settleDeadline(slot);
      }
    });
    // A run that ended has nothing to wait for: its signal aborts now, as it always did.
    this.#afterSettled(
      "deadline",
      () => this.#guard("deadline", true, (ctx) => ctx.shared.deadlineSettled(slot)),
      () => controller.abort(new DOMException("The run's deadline passed", "TimeoutError")),
    );
  }

  /** Keep a tool call's deadline on this thread too: the watchdog's twin, and the signal's clock. */
  #armToolTimer(
    ctx: RunContext,
    seq: number,
    tool: string,
    callId: string | undefined,
    now: number,
    timeoutSeconds: number,
  ): void {
    // The watchdog plans the new deadline now rather than at its next poll.
    ctx.shared.wake();
    const startedAt = this.#elapsed(ctx, now);
    const timer = longTimeout(() => this.#fireToolTimeout(seq), timeoutSeconds * 1000, {
      unref: true,
    });
    const timers = this.#more.toolTimers ??= new Map();
    timers.set(seq, { timer, tool, callId, startedAt, timeoutSeconds });
    if (timers.size > MAX_OPEN_CALLS) {
      const [oldest, kept] = timers.entries().next().value!;
      kept.timer.clear();
      timers.delete(oldest);
    }
  }

  /** A tool call's deadline passed: write its record unless the watchdog did, then abort its signal. */
  #fireToolTimeout(seq: number): void {
    const timers = this.#extras?.toolTimers;
    const kept = timers?.get(seq);
    timers?.delete(seq);
    if (!kept) return;
    this.#guard("tool timeout", undefined, (ctx) => {
      if (ctx.shared.toolDeadline(this.#info.slot, seq) === 0) return; // it ended
      if (ctx.shared.claimTimeout(this.#info.slot, seq)) {
        const now = nowMs();
        const settings = ctx.at(now);
        if (settings.enabled && settings.mid_run_persist) {
          const call: PersistEvent & { kind: "tool_timeout" } = {
            kind: "tool_timeout",
            call: {
              tool: kept.tool,
              timeoutSeconds: kept.timeoutSeconds,
              startedAt: kept.startedAt,
            },
          };
          if (kept.callId !== undefined) call.call.callId = kept.callId;
          ctx.writer.write(this.#info, settings, call, "host", now);
        }
        ctx.shared.settleTimeout(this.#info.slot, seq);
      }
      if (kept.callId !== undefined) this.#abortWhenSettled(seq, kept.callId);
    });
  }

  /**
   * Abort a timed-out call's signal once its `tool_timeout` record is written;
   * never once the call or run ended.
   */
  #abortWhenSettled(seq: number, callId: string): void {
    const slot = this.#info.slot;
    this.#afterSettled(
      `tool_timeout of call ${callId}`,
      () =>
        this.#guard("tool timeout", undefined, (ctx) =>
          // undefined: the call ended, or the run did
          ctx.shared.toolDeadline(slot, seq) === 0
            ? undefined
            : ctx.shared.timeoutSettled(slot, seq)),
      () => this.#abortTool(callId),
    );
  }

  /**
   * Call `abort` once the record behind a signal is in the file (`settled`):
   * the watchdog may have claimed the record and still be writing it. Looks
   * again on this thread's timers, which never keep the process alive; after
   * SETTLE_MS it says so in the log and aborts anyway. `settled` answering
   * undefined means there is nothing left to abort.
   */
  #afterSettled(
    record: string,
    settled: () => boolean | undefined,
    abort: () => void,
    since = performance.now(),
    pause = 1,
  ): void {
    const ready = settled();
    if (ready === undefined) return;
    if (!ready) {
      if (performance.now() - since < SETTLE_MS) {
        const again = () =>
          this.#afterSettled(record, settled, abort, since, Math.min(pause * 2, 16));
        longTimeout(again, pause, { unref: true });
        return;
      }
      this.log(
        "warn",
        `the watchdog did not write the ${record} record within ${SETTLE_MS / 1000}s; ` +
          "its signal aborts without it",
      );
    }
    this.#safe("abort", undefined, abort);
  }

  #abortTool(callId: string): void {
    this.#extras?.toolSignals?.get(callId)?.abort(
      new DOMException(`The tool call ${callId} ran past its deadline`, "TimeoutError"),
    );
  }

  /**
   * An `AbortSignal` for one tool call, by its call id: it aborts when the
   * call runs past its deadline (`preToolCall(tool, { callId, timeoutSeconds })`,
   * else the `tool_timeout_seconds` setting), right after the `tool_timeout`
   * checkpoint that names the call (written by the watchdog when the main
   * thread is blocked; when the watchdog's write is held up, the signal waits
   * for it at most 6 s, then aborts and logs a warning). It never aborts for a
   * call without a deadline, or once the call has ended. Its reason is a
   * `TimeoutError` `DOMException`. Its timer never keeps the process alive.
   *
   * @param callId The call id given to `preToolCall()`.
   * @returns The call's signal.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync, readFileSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "slow-tool" });
   * run.preToolCall("fetch_page", { callId: "c1", timeoutSeconds: 0.1 });
   * const signal = run.toolSignal("c1");
   * const work = setInterval(() => {}, 50); // the host's own work keeps the process alive
   * await new Promise((resolve) => signal.addEventListener("abort", resolve));
   * clearInterval(work);
   * run.postToolCall("fetch_page", { callId: "c1", error: signal.reason });
   * assert.match(readFileSync(run.checkpointFile, "utf8"), /fetch_page \[c1\] ran past its 0.1s deadline/);
   * await ac.close();
   * ```
   */
  toolSignal(callId: string): AbortSignal {
    return this.#safe("toolSignal", NEVER, () => {
      const id = String(callId);
      const known = this.#extras?.toolSignals?.get(id);
      if (known) return known.signal;
      const ctx = this.#live();
      if (!ctx) return NEVER;
      const controller = new AbortController();
      const signals = this.#more.toolSignals ??= new Map();
      signals.set(id, controller);
      if (signals.size > MAX_OPEN_CALLS) signals.delete(signals.keys().next().value as string);
      // Asked for after its deadline passed: the call has timed out already.
      const seq = this.#calls?.get(id);
      if (
        seq !== undefined && ctx.shared.toolDeadline(this.#info.slot, seq) > 0 &&
        ctx.shared.timedOut(this.#info.slot, seq)
      ) this.#abortWhenSettled(seq, id);
      return controller.signal;
    });
  }

  /**
   * Workspace snapshots: call before the agent changes files (S19). A no-op
   * unless `workspace_snapshots` is on.
   *
   * @param paths The files about to be written, when known.
   */
  beforeWrite(paths?: string[]): void {
    this.#hook("beforeWrite", undefined, (ctx) => {
      const list = Array.isArray(paths) ? paths.map(String) : undefined;
      this.#snapshot(
        ctx,
        (ws, dir, turn) => ws.beforeWrite(dir, turn, list, this.runId),
      );
    });
  }

  /**
   * Workspace snapshots: call after the agent wrote files, so rollback knows
   * their content is the agent's (S19). A no-op unless `workspace_snapshots` is on.
   *
   * @param paths The files written.
   */
  afterWrite(paths: string[]): void {
    if (!this.#guard("afterWrite", false, () => Array.isArray(paths))) return;
    this.#hook("afterWrite", undefined, (ctx) => {
      const ws = ctx.workspaces;
      if (ws && this.#workspace !== "") {
        ws.afterWrite(this.#workspace, paths.map(String), this.runId);
      }
    });
  }

  /** Tell the run's span how the run ended, with its figures. */
  #endTrace(ctx: RunContext, status: EndStatus, summary: unknown, now: number): void {
    const slot = this.#info.slot;
    const shared = ctx.shared;
    const usage = usageTotals(shared, slot);
    const figures: RunFigures = {
      turnsUsed: shared.turns(slot),
      elapsedSeconds: Math.round(this.#elapsed(ctx, now) * 1000) / 1000,
      tier: shared.tierClaimed(slot, 2) ? 2 : shared.tierClaimed(slot, 1) ? 1 : 0,
      inputTokens: usage?.inputTokens ?? 0,
      outputTokens: usage?.outputTokens ?? 0,
    };
    if (usage?.usd !== undefined) figures.usd = usage.usd;
    this.#trace!.end(status, summary === undefined ? undefined : String(summary), figures, now);
  }

  /**
   * End the run: when it has a checkpoint file, its block records how it
   * ended; the watchdog stops watching it and its hooks become no-ops. Safe
   * to call twice.
   *
   * @param outcome `status`: `done` (finished on its own, the default),
   * `capped` (stopped at its turn cap), `failed`, `aborted` or `deadline`;
   * `summary`: one line for the record.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync, readFileSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s6", caps: { turns: 2 } });
   * await run.checkpoint();
   * await run.end({ status: "capped", summary: "stopped at the turn cap" });
   * assert.match(readFileSync(run.checkpointFile, "utf8"), /capped/);
   * assert.equal(run.preLlmCall(), undefined);
   * await ac.close();
   * ```
   */
  end(
    outcome?: { status?: EndStatus; summary?: string },
  ): Promise<void> {
    if (this.#ended) return Promise.resolve();
    this.#ended = true;
    return this.#safe("end", undefined, () => {
      const extras = this.#extras;
      extras?.deadlineTimer?.clear();
      extras?.budgetTimer?.clear();
      for (const kept of extras?.toolTimers?.values() ?? []) kept.timer.clear();
      extras?.toolTimers?.clear();
      extras?.toolSignals?.clear();
      const ctx = this.#live();
      if (!ctx) return;
      let status = outcome?.status ?? (extras?.stopped ? "capped" : "done");
      if (!END_STATUSES.includes(status)) {
        ctx.log(
          "warn",
          `end(): unknown status ${JSON.stringify(status)}; recording "done"`,
          this.runId,
        );
        status = "done";
      }
      const now = nowMs();
      const settings = ctx.at(now);
      const seat = extras?.tree;
      if (seat) {
        this.#treeTotalsNow(ctx); // its end record names the tree's totals as it leaves
        const slot = this.#info.slot;
        seat.tree.settle(this.runId, {
          turns: ctx.shared.turns(slot),
          tokens: ctx.shared.tokens(slot),
          usd: ctx.shared.usd(slot),
        });
        ctx.trees?.leave(this.runId);
      }
      if (this.#trace) this.#endTrace(ctx, status, outcome?.summary, now);
      const event: PersistEvent = outcome?.summary === undefined
        ? { kind: "end", status }
        : { kind: "end", status, summary: String(outcome.summary) };
      // The record is made while the run still holds its slot; then the slot is let go, so
      // the watchdog starts no new write for the run, and the end lands after any it began.
      const prepared = settings.enabled
        ? ctx.writer.prepare({ info: this.#info, settings, event, source: "host", now })
        : undefined;
      // A run whose file a failed write still owes gets its end record, file or no file; so does
      // one whose record the watchdog's burst has yet to make (it makes none once the run ends).
      const owed = prepared !== undefined && ctx.writer.owes(this.#info);
      const due = prepared !== undefined && ctx.shared.writeDue(this.#info.slot);
      ctx.ended(
        this.#info,
        event.summary === undefined ? { status } : { status, summary: event.summary },
      );
      if (!prepared) return;
      const commit = () => {
        const late = owed || ctx.writer.owes(this.#info);
        if (late || due || fileExists(this.checkpointFile)) ctx.writer.commit(prepared, late);
      };
      if (ctx.shared.watchdogWriting()) {
        return ctx.shared.writesDone(END_WAIT_MS).then(commit).catch((error) =>
          this.#fail("end", error)
        );
      }
      commit();
    }) ?? Promise.resolve();
  }
}

// What the core tells a tracer: the `otel/` subsystem implements it and mod.ts plugs it in.

/** A span's ids as the run ledger keeps them, so a later attempt can link to it. @internal */
export interface TraceRef {
  /** 32 lowercase hex digits. */
  traceId: string;
  /** 16 lowercase hex digits. */
  spanId: string;
}

/** Where an earlier attempt of a run had got to, and its span's ids, from the run ledger. @internal */
export interface EarlierTrace {
  /** The earlier attempt's span. */
  trace: TraceRef;
  /** Its attempt number. */
  attempt: number;
  /** `live` (another process still runs it), `cut-off`, or how it ended. */
  state: "live" | "cut-off" | EndStatus;
  /** When it started, ms since the epoch. */
  startedAt: number;
  /** Its last sign of life (its record or its process's heartbeat), ms since the epoch. */
  lastSeen: number;
  /** Model calls it had made. */
  turnsUsed: number;
  /** Seconds it had run. */
  elapsedSeconds: number;
  /** The budget tier it had reached. */
  tier: number;
  /** The tools of the calls in flight when it stopped. */
  inFlight: string[];
}

/** A run as its span starts. @internal */
export interface TraceStart {
  runId: string;
  attempt: number;
  dialect: string;
  caps: RunCaps;
  /** When the run started, ms since the epoch. */
  startedAt: number;
  /** The run's checkpoint file. */
  checkpointFile: string;
  /** The agent's name (`gen_ai.agent.name`), when the host gave one. */
  agentName?: string;
  /** The model the run calls, when known. */
  model?: string;
  /** The earlier attempt, when this one resumes a run the ledger recorded with a span. */
  earlier?: EarlierTrace;
}

/** A run's figures as it ends. @internal */
export interface RunFigures {
  turnsUsed: number;
  elapsedSeconds: number;
  tier: number;
  inputTokens: number;
  outputTokens: number;
  /** Dollars, when known. */
  usd?: number;
}

/** One run's span. Never throws. @internal */
export interface RunTrace {
  /** The span's ids, for the run ledger. */
  readonly ref: TraceRef;
  /** A tool call started (`at`: ms since the epoch). */
  toolStart(tool: string, callId: string | undefined, at: number): void;
  /** A tool call ended. */
  toolEnd(
    tool: string,
    callId: string | undefined,
    ok: boolean | undefined,
    error: unknown,
    at: number,
  ): void;
  /** The run ended. */
  end(status: EndStatus, summary: string | undefined, figures: RunFigures, at: number): void;
}

/** The tracer the keeper works with (runs as OpenTelemetry traces, `otel/`). Never throws. @internal */
export interface Tracing {
  /** A run starts: its span, or undefined when no tracer provider listens (or `otel` is off). */
  start(run: TraceStart): RunTrace | undefined;
  /** A checkpoint file was written (the watchdog's writes included): an event on its run's span. */
  written(event: CheckpointEvent): void;
  /** The keeper closes: the spans of runs never ended are ended. */
  close(): void;
  /** @internal Settles once the OpenTelemetry API is loaded, or known to be absent (tests). */
  readonly ready: Promise<void>;
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

/** What a context is made of. @internal */
export interface RunContextParts {
  source: SettingsSource;
  shared: RunTable;
  writer: CheckpointWriter;
  log: Log;
  /** The working-tree snapshots, made on first use; called only while the settings turn them on. */
  workspaces: () => WorkspaceHooks | undefined;
  /** Start the watchdog if these settings want it; the keeper clears `watchdogDue` once it runs. */
  watchdog: (settings: Settings) => void;
  /** A run ended (its end goes to the run ledger), or its slot is let go without one. */
  ended: (info: RunInfo, end?: { status: EndStatus; summary?: string }) => void;
  /** The trees of runs sharing a budget, when the keeper keeps them. */
  trees?: TreeSeats;
  /** Where intents and receipts go, when the keeper keeps a run ledger. */
  effects?: EffectSink;
}

/** The most bytes of a tool name kept in the names table. */
const MAX_TOOL_NAME = 200;

/**
 * The context of the runs of one run table. @internal
 *
 * @example
 * ```ts
 * import { RunContext } from "./run.ts";
 * import { SettingsSource } from "./config.ts";
 * import { RunTable } from "./_run_table.ts";
 * import { CheckpointWriter } from "./_writer.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const shared = new RunTable(undefined, 1);
 * const log = () => {};
 * const context = new RunContext({
 *   source: new SettingsSource(mkdtempSync(join(tmpdir(), "ac-")), {}, undefined),
 *   shared,
 *   writer: new CheckpointWriter(shared, { log, comment: () => {}, written: () => {} }),
 *   log,
 *   workspaces: () => undefined,
 *   watchdog: () => {},
 *   ended: () => {},
 * });
 * assert.equal(context.at(0).enabled, true);
 * assert.equal(context.toolId("search"), context.toolId("search"));
 * ```
 */
export class RunContext {
  readonly shared: RunTable;
  readonly writer: CheckpointWriter;
  readonly log: Log;
  /** A run ended, or its slot is let go without an end. */
  readonly ended: (info: RunInfo, end?: { status: EndStatus; summary?: string }) => void;
  /** The version of the settings in force as of the last {@linkcode RunContext.at}. */
  version: number;
  /** False once the watchdog runs (or cannot): contact is then a field read. */
  watchdogDue = true;
  /** The runs' tier plans, shared by the runs whose caps are the same. */
  readonly plans: TierPlans = new TierPlans();
  /** Models already logged as having no price (one line per model). */
  readonly unknownPrices = new Set<string>();
  /** The trees of runs sharing a budget. */
  readonly trees: TreeSeats | undefined;
  /** Where intents and receipts go. */
  readonly effects: EffectSink | undefined;
  readonly #source: SettingsSource;
  /** The settings in force as of the last {@linkcode RunContext.at}, and until when they hold. */
  #reading: SettingsReading;
  readonly #makeWorkspaces: () => WorkspaceHooks | undefined;
  readonly #watchdog: (settings: Settings) => void;
  readonly #toolIds = new Map<string, number>();
  #namesFull = false;
  #snapshotsOn: boolean;
  #workspaces: WorkspaceHooks | undefined;

  constructor(parts: RunContextParts) {
    this.#source = parts.source;
    this.shared = parts.shared;
    this.writer = parts.writer;
    this.log = parts.log;
    this.ended = parts.ended;
    this.trees = parts.trees;
    this.effects = parts.effects;
    this.#makeWorkspaces = parts.workspaces;
    this.#watchdog = parts.watchdog;
    this.#reading = parts.source.read(nowMs());
    this.version = this.#reading.version;
    this.#snapshotsOn = this.#reading.settings.workspace_snapshots;
  }

  /** The settings as of `now`, renewing what depends on them when they changed. */
  at(now: number): Settings {
    // Until the poll is due, and unless a reload replaced them (whoever's look saw it: the
    // source then drops their `until` to 0), the settings are the ones held.
    const held = this.#reading;
    if (now < held.until) return held.settings;
    const reading = this.#source.read(now);
    this.#reading = reading;
    if (reading.version !== this.version) {
      this.version = reading.version;
      this.#snapshotsOn = reading.settings.workspace_snapshots;
    }
    return reading.settings;
  }

  /** The working-tree snapshots while the settings turn them on (made on first use), else undefined. */
  get workspaces(): WorkspaceHooks | undefined {
    return this.#snapshotsOn ? (this.#workspaces ??= this.#makeWorkspaces()) : undefined;
  }

  /** A run's hook saw these settings: start the watchdog when they want it and it does not run. */
  contact(settings: Settings): void {
    if (this.watchdogDue) this.#watchdog(settings);
  }

  /** A tool name's id in the shared table's names (0 once the table is full). */
  toolId(name: string): number {
    const known = this.#toolIds.get(name);
    if (known !== undefined) return known;
    if (this.#namesFull) return 0;
    const id = this.shared.internName(Array.from(String(name)).slice(0, MAX_TOOL_NAME).join(""));
    if (id !== 0) this.#toolIds.set(name, id);
    else {
      this.#namesFull = true;
      this.log(
        "warn",
        `the tool-name table is full (${
          MAX_NAME_BYTES / 1024 / 1024
        } MiB of distinct names); new tool names show as (unknown)`,
      );
    }
    return id;
  }

  /** Put a run's description where the watchdog reads it. */
  publish(info: RunInfo): void {
    const bytes = encodeRunInfo(info);
    if (!bytes || !this.shared.writeInfo(info.slot, bytes)) {
      this.log("warn", "the run's description is too large for the watchdog", info.runId);
    }
  }
}
