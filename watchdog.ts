/**
 * The watchdog worker (S9, S10, S11): one thread per `AgentCheckpoint`,
 * watching all its runs through shared memory and persisting checkpoint files
 * itself, so a run whose main thread is blocked still gets its record.
 *
 * It sleeps until the next moment something can be due (a tier crossing on
 * the time axis, the next uncapped multiple, a stall deadline, a run's
 * deadline, a tool call's deadline) or the poll interval, whichever comes
 * first, and reloads the settings on each poll. A look takes in only new and changed runs and those
 * whose moment has come, unless the settings changed. The writes one look finds
 * due go out through the one checkpoint writer: one at once, a burst
 * concurrently.
 *
 * Read top down: `threadContext` (the thread's settings, log and writer over
 * the shared run table), `Looks` (read the table, weigh each run whose moment
 * has come, make the records due, write them, settle the claimed signals),
 * `WatchdogLedger` (the run ledger: open, commit every interval with the
 * heartbeat that keeps the runs' leases, close), and `watchdog()`, the loop
 * that wakes them.
 *
 * @module
 */
import process from "node:process";
import type { MessagePort } from "node:worker_threads";
import { type CoreContext, coreContext, type Env } from "./config.ts";
import { errorText, failOpen, failOpenAsync, type Log } from "./log.ts";
import type { Settings } from "./settings.ts";
import { grownTo, nowMs, type RunTable, type RunTableBuffers } from "./_run_table.ts";
import type { CheckpointEvent, PendingWrite, PersistEvent, RunInfo } from "./_writer.ts";
import type { TimedOutCall } from "./_record.ts";
import {
  hasCap,
  PAST_CAP_SECONDS,
  tierFor,
  type TierPlan,
  TierPlans,
  timeCrossing,
} from "./tier.ts";
import {
  backoffMs,
  type HostId,
  LedgerProgress,
  type LedgerStore,
  MAX_BACKLOG,
  PRUNE_AT_START,
  type RunRecord,
} from "./_ledger.ts";
import { storedGoalTurns } from "./discover.ts";

/**
 * The mark of the watchdog's own start data: its entry module starts the loop only in a
 * thread started with it, never in a host's worker that imports the library.
 */
export const WATCHDOG_ENTRY = "agent-checkpoint/watchdog";

/** What the worker starts with. */
export interface WatchdogData {
  /** {@linkcode WATCHDOG_ENTRY}: the data is the watchdog's. */
  entry: typeof WATCHDOG_ENTRY;
  buffers: RunTableBuffers;
  home: string;
  env: Env;
  overrides: Record<string, unknown> | undefined;
  /** Log lines go to the main thread, for the host's logger. */
  hostLogger: boolean;
  /** Comments go to the main thread, for the host's `postComment`. */
  hostComments: boolean;
  commentModule?: string;
  /**
   * The run store's module (`store/mod.ts`), which the composition root names: the worker
   * imports it for the run ledger, so the core never imports the store itself.
   */
  storeModule?: string;
  /** The fleet store's port: the watchdog's batches go to its process's store thread. */
  storePort?: MessagePort;
  /** @internal Report heap use every this many ms (benchmarks). */
  statsEveryMs?: number;
}

/** @internal The worker's own heap, as benchmarks read it. */
export interface WatchdogStats {
  heapUsed: number;
  watched: number;
  /** Commits of the run ledger so far. */
  ledgerCommits?: number;
  /** Ledger records waiting for the store. */
  ledgerBacklog?: number;
}

/** Worker to main thread. */
export type FromWorker =
  | { type: "log"; level: "info" | "warn" | "error"; message: string; runId?: string }
  | { type: "comment"; comment: { taskId: string; body: string } }
  | { type: "written"; event: CheckpointEvent }
  | { type: "stats"; stats: WatchdogStats }
  | { type: "closed" };

/**
 * The host to the worker: close the run ledger's store, then say `closed` (the keeper's close);
 * or records (a start, an end) the host's thread found the ledger busy for, for the next commit.
 */
export type ToWorker = { type: "close" } | { type: "records"; records: RunRecord[] };

/**
 * Whether a thread's `workerData` is the watchdog's: a host's own worker, started with
 * data of its own or none, is never taken for the watchdog.
 *
 * @example
 * ```ts
 * import { isWatchdogData } from "./watchdog.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isWatchdogData(undefined), false);
 * assert.equal(isWatchdogData({ home: "/h" }), false);
 * ```
 */
export function isWatchdogData(data: unknown): data is WatchdogData {
  return typeof data === "object" && data !== null &&
    (data as { entry?: unknown }).entry === WATCHDOG_ENTRY;
}

/**
 * The time the watchdog reads and how it waits between looks: the real one in its
 * thread, a fake one a test moves (as std's `FakeTime` does).
 */
export interface WatchdogClock {
  /** Now, ms, on the run table's clock. */
  now(): number;
  /** Wait until `ms` passed or the table was woken since `seen`; true when woken. */
  sleep(table: RunTable, seen: number, ms: number): Promise<boolean>;
  /** Call `then` after `ms`. */
  after(ms: number, then: () => void): void;
}

/** The real clock: the table's time, its wake word, a timer. */
const REAL_CLOCK: WatchdogClock = {
  now: nowMs,
  sleep: (table, seen, ms) =>
    table.waitForWake(seen, ms).then((result) => result !== "timed-out", () => true),
  after: (ms, then) => setTimeout(then, ms),
};

/** What the worker uses of the run store's module ({@linkcode WatchdogData.storeModule}). */
interface StoreModule {
  openRunStore(options: {
    home: string;
    settings: Settings;
    setAside: true;
    log: (level: "info" | "warn" | "error", message: string) => void;
    storePort?: MessagePort;
  }): LedgerStore | undefined;
  thisHost(): HostId;
}

/** In the list of claimed records, the run's deadline checkpoint (not a tool call's number). */
const DEADLINE_CLAIM = -1;
/** In the list of claimed records, tier 1's record (and tier 2's, one less). */
const TIER_CLAIM = -2;

// The state of a slot the worker has seen, as bits.
const KNOWN = 1; // it has seen the slot's run
const DROPPED = 2; // no longer watched (S9 interval 0, S11 time cap + 180 s)
const STALLED = 4; // its stall state at its last look
const STOP_LOGGED = 8; // "stops watching" was logged

/**
 * What the worker keeps of the run in each slot, in typed arrays indexed by
 * slot: no object per run, and no parsed description (the description is read
 * from shared memory when a look weighs the run). Objects kept for each of
 * 20,000 runs survived the worker's young-generation collections and grew its
 * heap by about 2 KiB a run.
 */
class WatchedSlots {
  /** The generation and description sequence number of the run last seen in the slot. */
  gen = new Int32Array(0);
  seq = new Int32Array(0);
  flags = new Uint8Array(0);
  /** When it next needs a look, ms; -Infinity when new or changed. */
  nextAt = new Float64Array(0);
  /** Its deadline at its last look: a change calls for a new one. */
  deadlineAt = new Float64Array(0);
  /** Tool calls with a deadline started by its last look: a new one calls for a look. */
  timedCalls = new Int32Array(0);
  /** Slots whose run the worker knows. */
  count = 0;

  /** Cover `slots` slots, growing by half at least. */
  cover(slots: number): void {
    if (slots <= this.gen.length) return;
    const length = Math.max(slots, Math.ceil(this.gen.length * 1.5));
    this.gen = grownTo(this.gen, length);
    this.seq = grownTo(this.seq, length);
    this.flags = grownTo(this.flags, length);
    this.nextAt = grownTo(this.nextAt, length);
    this.deadlineAt = grownTo(this.deadlineAt, length);
    this.timedCalls = grownTo(this.timedCalls, length);
  }

  has(slot: number, flag: number): boolean {
    return (this.flags[slot]! & flag) !== 0;
  }

  set(slot: number, flag: number, on: boolean): void {
    this.flags[slot] = on ? this.flags[slot]! | flag : this.flags[slot]! & ~flag;
  }

  /** The slot's run is gone. */
  forget(slot: number): void {
    if (this.has(slot, KNOWN)) this.count--;
    this.flags[slot] = 0;
  }

  /**
   * A new run in the slot, or a new description of its run (`same`): looked at
   * anew, keeping whether its run was dropped and its stop logged.
   */
  renew(slot: number, gen: number, seq: number, same: boolean): void {
    if (!this.has(slot, KNOWN)) this.count++;
    this.flags[slot] = KNOWN | (same ? this.flags[slot]! & (DROPPED | STOP_LOGGED) : 0);
    this.gen[slot] = gen;
    this.seq[slot] = seq;
    this.nextAt[slot] = -Infinity;
    this.deadlineAt[slot] = 0;
    this.timedCalls[slot] = -1;
  }
}

/** What the worker sends the main thread. */
type Post = (message: FromWorker) => void;

/**
 * Step 0, the thread's context: the same core context as the main thread's, over the run
 * table it shares, its log lines going to the host's logger when asked, its comments through
 * the comment module once loaded (else the host's `postComment`, when free).
 */
function threadContext(data: WatchdogData, post: Post): CoreContext {
  const hostLog: Log | undefined = data.hostLogger
    ? (level, message, runId) =>
      post(
        runId === undefined
          ? { type: "log", level, message }
          : { type: "log", level, message, runId },
      )
    : undefined;
  type PostComment = (comment: { taskId: string; body: string }) => unknown;
  let moduleSink: PostComment | undefined;
  let moduleReady: Promise<void> = Promise.resolve();
  const context = coreContext({
    home: data.home,
    env: data.env,
    overrides: data.overrides,
    buffers: data.buffers,
    ...(hostLog ? { log: hostLog } : {}),
    sinks: (log) => ({
      comment: (comment, runId) => {
        const fail = (error: unknown) =>
          log("warn", `posting the task comment failed: ${errorText(error)}`, runId);
        moduleReady.then(async () => {
          if (moduleSink) await moduleSink(comment);
          else if (data.hostComments) post({ type: "comment", comment });
        }).catch(fail);
      },
      written: (event) => post({ type: "written", event }),
    }),
  });
  if (data.commentModule !== undefined) {
    const { log } = context;
    moduleReady = import(data.commentModule).then((mod) => {
      if (typeof mod.postComment !== "function") {
        throw new TypeError(`${data.commentModule} does not export postComment`);
      }
      moduleSink = mod.postComment;
    }).catch((error) => log("error", `commentModule could not be loaded: ${errorText(error)}`));
  }
  return context;
}

/**
 * The watchdog's looks at the run table, in named steps: {@linkcode Looks.look} reads the
 * table ({@linkcode Looks.takeIn}, {@linkcode Looks.describe}) and weighs each run whose
 * moment has come ({@linkcode Looks.weigh}: its deadline, its tool calls' deadlines, its tier
 * or uncapped multiple, its stall); each record found due is made ({@linkcode Looks.act})
 * and {@linkcode Looks.flush} writes them and settles the claimed signals.
 */
class Looks {
  readonly #watched = new WatchedSlots();
  readonly #plans = new TierPlans();
  /** The writes one look found due: one goes out at once, a burst concurrently. */
  #due: PendingWrite[] = [];
  /**
   * The records this look claimed whose signal the main thread aborts, or whose directive a
   * hook returns: (slot, its run's generation, a tool call's sequence number, DEADLINE_CLAIM
   * or a TIER_CLAIM) each.
   */
  #claimed: number[] = [];
  #nextPoll = 0;
  #lastVersion = -1;

  readonly #context: CoreContext;
  readonly #home: string;
  readonly #now: () => number;

  constructor(context: CoreContext, home: string, now: () => number) {
    this.#context = context;
    this.#home = home;
    this.#now = now;
  }

  /** Runs the worker knows. */
  get watched(): number {
    return this.#watched.count;
  }

  /**
   * Look at the runs that need it: all of them when the settings changed
   * (they are reloaded at each poll); else only the new and changed ones and
   * those whose moment has come, so that a wake or a poll costs a scan of the
   * table, not a look at every run. Returns when the next look is due.
   */
  look(): number {
    const { shared, source, log } = this.#context;
    const watched = this.#watched;
    const now = this.#now();
    const settings = source.at(now);
    // A poll reloads the settings (above); only changed settings call for a look at every run.
    const full = source.version !== this.#lastVersion;
    this.#lastVersion = source.version;
    if (now >= this.#nextPoll || full) {
      this.#nextPoll = now + settings.watchdog_poll_seconds * 1000;
    }
    let next = this.#nextPoll;
    if (!settings.enabled || !settings.watchdog || !settings.mid_run_persist) return next;
    const slots = shared.slots;
    shared.refresh(); // after reading the count: the views cover every slot counted
    watched.cover(slots);
    for (let slot = 0; slot < slots; slot++) {
      try {
        const changed = this.takeIn(slot);
        if (changed === false) continue;
        const timedCalls = shared.timedCalls(slot);
        if (watched.has(slot, DROPPED) && watched.timedCalls[slot] === timedCalls) continue;
        const nextAt = watched.nextAt[slot]!;
        if (
          !full && nextAt > now && watched.deadlineAt[slot] === shared.deadlineAt(slot) &&
          watched.has(slot, STALLED) === shared.stalled(slot) &&
          watched.timedCalls[slot] === timedCalls
        ) {
          next = Math.min(next, nextAt);
          continue;
        }
        const info = changed ?? this.describe(slot)?.info;
        if (info === undefined) continue;
        watched.deadlineAt[slot] = shared.deadlineAt(slot);
        watched.timedCalls[slot] = timedCalls;
        watched.set(slot, DROPPED, false);
        const due = this.weigh(info, settings, now);
        watched.set(slot, STALLED, shared.stalled(slot));
        if (due === undefined) watched.set(slot, DROPPED, true);
        else {
          watched.nextAt[slot] = due;
          next = Math.min(next, due);
        }
      } catch (error) {
        log("error", `watchdog failed on a run: ${errorText(error)}`);
      }
    }
    return next;
  }

  /**
   * Read the table: take in a slot's run when it is new or its description
   * changed, and say whether the worker knows a run there: its description,
   * parsed for a change, or undefined when it is unchanged (the look reads it
   * when it weighs the run), with false for a slot without a run it knows.
   */
  takeIn(slot: number): RunInfo | undefined | false {
    const { shared } = this.#context;
    const watched = this.#watched;
    if (!shared.live(slot)) {
      watched.forget(slot);
      return false;
    }
    const gen = shared.gen(slot);
    const known = watched.has(slot, KNOWN) && watched.gen[slot] === gen;
    if (known && watched.seq[slot] === shared.infoSeq(slot)) return undefined;
    const read = this.describe(slot);
    if (!read) return known ? undefined : false;
    watched.renew(slot, gen, read.seq, known);
    return read.info;
  }

  /**
   * The run in a slot as the main thread last described it, parsed from shared
   * memory; undefined when the slot is free, its description is being written
   * (the main thread holds it for a copy's time: read again a few times) or
   * is still its previous run's.
   */
  describe(slot: number): { info: RunInfo; seq: number } | undefined {
    const { shared } = this.#context;
    for (let tries = 0; tries < 100; tries++) {
      if (!shared.live(slot)) return undefined;
      const gen = shared.gen(slot);
      const read = shared.readInfo(slot);
      if (!read) continue;
      let info: RunInfo;
      try {
        info = JSON.parse(read.text) as RunInfo;
      } catch {
        return undefined; // no description yet, or one too large to publish (logged by the main thread)
      }
      // A slot just claimed still holds its previous run's description.
      return info.gen === gen ? { info, seq: read.seq } : undefined;
    }
    return undefined;
  }

  /**
   * Decide what is due for one run, and make its records: its deadline, its tool calls'
   * deadlines, its tier (capped) or uncapped multiple, its stall. Returns when it next needs
   * looking at, or undefined to stop watching it.
   */
  weigh(info: RunInfo, settings: Settings, now: number): number | undefined {
    const { shared, source, log } = this.#context;
    const slot = info.slot;
    // A goal run's turns are its stored goal's: read again at each look (one read by key).
    if (info.goalSession !== undefined) {
      const used = storedGoalTurns(this.#home, info.goalSession);
      if (used !== undefined) shared.raiseTurns(slot, used);
    }
    const start = shared.start(slot);
    const elapsed = (now - start) / 1000;
    const plan = this.#plans.get(info.caps, settings, source.version);
    const capped = hasCap(plan);
    const deadline = shared.deadlineAt(slot);
    this.#runDeadline(info, settings, now, deadline, start);
    const toolDue = this.#toolTimeouts(info, settings, now);
    // A run no longer watched for its budget is still watched for its tool calls' deadlines.
    const stop = (why: string): number | undefined => {
      if (!this.#watched.has(slot, STOP_LOGGED)) log("info", why, info.runId);
      this.#watched.set(slot, STOP_LOGGED, true);
      return toolDue === Infinity ? undefined : toolDue;
    };
    if (
      plan.timeCap !== undefined && elapsed > plan.timeCap + PAST_CAP_SECONDS &&
      !(deadline > now)
    ) return stop(`time cap + ${PAST_CAP_SECONDS}s passed; the watchdog stops watching`);
    if (!capped && settings.uncapped_interval_seconds === 0) {
      return stop("no cap and uncapped_interval_seconds is 0; the watchdog stops watching");
    }
    let next = Math.min(deadline > now ? deadline : Infinity, toolDue);
    next = Math.min(
      next,
      capped
        ? this.#tier(info, settings, now, plan, start, elapsed)
        : this.#uncapped(info, settings, now, start, elapsed),
    );
    if (info.goalSession !== undefined) {
      next = Math.min(next, now + settings.watchdog_poll_seconds * 1000);
    }
    return Math.min(next, this.#stall(info, settings, now));
  }

  /** The run's own deadline, once passed: its checkpoint (whichever thread claims it first). */
  #runDeadline(info: RunInfo, settings: Settings, now: number, deadline: number, start: number) {
    const { shared } = this.#context;
    if (deadline > 0 && now >= deadline && shared.claimDeadline(info.slot)) {
      this.#claimed.push(info.slot, info.gen, DEADLINE_CLAIM);
      this.act(info, settings, { kind: "deadline", atSeconds: (deadline - start) / 1000 }, now);
    }
  }

  /**
   * Write the record of each tool call of the run past its deadline (once
   * per call, whichever thread sees it first); returns the next deadline of
   * a call still in flight, or Infinity.
   */
  #toolTimeouts(info: RunInfo, settings: Settings, now: number): number {
    const { shared } = this.#context;
    const slot = info.slot;
    const { from, to } = shared.recentTools(slot);
    let next = Infinity;
    let calls: ReturnType<typeof shared.tools> | undefined;
    for (let n = from; n < to; n++) {
      const at = shared.toolDeadline(slot, n);
      if (at === 0 || shared.timedOut(slot, n)) continue;
      if (now < at) {
        next = Math.min(next, at);
        continue;
      }
      if (!shared.claimTimeout(slot, n)) continue;
      this.#claimed.push(slot, info.gen, n);
      calls ??= shared.tools(slot);
      const call = calls.find((c) => c.seq === n);
      if (!call) continue;
      const startedMs = shared.start(slot) + call.startedAt * 1000;
      const timedOut: TimedOutCall = {
        tool: call.tool,
        timeoutSeconds: (at - startedMs) / 1000,
        startedAt: call.startedAt,
      };
      if (call.callId !== undefined) timedOut.callId = call.callId;
      this.act(info, settings, { kind: "tool_timeout", call: timedOut }, now);
    }
    return next;
  }

  /** A capped run: its tier when due; returns its next time crossing (or time cap's end). */
  #tier(
    info: RunInfo,
    settings: Settings,
    now: number,
    plan: TierPlan,
    start: number,
    elapsed: number,
  ): number {
    const { shared } = this.#context;
    const slot = info.slot;
    let next = Infinity;
    const tier = tierFor(plan, shared.turns(slot), elapsed, shared.tokens(slot), shared.usd(slot));
    if (tier !== 0 && shared.claimTier(slot, tier)) {
      this.act(info, settings, { kind: "tier", tier }, now);
      this.#claimed.push(slot, info.gen, TIER_CLAIM + 1 - tier);
    }
    for (const t of [1, 2] as const) {
      const at = timeCrossing(plan, t);
      if (at !== undefined && !shared.tierClaimed(slot, t)) {
        next = Math.min(next, start + at * 1000);
      }
    }
    if (plan.timeCap !== undefined) {
      next = Math.min(next, start + (plan.timeCap + PAST_CAP_SECONDS) * 1000 + 1);
    }
    return next;
  }

  /** A capless run: its checkpoint at each multiple of the interval; returns the next one's time. */
  #uncapped(info: RunInfo, settings: Settings, now: number, start: number, elapsed: number) {
    const interval = settings.uncapped_interval_seconds;
    const multiple = Math.floor(elapsed / interval + 1e-9);
    if (multiple >= 1 && this.#context.shared.claimMultiple(info.slot, multiple)) {
      this.act(info, settings, { kind: "uncapped", multiple, intervalSeconds: interval }, now);
    }
    return start + (multiple + 1) * interval * 1000;
  }

  /** The stall record once the run was silent for its window; returns the window's end. */
  #stall(info: RunInfo, settings: Settings, now: number): number {
    const { shared } = this.#context;
    const slot = info.slot;
    const window = settings.stall_window_seconds;
    if (window <= 0) return Infinity;
    const deadline = shared.activity(slot) + window * 1000;
    if (now < deadline) return deadline;
    if (shared.claimStall(slot)) {
      this.act(
        info,
        settings,
        { kind: "stall", silentSeconds: (now - shared.activity(slot)) / 1000 },
        now,
      );
    }
    return Infinity;
  }

  /** Make a record found due: it goes out with this look's {@linkcode Looks.flush}. */
  act(info: RunInfo, settings: Settings, event: PersistEvent, now: number): void {
    this.#due.push({ info, settings, event, source: "watchdog", now });
  }

  /** Write what this look found due, then settle the signals it claimed. */
  async flush(): Promise<void> {
    const { shared } = this.#context;
    const settling = this.#claimed;
    this.#claimed = [];
    try {
      await this.#write();
    } finally {
      // Written or not, the main thread may now abort these calls' signals: those of calls
      // still in flight in the same run (a slot or ring entry used anew has no claim to settle).
      for (let k = 0; k < settling.length; k += 3) {
        const [slot, gen, n] = [settling[k]!, settling[k + 1]!, settling[k + 2]!];
        if (shared.gen(slot) !== gen) continue;
        if (n === DEADLINE_CLAIM) shared.settleDeadline(slot);
        else if (n <= TIER_CLAIM) shared.settleTier(slot, n === TIER_CLAIM ? 1 : 2);
        else if (shared.toolDeadline(slot, n) > 0) shared.settleTimeout(slot, n);
      }
    }
  }

  /** The writes found due, through the one checkpoint writer: one at once, a burst concurrently. */
  async #write(): Promise<void> {
    const { shared, writer } = this.#context;
    let writes = this.#due;
    this.#due = [];
    if (writes.length === 0) return;
    // close() has begun: it waits for writes counted in, and no new one starts.
    if (!shared.writing(true)) return;
    try {
      // Counted in first, then checked: a run that ended meanwhile is skipped, and one that
      // ends from here on waits for these writes before it writes its end.
      writes = writes.filter((w) =>
        shared.live(w.info.slot) && shared.gen(w.info.slot) === w.info.gen
      );
      if (writes.length === 0) return;
      if (writes.length === 1) {
        const w = writes[0]!;
        writer.write(w.info, w.settings, w.event, w.source, w.now);
      } else await writer.writeMany(writes);
    } finally {
      shared.writing(false);
    }
  }
}

/**
 * The run ledger from the watchdog's thread (S20): the store's module loaded, the ledger
 * opened on first use while the setting is on (and again after a failed open, backing off),
 * every interval the changed runs' records and the heartbeat in one commit, the records the
 * host's thread handed on, and the store closed at the keeper's close.
 */
class WatchdogLedger {
  /** The run store's module, once loaded; null when there is none (no ledger from this thread). */
  #store: StoreModule | null | undefined;
  readonly #storeReady: Promise<unknown>;
  #ledger: { store: LedgerStore; progress: LedgerProgress } | undefined;
  /** Records the host's thread handed on (the ledger was busy for it), for the next commit. */
  #handed: RunRecord[] = [];
  #off = false;
  #nextProgress = 0;
  /** Failed opens in a row, and when the next try is due (S26: the open is tried again). */
  #openFailures = 0;
  #openAt = 0;

  readonly #context: CoreContext;
  readonly #data: WatchdogData;
  readonly #looks: Looks;
  readonly #now: () => number;

  constructor(context: CoreContext, data: WatchdogData, looks: Looks, now: () => number) {
    this.#context = context;
    this.#data = data;
    this.#looks = looks;
    this.#now = now;
    const { log } = context;
    this.#store = data.storeModule === undefined ? null : undefined;
    this.#storeReady = data.storeModule === undefined
      ? Promise.resolve()
      : import(data.storeModule).then((mod: StoreModule) => {
        if (typeof mod.openRunStore !== "function" || typeof mod.thisHost !== "function") {
          throw new TypeError(`${data.storeModule} is not the run store's module`);
        }
        this.#store = mod;
      }).catch((error) => {
        this.#store = null;
        log("error", `the run ledger is off in the watchdog: ${errorText(error)}`);
      });
  }

  /** Commits so far and records waiting, for the benchmarks' stats. */
  stats(): { commits: number; backlog: number } {
    return {
      commits: this.#ledger?.progress.commits ?? 0,
      backlog: this.#ledger?.progress.backlog ?? 0,
    };
  }

  /** Records the host's thread found the ledger busy for: in the next commit. */
  hand(records: RunRecord[]): void {
    const handed = this.#handed;
    handed.push(...records);
    // Bounded as the worker's own backlog is; what goes is counted where that is.
    if (handed.length > MAX_BACKLOG) handed.splice(0, handed.length - MAX_BACKLOG);
  }

  /** Every interval: the changed runs' records and the heartbeat, in one commit. */
  async progress(): Promise<number> {
    const { shared, source, log } = this.#context;
    const now = this.#now();
    const settings = source.at(now);
    const interval = settings.progress_interval_seconds * 1000;
    if (!settings.enabled || !settings.ledger) return Infinity;
    if (now < this.#nextProgress) return this.#nextProgress;
    this.#nextProgress = now + interval;
    if (this.#store === undefined) await this.#storeReady;
    const writer = this.#open(settings, now);
    if (!writer) return this.#off ? Infinity : Math.max(this.#nextProgress, this.#openAt);
    if (this.#handed.length > 0) {
      for (const record of this.#handed) writer.take(record);
      this.#handed = [];
    }
    const live = writer.collect(shared, (slot) => this.#looks.describe(slot)?.info, now);
    await writer.flush(now, settings.progress_interval_seconds, live > 0);
    // The store's log goes into the database (main-thread writes never do that), kept bounded:
    // the store decides, each interval, whether its log needs it.
    failOpen(
      () => this.#ledger?.store.upkeep?.maintain(),
      (error) => log("warn", `tidying the run ledger failed: ${errorText(error)}`),
    );
    return this.#nextProgress;
  }

  /** The ledger, opened on first use (and tried again, backing off, after a failed open). */
  #open(settings: Settings, now: number): LedgerProgress | undefined {
    const { log } = this.#context;
    if (this.#ledger || this.#off) return this.#ledger?.progress;
    if (now < this.#openAt) return undefined;
    let noDriver = false;
    const say = this.#openFailures === 0 || Number.isInteger(Math.log2(this.#openFailures + 1));
    const store = this.#store;
    if (!store) {
      this.#off = true; // no store module, or it failed to load (said once)
      return undefined;
    }
    const opened = store.openRunStore({
      home: this.#data.home,
      settings,
      // A damaged file is moved aside (never deleted) and a new ledger started.
      setAside: true,
      // The main thread said it already when there is no driver (the one "info" line).
      log: (level, message) => {
        if (level === "info") noDriver = true;
        else if (say) log(level, message);
      },
      ...(this.#data.storePort ? { storePort: this.#data.storePort } : {}),
    });
    if (!opened) {
      if (noDriver) this.#off = true;
      else {
        this.#openFailures++;
        this.#openAt = now + backoffMs(this.#openFailures);
        if (say) {
          log(
            "warn",
            `the run ledger will be opened again (next try in ${
              Math.round((this.#openAt - now) / 1000)
            }s); the live runs wait in memory (at most ${MAX_BACKLOG} records) and are written once it opens`,
          );
        }
      }
      return undefined;
    }
    if (this.#openFailures > 0) {
      log("info", `the run ledger opened after ${this.#openFailures} failed tries`);
    }
    this.#openFailures = 0;
    this.#ledger = { store: opened, progress: new LedgerProgress(opened, log, store.thisHost()) };
    // A bounded batch of ended runs past their retention goes at each process's start.
    opened.prune(now - settings.ledger_retention_days * 86_400_000, PRUNE_AT_START).catch((error) =>
      log("warn", `pruning the run ledger failed: ${errorText(error)}`)
    );
    return this.#ledger.progress;
  }

  /**
   * The records waiting (handed on, or kept after a failed commit whose retry is not yet due)
   * written at close, whatever the backoff: a store that was busy may take them now. Tried
   * again for a bounded while, then what is lost is said.
   */
  async #last(progress: LedgerProgress): Promise<void> {
    const { source, log } = this.#context;
    for (const record of this.#handed) progress.take(record);
    this.#handed = [];
    const until = Date.now() + CLOSE_FLUSH_MS;
    for (let wait = 10; progress.backlog > 0; wait = Math.min(200, wait * 2)) {
      const now = this.#now();
      await progress.flush(now, source.at(now).progress_interval_seconds, false, true);
      if (progress.backlog === 0 || Date.now() + wait > until) break;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
    if (progress.backlog > 0) {
      log(
        "warn",
        `${progress.backlog} run record(s) could not be written to the run ledger by close(): it stayed busy for ${
          CLOSE_FLUSH_MS / 1000
        } s, and they are lost`,
      );
    }
  }

  /**
   * The keeper's close: the records waiting are written, then the store's connection closes,
   * before the thread is terminated, so that no lock of it outlives close() (a keeper opened
   * next finds the ledger free). Nothing is opened again after.
   */
  async close(): Promise<void> {
    const { log } = this.#context;
    const open = this.#ledger;
    this.#ledger = undefined;
    this.#off = true;
    await failOpenAsync(
      async () => {
        if (open) await this.#last(open.progress);
        await open?.store.close();
      },
      (error) => log("warn", `closing the run ledger failed: ${errorText(error)}`),
    );
  }
}

/** How long the keeper's close goes on trying to write the records waiting for the run ledger, ms. */
const CLOSE_FLUSH_MS = 2000;

/** Wakes closer together than this are taken as one (a burst of new runs). */
const WAKE_GAP_MS = 5;

/**
 * The watchdog's loop, over the data its `AgentCheckpoint` started it with. Its entry module
 * (`_watchdog_worker.ts`) calls it in the thread started for it; nothing calls it on import.
 *
 * @param port Where its messages go (the thread's `parentPort`).
 * @param data What it starts with.
 * @param clock The time it reads and its waits between looks (a test drives a fake one).
 * @returns Its stop, for a loop run in a thread of a test's own (the worker's ends with it).
 *
 * @example A run stalled past its window gets the watchdog's record, on a clock the test moves
 * ```ts
 * import { watchdog, WATCHDOG_ENTRY, type WatchdogClock } from "./watchdog.ts";
 * import { RunTable } from "./_run_table.ts";
 * import { MessageChannel } from "node:worker_threads";
 * import assert from "node:assert/strict";
 *
 * const table = new RunTable(undefined, 1);
 * const { port1, port2 } = new MessageChannel();
 * let now = 0;
 * const clock: WatchdogClock = {
 *   now: () => now,
 *   sleep: () => new Promise(() => {}), // never wakes by itself: the test moves it
 *   after: () => {},
 * };
 * const { stop } = watchdog(port1, {
 *   entry: WATCHDOG_ENTRY,
 *   buffers: table.buffers,
 *   home: "/nonexistent",
 *   env: {},
 *   overrides: { watchdog: false },
 *   hostLogger: true,
 *   hostComments: false,
 * }, clock);
 * stop();
 * port1.close();
 * port2.close();
 * assert.equal(now, 0);
 * ```
 */
export function watchdog(
  port: MessagePort,
  data: WatchdogData,
  clock: WatchdogClock = REAL_CLOCK,
): { stop(): void } {
  const post: Post = (message) => port.postMessage(message);
  const context = threadContext(data, post);
  const { shared, log, source } = context;
  const nowMs = clock.now;
  const looks = new Looks(context, data.home, nowMs);
  const ledger = new WatchdogLedger(context, data, looks, nowMs);

  let lastLook = 0;
  /** When the watchdog's own look is next due (the ledger's interval may wake the loop sooner). */
  let nextLook = 0;
  let stopped = false;

  /** One turn: a look when woken or due, its writes, the ledger's interval; then sleep. */
  async function loop(woken: boolean): Promise<void> {
    if (stopped) return;
    const seen = shared.wakes();
    const next = await failOpenAsync(async () => {
      if (woken || nowMs() >= nextLook) {
        lastLook = nowMs();
        nextLook = looks.look();
        await looks.flush();
        shared.looked(source.version, seen);
      }
      return Math.min(nextLook, await ledger.progress());
    }, (error) => {
      log("error", `watchdog poll failed: ${errorText(error)}`);
      return nowMs() + 10_000;
    });
    clock.sleep(shared, seen, Math.ceil(next - nowMs())).then(settle, () => settle(true));
  }

  function settle(woken: boolean): void {
    const gap = WAKE_GAP_MS - (nowMs() - lastLook);
    if (woken && gap > 0) clock.after(gap, () => loop(true));
    else loop(woken);
  }

  // A pending Atomics.waitAsync does not keep a worker alive by itself. This
  // keeps the worker (not the host: the worker is unref'd) running.
  const timers = [setInterval(() => {}, 2 ** 30)];
  if (data.statsEveryMs) {
    const gc = (globalThis as { gc?: () => void }).gc;
    timers.push(setInterval(() => {
      gc?.();
      const { commits, backlog } = ledger.stats();
      post({
        type: "stats",
        stats: {
          heapUsed: process.memoryUsage().heapUsed,
          watched: looks.watched,
          ledgerCommits: commits,
          ledgerBacklog: backlog,
        },
      });
    }, data.statsEveryMs));
  }
  loop(true);
  const stop = () => {
    stopped = true;
    for (const timer of timers) clearInterval(timer);
    shared.wake(); // the pending wait settles, and the loop ends there
  };
  port.on("message", (message: ToWorker) => {
    if (message?.type === "records") ledger.hand(message.records);
    else if (message?.type === "close") {
      stop();
      void ledger.close().then(() => post({ type: "closed" }));
    }
  });
  return { stop };
}
