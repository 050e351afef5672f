/**
 * What `agent-checkpoint explain` reports (S14): the wiring for one run in the
 * current environment, and what would silently not work.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import {
  discoverCapsSync,
  type DiscoveredCaps,
  type Env,
  envOf,
  readConfig,
  resolveHome,
  settingsFrom,
} from "./discover.ts";
import { errorText } from "./log.ts";
import { checkpointFileName, ensureDir } from "./persist.ts";
import type { Settings, SettingSource } from "./settings.ts";
import { type SqliteDriver, sqliteDriver } from "./sqlite.ts";
import { capValues, tierFor, tierPlan, timeCrossing } from "./tier.ts";

/** When one tier fires, on each surface. */
export interface TierSchedule {
  tier: 1 | 2;
  /** False when it never fires (tier 1 on tiny caps, or no axis). */
  fires: boolean;
  /** Prologue: the model call (1-based) whose `preLlmCall()` returns the text. */
  prologueModelCall?: number;
  /** Mid-run: the tool calls after this model call persist the file. */
  midRunAfterModelCall?: number;
  /** Both surfaces: seconds into the run; the watchdog persists at this moment. */
  atSeconds?: number;
}

/** Everything `explain` reports. */
export interface Explanation {
  home: string;
  configFile: string;
  settings: Array<{ key: string; value: unknown; source: SettingSource }>;
  warnings: string[];
  run: {
    sessionId: string;
    runId: string;
    dialect: DiscoveredCaps["dialect"];
    taskId?: string;
    caps: DiscoveredCaps["caps"];
    dropped: string[];
    capless: boolean;
  };
  schedule: TierSchedule[];
  checkpointFile: string;
  writable: { ok: boolean; error?: string };
  sqliteDriver: string | null;
  watchdog: {
    enabled: boolean;
    pollSeconds: number;
    uncappedIntervalSeconds: number;
    stallWindowSeconds: number;
  };
  /** What would silently not work; each makes `explain` exit 1. */
  problems: string[];
  /** Worth knowing, but chosen on purpose. */
  notes: string[];
}

/** Where `explain` looks. */
export interface ExplainOptions {
  home?: string;
  env?: Env;
  sessionId?: string;
  taskId?: string;
  /** @internal A SQLite driver to use instead of the runtime's; `null` for none. */
  sqlite?: SqliteDriver | null;
}

/** Try to write in a directory: the honest test of "writable", for root too. */
function probeWritable(dir: string): { ok: boolean; error?: string } {
  const probe = path.join(dir, `.agent-checkpoint-probe-${process.pid}`);
  try {
    ensureDir(dir);
    fs.writeFileSync(probe, "");
    fs.rmSync(probe);
    return { ok: true };
  } catch (error) {
    return { ok: false, error: errorText(error) };
  }
}

function schedule(caps: DiscoveredCaps["caps"], settings: Settings): TierSchedule[] {
  const plan = tierPlan(capValues(caps), settings);
  return ([1, 2] as const).map((tier) => {
    const out: TierSchedule = { tier, fires: false };
    if (plan.turnCap !== undefined) {
      for (let used = 0; used <= plan.turnCap; used++) {
        if (tierFor(plan, used, 0) >= tier) {
          // Tier 1 is not due on a turn where tier 2 already is: it is skipped there.
          if (tier === 2 || tierFor(plan, used, 0) === 1) {
            out.prologueModelCall = used + 1;
            out.midRunAfterModelCall = used;
            out.fires = true;
          }
          break;
        }
      }
    }
    const at = timeCrossing(plan, tier);
    if (at !== undefined) {
      out.atSeconds = at;
      out.fires = true;
    }
    return out;
  });
}

/**
 * Explain the wiring for a run started now in this environment. Never throws.
 */
export function explain(options: ExplainOptions = {}): Explanation {
  const env = envOf(options.env);
  const home = resolveHome(options.home, env);
  const config = readConfig(home);
  const loaded = settingsFrom(config, home, env, undefined);
  const { settings } = loaded;
  const driver = options.sqlite === undefined ? sqliteDriver() : options.sqlite ?? undefined;
  const sessionId = options.sessionId ?? "explain";
  const found = discoverCapsSync(
    options.taskId === undefined ? { sessionId } : { sessionId, taskId: options.taskId },
    { home, env, settings, config, sqlite: driver ?? null },
  );
  const capless = found.caps.turns === undefined && found.caps.time === undefined;
  const checkpointFile = path.join(settings.checkpoint_dir, checkpointFileName(found.runId));
  const writable = probeWritable(settings.checkpoint_dir);

  const problems: string[] = [];
  const notes: string[] = [];
  if (!writable.ok) {
    problems.push(`the checkpoint directory cannot be written: ${writable.error}`);
  }
  for (const warning of loaded.warnings) problems.push(`settings: ${warning}`);
  for (const problem of found.problems) problems.push(`cap discovery: ${problem}`);
  if (!settings.enabled) notes.push("enabled is false: every hook is a no-op");
  if (settings.mode === "log-only") notes.push("mode is log-only: nothing is injected or written");
  if (!settings.mid_run_persist) {
    notes.push("mid_run_persist is false: the library writes no checkpoint file itself");
  }
  if (!settings.watchdog) {
    notes.push("watchdog is false: a run stuck in one long call gets no file");
  }
  if (capless && settings.uncapped_interval_seconds === 0) {
    notes.push("this run is capless and uncapped_interval_seconds is 0: only stalls are recorded");
  }

  const run: Explanation["run"] = {
    sessionId,
    runId: found.runId,
    dialect: found.dialect,
    caps: found.caps,
    dropped: found.dropped,
    capless,
  };
  if (found.taskId !== undefined) run.taskId = found.taskId;
  return {
    home,
    configFile: path.join(home, "config.yaml"),
    settings: Object.entries(loaded.sources).map(([key, source]) => ({
      key,
      value: key.startsWith("caps.")
        ? settings.caps[key.slice(5) as keyof Settings["caps"]] ?? null
        : settings[key as keyof Settings],
      source,
    })),
    warnings: loaded.warnings,
    run,
    schedule: capless ? [] : schedule(found.caps, settings),
    checkpointFile,
    writable,
    sqliteDriver: driver?.name ?? null,
    watchdog: {
      enabled: settings.enabled && settings.watchdog && settings.mid_run_persist,
      pollSeconds: settings.watchdog_poll_seconds,
      uncappedIntervalSeconds: settings.uncapped_interval_seconds,
      stallWindowSeconds: settings.stall_window_seconds,
    },
    problems,
    notes,
  };
}
