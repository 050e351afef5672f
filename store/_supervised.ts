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
import { isPostgresUrl } from "./postgres.ts";
import { openPgBridge } from "./_pg_bridge.ts";
import { thisHost } from "./_host.ts";
import type { RunRecord } from "./types.ts";

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
  const store = isPostgresUrl(settings.store)
    ? openPgBridge({
      url: settings.store,
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
    const own = latest && latest.record.startedAt >= end.startedAt - 1000
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
