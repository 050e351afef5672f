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
import { errorText, type Log } from "./log.ts";
import {
  END_STATUSES,
  type EndStatus,
  type RecordKind,
  type RecordSource,
  type RunCaps,
  type UsageTotals,
} from "./_record.ts";
import { budgetValue, type Settings } from "./settings.ts";
import type { SettingsReading, SettingsSource } from "./config.ts";
import { MAX_NAME_BYTES, nowMs, type RunTable } from "./_run_table.ts";
import { FILE_LOCK_WAIT_MS } from "./_write_steps.ts";
import { renderTemplate, withoutSentencesNaming } from "./template.ts";
import { fireTier, tierFor, type TierPlan, TierPlans } from "./tier.ts";
import type { TreeSeat, TreeSeats } from "./_tree.ts";
import type { EffectRow } from "./_ledger.ts";
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
import type {
  EffectSink,
  JournalSink,
  PartContext,
  RunHost,
  RunPart,
  StopReason,
  ToolEnd,
  WorkspaceHooks,
} from "./run/_host.ts";
import { RunBudget, type UsageReport } from "./run/_budget.ts";
import { RunEffects } from "./run/_effects.ts";
import { RunJournal } from "./run/_journal.ts";
import { RunTime } from "./run/_time.ts";
import { RunWorkspace } from "./run/_workspace.ts";

export { BudgetExceededError, type BudgetTotals, type StopReason } from "./run/_host.ts";
export { RunBudget, type UsageReport } from "./run/_budget.ts";
export { type EffectState, RunEffects } from "./run/_effects.ts";
export { RunJournal } from "./run/_journal.ts";
export { RunTime } from "./run/_time.ts";

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
  /** The run id. */
  runId?: string;
  /** When the holding attempt started, ms since the epoch. */
  since?: number;
  /**
   * The latest its lease frees should its process stop answering (its last
   * heartbeat plus `host_timeout_seconds`), ms since the epoch; it frees
   * sooner when that attempt ends or its process dies.
   */
  freesBy?: number;
}

/**
 * Thrown by an adapter given a run whose start was refused (setting
 * `on_duplicate: refuse`, the default): another live attempt holds the run
 * id, so the adapter does not call its framework. The message names the
 * holder (machine, pid, since when) and when its lease frees; `refused` has
 * the same as fields. A host driving its own loop does the same check:
 * `if (run.refused) throw new RunRefusedError(run.refused)`.
 *
 * @example
 * ```ts
 * import { RunRefusedError } from "./mod.ts";
 * import { attemptHost } from "./run.ts";
 * import assert from "node:assert/strict";
 *
 * const error = new RunRefusedError({
 *   runId: "task-7",
 *   attempt: 2,
 *   host: attemptHost("ci-7", 4121),
 *   since: Date.UTC(2026, 0, 5, 9, 30),
 *   freesBy: Date.UTC(2026, 0, 5, 9, 41),
 *   reason: "held",
 * });
 * assert.equal(error.name, "RunRefusedError");
 * assert.match(error.message, /task-7 is held by attempt 2 on ci-7 \(pid 4121\) since 2026-01-05T09:30:00Z/);
 * assert.match(error.message, /by 2026-01-05T09:41:00Z/);
 * assert.equal(error.refused.host.pid, 4121);
 * ```
 */
export class RunRefusedError extends Error {
  /** Who holds the run, and when its lease frees. */
  readonly refused: RefusedStart;

  /** Make the error for a refused start (`run.refused`). */
  constructor(refused: RefusedStart) {
    const stamp = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
    const since = refused.since !== undefined ? ` since ${stamp(refused.since)}` : "";
    const frees = refused.freesBy !== undefined
      ? `, at the latest by ${stamp(refused.freesBy)} should its process stop answering`
      : "";
    super(
      `run id ${refused.runId ?? "(unknown)"} is held by attempt ${refused.attempt} on ${
        attemptHost(refused.host.machine, refused.host.pid)
      }${since}; its lease frees when that attempt ends or its process dies${frees}. This start did not run (on_duplicate: refuse): try again later, or set on_duplicate to warn or take-over`,
    );
    this.name = "RunRefusedError";
    this.refused = refused;
  }
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
const MAX_ERROR = 500;
const fileExists = (file: string) => {
  try {
    return file !== "" && existsSync(file);
  } catch {
    // a path that cannot be checked is taken as gone: no end record committed into it
    return false;
  }
};
/**
 * What a run's hooks and parts share: its context and description, its
 * guard, its record and its stop. The run's parts get it as their
 * {@linkcode RunHost}; the run is a thin handle over it.
 */
class RunState implements RunHost {
  readonly context: RunContext | undefined;
  readonly info: RunInfo;
  readonly attempt: number;
  ended = false;
  /** Sequence numbers of the tool calls in flight, by call id, made on first use. */
  calls: Map<string, number> | undefined = undefined;
  /** The working-tree part, when the run has a working tree. */
  workspace: RunWorkspace | undefined = undefined;
  /** The parts the hooks notify, in the order they engaged. */
  parts: RunPart[] | undefined = undefined;
  /** `run.signal`'s controller, made when it is first asked for or at the first stop. */
  controller: AbortController | undefined = undefined;
  stopReason: StopReason | undefined = undefined;
  /** Whether `run.signal` was asked for (an enforced time cap then has its timer). */
  watched = false;
  #plan: TierPlan | undefined = undefined;
  #planVersion = -1;

  constructor(ctx: RunContext | undefined, start: RunStart) {
    this.context = ctx;
    this.info = start.info;
    this.attempt = start.attempt;
  }

  get runId(): string {
    return this.info.runId;
  }

  get caps(): RunCaps {
    return this.info.caps;
  }

  live(): RunContext | undefined {
    const ctx = this.context;
    return ctx && ctx.shared.gen(this.info.slot) === this.info.gen ? ctx : undefined;
  }

  planFor(ctx: PartContext, settings: Settings): TierPlan {
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
  hook<T>(
    name: string,
    neutral: T,
    body: (ctx: RunContext, settings: Settings, now: number) => T,
    disabledToo = false,
  ): T {
    try {
      const ctx = this.live();
      if (!ctx) return neutral;
      const now = nowMs();
      ctx.shared.touch(this.info.slot, now);
      const settings = ctx.at(now);
      if (!disabledToo && !settings.enabled) return neutral;
      return body(ctx, settings, now);
    } catch (error) {
      this.fail(name, error);
      return neutral;
    }
  }

  /** The guard and liveness alone, for what is not an activity of the run (timers, signals, the end). */
  guard<T>(name: string, neutral: T, body: (ctx: RunContext) => T): T {
    return this.safe(name, neutral, () => {
      const ctx = this.live();
      return ctx ? body(ctx) : neutral;
    });
  }

  /** The guard alone: any throw becomes a log line and `neutral`. */
  safe<T>(name: string, neutral: T, body: () => T): T {
    try {
      return body();
    } catch (error) {
      this.fail(name, error);
      return neutral;
    }
  }

  fail(hook: string, error: unknown): void {
    try {
      this.context?.log("error", `${hook} failed: ${errorText(error)}`, this.runId);
    } catch { /* the logger itself is guarded; this is the last line */ }
  }

  log(level: "info" | "warn" | "error", message: string): void {
    try {
      this.context?.log(level, message, this.runId);
    } catch { /* the logger itself is guarded */ }
  }

  elapsed(ctx: PartContext, now: number): number {
    return (now - ctx.shared.start(this.info.slot)) / 1000;
  }

  /** The mid-run surface: persist a due tier once, whichever surface sees it first (S6). */
  midRun(
    ctx: PartContext,
    settings: Settings,
    tier: 1 | 2,
    now: number,
    source: RecordSource,
  ): void {
    if (!settings.mid_run_persist || !ctx.shared.claimTier(this.info.slot, tier)) return;
    try {
      // The record names the working-tree snapshot that matches it.
      const ref = ctx.workspaces && this.workspace?.snapshot(ctx, `tier ${tier} checkpoint`);
      if (ref && ref.snapshot !== this.info.workspace?.snapshot) {
        this.info.workspace = { snapshot: ref.snapshot, project: ref.project };
        ctx.publish(this.info);
      }
      ctx.writer.write(this.info, settings, { kind: "tier", tier }, source, now);
    } finally {
      // Written or not: a hook about to return the tier's directive no longer waits for it.
      ctx.shared.settleTier(this.info.slot, tier);
    }
  }

  stop(reason: StopReason, abort: DOMException): void {
    if (this.stopReason !== undefined) return;
    this.stopReason = reason;
    (this.controller ??= new AbortController()).abort(abort);
  }

  signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  engage(part: RunPart): void {
    const parts = this.parts ??= [];
    if (!parts.includes(part)) parts.push(part);
  }
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
  // from its description); its parts (budget, effects, journal, time) are made when first needed.
  readonly #s: RunState;
  /** The run's span, when a tracer listens (else one undefined field read per tool hook). */
  readonly #trace: RunTrace | undefined;
  #budget: RunBudget | undefined;
  #effects: RunEffects | undefined;
  #journal: RunJournal | undefined;
  #time: RunTime | undefined;
  readonly #workspace: RunWorkspace | undefined;
  #prologue = 0;
  /** The resumed run's note until its resume text has gone out; `false` once it has, or for a fresh run. */
  #resume: { note: string | undefined; noFile: boolean } | false;

  /** @internal */
  constructor(ctx: RunContext | undefined, start: RunStart) {
    this.attempt = start.attempt;
    this.previous = start.previous;
    this.refused = start.refused;
    const s = this.#s = new RunState(ctx, start);
    this.#trace = start.trace;
    this.#resume = start.previous !== undefined &&
      { note: start.resumeNote, noFile: start.noFile === true };
    const dir = start.workspace ?? "";
    if (dir !== "") {
      const ws = this.#workspace = new RunWorkspace(s, dir);
      s.workspace = ws;
    }
    if (start.effects) this.#effects = new RunEffects(s, start.effects);
    if (start.tree && ctx) this.budget.seated(ctx, start.tree);
    else if (start.tree) this.budget.seat = start.tree;
  }

  /**
   * The run's budget: whether a cap is enforced, whether one stopped the run
   * and the error to throw for it, and `childEnv()` for a child process whose
   * runs share this run's budget.
   */
  get budget(): RunBudget {
    return this.#budget ??= new RunBudget(this.#s);
  }

  /**
   * The run's side effects: `key()`, `intent()`, `state()`, `once()`,
   * `durable()`, `isEffectTool()`.
   */
  get effects(): RunEffects {
    return this.#effects ??= new RunEffects(this.#s);
  }

  /**
   * The run's journal: `model()` and `tool()` journal each call, and a retry
   * replays its earlier attempt's calls from it; `live`, `replayed`.
   */
  get journal(): RunJournal {
    return this.#journal ??= new RunJournal(this.#s);
  }

  /** The run's time: `requestTimeout()`, `toolSignal()`, `stopAtDeadline()`. */
  get time(): RunTime {
    return this.#time ??= new RunTime(this.#s);
  }

  /** The kanban task id in the kanban dialect, else the session id. */
  get runId(): string {
    return this.#s.info.runId;
  }

  /** `chat`, `kanban` or `goal` (S4). */
  get dialect(): "chat" | "kanban" | "goal" {
    return this.#s.info.dialect as "chat" | "kanban" | "goal";
  }

  /** The caps that count, per axis, with their sources (S4). */
  get caps(): RunCaps {
    return this.#s.info.caps;
  }

  /** The checkpoint file of this run (S8). */
  get checkpointFile(): string {
    return this.#s.info.checkpointFile;
  }

  /** @internal The run's slot in shared memory. */
  get slot(): number {
    return this.#s.info.slot;
  }

  /** @internal A log line about this run, through the host's logger or the log file (adapters). */
  log(level: "info" | "warn" | "error", message: string): void {
    this.#s.log(level, message);
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
   * @example Tier 1 halfway through ten turns, tier 2 on the penultimate turn
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
   * const due = texts.flatMap((t, i) => (t === undefined ? [] : [i]));
   * assert.deepEqual(due, [5, 8]);
   * assert.match(texts[8]!, /INCOMPLETE/);
   * assert.ok(existsSync(run.checkpointFile)); // persisted before the call returned
   * await ac.close();
   * ```
   */
  preLlmCall(): string | undefined {
    return this.#s.hook("preLlmCall", undefined, (ctx, settings, now) => {
      const slot = this.#s.info.slot;
      // Turns count while the library is disabled too: enabled again, it knows where the run is.
      const used = ctx.shared.addTurn(slot);
      if (!settings.enabled) return undefined;
      ctx.contact(settings);
      const elapsed = this.#s.elapsed(ctx, now);
      let tier = tierFor(
        this.#s.planFor(ctx, settings),
        used,
        elapsed,
        ctx.shared.tokens(slot),
        ctx.shared.usd(slot),
      );
      if (this.#budget?.seat !== undefined || settings.enforce.length !== 0) {
        tier = this.budget.judge(ctx, settings, tier, now, "pre_llm_call", used);
      }
      const resume = this.#resume ? this.#resumeText(ctx, settings, used, elapsed) : undefined;
      if (tier === 0) return resume;
      this.#s.midRun(ctx, settings, tier, now, "pre_llm_call");
      const latch = fireTier(this.#prologue, tier);
      if (latch === undefined) return resume;
      this.#prologue = latch;
      if (settings.mode === "log-only") {
        ctx.log("info", `tier ${tier} due on the prologue surface (turn ${used})`, this.runId);
        return resume;
      }
      // The directive names the file: when the watchdog claimed the tier, its write lands first.
      if (!ctx.shared.tierSettled(slot, tier, FILE_LOCK_WAIT_MS)) {
        ctx.log("warn", `the watchdog's tier ${tier} checkpoint is not written yet`, this.runId);
      }
      const text = tierMessage(
        settings,
        tier,
        templateValues(this.#s.info, used, elapsed, {
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
      ...templateValues(this.#s.info, used, elapsed),
      previous: previous.summary,
      attempt: this.attempt,
    });
    if (note !== undefined) text = text === "" ? note : `${text} ${note}`;
    if (this.dialect === "kanban") {
      text += ` The task's comments hold the earlier attempts' checkpoints too.`;
    }
    return text;
  }

  /** A tool boundary, with the settings enabled: contact, then the mid-run surface. */
  #boundary(ctx: RunContext, settings: Settings, now: number, source: RecordSource): void {
    ctx.contact(settings);
    const slot = this.#s.info.slot;
    let tier = tierFor(
      this.#s.planFor(ctx, settings),
      ctx.shared.turns(slot),
      this.#s.elapsed(ctx, now),
      ctx.shared.tokens(slot),
      ctx.shared.usd(slot),
    );
    if (this.#budget?.seat !== undefined || settings.enforce.length !== 0) {
      tier = this.budget.judge(ctx, settings, tier, now, source, ctx.shared.turns(slot));
    }
    if (tier !== 0) this.#s.midRun(ctx, settings, tier, now, source);
  }

  /**
   * One `AbortSignal` that aborts for any stop of the run, and
   * {@linkcode Run.stopReason} says which: an axis named in the `enforce`
   * setting passes its cap (the run's own, or, in a tree of runs, an ancestor's on the
   * tree's totals), right after a checkpoint of kind `budget` is written.
   * (a run stopped so ends `capped`); or, once
   * `run.time.stopAtDeadline()` armed it, the run's deadline. Adapters hand it
   * to the framework. It never aborts when nothing is enforced and no deadline is armed.
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
   * while (!run.signal.aborted) {
   *   run.preLlmCall();
   *   calls++;
   *   run.postLlmCall({ inputTokens: 10, outputTokens: 10, usd: 0.3 });
   * }
   * assert.equal(calls, 4); // $1.20: the fourth call passed the cap
   * assert.match(readFileSync(run.checkpointFile, "utf8"), /enforced budget cap passed/);
   * await run.end();
   * assert.match(readFileSync(run.checkpointFile, "utf8"), /run ended \(capped\)/);
   * await ac.close();
   * ```
   */
  get signal(): AbortSignal {
    const s = this.#s;
    if (!s.watched) {
      s.watched = true;
      this.budget.watch();
    }
    return s.signal();
  }

  /** Why `signal` aborted: an enforced cap or the deadline; undefined while the run goes on. */
  get stopReason(): StopReason | undefined {
    return this.#s.stopReason;
  }

  /**
   * Call after each model call, with its use: its input and output
   * tokens, and its cost when the framework gives one (else the `prices`
   * setting prices it from the model's name). The run adds them up; when a
   * token or dollar tier becomes due, the checkpoint file is persisted
   * before this returns (source `post_llm_call`), and the next
   * `preLlmCall()` returns the directive. A call whose cost is neither given
   * (a negative, NaN or infinite cost is none) nor priced is never counted as
   * $0: one log line names the model, the run's dollars are shown as a lower
   * bound ("at least"), and with `usd` in the `enforce` setting it stops the
   * run under a dollar cap, as passing the cap would.
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
   *   run.postLlmCall({ inputTokens: 100_000, outputTokens: 0 }); // $0.10 a call
   * }
   * assert.equal(texts.findIndex((t) => t !== undefined), 5); // after $0.50
   * assert.match(texts[9]!, /\$0\.90 of \$1\.00/);
   * await ac.close();
   * ```
   */
  postLlmCall(report: UsageReport): void {
    this.#s.hook("postLlmCall", undefined, (ctx, settings, now) => {
      this.budget.called(ctx, settings, now, report);
    }, true);
  }

  /**
   * Call before each tool call. Persists the checkpoint file itself when a
   * tier is due on the mid-run surface, so the file is durable before the
   * tool runs. For a tool that acts on the world (named in the setting
   * `effect_tools`, or `effect: true` here) it records the call's intent
   * under its effect key: on the run ledger's next commit, which this does
   * not wait for; to have it durable before the tool runs, await
   * {@linkcode RunEffects.intent} (or use {@linkcode RunEffects.once}) instead.
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
    this.#s.hook("preToolCall", undefined, (ctx, settings, now) => {
      const slot = this.#s.info.slot;
      const callId = call?.callId === undefined ? undefined : String(call.callId);
      const asked = call?.timeoutSeconds;
      const timeout = !settings.enabled
        ? undefined
        : (asked === undefined ? undefined : budgetValue(asked)) ?? settings.tool_timeout_seconds;
      const deadlineAt = timeout === undefined ? 0 : now + timeout * 1000;
      const seq = ctx.shared.toolStart(slot, ctx.toolId(tool), now, callId, deadlineAt);
      if (callId !== undefined) {
        const calls = this.#s.calls ??= new Map();
        calls.set(callId, seq);
        // Calls whose end never came: past the ring, their starts are gone from the record too.
        if (calls.size > MAX_OPEN_CALLS) calls.delete(calls.keys().next().value as string);
      }
      if (timeout !== undefined) this.time.arm(ctx, seq, String(tool), callId, now, timeout);
      this.#trace?.toolStart(String(tool), callId, now);
      if (!settings.enabled) return;
      // A tool that acts on the world: its intent goes to the ledger's next commit.
      const effect = call?.effect;
      if (
        effect === true ||
        (effect === undefined && settings.effect_tools.length !== 0 &&
          settings.effect_tools.includes(String(tool)))
      ) this.effects.toolStart(ctx, String(tool), callId, call?.input);
      if (call?.input !== undefined && ctx.workspaces) {
        this.#workspace?.toolStart(ctx, String(tool), callId, call.input);
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
    this.#s.hook("postToolCall", undefined, (ctx, settings, now) => {
      const slot = this.#s.info.slot;
      const toolId = ctx.toolId(tool);
      const callId = outcome?.callId === undefined ? undefined : String(outcome.callId);
      let seq = -1;
      if (callId !== undefined) {
        seq = this.#s.calls?.get(callId) ?? -1;
        this.#s.calls?.delete(callId);
      } else seq = ctx.shared.oldestInFlight(slot, toolId);
      const ok = outcome?.error !== undefined ? false : outcome?.ok;
      if (ok === false && outcome?.error !== undefined) {
        this.#toolError(ctx, seq < 0 ? ctx.shared.toolCount(slot) : seq, outcome.error);
      }
      ctx.shared.toolEnd(slot, seq, toolId, ok, outcome?.durationMs ?? -1, now, callId);
      this.#trace?.toolEnd(String(tool), callId, ok, outcome?.error, now);
      // The run's engaged parts hear of the end: tool timers, receipts, snapshots.
      const parts = this.#s.parts;
      if (parts !== undefined) {
        const end: ToolEnd = {
          tool: String(tool),
          callId,
          seq,
          ok,
          error: outcome?.error,
          result: outcome?.result,
        };
        for (const part of parts) part.toolEnd?.(ctx, settings, end);
      }
      if (!settings.enabled) return;
      if (ctx.workspaces) this.#workspace?.toolEnd(ctx, String(tool), callId, ok);
      this.#boundary(ctx, settings, now, "post_tool_call");
    }, true);
  }

  /** Keep a failed call's error for the record (the newest few). */
  #toolError(ctx: RunContext, seq: number, error: unknown): void {
    const text = Array.from(errorText(error)).slice(0, MAX_ERROR).join("");
    const errors: Record<string, string> = { ...this.#s.info.toolErrors, [seq]: text };
    const keys = Object.keys(errors).map(Number).sort((a, b) => a - b);
    for (const old of keys.slice(0, Math.max(0, keys.length - 8))) delete errors[old];
    this.#s.info.toolErrors = errors;
    ctx.publish(this.#s.info);
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
    this.#s.hook("activity", undefined, (ctx, settings) => ctx.contact(settings), true);
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
    this.#s.hook("note", undefined, (ctx, settings) => {
      let line = String(text);
      if (line.length > MAX_NOTE) line = Array.from(line).slice(0, MAX_NOTE).join("");
      // A new array each time: a run without notes shares the frozen NO_NOTES.
      const notes = [...this.#s.info.notes, line];
      if (notes.length > MAX_NOTES) notes.splice(0, notes.length - MAX_NOTES);
      this.#s.info.notes = notes;
      ctx.publish(this.#s.info);
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
    return Promise.resolve(this.#s.hook("checkpoint", undefined, (ctx, settings, now) => {
      ctx.contact(settings);
      const event: PersistEvent = message === undefined
        ? { kind: "manual" }
        : { kind: "manual", message: String(message) };
      return ctx.writer.write(this.#s.info, settings, event, "host", now);
    }));
  }

  /**
   * Workspace snapshots: call before the agent changes files (S19). A no-op
   * unless `workspace_snapshots` is on.
   *
   * @param paths The files about to be written, when known.
   */
  beforeWrite(paths?: string[]): void {
    this.#s.hook("beforeWrite", undefined, (ctx) => {
      const list = Array.isArray(paths) ? paths.map(String) : undefined;
      this.#workspace?.beforeWrite(ctx, list);
    });
  }

  /**
   * Workspace snapshots: call after the agent wrote files, so rollback knows
   * their content is the agent's (S19). A no-op unless `workspace_snapshots` is on.
   *
   * @param paths The files written.
   */
  afterWrite(paths: string[]): void {
    if (!this.#s.guard("afterWrite", false, () => Array.isArray(paths))) return;
    this.#s.hook("afterWrite", undefined, (ctx) => {
      this.#workspace?.afterWrite(ctx, paths.map(String));
    });
  }

  /** Tell the run's span how the run ended, with its figures. */
  #endTrace(ctx: RunContext, status: EndStatus, summary: unknown, now: number): void {
    const slot = this.#s.info.slot;
    const shared = ctx.shared;
    const usage = usageTotals(shared, slot);
    const figures: RunFigures = {
      turnsUsed: shared.turns(slot),
      elapsedSeconds: Math.round(this.#s.elapsed(ctx, now) * 1000) / 1000,
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
    if (this.#s.ended) return Promise.resolve();
    this.#s.ended = true;
    return this.#s.safe("end", undefined, () => {
      const ctx = this.#s.live();
      // Its parts let go: timers cleared; in a tree, its use settled and its seat given up (its
      // end record names the tree's totals as it leaves).
      for (const part of this.#s.parts ?? []) part.ended?.(ctx);
      if (!ctx) return;
      let status = outcome?.status ?? (this.#budget?.stopped ? "capped" : "done");
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
      if (this.#trace) this.#endTrace(ctx, status, outcome?.summary, now);
      const event: PersistEvent = outcome?.summary === undefined
        ? { kind: "end", status }
        : { kind: "end", status, summary: String(outcome.summary) };
      // The record is made while the run still holds its slot; then the slot is let go, so
      // the watchdog starts no new write for the run, and the end lands after any it began.
      const prepared = settings.enabled
        ? ctx.writer.prepare({ info: this.#s.info, settings, event, source: "host", now })
        : undefined;
      // A run whose file a failed write still owes gets its end record, file or no file; so does
      // one whose record the watchdog's burst has yet to make (it makes none once the run ends).
      const owed = prepared !== undefined && ctx.writer.owes(this.#s.info);
      const due = prepared !== undefined && ctx.shared.writeDue(this.#s.info.slot);
      ctx.ended(
        this.#s.info,
        event.summary === undefined ? { status } : { status, summary: event.summary },
      );
      if (!prepared) return;
      const commit = () => {
        const late = owed || ctx.writer.owes(this.#s.info);
        if (late || due || fileExists(this.checkpointFile)) ctx.writer.commit(prepared, late);
      };
      if (ctx.shared.watchdogWriting()) {
        return ctx.shared.writesDone(END_WAIT_MS).then(commit).catch((error) =>
          this.#s.fail("end", error)
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
  /** The span's ids, for the run ledger: undefined until the span starts (see `Tracing.start`). */
  readonly ref: TraceRef | undefined;
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
  /**
   * A run starts: its span, or undefined when no tracer provider listens (or `otel` is off).
   * `started` is told the span's ids once it starts: at once, or once the API is loaded.
   */
  start(run: TraceStart, started?: (ref: TraceRef) => void): RunTrace | undefined;
  /** A checkpoint file was written (the watchdog's writes included): an event on its run's span. */
  written(event: CheckpointEvent): void;
  /** The keeper closes: the spans of runs never ended are ended. */
  close(): void;
  /** @internal Settles once the OpenTelemetry API is loaded, or known to be absent (tests). */
  readonly ready: Promise<void>;
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
  /** Where journal entries go, when the keeper keeps a run ledger. */
  journal?: JournalSink;
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
  /** Where journal entries go. */
  readonly journal: JournalSink | undefined;
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
    this.journal = parts.journal;
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
