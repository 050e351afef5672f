/**
 * What `agent-checkpoint explain` reports (S14): the wiring for one run in the
 * current environment, and what would silently not work.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { dig, type Env, envOf, readConfig, resolveHome, settingsFrom } from "../config.ts";
import { discoverCapsSync, type DiscoveredCaps, supervisorDeadline } from "../discover.ts";
import { errorText, show } from "../log.ts";
import { checkpointFileName, ensureDir } from "../persist.ts";
import type { Settings, SettingSource } from "../settings.ts";
import { type SqliteDriver, sqliteDriver } from "../_sqlite.ts";
import { oldStoreForHermes } from "../_home.ts";

export type { DiscoveredCaps, Env, SettingSource };
import { capValues, tierFor, type TierPlan, tierPlan, timeCrossing } from "../tier.ts";

/** When one tier fires, on each surface. */
export interface TierSchedule {
  /** The tier: 1 the half-way checkpoint, 2 the final one. */
  tier: 1 | 2;
  /** False when it never fires (tier 1 on tiny caps, or no axis). */
  fires: boolean;
  /** Prologue: the model call (1-based, in this process) whose `preLlmCall()` returns the text. */
  prologueModelCall?: number;
  /** Mid-run: the tool calls after this model call persist the file. */
  midRunAfterModelCall?: number;
  /**
   * Both surfaces: seconds into the run at which the time axis crosses the
   * tier's fraction (to the millisecond; the watchdog persists then).
   */
  atSeconds?: number;
  /** Both surfaces: the tokens reported (input + output) at which the token axis makes it due. */
  atTokens?: number;
  /** Both surfaces: the dollars spent at which the dollar axis makes it due. */
  atUsd?: number;
}

/** Everything `explain` reports. */
export interface Explanation {
  /** The profile directory. */
  home: string;
  /** Its `config.yaml` (which may not exist). */
  configFile: string;
  /** Every setting of the settings table, its value and where it came from. */
  settings: Array<{ key: string; value: unknown; source: SettingSource }>;
  /** Settings that were invalid and fell back to defaults. */
  warnings: string[];
  /** The run a host would start here: dialect, run id and caps with their sources. */
  run: {
    /** The session id explained. */
    sessionId: string;
    /** The run id, naming the checkpoint file. */
    runId: string;
    /** `chat`, `kanban` or `goal`. */
    dialect: DiscoveredCaps["dialect"];
    /** The kanban task id, for a kanban run. */
    taskId?: string;
    /** Each axis's cap and where it was found. */
    caps: DiscoveredCaps["caps"];
    /** Caps found but not counted, and why. */
    dropped: string[];
    /** Whether neither axis has a cap. */
    capless: boolean;
    /** For a kanban run: the board file chosen (none when not found), and why. */
    board?: DiscoveredCaps["board"];
    /**
     * When the run's time axis starts, ms since the epoch, and where that was
     * read (the task's run on the board); undefined: when `startRun` is called.
     */
    origin?: DiscoveredCaps["origin"];
    /** Turns used before the run starts: a stored goal's `turns_used`. */
    turnsUsed?: DiscoveredCaps["turnsUsed"];
  };
  /** When each tier fires (empty for a capless run). */
  schedule: TierSchedule[];
  /** The checkpoint file the run would write. */
  checkpointFile: string;
  /** Whether its directory can be written (tried, not guessed). */
  writable: { ok: boolean; error?: string };
  /** The SQLite driver in use, or null. */
  sqliteDriver: string | null;
  /** The watchdog and its interval and stall settings. */
  watchdog: {
    /** Whether the watchdog runs. */
    enabled: boolean;
    /** Seconds between its polls. */
    pollSeconds: number;
    /** Seconds between checkpoints of a capless run; 0 for none. */
    uncappedIntervalSeconds: number;
    /** Seconds of silence that make a stall; 0 for off. */
    stallWindowSeconds: number;
  };
  /** The supervisor's deadline when `AGENT_CHECKPOINT_DEADLINE` is set (`agent-checkpoint run`). */
  supervisor?: SupervisorDeadline & {
    /** The run id the supervisor gave (`AGENT_CHECKPOINT_RUN_ID`), when set. */
    runId?: string;
  };
  /** What would silently not work; each makes `explain` exit 1. */
  problems: string[];
  /** Worth knowing, but chosen on purpose. */
  notes: string[];
}

/** Where `explain` looks. */
export interface ExplainOptions {
  /** The profile directory. @default {env.HERMES_HOME, else ~/.hermes} */
  home?: string;
  /** The environment. @default {process.env} */
  env?: Env;
  /** The session id to explain. @default {"explain"} */
  sessionId?: string;
  /** Explain a kanban run for this task id. */
  taskId?: string;
  /** @internal A SQLite driver to use instead of the runtime's; `null` for none. */
  sqlite?: SqliteDriver | null;
  /** The clock, ms since the epoch, for the supervisor's deadline. @default {Date.now()} */
  now?: number;
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

function schedule(
  caps: DiscoveredCaps["caps"],
  settings: Settings,
  base = 0,
): TierSchedule[] {
  const plan = tierPlan(capValues(caps), settings);
  return ([1, 2] as const).map((tier) => {
    const out: TierSchedule = { tier, fires: false };
    if (plan.turnCap !== undefined) {
      // A goal run starts with `base` turns used: its model calls here count from there.
      for (let used = base; used <= Math.max(base, plan.turnCap); used++) {
        if (tierFor(plan, used, 0) >= tier) {
          // Tier 1 is not due on a turn where tier 2 already is: it is skipped there.
          if (tier === 2 || tierFor(plan, used, 0) === 1) {
            out.prologueModelCall = used - base + 1;
            out.midRunAfterModelCall = used - base;
            out.fires = true;
          }
          break;
        }
      }
    }
    const at = exactCrossing(plan, tier);
    if (at !== undefined) {
      out.atSeconds = at;
      out.fires = true;
    }
    // Tokens and dollars take the turn fractions (tier 1 is never tiny there).
    const fraction = tier === 1 ? plan.tier1 : plan.tier2Turn;
    if (plan.tokenCap !== undefined) {
      out.atTokens = Math.ceil(fraction * plan.tokenCap - 1e-9);
      out.fires = true;
    }
    if (plan.usdCap !== undefined) {
      out.atUsd = fraction * plan.usdCap;
      out.fires = true;
    }
    return out;
  });
}

/**
 * The moment the time axis alone makes `tier` due, to the millisecond.
 * `timeCrossing` wakes the watchdog a hair early (its fraction less an
 * epsilon) so that the tier is due when it looks; a schedule shown to people
 * names the crossing itself: tier 1 of a one-hour cap is 1800 s, not 1799.99….
 */
function exactCrossing(plan: TierPlan, tier: 1 | 2): number | undefined {
  if (timeCrossing(plan, tier) === undefined || plan.timeCap === undefined) return undefined;
  const fraction = tier === 1 ? plan.tier1 : plan.tier2Time;
  return Math.round(fraction * plan.timeCap * 1000) / 1000;
}

/** The supervisor's deadline (`AGENT_CHECKPOINT_DEADLINE`, ms since the epoch) as `explain` shows it. */
export interface SupervisorDeadline {
  /** The variable as set. */
  raw: string;
  /** The deadline, ms since the epoch; undefined when the value is not a time. */
  at?: number;
  /** Seconds from now to the deadline (negative once it passed). */
  secondsLeft?: number;
}

/** The plugin's id in Hermes's `plugins` lists and entries. */
const PLUGIN_ID = "agent-checkpoint";

/**
 * Why Hermes's plugin lists in `config.yaml` leave Hermes's own Python plugin
 * off, or undefined when they do not (or the file has no plugin lists for
 * it). Plugins are opt-in: `plugins.enabled` must name it, and
 * `plugins.disabled` wins. This is about Hermes, not this library: a note.
 */
function pluginOff(doc: unknown): string | undefined {
  const list = (value: unknown): string[] | undefined =>
    Array.isArray(value)
      ? value.map((v) => String(v))
      : typeof value === "string"
      ? [value]
      : undefined;
  const enabled = list(dig(doc, "plugins", "enabled"));
  const disabled = list(dig(doc, "plugins", "disabled"));
  if (disabled?.includes(PLUGIN_ID)) {
    return `config.yaml plugins.disabled names ${PLUGIN_ID}: Hermes does not load its own Python plugin (disabled wins over enabled); this library works without it`;
  }
  if (enabled === undefined) {
    return dig(doc, "plugins", "entries", PLUGIN_ID) === undefined
      ? undefined
      : `config.yaml has plugins.entries.${PLUGIN_ID} but no plugins.enabled list naming it: Hermes plugins are opt-in, so Hermes does not load its own Python plugin; this library works without it`;
  }
  return enabled.includes(PLUGIN_ID)
    ? undefined
    : `config.yaml plugins.enabled does not name ${PLUGIN_ID}: Hermes plugins are opt-in, so Hermes does not load its own Python plugin; this library works without it`;
}

function deadlineShown(env: Env, now: number): SupervisorDeadline | undefined {
  const given = supervisorDeadline(env);
  if (given?.at === undefined) return given;
  return { ...given, secondsLeft: (given.at - now) / 1000 };
}

/**
 * Explain the wiring for a run started now in this environment. Never throws.
 *
 * @param options The home, environment and run to explain.
 * @returns Every setting with its source, the run's caps and schedule, the
 * checkpoint file, the runtime, and what would silently not work.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { explain } from "./_explain_report.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * fs.writeFileSync(
 *   path.join(home, "config.yaml"),
 *   "agent_checkpoint:\n  caps:\n    time_seconds: 3600\n",
 * );
 * const e = explain({ home, env: {}, sessionId: "s1" });
 * assert.equal(e.run.runId, "s1");
 * assert.equal(e.schedule[0]?.atSeconds, 1800); // tier 1 of a one-hour cap
 * assert.deepEqual(e.problems, []);
 * ```
 */
export function explain(options: ExplainOptions = {}): Explanation {
  const env = envOf(options.env);
  const home = resolveHome(options.home, env);
  const config = readConfig(home);
  const loaded = settingsFrom(config, home, env, undefined);
  const { settings } = loaded;
  const driver = options.sqlite === undefined ? sqliteDriver() : options.sqlite ?? undefined;
  const sessionId = options.sessionId ?? "explain";
  const now = options.now ?? Date.now();
  const found = discoverCapsSync(
    options.taskId === undefined ? { sessionId } : { sessionId, taskId: options.taskId },
    { home, env, settings, config, sqlite: driver ?? null, startedAtMs: now },
  );
  const capless = found.caps.turns === undefined && found.caps.time === undefined &&
    found.caps.tokens === undefined && found.caps.usd === undefined;
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
  const deadline = deadlineShown(env, now);
  // Cap discovery reports a deadline it cannot use; this says it only when it did not.
  const told = found.problems.some((p) => p.includes("AGENT_CHECKPOINT_DEADLINE"));
  if (deadline && deadline.at === undefined && !told) {
    problems.push(
      `AGENT_CHECKPOINT_DEADLINE is "${deadline.raw}", not a time in ms since the epoch: the supervisor's deadline is not a time cap`,
    );
  } else if (deadline?.secondsLeft !== undefined && deadline.secondsLeft <= 0 && !told) {
    notes.push("the supervisor's deadline (AGENT_CHECKPOINT_DEADLINE) has already passed");
  }
  const off = pluginOff(config.doc);
  if (off !== undefined) notes.push(off);
  const oldStore = oldStoreForHermes(home);
  if (oldStore !== undefined) problems.push(oldStore.fix);
  const ratio = dig(config.doc, "agent", "budget_warning_ratio");
  if (ratio !== undefined && ratio !== null && ratio !== false) {
    notes.push(
      `agent.budget_warning_ratio is ${
        show(ratio)
      }: Hermes sends its own turn-budget warning, so the agent gets two wrap-up messages (Hermes's and this library's tiers)`,
    );
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
  if (found.board) run.board = found.board;
  if (found.origin) run.origin = found.origin;
  if (found.turnsUsed) run.turnsUsed = found.turnsUsed;
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
    schedule: capless ? [] : schedule(found.caps, settings, found.turnsUsed?.value),
    checkpointFile,
    writable,
    sqliteDriver: driver?.name ?? null,
    watchdog: {
      enabled: settings.enabled && settings.watchdog && settings.mid_run_persist,
      pollSeconds: settings.watchdog_poll_seconds,
      uncappedIntervalSeconds: settings.uncapped_interval_seconds,
      stallWindowSeconds: settings.stall_window_seconds,
    },
    ...(deadline
      ? {
        supervisor: {
          ...deadline,
          ...(env.AGENT_CHECKPOINT_RUN_ID ? { runId: env.AGENT_CHECKPOINT_RUN_ID } : {}),
        },
      }
      : {}),
    problems,
    notes,
  };
}
