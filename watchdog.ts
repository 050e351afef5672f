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
 * @module
 */
import process from "node:process";
import type { MessagePort } from "node:worker_threads";
import { coreContext, type Env } from "./config.ts";
import { errorText, failOpen, failOpenAsync, type Log } from "./log.ts";
import type { Settings } from "./settings.ts";
import { grownTo, nowMs, type RunTable, type RunTableBuffers } from "./_run_table.ts";
import type { CheckpointEvent, PendingWrite, PersistEvent, RunInfo } from "./_writer.ts";
import type { TimedOutCall } from "./_record.ts";
import { hasCap, PAST_CAP_SECONDS, tierFor, TierPlans, timeCrossing } from "./tier.ts";
import {
  backoffMs,
  type HostId,
  LedgerProgress,
  type LedgerStore,
  MAX_BACKLOG,
  PRUNE_AT_START,
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

/** The host to the worker: close the run ledger's store, then say `closed` (the keeper's close). */
export type ToWorker = { type: "close" };

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
  const post = (message: FromWorker) => port.postMessage(message);
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
  // The same core context as the main thread's, over the run table it shares.
  const { shared, log, source, writer } = coreContext({
    home: data.home,
    env: data.env,
    overrides: data.overrides,
    buffers: data.buffers,
    ...(hostLog ? { log: hostLog } : {}),
    sinks: (log) => ({
      // Through the comment module once it has loaded, else through the host's sink when free.
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
  const watched = new WatchedSlots();
  const plans = new TierPlans();
  const nowMs = clock.now;

  if (data.commentModule !== undefined) {
    moduleReady = import(data.commentModule).then((mod) => {
      if (typeof mod.postComment !== "function") {
        throw new TypeError(`${data.commentModule} does not export postComment`);
      }
      moduleSink = mod.postComment;
    }).catch((error) => log("error", `commentModule could not be loaded: ${errorText(error)}`));
  }

  /** The run store's module, once loaded; null when there is none (no ledger from this thread). */
  let store: StoreModule | null | undefined = data.storeModule === undefined ? null : undefined;
  const storeReady: Promise<unknown> = data.storeModule === undefined
    ? Promise.resolve()
    : import(data.storeModule).then((mod: StoreModule) => {
      if (typeof mod.openRunStore !== "function" || typeof mod.thisHost !== "function") {
        throw new TypeError(`${data.storeModule} is not the run store's module`);
      }
      store = mod;
    }).catch((error) => {
      store = null;
      log("error", `the run ledger is off in the watchdog: ${errorText(error)}`);
    });

  /** The writes one look found due: one goes out at once, a burst concurrently. */
  let due: PendingWrite[] = [];
  /**
   * The records this look claimed whose signal the main thread aborts: (slot, its run's
   * generation, a tool call's sequence number or DEADLINE_CLAIM) each.
   */
  let claimed: number[] = [];

  function act(info: RunInfo, settings: Settings, event: PersistEvent, now: number): void {
    due.push({ info, settings, event, source: "watchdog", now });
  }

  async function flush(): Promise<void> {
    const settling = claimed;
    claimed = [];
    try {
      await writeDue();
    } finally {
      // Written or not, the main thread may now abort these calls' signals: those of calls
      // still in flight in the same run (a slot or ring entry used anew has no claim to settle).
      for (let k = 0; k < settling.length; k += 3) {
        const [slot, gen, n] = [settling[k]!, settling[k + 1]!, settling[k + 2]!];
        if (shared.gen(slot) !== gen) continue;
        if (n === DEADLINE_CLAIM) shared.settleDeadline(slot);
        else if (shared.toolDeadline(slot, n) > 0) shared.settleTimeout(slot, n);
      }
    }
  }

  async function writeDue(): Promise<void> {
    let writes = due;
    due = [];
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

  /**
   * Write the record of each tool call of the run past its deadline (once
   * per call, whichever thread sees it first); returns the next deadline of
   * a call still in flight, or Infinity.
   */
  function toolTimeouts(info: RunInfo, settings: Settings, now: number): number {
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
      claimed.push(slot, info.gen, n);
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
      act(info, settings, { kind: "tool_timeout", call: timedOut }, now);
    }
    return next;
  }

  /** Look at one run; returns when it next needs looking at, or undefined to stop watching. */
  function watch(info: RunInfo, settings: Settings, now: number): number | undefined {
    const slot = info.slot;
    // A goal run's turns are its stored goal's: read again at each look (one read by key).
    if (info.goalSession !== undefined) {
      const used = storedGoalTurns(data.home, info.goalSession);
      if (used !== undefined) shared.raiseTurns(slot, used);
    }
    const start = shared.start(slot);
    const elapsed = (now - start) / 1000;
    const plan = plans.get(info.caps, settings, source.version);
    const capped = hasCap(plan);
    const deadline = shared.deadlineAt(slot);
    if (deadline > 0 && now >= deadline && shared.claimDeadline(slot)) {
      claimed.push(slot, info.gen, DEADLINE_CLAIM);
      act(info, settings, { kind: "deadline", atSeconds: (deadline - start) / 1000 }, now);
    }
    const toolDue = toolTimeouts(info, settings, now);
    // A run no longer watched for its budget is still watched for its tool calls' deadlines.
    const stop = (why: string): number | undefined => {
      if (!watched.has(slot, STOP_LOGGED)) log("info", why, info.runId);
      watched.set(slot, STOP_LOGGED, true);
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
    if (capped) {
      const tier = tierFor(
        plan,
        shared.turns(slot),
        elapsed,
        shared.tokens(slot),
        shared.usd(slot),
      );
      if (tier !== 0 && shared.claimTier(slot, tier)) {
        act(info, settings, { kind: "tier", tier }, now);
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
    } else {
      const interval = settings.uncapped_interval_seconds;
      const multiple = Math.floor(elapsed / interval + 1e-9);
      if (multiple >= 1 && shared.claimMultiple(slot, multiple)) {
        act(info, settings, { kind: "uncapped", multiple, intervalSeconds: interval }, now);
      }
      next = Math.min(next, start + (multiple + 1) * interval * 1000);
    }
    if (info.goalSession !== undefined) {
      next = Math.min(next, now + settings.watchdog_poll_seconds * 1000);
    }
    const window = settings.stall_window_seconds;
    if (window > 0) {
      const deadline = shared.activity(slot) + window * 1000;
      if (now >= deadline) {
        if (shared.claimStall(slot)) {
          act(
            info,
            settings,
            { kind: "stall", silentSeconds: (now - shared.activity(slot)) / 1000 },
            now,
          );
        }
      } else next = Math.min(next, deadline);
    }
    return next;
  }

  /**
   * The run in a slot as the main thread last described it, parsed from shared
   * memory; undefined when the slot is free, its description is being written
   * (the main thread holds it for a copy's time: read again a few times) or
   * is still its previous run's.
   */
  function describe(slot: number): { info: RunInfo; seq: number } | undefined {
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
   * Take in a slot's run when it is new or its description changed, and say
   * whether the worker knows a run there: its description, parsed for a
   * change, or undefined when it is unchanged (the look reads it when it
   * weighs the run), with false for a slot without a run it knows.
   */
  function takeIn(slot: number): RunInfo | undefined | false {
    if (!shared.live(slot)) {
      watched.forget(slot);
      return false;
    }
    const gen = shared.gen(slot);
    const known = watched.has(slot, KNOWN) && watched.gen[slot] === gen;
    if (known && watched.seq[slot] === shared.infoSeq(slot)) return undefined;
    const read = describe(slot);
    if (!read) return known ? undefined : false;
    watched.renew(slot, gen, read.seq, known);
    return read.info;
  }

  /** The run ledger (S20): opened on first use while the setting is on. */
  let ledger: { store: LedgerStore; progress: LedgerProgress } | undefined;
  let ledgerOff = false;
  let nextProgress = 0;
  /** Failed opens in a row, and when the next try is due (S26: the open is tried again). */
  let openFailures = 0;
  let openAt = 0;

  function openLedger(settings: Settings, now: number): LedgerProgress | undefined {
    if (ledger || ledgerOff) return ledger?.progress;
    if (now < openAt) return undefined;
    let noDriver = false;
    const say = openFailures === 0 || Number.isInteger(Math.log2(openFailures + 1));
    if (!store) {
      ledgerOff = true; // no store module, or it failed to load (said once)
      return undefined;
    }
    const opened = store.openRunStore({
      home: data.home,
      settings,
      // A damaged file is moved aside (never deleted) and a new ledger started.
      setAside: true,
      // The main thread said it already when there is no driver (the one "info" line).
      log: (level, message) => {
        if (level === "info") noDriver = true;
        else if (say) log(level, message);
      },
      ...(data.storePort ? { storePort: data.storePort } : {}),
    });
    if (!opened) {
      if (noDriver) ledgerOff = true;
      else {
        openFailures++;
        openAt = now + backoffMs(openFailures);
        if (say) {
          log(
            "warn",
            `the run ledger will be opened again (next try in ${
              Math.round((openAt - now) / 1000)
            }s); the live runs wait in memory (at most ${MAX_BACKLOG} records) and are written once it opens`,
          );
        }
      }
      return undefined;
    }
    if (openFailures > 0) {
      log("info", `the run ledger opened after ${openFailures} failed tries`);
    }
    openFailures = 0;
    ledger = { store: opened, progress: new LedgerProgress(opened, log, store.thisHost()) };
    // A bounded batch of ended runs past their retention goes at each process's start.
    opened.prune(now - settings.ledger_retention_days * 86_400_000, PRUNE_AT_START).catch((error) =>
      log("warn", `pruning the run ledger failed: ${errorText(error)}`)
    );
    return ledger.progress;
  }

  /** Every interval: the changed runs' records and the heartbeat, in one commit. */
  async function progress(): Promise<number> {
    const now = nowMs();
    const settings = source.at(now);
    const interval = settings.progress_interval_seconds * 1000;
    if (!settings.enabled || !settings.ledger) return Infinity;
    if (now < nextProgress) return nextProgress;
    nextProgress = now + interval;
    if (store === undefined) await storeReady;
    const writer = openLedger(settings, now);
    if (!writer) return ledgerOff ? Infinity : Math.max(nextProgress, openAt);
    const live = writer.collect(shared, (slot) => describe(slot)?.info, now);
    await writer.flush(now, settings.progress_interval_seconds, live > 0);
    // The store's log goes into the database (main-thread writes never do that), kept bounded:
    // the store decides, each interval, whether its log needs it.
    failOpen(
      () => ledger?.store.maintain?.(),
      (error) => log("warn", `tidying the run ledger failed: ${errorText(error)}`),
    );
    return nextProgress;
  }

  let nextPoll = 0;
  let lastVersion = -1;

  /**
   * Look at the runs that need it: all of them when the settings changed
   * (they are reloaded at each poll); else only the new and changed ones and
   * those whose moment has come, so that a wake or a poll costs a scan of the
   * table, not a look at every run.
   */
  function look(): number {
    const now = nowMs();
    const settings = source.at(now);
    // A poll reloads the settings (above); only changed settings call for a look at every run.
    const full = source.version !== lastVersion;
    lastVersion = source.version;
    if (now >= nextPoll || full) nextPoll = now + settings.watchdog_poll_seconds * 1000;
    let next = nextPoll;
    if (!settings.enabled || !settings.watchdog || !settings.mid_run_persist) return next;
    const slots = shared.slots;
    shared.refresh(); // after reading the count: the views cover every slot counted
    watched.cover(slots);
    for (let slot = 0; slot < slots; slot++) {
      try {
        const changed = takeIn(slot);
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
        const info = changed ?? describe(slot)?.info;
        if (info === undefined) continue;
        watched.deadlineAt[slot] = shared.deadlineAt(slot);
        watched.timedCalls[slot] = timedCalls;
        watched.set(slot, DROPPED, false);
        const due = watch(info, settings, now);
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

  /** Wakes closer together than this are taken as one (a burst of new runs). */
  const WAKE_GAP_MS = 5;
  let lastLook = 0;

  /** When the watchdog's own look is next due (the ledger's interval may wake the loop sooner). */
  let nextLook = 0;

  let stopped = false;

  async function loop(woken: boolean): Promise<void> {
    if (stopped) return;
    const seen = shared.wakes();
    const next = await failOpenAsync(async () => {
      if (woken || nowMs() >= nextLook) {
        lastLook = nowMs();
        nextLook = look();
        await flush();
        shared.looked(source.version, seen);
      }
      return Math.min(nextLook, await progress());
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
      post({
        type: "stats",
        stats: {
          heapUsed: process.memoryUsage().heapUsed,
          watched: watched.count,
          ledgerCommits: ledger?.progress.commits ?? 0,
          ledgerBacklog: ledger?.progress.backlog ?? 0,
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
  // The keeper's close: the store's connection closes here, before the thread is terminated, so
  // that no lock of it outlives close() (a keeper opened next finds the ledger free).
  port.on("message", (message: ToWorker) => {
    if (message?.type !== "close") return;
    stop();
    const store = ledger?.store;
    ledger = undefined;
    ledgerOff = true;
    void failOpenAsync(
      async () => await store?.close(),
      (error) => log("warn", `closing the run ledger failed: ${errorText(error)}`),
    ).then(() => post({ type: "closed" }));
  });
  return { stop };
}
