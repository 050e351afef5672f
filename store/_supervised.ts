/**
 * The supervisor's record in the run ledger: when the command it ran ends
 * (or meets its deadline), the run's newest attempt records how; a command
 * that never recorded a run of its own gets an attempt recorded for it.
 *
 * @module
 */
import { loadSettings, resolveHome } from "../config.ts";
import type { Env } from "../config.ts";
import type { CheckpointRecord, EndStatus } from "../_record.ts";
import { openStore } from "./_open.ts";
import { backendOf } from "./_backends.ts";
import { openBridge } from "./_bridge.ts";
import { thisHost } from "./_host.ts";
import type { RunRecord, RunView } from "./types.ts";

/** What the supervisor knows of the run when it writes its record. */
export interface SupervisedEnd {
  /** The profile directory, when given. */
  home?: string;
  /** The environment the supervisor runs in. */
  env: Env;
  /** The record the supervisor wrote into the checkpoint file. */
  record: CheckpointRecord;
  /** The checkpoint file. */
  file: string;
  /** How the run ended. */
  status: EndStatus;
  /** When the supervisor started the command, ms since the epoch. */
  startedAt: number;
  /** The command's process id, when it started: only an attempt of that process is the command's own. */
  pid?: number;
}

/**
 * Bring the run's ledger record to the supervisor's end: the attempt the
 * command itself recorded (started after the supervisor began), else a new
 * attempt. Throws on a store failure (the supervisor reports it); does
 * nothing when the ledger is off or there is no driver.
 *
 * @param end The run, its record, its end and when it started.
 * @returns Whether the ledger took the record.
 *
 * @example
 * ```ts
 * import { openStore, recordSupervisedEnd } from "./mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * const at = new Date().toISOString();
 * recordSupervisedEnd({
 *   home,
 *   env: {},
 *   file: join(home, "job.md"),
 *   status: "deadline",
 *   startedAt: Date.now(),
 *   record: {
 *     kind: "deadline", source: "supervisor", runId: "job", dialect: "chat", turnsUsed: 0,
 *     elapsedSeconds: 60, caps: {}, tier: 0, persistedAt: at, message: "", tools: [], notes: [],
 *     end: { status: "deadline", at },
 *   },
 * });
 * const store = openStore({ home, settings: { host_timeout_seconds: 30 } })!;
 * assert.equal(store.latestSync("job")?.record.status, "deadline");
 * store.closeSync();
 * ```
 */
export function recordSupervisedEnd(end: SupervisedEnd): boolean {
  const home = resolveHome(end.home, end.env);
  const settings = loadSettings({ home, env: end.env }).settings;
  if (!settings.enabled || !settings.ledger) return false;
  let failure: string | undefined;
  const log = (_l: unknown, m: string) => (failure = m);
  // The fleet store when the settings name one: the same calls, each waited for (bounded).
  const backend = backendOf(settings.store);
  const store = backend
    ? openBridge({
      backend,
      url: settings.store as string,
      hostTimeoutSeconds: settings.host_timeout_seconds,
      fileMaxKb: settings.store_file_max_kb,
      log,
    }).syncView()
    : openStore({ home, settings, mode: "quick", log });
  if (!store) {
    if (failure !== undefined && !failure.includes("no SQLite driver")) throw new Error(failure);
    return false;
  }
  try {
    const r = end.record;
    const now = Date.now();
    const latest = store.latestSync(r.runId);
    // The command's own attempt, when a library inside it recorded one: its end is the supervisor's.
    // Another process's attempt started meanwhile (another machine re-driving the run) is not ours
    // to end.
    const own = latest && latest.record.startedAt >= end.startedAt - 1000 &&
        (end.pid === undefined || latest.record.host.pid === end.pid)
      ? latest.record
      : undefined;
    const endOf = (base: RunRecord): RunRecord => {
      const out: RunRecord = {
        ...base,
        status: end.status,
        end: { status: end.status, at: now },
        elapsedSeconds: Math.max(base.elapsedSeconds, r.elapsedSeconds),
        updatedAt: now,
      };
      if (r.end?.summary !== undefined) out.end!.summary = r.end.summary;
      return out;
    };
    if (own) {
      store.writeSync({ records: [endOf(own)] });
      return true;
    }
    // Never an attempt over a live one of another process: it holds the run.
    if (end.pid !== undefined && latest?.state === "live") return false;
    const fresh: RunRecord = {
      runId: r.runId,
      attempt: r.attempt ?? 1,
      dialect: r.dialect,
      caps: r.caps,
      turnsUsed: r.turnsUsed,
      elapsedSeconds: r.elapsedSeconds,
      tier: r.tier,
      inFlight: [],
      recent: r.tools,
      notes: r.notes,
      checkpointFile: end.file,
      host: thisHost(),
      status: "live",
      startedAt: Math.round(end.startedAt),
      updatedAt: now,
    };
    if (r.attempts?.length) fresh.attempts = r.attempts;
    const started = store.startAttemptSync(fresh, { minAttempt: r.attempt ?? 1 });
    store.writeSync({ records: [endOf({ ...fresh, attempt: started.attempt })] });
    return true;
  } finally {
    store.closeSync();
  }
}

/**
 * The attempt that holds a run, as a supervisor about to retry its command
 * sees it: the newest record of the run id when it is live (its process
 * still there, its lease held) and not the command's own (`pid`), or when
 * another process started it after `since` (ms since the epoch) and finished
 * it (`done`: a retry would run it twice), else undefined. Never throws: a store
 * that cannot be read holds nothing (the retry's own start then decides).
 *
 * @param of The profile directory, the environment and the run id.
 * @returns The newest record's view when it is live.
 *
 * @example
 * ```ts
 * import { liveHolder } from "./mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * assert.equal(liveHolder({ home, env: {}, runId: "nobody-has-it" }), undefined);
 * ```
 */
export function liveHolder(
  of: { home?: string; env: Env; runId: string; pid?: number; since?: number },
): RunView | undefined {
  try {
    const home = resolveHome(of.home, of.env);
    const settings = loadSettings({ home, env: of.env }).settings;
    if (!settings.enabled || !settings.ledger) return undefined;
    const log = () => {};
    const backend = backendOf(settings.store);
    const store = backend
      ? openBridge({
        backend,
        url: settings.store as string,
        hostTimeoutSeconds: settings.host_timeout_seconds,
        fileMaxKb: settings.store_file_max_kb,
        log,
      }).syncView()
      : openStore({ home, settings, mode: "quick", log });
    if (!store) return undefined;
    try {
      const view = store.latestSync(of.runId);
      if (!view) return undefined;
      const r = view.record;
      // The command's own attempt may read live a moment after its death (before the
      // supervisor's record of its end): it holds nothing.
      if (view.state === "live") {
        return of.pid !== undefined && r.host.pid === of.pid ? undefined : view;
      }
      // Done, by another process that started while the command ran: a retry would run it twice.
      const other = of.pid !== undefined && of.since !== undefined && r.host.pid !== of.pid &&
        r.startedAt >= of.since - 1000 && r.status === "done";
      return other ? view : undefined;
    } finally {
      store.closeSync();
    }
  } catch {
    // Unread, it holds nothing: the retry's own start asks the store again, and is refused there.
    return undefined;
  }
}
