/**
 * The watchdog worker (S9, S10, S11): one thread per `AgentCheckpoint`,
 * watching all its runs through shared memory and persisting checkpoint files
 * itself, so a run whose main thread is blocked still gets its record.
 *
 * It sleeps until the next moment something can be due (a tier crossing on
 * the time axis, the next uncapped multiple, a stall deadline) or the poll
 * interval, whichever comes first, and reloads the settings on each poll.
 *
 * @module
 */
import process from "node:process";
import { type MessagePort, parentPort, workerData } from "node:worker_threads";
import { SettingsSource } from "./discover.ts";
import { createLog, errorText, type Log } from "./log.ts";
import { commentBody } from "./record.ts";
import type { Settings } from "./settings.ts";
import { MAX_RUNS, nowMs, SharedRuns } from "./shared.ts";
import { type PersistEvent, persistRecord, type RunInfo, snapshot } from "./snapshot.ts";
import { capValues, tierFor, type TierPlan, tierPlan, timeCrossing } from "./tier.ts";
import type { FromWorker, WatchdogData } from "./watchdog_protocol.ts";

/** Seconds past the time cap after which a run is no longer watched (S11). */
export const PAST_CAP_SECONDS = 180;

/** What the worker keeps of a run it has seen. */
interface Watched {
  gen: number;
  seq: number;
  info: RunInfo;
  /** The kanban comment of a capless run went out (S9: first fire only). */
  commented: boolean;
  /** No longer watched (S9 interval 0, S11 time cap + 180 s). */
  dropped: boolean;
  plan?: TierPlan;
  planVersion?: number;
}

/** The watchdog's loop, over the data its `AgentCheckpoint` started it with. */
function watchdog(port: MessagePort, data: WatchdogData): void {
  const shared = new SharedRuns(data.buffer);
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

  /** Through the comment module once it has loaded, else through the host's sink when free. */
  function comment(info: RunInfo, body: string): void {
    const taskId = info.taskId as string;
    const fail = (error: unknown) =>
      log("warn", `posting the task comment failed: ${errorText(error)}`, info.runId);
    moduleReady.then(async () => {
      if (moduleSink) await moduleSink({ taskId, body });
      else if (data.hostComments) post({ type: "comment", comment: { taskId, body } });
    }).catch(fail);
  }

  function act(run: Watched, settings: Settings, event: PersistEvent, now: number): void {
    const info = run.info;
    if (settings.mode === "log-only") {
      log(
        "info",
        `${event.kind === "tier" ? `tier ${event.tier}` : event.kind} due (watchdog)`,
        info.runId,
      );
      return;
    }
    let record;
    try {
      record = snapshot(
        info,
        shared,
        settings,
        event,
        "watchdog",
        now,
      );
      persistRecord(info, record);
    } catch (error) {
      log(
        "error",
        `could not persist the checkpoint to ${info.checkpointFile}: ${errorText(error)}`,
        info.runId,
      );
      return;
    }
    if (info.taskId === undefined) return;
    // Capless runs rewrite the file at every multiple but comment once (S9).
    if (event.kind === "uncapped" && run.commented) return;
    run.commented = true;
    comment(info, commentBody(record));
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
    const capped = plan.turnCap !== undefined || plan.timeCap !== undefined;
    if (plan.timeCap !== undefined && elapsed > plan.timeCap + PAST_CAP_SECONDS) {
      log(
        "info",
        `time cap + ${PAST_CAP_SECONDS}s passed; the watchdog stops watching`,
        info.runId,
      );
      return undefined;
    }
    if (!capped && settings.uncapped_interval_seconds === 0) {
      log(
        "info",
        "no cap and uncapped_interval_seconds is 0; the watchdog stops watching",
        info.runId,
      );
      return undefined;
    }
    let next = Infinity;
    if (capped) {
      const tier = tierFor(plan, shared.turns(slot), elapsed);
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
    const info = JSON.parse(read.text) as RunInfo;
    // A slot just claimed still holds its previous run's description.
    if (info.gen !== gen) return undefined;
    const same = known?.gen === gen;
    const run: Watched = {
      gen,
      seq: read.seq,
      info,
      commented: same && known.commented,
      dropped: same && known.dropped,
    };
    watched.set(slot, run);
    return run;
  }

  function look(): number {
    const now = nowMs();
    const settings = source.at(now);
    let next = now + settings.watchdog_poll_seconds * 1000;
    if (!settings.enabled || !settings.watchdog || !settings.mid_run_persist) return next;
    for (let slot = 0; slot < MAX_RUNS; slot++) {
      try {
        const run = runIn(slot);
        if (!run || run.dropped) continue;
        const due = watch(run, settings, now);
        if (due === undefined) run.dropped = true;
        else next = Math.min(next, due);
      } catch (error) {
        log("error", `watchdog failed on a run: ${errorText(error)}`);
      }
    }
    return next;
  }

  function loop(): void {
    const seen = shared.wakes();
    let next: number;
    try {
      next = look();
    } catch (error) {
      log("error", `watchdog poll failed: ${errorText(error)}`);
      next = nowMs() + 10_000;
    }
    shared.waitForWake(seen, Math.ceil(next - nowMs())).then(loop, loop);
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
        stats: { heapUsed: process.memoryUsage().heapUsed, watched: watched.size },
      });
    }, data.statsEveryMs);
  }
  loop();
}

// Imported outside a worker (by a documentation or type check), it does nothing.
if (parentPort !== null && workerData !== null) watchdog(parentPort, workerData as WatchdogData);
