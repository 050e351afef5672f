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
import { type MessagePort, parentPort, workerData } from "node:worker_threads";
import { SettingsSource } from "./config.ts";
import { createLog, errorText, failOpen, failOpenAsync, type Log } from "./log.ts";
import type { Settings } from "./settings.ts";
import { nowMs, RunTable } from "./_run_table.ts";
import { CheckpointWriter, type PendingWrite, type PersistEvent, type RunInfo } from "./_writer.ts";
import type { TimedOutCall } from "./_record.ts";
import {
  capValues,
  hasCap,
  PAST_CAP_SECONDS,
  tierFor,
  type TierPlan,
  tierPlan,
  timeCrossing,
} from "./tier.ts";
// Types only: the worker never loads the main thread's side of the watchdog.
import type { FromWorker, WatchdogData } from "./_watchdog_host.ts";
import { LedgerProgress, type LedgerStore, PRUNE_AT_START } from "./_ledger.ts";
import { openRunStore, thisHost } from "./store/mod.ts";

/** Progress intervals between two tidyings of the run ledger. */
const MAINTAIN_EVERY = 10;

/** What the worker keeps of a run it has seen. */
interface Watched {
  gen: number;
  seq: number;
  info: RunInfo;
  /** No longer watched (S9 interval 0, S11 time cap + 180 s). */
  dropped: boolean;
  /** When it next needs a look, ms; -Infinity when new or changed. */
  nextAt: number;
  /** Its deadline and stall state at its last look: a change calls for a new one. */
  deadlineAt: number;
  stalled: boolean;
  /** Tool calls with a deadline started by its last look: a new one calls for a look. */
  timedCalls: number;
  /** Whether "stops watching" was logged. */
  stopLogged: boolean;
  plan?: TierPlan;
  planVersion?: number;
}

/** The watchdog's loop, over the data its `AgentCheckpoint` started it with. */
function watchdog(port: MessagePort, data: WatchdogData): void {
  const shared = new RunTable(data.buffers);
  const watched = new Map<number, Watched>();
  const post = (message: FromWorker) => port.postMessage(message);
  const log: Log = data.hostLogger
    ? (level, message, runId) =>
      post(
        runId === undefined
          ? { type: "log", level, message }
          : { type: "log", level, message, runId },
      )
    : createLog(data.home);
  const source = new SettingsSource(data.home, data.env, data.overrides);

  type PostComment = (comment: { taskId: string; body: string }) => unknown;
  let moduleSink: PostComment | undefined;
  const moduleReady: Promise<void> = data.commentModule === undefined
    ? Promise.resolve()
    : import(data.commentModule).then((mod) => {
      if (typeof mod.postComment !== "function") {
        throw new TypeError(`${data.commentModule} does not export postComment`);
      }
      moduleSink = mod.postComment;
    }).catch((error) => log("error", `commentModule could not be loaded: ${errorText(error)}`));

  const writer = new CheckpointWriter(shared, {
    log,
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
  });

  /** The writes one look found due: one goes out at once, a burst concurrently. */
  let due: PendingWrite[] = [];

  function act(run: Watched, settings: Settings, event: PersistEvent, now: number): void {
    due.push({ info: run.info, settings, event, source: "watchdog", now });
  }

  async function flush(): Promise<void> {
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
  function toolTimeouts(run: Watched, settings: Settings, now: number): number {
    const slot = run.info.slot;
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
      act(run, settings, { kind: "tool_timeout", call: timedOut }, now);
    }
    return next;
  }

  /** Look at one run; returns when it next needs looking at, or undefined to stop watching. */
  function watch(run: Watched, settings: Settings, now: number): number | undefined {
    const info = run.info;
    const slot = info.slot;
    const start = shared.start(slot);
    const elapsed = (now - start) / 1000;
    if (run.plan === undefined || run.planVersion !== source.version) {
      run.plan = tierPlan(capValues(info.caps), settings);
      run.planVersion = source.version;
    }
    const plan = run.plan;
    const capped = hasCap(plan);
    const deadline = shared.deadlineAt(slot);
    if (deadline > 0 && now >= deadline && shared.claimDeadline(slot)) {
      act(run, settings, { kind: "deadline", atSeconds: (deadline - start) / 1000 }, now);
    }
    const toolDue = toolTimeouts(run, settings, now);
    // A run no longer watched for its budget is still watched for its tool calls' deadlines.
    const stop = (why: string): number | undefined => {
      if (!run.stopLogged) log("info", why, info.runId);
      run.stopLogged = true;
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
        act(run, settings, { kind: "tier", tier }, now);
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
        act(run, settings, { kind: "uncapped", multiple, intervalSeconds: interval }, now);
      }
      next = Math.min(next, start + (multiple + 1) * interval * 1000);
    }
    const window = settings.stall_window_seconds;
    if (window > 0) {
      const deadline = shared.activity(slot) + window * 1000;
      if (now >= deadline) {
        if (shared.claimStall(slot)) {
          act(
            run,
            settings,
            { kind: "stall", silentSeconds: (now - shared.activity(slot)) / 1000 },
            now,
          );
        }
      } else next = Math.min(next, deadline);
    }
    return next;
  }

  /** The run in a slot as the main thread last described it, or undefined. */
  function runIn(slot: number): Watched | undefined {
    if (!shared.live(slot)) {
      watched.delete(slot);
      return undefined;
    }
    const gen = shared.gen(slot);
    const known = watched.get(slot);
    if (known?.gen === gen && known.seq === shared.infoSeq(slot)) return known;
    const read = shared.readInfo(slot);
    if (!read) return known?.gen === gen ? known : undefined;
    let info: RunInfo;
    try {
      info = JSON.parse(read.text) as RunInfo;
    } catch {
      return undefined; // no description yet, or one too large to publish (logged by the main thread)
    }
    // A slot just claimed still holds its previous run's description.
    if (info.gen !== gen) return undefined;
    const same = known?.gen === gen;
    const run: Watched = {
      gen,
      seq: read.seq,
      info,
      dropped: same && known.dropped,
      nextAt: -Infinity,
      deadlineAt: 0,
      stalled: false,
      timedCalls: -1,
      stopLogged: same && known.stopLogged,
    };
    watched.set(slot, run);
    return run;
  }

  /** The run ledger (S20): opened on first use while the setting is on. */
  let ledger: { store: LedgerStore; progress: LedgerProgress } | undefined;
  let ledgerOff = false;
  let nextProgress = 0;
  let progressTicks = 0;

  function openLedger(settings: Settings, now: number): LedgerProgress | undefined {
    if (ledger || ledgerOff) return ledger?.progress;
    const store = openRunStore({
      home: data.home,
      settings,
      // The main thread said it already when there is no driver (the one "info" line).
      log: (level, message) => level !== "info" && log(level, message),
      ...(data.storePort ? { storePort: data.storePort } : {}),
    });
    if (!store) {
      ledgerOff = true;
      return undefined;
    }
    ledger = { store, progress: new LedgerProgress(store, log, thisHost()) };
    // A bounded batch of ended runs past their retention goes at each process's start.
    store.prune(now - settings.ledger_retention_days * 86_400_000, PRUNE_AT_START).catch((error) =>
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
    const writer = openLedger(settings, now);
    if (!writer) return Infinity;
    const live = writer.collect(shared, (slot) => runIn(slot)?.info, now);
    await writer.flush(now, settings.progress_interval_seconds, live > 0);
    // Now and then, the store's log goes into the database (main-thread writes never do that).
    if (++progressTicks % MAINTAIN_EVERY === 0) {
      failOpen(
        () => ledger?.store.maintain?.(),
        (error) => log("warn", `tidying the run ledger failed: ${errorText(error)}`),
      );
    }
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
    for (let slot = 0; slot < slots; slot++) {
      try {
        const run = runIn(slot);
        if (!run) continue;
        const timedCalls = shared.timedCalls(slot);
        if (run.dropped && run.timedCalls === timedCalls) continue;
        if (
          !full && run.nextAt > now && run.deadlineAt === shared.deadlineAt(slot) &&
          run.stalled === shared.stalled(slot) && run.timedCalls === timedCalls
        ) {
          next = Math.min(next, run.nextAt);
          continue;
        }
        run.deadlineAt = shared.deadlineAt(slot);
        run.timedCalls = timedCalls;
        run.dropped = false;
        const due = watch(run, settings, now);
        run.stalled = shared.stalled(slot);
        if (due === undefined) run.dropped = true;
        else {
          run.nextAt = due;
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

  async function loop(woken: boolean): Promise<void> {
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
    shared.waitForWake(seen, Math.ceil(next - nowMs())).then(
      (result) => settle(result !== "timed-out"),
      () => settle(true),
    );
  }

  function settle(woken: boolean): void {
    const gap = WAKE_GAP_MS - (nowMs() - lastLook);
    if (woken && gap > 0) setTimeout(() => loop(true), gap);
    else loop(woken);
  }

  // A pending Atomics.waitAsync does not keep a worker alive by itself. This
  // keeps the worker (not the host: the worker is unref'd) running.
  setInterval(() => {}, 2 ** 30);
  if (data.statsEveryMs) {
    const gc = (globalThis as { gc?: () => void }).gc;
    setInterval(() => {
      gc?.();
      post({
        type: "stats",
        stats: {
          heapUsed: process.memoryUsage().heapUsed,
          watched: watched.size,
          ledgerCommits: ledger?.progress.commits ?? 0,
          ledgerBacklog: ledger?.progress.backlog ?? 0,
        },
      });
    }, data.statsEveryMs);
  }
  loop(true);
}

// Imported outside a worker (by a documentation or type check), it does nothing.
if (parentPort !== null && workerData !== null) watchdog(parentPort, workerData as WatchdogData);
