/**
 * Cap discovery: a run's dialect, run id, and turn and time caps, each with
 * the source it came from. Reads the kanban board and `state.db` (only
 * reads), the supervisor's environment, `config.yaml` and the settings. Never
 * throws: a source that fails is a problem line and the next source.
 *
 * @module
 */
import * as fs from "node:fs";
import { Buffer } from "node:buffer";
import * as path from "node:path";
import { budgetValue, type Settings } from "./settings.ts";
import { type Caps, capValues, countedCaps } from "./tier.ts";
import { AXES, type RunCaps } from "./_record.ts";
import {
  readWith,
  selectOne,
  SQLITE_FIX,
  type SqliteDb,
  type SqliteDriver,
  sqliteDriver,
} from "./_sqlite.ts";
import {
  type ConfigFile,
  dig,
  type Env,
  envOf,
  hermesRoot,
  readBounded,
  readConfig,
  resolveHome,
  settingsFrom,
  type SettingsOptions,
} from "./config.ts";
import { errorText, nonEmptyText as text, show } from "./log.ts";
import { nothingAt } from "./_file_ops.ts";
import { boundRunId, MAX_RUN_ID_BYTES } from "./persist.ts";

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
  caps?: Caps;
  /** The model the run calls, for the `prices` setting; `run.postLlmCall()` can name it too. */
  model?: string;
  /** The goal the run pursues. */
  goal?: { maxTurns?: number };
  /** The run's working tree, for workspace snapshots. @default {the current directory} */
  workspace?: string;
  /**
   * The run whose budget this one shares: a run of this process, or a run id
   * (another process's). Its turns, tokens and dollars count toward its own
   * caps and every ancestor's. @default {env AGENT_CHECKPOINT_PARENT}
   */
  parent?: { readonly runId: string } | string;
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
  /** The kanban board read (or looked for), and why that file: kanban runs only. */
  board?: BoardChoice;
  /**
   * When the run's time axis starts, ms since the epoch, and where that was
   * read: the task's run on the kanban board. Undefined: when `startRun` is called.
   */
  origin?: { atMs: number; source: string };
  /**
   * Turns the run has used before it starts, and where that was read: a
   * stored goal's `turns_used`. The run's turn count starts there and follows it.
   */
  turnsUsed?: { value: number; source: string };
  /** The session whose stored goal (`state.db`) the run's turn count follows. */
  goalSession?: string;
}

/** The kanban board a run reads, and why that file. */
export interface BoardChoice {
  /** The board file; undefined when none was found. */
  file?: string;
  /** Why this file, or why none. */
  why: string;
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
    // a getter that throws is no value: the cap is looked for elsewhere
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

/** A stored goal as cap discovery reads it. */
interface StoredGoal {
  /** Whether `state.db` holds a goal for the session. */
  exists: boolean;
  active: boolean;
  maxTurns: unknown;
  /** Its `turns_used`, when it is a whole number ≥ 0. */
  turnsUsed?: number;
}

/** A whole number ≥ 0 from a stored value, else undefined. */
const wholeCount = (value: unknown): number | undefined => {
  const n = typeof value === "bigint" ? Number(value) : value;
  return typeof n === "number" && Number.isInteger(n) && n >= 0 ? n : undefined;
};

const stateDbGoal = (
  home: string,
  sessionId: string,
  problems: string[],
  driver: SqliteDriver | undefined,
): StoredGoal => {
  const none = { exists: false, active: false, maxTurns: undefined };
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
    const out: StoredGoal = {
      exists: true,
      active: dig(goal, "status") === "active",
      maxTurns: dig(goal, "max_turns"),
    };
    const used = wholeCount(dig(goal, "turns_used"));
    if (used !== undefined) out.turnsUsed = used;
    return out;
  } catch (error) {
    problems.push(`cannot read the goal from ${file} (${errorText(error)}); treating it as none`);
    return none;
  }
};

/**
 * The `turns_used` of the goal `state.db` in `home` stores for a session:
 * one read by primary key. Undefined when there is none or it cannot be
 * read; never throws. The watchdog reads it at each look of a goal run.
 *
 * @example
 * ```ts
 * import { storedGoalTurns } from "./discover.ts";
 * import { sqliteDriver } from "./_sqlite.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * const db = sqliteDriver()!.open(join(home, "state.db"), { readOnly: false });
 * db.exec("CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT)");
 * db.run("INSERT INTO state_meta VALUES (?, ?)", "goal:s1", JSON.stringify({ turns_used: 3 }));
 * db.close();
 * assert.equal(storedGoalTurns(home, "s1"), 3);
 * assert.equal(storedGoalTurns(home, "other"), undefined);
 * ```
 */
export function storedGoalTurns(
  home: string,
  sessionId: string,
  driver: SqliteDriver | undefined = sqliteDriver(),
): number | undefined {
  try {
    if (!driver) return undefined;
    return stateDbGoal(home, sessionId, [], driver).turnsUsed;
  } catch {
    // Hermes's state database cannot be read now: no turns, read again at the next look
    return undefined;
  }
}

/** A board slug as Hermes takes one: lowercase letters, digits, `-` and `_`, at most 64. */
const BOARD_SLUG = /^[a-z0-9][a-z0-9\-_]{0,63}$/;

const isFile = (file: string): boolean => {
  try {
    return fs.statSync(file).isFile();
  } catch {
    // absent or unreadable: not a file
    return false;
  }
};

/** `~` and `~/…` made the user's home, as Hermes's `expanduser` does. */
const expandUser = (file: string, env: Env): string => {
  if (file !== "~" && !file.startsWith("~/")) return file;
  const home = envText(env, "HOME") ?? "";
  return home === "" ? file : path.join(home, file.slice(1));
};

/**
 * The kanban board a run in this environment reads, as Hermes picks it:
 * `HERMES_KANBAN_DB` (a file, pinned); else the board `HERMES_KANBAN_BOARD`
 * names (`<kroot>/kanban/boards/<slug>/kanban.db`, when that board exists);
 * else the one named in `<kroot>/kanban/current`; else the default board,
 * `<kroot>/kanban.db`. `<kroot>` is `HERMES_KANBAN_HOME`, else the Hermes
 * root ({@linkcode hermesRoot}). The board named `default` is `<kroot>/kanban.db`.
 * Never throws.
 *
 * @param home The profile home, absolute.
 * @param env The environment.
 * @returns The file (undefined when no board was found) and why.
 *
 * @example
 * ```ts
 * import { kanbanBoard } from "./discover.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(kanbanBoard("/h", { HERMES_KANBAN_DB: "/b/kanban.db" }), {
 *   file: "/b/kanban.db",
 *   why: "HERMES_KANBAN_DB",
 * });
 * assert.equal(kanbanBoard("/nonexistent", {}).file, undefined);
 * ```
 */
export function kanbanBoard(home: string, env: Env): BoardChoice {
  try {
    const pinned = envText(env, "HERMES_KANBAN_DB")?.trim();
    if (pinned) return { file: path.resolve(expandUser(pinned, env)), why: "HERMES_KANBAN_DB" };
    const kanbanHome = envText(env, "HERMES_KANBAN_HOME")?.trim();
    const kroot = kanbanHome ? path.resolve(expandUser(kanbanHome, env)) : hermesRoot(home, env);
    const rootWhy = kanbanHome ? `HERMES_KANBAN_HOME ${kroot}` : `the Hermes root ${kroot}`;
    const passed: string[] = [];
    const bySlug = (raw: string, from: string): BoardChoice | undefined => {
      const slug = raw.trim().toLowerCase();
      if (slug === "") return undefined;
      if (!BOARD_SLUG.test(slug)) {
        passed.push(`${from} ${show(raw.trim())} is not a board name`);
        return undefined;
      }
      if (slug === "default") {
        return { file: path.join(kroot, "kanban.db"), why: `${from} names the default board` };
      }
      const dir = path.join(kroot, "kanban", "boards", slug);
      if (!isFile(path.join(dir, "kanban.db")) && !isFile(path.join(dir, "board.json"))) {
        passed.push(`${from} names board "${slug}", which does not exist`);
        return undefined;
      }
      return { file: path.join(dir, "kanban.db"), why: `${from} names board "${slug}"` };
    };
    const then = (choice: BoardChoice): BoardChoice =>
      passed.length === 0 ? choice : { ...choice, why: `${choice.why} (${passed.join("; ")})` };
    const named = envText(env, "HERMES_KANBAN_BOARD");
    const fromEnv = named === undefined ? undefined : bySlug(named, "HERMES_KANBAN_BOARD");
    if (fromEnv) return then(fromEnv);
    const currentFile = path.join(kroot, "kanban", "current");
    const current = readBounded(currentFile, 4096);
    if (current.ok) {
      const chosen = bySlug(current.text.replace(/^\uFEFF/, ""), currentFile);
      if (chosen) return then(chosen);
    }
    const file = path.join(kroot, "kanban.db");
    if (!fs.existsSync(file)) {
      passed.push(`HERMES_KANBAN_DB is unset and there is no ${file}`);
      return { why: `no board found: ${passed.join("; ")}` };
    }
    return then({ file, why: `the default board in ${rootWhy}` });
  } catch (error) {
    return { why: `no board found (${errorText(error)})` };
  }
}

/** What a kanban task's row says, read from its board. */
interface TaskRow {
  runtime: unknown;
  goalMaxTurns: unknown;
  origin?: { atMs: number; source: string };
}

/** Attempts at a board read that fails "locked" or "readonly": the first, and 3 more, as Hermes. */
export const BOARD_READ_TRIES = 4;
/** Milliseconds between two attempts at a board read. */
export const BOARD_RETRY_MS = 50;

const pause = new Int32Array(new SharedArrayBuffer(4));
/** Wait `ms` on this thread: cap discovery runs inside `startRun`, which is synchronous. */
function sleepSync(ms: number): void {
  try {
    Atomics.wait(pause, 0, 0, ms);
  } catch {
    const end = Date.now() + ms;
    while (Date.now() < end) { /* a thread that may not wait */ }
  }
}

/** A read that fails while a writer resets the write-ahead log, and works when tried again. */
const transient = (error: unknown): boolean =>
  /\b(locked|readonly|read-only|busy)\b/i.test(errorText(error));

/** Epoch seconds as ms since the epoch, when the value is a time after 2001. */
const epochMs = (value: unknown): number | undefined => {
  const n = typeof value === "bigint" ? Number(value) : value;
  return typeof n === "number" && Number.isFinite(n) && n > 1e9 ? n * 1000 : undefined;
};

/** The task's row: its cap, goal cap and run start; a string saying why when it cannot be read. */
function taskRow(db: SqliteDb, taskId: string, runIdEnv: string | undefined): TaskRow | string {
  const columns = (table: string) =>
    new Set(db.all("SELECT name FROM pragma_table_info(?)", table).map((r) => String(r.name)));
  const tasks = columns("tasks");
  if (tasks.size === 0) return "no such table: tasks";
  if (!tasks.has("max_runtime_seconds")) {
    return "its tasks table has no max_runtime_seconds column: an old board";
  }
  const col = (name: string) => tasks.has(name) ? name : `NULL AS ${name}`;
  const row = db.get(
    `SELECT max_runtime_seconds, ${col("started_at")}, ${col("current_run_id")}, ${
      col("goal_max_turns")
    } FROM tasks WHERE id = ?`,
    taskId,
  );
  if (!row) return `no task ${show(taskId)}`;
  const out: TaskRow = { runtime: row.max_runtime_seconds, goalMaxTurns: row.goal_max_turns };
  const fromEnv = runIdEnv !== undefined && /^\s*\d+\s*$/.test(runIdEnv)
    ? Number(runIdEnv.trim())
    : undefined;
  const runId = fromEnv ?? wholeCount(row.current_run_id);
  if (runId !== undefined && columns("task_runs").has("started_at")) {
    const run = db.get(
      "SELECT started_at FROM task_runs WHERE id = ? AND task_id = ?",
      runId,
      taskId,
    );
    const at = epochMs(run?.started_at);
    if (at !== undefined) {
      const via = fromEnv !== undefined ? "HERMES_KANBAN_RUN_ID" : "tasks.current_run_id";
      out.origin = { atMs: at, source: `task_runs.started_at of run ${runId} (${via})` };
    }
  }
  if (out.origin === undefined) {
    const at = epochMs(row.started_at);
    if (at !== undefined) out.origin = { atMs: at, source: "tasks.started_at" };
  }
  return out;
}

/**
 * The kanban task's row from its board, tried again while it reads as
 * locked; undefined, with a problem line saying why, when it cannot be read.
 */
function kanbanTask(
  board: BoardChoice,
  env: Env,
  taskId: string,
  problems: string[],
  driver: SqliteDriver | undefined,
): TaskRow | undefined {
  const file = board.file;
  if (file === undefined) {
    problems.push(`cannot read the kanban board: ${board.why}`);
    return undefined;
  }
  if (!driver) {
    problems.push(`cannot read the kanban board ${file}: ${SQLITE_FIX}`);
    return undefined;
  }
  const runIdEnv = envText(env, "HERMES_KANBAN_RUN_ID");
  for (let tries = 1;; tries++) {
    try {
      const row = readWith(driver, file, (db) => taskRow(db, taskId, runIdEnv));
      if (typeof row === "string") {
        problems.push(
          row.startsWith("no task ")
            ? `kanban board ${file} has no task ${show(taskId)}`
            : `cannot read the kanban board ${file} (${row})`,
        );
        return undefined;
      }
      return row;
    } catch (error) {
      if (tries < BOARD_READ_TRIES && transient(error)) {
        sleepSync(BOARD_RETRY_MS);
        continue;
      }
      const after = tries > 1 ? `; tried ${tries} times, ${BOARD_RETRY_MS} ms apart` : "";
      problems.push(`cannot read the kanban board ${file} (${errorText(error)}${after})`);
      return undefined;
    }
  }
}

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

/** A goal's turn cap when it has none (or 0), as Hermes counts. */
export const GOAL_TURNS = 20;

/**
 * A task row's `max_runtime_seconds`: its seconds when > 0; `"none"` when it
 * is NULL, 0 or less (Hermes does not stop the task); undefined, with a
 * problem line, when it is not a number.
 */
function boardSeconds(
  value: unknown,
  taskId: string,
  problems: string[],
): number | "none" | undefined {
  const n = typeof value === "bigint" ? Number(value) : value;
  if (n === null || n === undefined) return "none";
  if (typeof n === "number" && Number.isFinite(n)) return n > 0 ? n : "none";
  if (typeof n === "string" && n.trim() !== "" && Number.isFinite(Number(n))) {
    return Number(n) > 0 ? Number(n) : "none";
  }
  problems.push(
    `task ${show(taskId)} has max_runtime_seconds ${show(value)}, not a number of seconds`,
  );
  return undefined;
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
  // A kanban task's row: its time cap, its goal cap and when Hermes started its run.
  const board = dialect === "kanban" && taskId ? kanbanBoard(ctx.home, env) : undefined;
  let t = budgetFrom(field(init.caps, "timeSeconds"), "host");
  // No board at all is a line only when a cap was to come from it: not for a host that gave one.
  const quiet = t !== undefined && board?.file === undefined;
  const row = board && taskId && !quiet
    ? kanbanTask(board, env, taskId, problems, driver)
    : undefined;
  if (dialect === "kanban") {
    // A row read with no cap (NULL, 0 or less) is a task Hermes does not stop: no time cap from
    // the board, and not TERMINAL_TIMEOUT either. The fallback is for a board not read.
    const runtime = row === undefined ? undefined : boardSeconds(row.runtime, taskId!, problems);
    if (runtime !== "none") {
      t ??= budgetFrom(runtime, "kanban db");
      t ??= budgetFrom(terminalTimeout(env, problems), "TERMINAL_TIMEOUT");
    }
    t ??= budgetFrom(settings.caps.time_seconds, "caps.time_seconds");
  } else if (dialect === "goal") {
    t ??= budgetFrom(settings.caps.time_seconds, "caps.time_seconds");
  } else {
    t ??= budgetFrom(settings.caps.time_seconds, "caps.time_seconds");
    t ??= budgetFrom(dig(config.doc, "agent", "run_budget_seconds"), "agent.run_budget_seconds");
  }
  let n = budgetFrom(field(init.caps, "turns"), "host");
  // A goal's turn cap when the run pursues one; its stored turns_used is where the run's
  // turn count starts (and, through the watchdog, follows).
  let goal: StoredGoal | undefined;
  if (dialect === "kanban" && envText(env, "HERMES_KANBAN_GOAL_MODE")?.trim() === "1") {
    n ??= budgetFrom(envText(env, "HERMES_KANBAN_GOAL_MAX_TURNS"), "HERMES_KANBAN_GOAL_MAX_TURNS");
    n ??= budgetFrom(row?.goalMaxTurns, "tasks.goal_max_turns");
    n ??= { value: GOAL_TURNS, source: "goal default" };
    goal = storedGoal();
  } else if (dialect === "kanban") {
    n ??= budgetFrom(dig(config.doc, "agent", "max_turns"), "agent.max_turns");
  } else if (dialect === "goal") {
    goal = storedGoal();
    n ??= budgetFrom(field(init.goal, "maxTurns"), "goal");
    n ??= budgetFrom(goal.maxTurns, "goal");
    if (init.goal !== undefined || goal.exists) n ??= { value: GOAL_TURNS, source: "goal default" };
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
  // The other axes: the host's caps, then the plugin's, in every dialect.
  const plugin: Record<string, unknown> = settings.caps;
  for (const { name, setting } of AXES) {
    if (name === "time" || name === "turns") continue;
    const cap = budgetFrom(field(init.caps, name), "host") ??
      budgetFrom(plugin[setting], `caps.${setting}`);
    if (cap) found[name] = cap;
  }

  const counted = countedCaps(capValues(found), settings);
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
  for (const { name, show } of AXES) {
    const cap = found[name];
    if (name === "time" || name === "turns" || !cap) continue;
    if (counted[name] !== undefined) caps[name] = cap;
    else dropped.push(`${name} cap ${show(cap.value)} not counted: ${name} is not in enabled_axes`);
  }
  const given = taskId ?? supervisorRunId ?? sessionId;
  const runId = boundRunId(given);
  if (runId !== given) {
    const why = given.includes("\u0000")
      ? "holds a NUL character"
      : `is ${Buffer.byteLength(given)} bytes long, more than ${MAX_RUN_ID_BYTES}`;
    problems.push(`the run id ${why}; the run is kept as ${runId}`);
  }
  const out: DiscoveredCaps = {
    dialect,
    runId,
    caps,
    found,
    dropped,
    problems,
  };
  if (taskId) out.taskId = taskId;
  if (board) out.board = board;
  const startMs = ctx.startedAtMs ?? Date.now();
  if (row?.origin && row.origin.atMs <= startMs) out.origin = row.origin;
  if (goal?.exists) {
    out.goalSession = sessionId;
    if (goal.turnsUsed !== undefined) {
      out.turnsUsed = { value: goal.turnsUsed, source: "state.db goal turns_used" };
    }
  }
  return out;
}

/**
 * Cap discovery, synchronously: a few read-only SELECTs on one open per
 * database; a board that reads as locked is tried 3 more times, 50 ms apart
 * (this thread waits at most 150 ms for it). Never throws: bad input or an internal failure gives a chat run with no
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
      runId: boundRunId(sessionId),
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
