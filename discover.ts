/**
 * Cap discovery: a run's dialect, run id, and turn and time caps, each with
 * the source it came from. Reads the kanban board and `state.db` (only
 * reads), the supervisor's environment, `config.yaml` and the settings. Never
 * throws: a source that fails is a problem line and the next source.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { budgetValue, type Settings } from "./settings.ts";
import { countedCaps } from "./tier.ts";
import type { RunCaps } from "./_record.ts";
import { selectOne, SQLITE_FIX, type SqliteDriver, sqliteDriver } from "./_sqlite.ts";
import {
  type ConfigFile,
  dig,
  type Env,
  envOf,
  readConfig,
  resolveHome,
  settingsFrom,
  type SettingsOptions,
} from "./config.ts";
import { errorText, nonEmptyText as text, show } from "./_show.ts";
import { nothingAt } from "./_file_ops.ts";

/** The host's description of a run. */
export interface RunInit {
  /** The conversation's session id. */
  sessionId: string;
  /** The kanban task id; makes the run a kanban run. */
  taskId?: string;
  /** The dialect, when the host knows it. */
  dialect?: "chat" | "kanban" | "goal";
  /**
   * Caps the host knows; they win over every other source. `tokens` counts
   * input and output tokens, `usd` is the cost in US dollars.
   */
  caps?: { turns?: number; timeSeconds?: number; tokens?: number; usd?: number };
  /** The model the run calls, for the `prices` setting; `run.usage()` can name it too. */
  model?: string;
  /** The goal the run pursues. */
  goal?: { maxTurns?: number };
  /** The run's working tree, for workspace snapshots. @default {the current directory} */
  workspace?: string;
  /** The agent's name, for traces (`gen_ai.agent.name`, and the span's name). */
  agentName?: string;
}

/** The outcome of cap discovery for one run. */
export interface DiscoveredCaps {
  /** The dialect the caps were looked up in. */
  dialect: "chat" | "kanban" | "goal";
  /** The kanban task id, else the supervisor's run id, else the session id. */
  runId: string;
  /** The kanban task id, in the kanban dialect. */
  taskId?: string;
  /** Counted caps: after floors, `enabled_axes` and the 1-turn rule. */
  caps: RunCaps;
  /** Caps as found, before floors and axes. */
  found: RunCaps;
  /** Why a found cap does not count, one line each. */
  dropped: string[];
  /** Sources that failed, one log line each. */
  problems: string[];
}

/** What cap discovery reads besides the run itself. */
export interface DiscoveryContext {
  /** The home directory, absolute. */
  home: string;
  /** The environment. */
  env: Env;
  /** The settings in force. */
  settings: Settings;
  /** `config.yaml` as read. */
  config: ConfigFile;
  /** The SQLite driver; `null` for none. @default {sqliteDriver()} */
  sqlite?: SqliteDriver | null;
  /** When the run starts, in ms since the epoch (for the supervisor's deadline). @default {Date.now()} */
  startedAtMs?: number;
}

/** The environment variable naming the run id a supervisor gives. */
export const RUN_ID_ENV = "AGENT_CHECKPOINT_RUN_ID";
/** The environment variable holding a supervisor's deadline, in ms since the epoch. */
export const DEADLINE_ENV = "AGENT_CHECKPOINT_DEADLINE";

const envText = (env: Env, name: string): string | undefined =>
  Object.hasOwn(env, name) ? text(env[name]) : undefined;

/** A field of an object the host gave (its own or inherited), or undefined; never throws. */
const field = (obj: unknown, key: string): unknown => {
  try {
    return typeof obj === "object" && obj !== null
      ? (obj as Record<string, unknown>)[key]
      : undefined;
  } catch {
    return undefined;
  }
};

/** An id as the host gave it: a string, or a finite number or bigint made one. */
function idOf(value: unknown, what: string, problems: string[]): string | undefined {
  if (value === undefined || value === null || value === "") return undefined;
  if (typeof value === "string") return value;
  if ((typeof value === "number" && Number.isFinite(value)) || typeof value === "bigint") {
    return String(value);
  }
  problems.push(`${what} ${show(value)} is not a string; ignoring it`);
  return undefined;
}

const stateDbGoal = (
  home: string,
  sessionId: string,
  problems: string[],
  driver: SqliteDriver | undefined,
): { active: boolean; maxTurns: unknown } => {
  const none = { active: false, maxTurns: undefined };
  const file = path.join(home, "state.db");
  let row: Record<string, unknown> | undefined;
  try {
    if (!driver) {
      // Only worth a line when there is a state.db to read.
      if (!fs.existsSync(file)) return none;
      problems.push(`cannot read goals from ${file}: ${SQLITE_FIX}`);
      return none;
    }
    if (nothingAt(file)) return none;
    row = selectOne(
      driver,
      file,
      "SELECT value FROM state_meta WHERE key = ?",
      `goal:${sessionId}`,
    );
  } catch (error) {
    if ((error as NodeJS.ErrnoException)?.code === "ENOENT") return none;
    problems.push(`cannot read the goal from ${file} (${errorText(error)}); treating it as none`);
    return none;
  }
  if (!row) return none;
  try {
    const goal = JSON.parse(String(row.value));
    return { active: dig(goal, "status") === "active", maxTurns: dig(goal, "max_turns") };
  } catch (error) {
    problems.push(`cannot read the goal from ${file} (${errorText(error)}); treating it as none`);
    return none;
  }
};

const kanbanRuntime = (
  env: Env,
  taskId: string,
  problems: string[],
  driver: SqliteDriver | undefined,
): unknown => {
  const file = envText(env, "HERMES_KANBAN_DB");
  if (!file) return undefined;
  if (!driver) {
    problems.push(`cannot read the kanban board ${file}: ${SQLITE_FIX}`);
    return undefined;
  }
  try {
    const row = selectOne(
      driver,
      file,
      "SELECT max_runtime_seconds FROM tasks WHERE id = ?",
      taskId,
    );
    if (!row) problems.push(`kanban board ${file} has no task ${show(taskId)}`);
    return row?.max_runtime_seconds ?? undefined;
  } catch (error) {
    problems.push(`cannot read the kanban board ${file} (${errorText(error)})`);
    return undefined;
  }
};

/**
 * The supervisor's deadline as its environment gives it
 * (`AGENT_CHECKPOINT_DEADLINE`, ms since the epoch): undefined when unset or
 * blank, else the value as set (`raw`) and, when it is a time, that time
 * (`at`). The one reading of the variable, for the library, the supervisor
 * and `explain`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { supervisorDeadline } from "./discover.ts";
 *
 * assert.deepEqual(supervisorDeadline({ AGENT_CHECKPOINT_DEADLINE: "1800000000000" }), {
 *   raw: "1800000000000",
 *   at: 1800000000000,
 * });
 * assert.deepEqual(supervisorDeadline({ AGENT_CHECKPOINT_DEADLINE: "soon" }), { raw: "soon" });
 * assert.equal(supervisorDeadline({ AGENT_CHECKPOINT_DEADLINE: " " }), undefined);
 * ```
 */
export function supervisorDeadline(env: Env): { raw: string; at?: number } | undefined {
  const raw = envText(env, DEADLINE_ENV);
  if (raw === undefined || raw.trim() === "") return undefined;
  const at = Number(raw);
  return /^\s*\d+(\.\d*)?\s*$/.test(raw) && Number.isFinite(at) ? { raw, at } : { raw };
}

/** The supervisor's deadline as seconds left from `startedAtMs`, when it gives one. */
function supervisorSeconds(env: Env, startedAtMs: number, problems: string[]): number | undefined {
  const given = supervisorDeadline(env);
  if (given === undefined) return undefined;
  const { raw, at: deadline } = given;
  if (deadline === undefined) {
    problems.push(`${DEADLINE_ENV}=${show(raw)} is not a time in ms since the epoch; ignoring it`);
    return undefined;
  }
  const seconds = (deadline - startedAtMs) / 1000;
  if (seconds <= 0) {
    problems.push(
      `${DEADLINE_ENV} passed ${
        Math.round(-seconds)
      }s before the run started; its checkpoint is due at once`,
    );
    return 0.001;
  }
  return seconds;
}

/** A budget and its source, when `value` is one. */
function budgetFrom(value: unknown, source: string): { value: number; source: string } | undefined {
  const n = budgetValue(value);
  return n === undefined ? undefined : { value: n, source };
}

/** `TERMINAL_TIMEOUT` plus 30 s, when it is a number of seconds; a problem line when it is not. */
function terminalTimeout(env: Env, problems: string[]): number | undefined {
  const raw = envText(env, "TERMINAL_TIMEOUT");
  if (raw === undefined) return undefined;
  const n = budgetValue(raw);
  if (n === undefined) problems.push(`TERMINAL_TIMEOUT=${show(raw)} is not a number of seconds`);
  return n === undefined ? undefined : n + 30;
}

function discover(init: RunInit, ctx: DiscoveryContext): DiscoveredCaps {
  const { env, settings, config } = ctx;
  const driver = ctx.sqlite === undefined ? sqliteDriver() : ctx.sqlite ?? undefined;
  const problems: string[] = [];
  const sessionId = idOf(init.sessionId, "sessionId", problems) ?? "";
  const taskId = idOf(init.taskId, "taskId", problems) ?? envText(env, "HERMES_KANBAN_TASK");
  const supervisorRunId = envText(env, RUN_ID_ENV);
  let stored: ReturnType<typeof stateDbGoal> | undefined;
  const storedGoal = () => (stored ??= stateDbGoal(ctx.home, sessionId, problems, driver));
  let dialect: DiscoveredCaps["dialect"];
  if (taskId || init.dialect === "kanban") dialect = "kanban";
  else if (init.dialect === "goal" || init.goal !== undefined) dialect = "goal";
  else if (init.dialect === "chat") dialect = "chat";
  else dialect = storedGoal().active ? "goal" : "chat";

  // Each axis takes its first source with a budget, in order, each read only when the ones
  // before it had none (a read may be a database's, or add a problem line). Written out with
  // `??=` rather than lists of closures: those were ~5 KB of garbage per start.
  const found: RunCaps = {};
  let t = budgetFrom(field(init.caps, "timeSeconds"), "host");
  if (dialect === "kanban") {
    t ??= budgetFrom(taskId && kanbanRuntime(env, taskId, problems, driver), "kanban db");
    t ??= budgetFrom(terminalTimeout(env, problems), "TERMINAL_TIMEOUT");
    t ??= budgetFrom(settings.caps.time_seconds, "caps.time_seconds");
  } else if (dialect === "goal") {
    t ??= budgetFrom(settings.caps.time_seconds, "caps.time_seconds");
  } else {
    t ??= budgetFrom(settings.caps.time_seconds, "caps.time_seconds");
    t ??= budgetFrom(dig(config.doc, "agent", "run_budget_seconds"), "agent.run_budget_seconds");
  }
  let n = budgetFrom(field(init.caps, "turns"), "host");
  if (dialect === "kanban") {
    n ??= budgetFrom(dig(config.doc, "agent", "max_turns"), "agent.max_turns");
  } else if (dialect === "goal") {
    n ??= budgetFrom(field(init.goal, "maxTurns"), "goal");
    n ??= budgetFrom(storedGoal().maxTurns, "goal");
    n ??= budgetFrom(dig(config.doc, "agent", "max_turns"), "agent.max_turns");
  }
  n ??= budgetFrom(settings.caps.turns, "caps.turns");
  // The supervisor's deadline is a hard limit: it caps the time axis whenever
  // it comes before the budget the other sources give (the host's included).
  const deadline = supervisorSeconds(env, ctx.startedAtMs ?? Date.now(), problems);
  if (deadline !== undefined && (t === undefined || deadline < t.value)) {
    t = { value: deadline, source: "supervisor" };
  }
  if (t) found.time = t;
  if (n) found.turns = n;
  // Tokens and dollars: the host's caps, then the plugin's, in every dialect.
  const tokens = budgetFrom(field(init.caps, "tokens"), "host") ??
    budgetFrom(settings.caps.tokens, "caps.tokens");
  const usd = budgetFrom(field(init.caps, "usd"), "host") ??
    budgetFrom(settings.caps.usd, "caps.usd");
  if (tokens) found.tokens = tokens;
  if (usd) found.usd = usd;

  const counted = countedCaps(
    { turns: n?.value, timeSeconds: t?.value, tokens: tokens?.value, usd: usd?.value },
    settings,
  );
  const caps: RunCaps = {};
  const dropped: string[] = [];
  if (n && counted.turns !== undefined) caps.turns = n;
  else if (n) {
    dropped.push(
      !settings.enabled_axes.includes("turns")
        ? `turn cap ${n.value} not counted: turns is not in enabled_axes`
        : n.value <= 1
        ? `turn cap ${n.value} not counted: a 1-turn run has no turn a checkpoint could help`
        : `turn cap ${n.value} not counted: below min_budget_floor_turns ${settings.min_budget_floor_turns}`,
    );
  }
  if (t && counted.timeSeconds !== undefined) caps.time = t;
  else if (t) {
    dropped.push(
      !settings.enabled_axes.includes("time")
        ? `time cap ${t.value}s not counted: time is not in enabled_axes`
        : `time cap ${t.value}s not counted: below min_budget_floor_seconds ${settings.min_budget_floor_seconds}`,
    );
  }
  if (tokens && counted.tokens !== undefined) caps.tokens = tokens;
  else if (tokens) {
    dropped.push(`tokens cap ${tokens.value} not counted: tokens is not in enabled_axes`);
  }
  if (usd && counted.usd !== undefined) caps.usd = usd;
  else if (usd) dropped.push(`usd cap ${usd.value} USD not counted: usd is not in enabled_axes`);
  const out: DiscoveredCaps = {
    dialect,
    runId: taskId ?? supervisorRunId ?? sessionId,
    caps,
    found,
    dropped,
    problems,
  };
  if (taskId) out.taskId = taskId;
  return out;
}

/**
 * Cap discovery, synchronously: one read-only SELECT at most per database.
 * Never throws: bad input or an internal failure gives a chat run with no
 * caps, and a problem line saying why.
 *
 * @example
 * ```ts
 * import { discoverCapsSync } from "./discover.ts";
 * import { defaultSettings } from "./settings.ts";
 * import assert from "node:assert/strict";
 *
 * const found = discoverCapsSync({ sessionId: "s", caps: { turns: 30 } }, {
 *   home: "/nonexistent",
 *   env: {},
 *   settings: defaultSettings("/tmp/cp"),
 *   config: { doc: undefined, warnings: [] },
 * });
 * assert.deepEqual(found.caps, { turns: { value: 30, source: "host" } });
 * ```
 */
export function discoverCapsSync(init: RunInit, ctx: DiscoveryContext): DiscoveredCaps {
  try {
    const run = typeof init === "object" && init !== null ? init : ({} as RunInit);
    const out = discover(run, ctx);
    if (run !== init) out.problems.unshift(`the run's description ${show(init)} is not an object`);
    return out;
  } catch (error) {
    const sessionId = typeof init?.sessionId === "string" ? init.sessionId : "";
    return {
      dialect: "chat",
      runId: sessionId,
      caps: {},
      found: {},
      dropped: [],
      problems: [`cap discovery failed (${errorText(error)}); the run has no caps`],
    };
  }
}

/**
 * Discover a run's dialect and caps from the host's caps, the supervisor's
 * deadline, the kanban board, `TERMINAL_TIMEOUT`, `state.db` goals,
 * `config.yaml` and the plugin's own `caps`. Databases are only read. Never
 * throws, whatever it is given: a source that fails is skipped and named in
 * `problems`.
 *
 * @param init The run, as `startRun` takes it.
 * @param options Home directory, environment and settings overrides.
 * @returns The dialect, run id and caps with their sources.
 *
 * @example A chat run takes its time cap from `caps.time_seconds`
 * ```ts
 * import { discoverCaps } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * const found = await discoverCaps({ sessionId: "s1" }, {
 *   home: "/nonexistent",
 *   env: {},
 *   overrides: { caps: { time_seconds: 900 } },
 * });
 * assert.equal(found.dialect, "chat");
 * assert.deepEqual(found.caps, { time: { value: 900, source: "caps.time_seconds" } });
 * ```
 */
export function discoverCaps(
  init: RunInit,
  options: SettingsOptions = {},
): Promise<DiscoveredCaps> {
  const startedAtMs = Date.now();
  try {
    const opts = typeof options === "object" && options !== null ? options : {};
    const env = envOf(opts.env);
    const home = resolveHome(opts.home, env);
    const config = readConfig(home);
    const loaded = settingsFrom(config, home, env, opts.overrides);
    const found = discoverCapsSync(init, {
      home,
      env,
      settings: loaded.settings,
      config,
      startedAtMs,
    });
    return Promise.resolve(found);
  } catch (error) {
    return Promise.resolve({
      dialect: "chat",
      runId: "",
      caps: {},
      found: {},
      dropped: [],
      problems: [`cap discovery failed (${errorText(error)}); the run has no caps`],
    });
  }
}
