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
import { type MessagePort, parentPort, workerData } from "node:worker_threads";
import { SettingsSource } from "./discover.ts";
import { createLog, errorText, type Log } from "./log.ts";
import { commentBody } from "./record.ts";
import type { Settings } from "./settings.ts";
import { nowMs, SharedRuns } from "./shared.ts";
import { type PersistEvent, persistRecord, type RunInfo, snapshot } from "./snapshot.ts";
import { tierFor, tierPlan, timeCrossing } from "./tier.ts";
import { MAX_NOTES } from "./snapshot.ts";
import type { FromWorker, ToWorker, WatchdogData } from "./watchdog_protocol.ts";

/** Seconds past the time cap after which a run is no longer watched (S11). */
export const PAST_CAP_SECONDS = 180;

/** The watchdog's loop, over the data its `AgentCheckpoint` started it with. */
function watchdog(port: MessagePort, data: WatchdogData): void {
  const shared = new SharedRuns(data.buffer);
  const toolNames = [...data.toolNames];
  const runs = new Map<number, RunInfo>(data.runs.map((info) => [info.slot, info]));
  const commented = new WeakSet<RunInfo>();
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

  function comment(info: RunInfo, body: string): void {
    const taskId = info.taskId as string;
    if (moduleSink === undefined && data.hostComments) {
      post({ type: "comment", comment: { taskId, body } });
      return;
    }
    const fail = (error: unknown) =>
      log("warn", `posting the task comment failed: ${errorText(error)}`, info.runId);
    moduleReady.then(async () => {
      if (moduleSink) await moduleSink({ taskId, body });
      else if (data.hostComments) post({ type: "comment", comment: { taskId, body } });
    }).catch(fail);
  }

  function act(info: RunInfo, settings: Settings, event: PersistEvent, now: number): void {
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
        (id) => toolNames[id] ?? "(unknown)",
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
    if (event.kind === "uncapped" && commented.has(info)) return;
    commented.add(info);
    comment(info, commentBody(record));
  }

  /** Look at one run; returns when it next needs looking at, or undefined to stop watching. */
  function watch(info: RunInfo, settings: Settings, now: number): number | undefined {
    const slot = info.slot;
    const start = shared.start(slot);
    const elapsed = (now - start) / 1000;
    const plan = tierPlan(
      { turns: info.caps.turns?.value, timeSeconds: info.caps.time?.value },
      settings,
    );
    const capped = plan.turnCap !== undefined || plan.timeCap !== undefined;
    if (plan.timeCap !== undefined && elapsed > plan.timeCap + PAST_CAP_SECONDS) {
      log(
        "info",
        `time cap + ${PAST_CAP_SECONDS}s passed; the watchdog stops watching`,
        info.runId,
      );
      return undefined;
    }
    if (!capped && settings.uncapped_interval_seconds === 0) return undefined;
    let next = Infinity;
    if (capped) {
      const tier = tierFor(plan, shared.turns(slot), elapsed);
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

  let timer: ReturnType<typeof setTimeout> | undefined;

  function tick(): void {
    clearTimeout(timer);
    let next = Infinity;
    try {
      const now = nowMs();
      const settings = source.at(now);
      next = now + settings.watchdog_poll_seconds * 1000;
      if (settings.enabled && settings.watchdog && settings.mid_run_persist) {
        for (const [slot, info] of runs) {
          if (shared.gen(slot) !== info.gen) {
            runs.delete(slot);
            continue;
          }
          const due = watch(info, settings, now);
          if (due === undefined) runs.delete(slot);
          else next = Math.min(next, due);
        }
      }
    } catch (error) {
      log("error", `watchdog poll failed: ${errorText(error)}`);
    }
    if (!Number.isFinite(next)) next = nowMs() + 10_000;
    timer = setTimeout(tick, Math.max(1, Math.ceil(next - nowMs())));
  }

  port.on("message", (message: ToWorker) => {
    try {
      if (message.type === "run") runs.set(message.info.slot, message.info);
      else if (message.type === "tool") toolNames[message.id] = message.name;
      else if (message.type === "note") {
        const info = runs.get(message.slot);
        if (info?.gen === message.gen) {
          info.notes.push(message.text);
          if (info.notes.length > MAX_NOTES) info.notes.splice(0, info.notes.length - MAX_NOTES);
        }
      }
    } catch (error) {
      log("error", `watchdog message failed: ${errorText(error)}`);
    }
    tick();
  });

  tick();
}

// Imported outside a worker (by a documentation or type check), it does nothing.
if (parentPort !== null && workerData !== null) watchdog(parentPort, workerData as WatchdogData);
