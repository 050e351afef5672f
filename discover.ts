/**
 * Settings (S3) from `<home>/config.yaml`, and cap discovery (S4).
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { load as parseYaml } from "js-yaml";
import {
  budgetValue,
  defaultSettings,
  resolveSettings,
  type Settings,
  type SettingsLayer,
  type SettingSource,
} from "./settings.ts";
import { countedCaps } from "./tier.ts";
import type { RunCaps } from "./record.ts";
import { selectOne, SQLITE_FIX, type SqliteDriver, sqliteDriver } from "./sqlite.ts";
import { errorText } from "./log.ts";

/** Environment variables, as `process.env` holds them. */
export type Env = Record<string, string | undefined>;

/** Where to find settings. */
export interface SettingsOptions {
  /** The profile directory. @default {env.HERMES_HOME, else ~/.hermes} */
  home?: string;
  /** Environment for `HERMES_HOME`, `$VAR` expansion and cap discovery. @default {process.env} */
  env?: Env;
  /** Settings that win over the file, with S3's snake_case keys. */
  overrides?: Record<string, unknown>;
}

/** The environment to use: the one given, else the process's. */
export function envOf(env: Env | undefined): Env {
  if (env) return env;
  try {
    return { ...process.env };
  } catch {
    return {};
  }
}

const userHome = (env: Env) => env.HOME || os.homedir();

/** The home directory: the option, else `HERMES_HOME`, else `~/.hermes`. */
export function resolveHome(home: string | undefined, env: Env): string {
  return path.resolve(home || env.HERMES_HOME || path.join(userHome(env), ".hermes"));
}

/** The parsed `config.yaml` and what went wrong reading it. */
export interface ConfigFile {
  doc: Record<string, unknown> | undefined;
  warnings: string[];
}

const isMapping = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** Follow keys through nested mappings. */
export function dig(doc: unknown, ...keys: string[]): unknown {
  let at = doc;
  for (const key of keys) {
    if (!isMapping(at)) return undefined;
    at = at[key];
  }
  return at;
}

/** Read and parse `<home>/config.yaml`; a missing file is no warning. */
export function readConfig(home: string): ConfigFile {
  const file = path.join(home, "config.yaml");
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { doc: undefined, warnings: [] };
    return {
      doc: undefined,
      warnings: [`cannot read ${file} (${errorText(error)}); using default settings`],
    };
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (error) {
    const reason = errorText(error).split("\n")[0];
    return {
      doc: undefined,
      warnings: [`${file} is not valid YAML (${reason}); using default settings`],
    };
  }
  if (doc === undefined || doc === null) return { doc: undefined, warnings: [] };
  if (!isMapping(doc)) {
    return {
      doc: undefined,
      warnings: [`${file} does not hold a mapping; using default settings`],
    };
  }
  return { doc, warnings: [] };
}

/** Expand `$VAR`, `${VAR}` and a leading `~`; relative paths are taken from home. */
export function expandDir(
  dir: string,
  env: Env,
  home: string,
  warnings: string[],
): string {
  let out = dir.replace(/\$\{(\w+)\}|\$(\w+)/g, (whole, a?: string, b?: string) => {
    const name = (a ?? b) as string;
    const value = env[name];
    if (value === undefined) {
      warnings.push(`checkpoint_dir names $${name}, which is not set; leaving it as written`);
      return whole;
    }
    return value;
  });
  if (out === "~" || out.startsWith("~/")) out = path.join(userHome(env), out.slice(1));
  return path.resolve(home, out);
}

/** Settings with where each came from. */
export interface LoadedSettings {
  /** Every S3 setting, defaults filled in. */
  settings: Settings;
  /** What fell back to a default, and why, one line each. */
  warnings: string[];
  /** Where each setting came from (`caps.turns` and `caps.time_seconds` separately). */
  sources: Record<string, SettingSource>;
}

/** Resolve settings from an already-read config file. */
export function settingsFrom(
  config: ConfigFile,
  home: string,
  env: Env,
  overrides: Record<string, unknown> | undefined,
): LoadedSettings {
  const layers: SettingsLayer[] = [
    { source: "config.yaml agent_checkpoint", values: dig(config.doc, "agent_checkpoint") },
    {
      source: "config.yaml plugins.entries.agent-checkpoint.settings",
      values: dig(config.doc, "plugins", "entries", "agent-checkpoint", "settings"),
    },
    { source: "override", values: overrides },
  ];
  const resolved = resolveSettings(defaultSettings(path.join(home, "agent-checkpoints")), layers);
  const warnings = [...config.warnings, ...resolved.warnings];
  if (resolved.sources.checkpoint_dir !== "default") {
    resolved.settings.checkpoint_dir = expandDir(
      resolved.settings.checkpoint_dir,
      env,
      home,
      warnings,
    );
  }
  return { settings: resolved.settings, warnings, sources: resolved.sources };
}

/**
 * Load the S3 settings: the `agent_checkpoint` section of
 * `<home>/config.yaml`, then `plugins.entries.agent-checkpoint.settings` (which
 * wins key by key), then `overrides`. Never throws: every problem becomes a
 * warning and that key's default.
 *
 * @param options Home directory, environment and overrides.
 * @returns The settings, every default filled in, and the warnings.
 *
 * @example A bad value falls back to its default, with a warning
 * ```ts
 * import { loadSettings } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * const { settings, warnings } = loadSettings({
 *   home: "/nonexistent",
 *   env: {},
 *   overrides: { tier_fractions: [0.7], watchdog_poll_seconds: true },
 * });
 * assert.deepEqual(settings.tier_fractions, [0.7]);
 * assert.equal(settings.watchdog_poll_seconds, 10);
 * assert.match(warnings[0]!, /watchdog_poll_seconds = true .* using 10/);
 * ```
 */
export function loadSettings(options: SettingsOptions = {}): LoadedSettings {
  const env = envOf(options.env);
  const home = resolveHome(options.home, env);
  return settingsFrom(readConfig(home), home, env, options.overrides);
}

/**
 * Settings that follow `config.yaml` as it changes: the file is looked at
 * (one stat) at most once per poll interval, and parsed only when it changed.
 */
export class SettingsSource {
  /** Increases whenever the settings change. */
  version = 0;
  current: LoadedSettings;
  config: ConfigFile;
  #stamp: string;
  #nextCheck = 0;
  readonly #file: string;
  readonly #onChange: (loaded: LoadedSettings) => void;

  constructor(
    readonly home: string,
    readonly env: Env,
    readonly overrides: Record<string, unknown> | undefined,
    onChange: (loaded: LoadedSettings) => void = () => {},
  ) {
    this.#file = path.join(home, "config.yaml");
    this.#onChange = onChange;
    this.#stamp = this.#statStamp();
    this.config = readConfig(home);
    this.current = settingsFrom(this.config, home, env, overrides);
    onChange(this.current);
  }

  #statStamp(): string {
    try {
      const s = fs.statSync(this.#file);
      return `${s.ino}:${s.size}:${s.mtimeMs}`;
    } catch (error) {
      return `missing:${(error as NodeJS.ErrnoException).code}`;
    }
  }

  /** The settings as of `nowMs`, re-read when the poll interval has passed. */
  at(nowMs: number): Settings {
    if (nowMs < this.#nextCheck) return this.current.settings;
    this.refresh(nowMs);
    return this.current.settings;
  }

  /** Look at the file now. */
  refresh(nowMs: number): void {
    const stamp = this.#statStamp();
    if (stamp !== this.#stamp) {
      this.#stamp = stamp;
      this.config = readConfig(this.home);
      this.current = settingsFrom(this.config, this.home, this.env, this.overrides);
      this.version++;
      this.#onChange(this.current);
    }
    // After a reload, so that a new poll interval counts from now.
    this.#nextCheck = nowMs + this.current.settings.watchdog_poll_seconds * 1000;
  }
}

/** The host's description of a run. */
export interface RunInit {
  /** The conversation's session id. */
  sessionId: string;
  /** The kanban task id; makes the run a kanban run. */
  taskId?: string;
  /** The dialect, when the host knows it. */
  dialect?: "chat" | "kanban" | "goal";
  /** Caps the host knows; they win over every other source. */
  caps?: { turns?: number; timeSeconds?: number };
  /** The goal the run pursues. */
  goal?: { maxTurns?: number };
}

/** The outcome of S4 for one run. */
export interface DiscoveredCaps {
  /** The dialect the caps were looked up in. */
  dialect: "chat" | "kanban" | "goal";
  /** The kanban task id, else the session id. */
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
  home: string;
  env: Env;
  settings: Settings;
  config: ConfigFile;
  /** The SQLite driver; `null` for none. @default {sqliteDriver()} */
  sqlite?: SqliteDriver | null;
}

const stateDbGoal = (
  home: string,
  sessionId: string,
  problems: string[],
  driver: SqliteDriver | undefined,
): { active: boolean; maxTurns: unknown } => {
  const file = path.join(home, "state.db");
  if (!fs.existsSync(file)) return { active: false, maxTurns: undefined };
  if (!driver) {
    problems.push(`cannot read goals from ${file}: ${SQLITE_FIX}`);
    return { active: false, maxTurns: undefined };
  }
  try {
    const row = selectOne(
      driver,
      file,
      "SELECT value FROM state_meta WHERE key = ?",
      `goal:${sessionId}`,
    );
    if (!row) return { active: false, maxTurns: undefined };
    const goal = JSON.parse(String(row.value));
    return { active: dig(goal, "status") === "active", maxTurns: dig(goal, "max_turns") };
  } catch (error) {
    problems.push(`cannot read the goal from ${file} (${errorText(error)}); treating it as none`);
    return { active: false, maxTurns: undefined };
  }
};

const kanbanRuntime = (
  env: Env,
  taskId: string,
  problems: string[],
  driver: SqliteDriver | undefined,
): unknown => {
  const file = env.HERMES_KANBAN_DB;
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
    if (!row) problems.push(`kanban board ${file} has no task ${taskId}`);
    return row?.max_runtime_seconds ?? undefined;
  } catch (error) {
    problems.push(`cannot read the kanban board ${file} (${errorText(error)})`);
    return undefined;
  }
};

/** Cap discovery (S4), synchronously: one read-only SELECT at most per database. */
export function discoverCapsSync(init: RunInit, ctx: DiscoveryContext): DiscoveredCaps {
  const { env, settings, config } = ctx;
  const driver = ctx.sqlite === undefined ? sqliteDriver() : ctx.sqlite ?? undefined;
  const problems: string[] = [];
  const taskId = init.taskId || env.HERMES_KANBAN_TASK || undefined;
  let stored: ReturnType<typeof stateDbGoal> | undefined;
  const storedGoal = () => (stored ??= stateDbGoal(ctx.home, init.sessionId, problems, driver));
  let dialect: DiscoveredCaps["dialect"];
  if (taskId || init.dialect === "kanban") dialect = "kanban";
  else if (init.dialect === "goal" || init.goal !== undefined) dialect = "goal";
  else if (init.dialect === "chat") dialect = "chat";
  else dialect = storedGoal().active ? "goal" : "chat";

  type Candidate = [source: string, value: () => unknown];
  const first = (candidates: Candidate[]) => {
    for (const [source, value] of candidates) {
      const n = budgetValue(value());
      if (n !== undefined) return { value: n, source };
    }
    return undefined;
  };
  const host: Candidate[] = [["host", () => init.caps?.timeSeconds]];
  const hostTurns: Candidate[] = [["host", () => init.caps?.turns]];
  const capTime: Candidate = ["caps.time_seconds", () => settings.caps.time_seconds];
  const capTurns: Candidate = ["caps.turns", () => settings.caps.turns];
  const agentTurns: Candidate = ["agent.max_turns", () => dig(config.doc, "agent", "max_turns")];

  let time: Candidate[];
  let turns: Candidate[];
  if (dialect === "kanban") {
    time = [
      ...host,
      ["kanban db", () => taskId && kanbanRuntime(env, taskId, problems, driver)],
      ["TERMINAL_TIMEOUT", () => {
        const raw = env.TERMINAL_TIMEOUT;
        if (raw === undefined || raw === "") return undefined;
        const n = budgetValue(raw);
        if (n === undefined) {
          problems.push(`TERMINAL_TIMEOUT=${JSON.stringify(raw)} is not a number of seconds`);
        }
        return n === undefined ? undefined : n + 30;
      }],
      capTime,
    ];
    turns = [...hostTurns, agentTurns, capTurns];
  } else if (dialect === "goal") {
    time = [...host, capTime];
    turns = [
      ...hostTurns,
      ["goal", () => init.goal?.maxTurns],
      ["goal", () => storedGoal().maxTurns],
      agentTurns,
      capTurns,
    ];
  } else {
    time = [
      ...host,
      capTime,
      ["agent.run_budget_seconds", () => dig(config.doc, "agent", "run_budget_seconds")],
    ];
    turns = [...hostTurns, capTurns];
  }

  const found: RunCaps = {};
  const t = first(time);
  const n = first(turns);
  if (t) found.time = t;
  if (n) found.turns = n;

  const counted = countedCaps({ turns: n?.value, timeSeconds: t?.value }, settings);
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
  const out: DiscoveredCaps = {
    dialect,
    runId: taskId ?? init.sessionId,
    caps,
    found,
    dropped,
    problems,
  };
  if (taskId) out.taskId = taskId;
  return out;
}

/**
 * Discover a run's dialect and caps (S4) from the host's caps, the kanban
 * board, `TERMINAL_TIMEOUT`, `state.db` goals, `config.yaml` and the plugin's
 * own `caps`. Databases are only read. Never throws: a source that fails is
 * skipped and named in `problems`.
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
  const env = envOf(options.env);
  const home = resolveHome(options.home, env);
  const config = readConfig(home);
  const { settings } = settingsFrom(config, home, env, options.overrides);
  return Promise.resolve(discoverCapsSync(init, { home, env, settings, config }));
}
