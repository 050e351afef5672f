/**
 * Test fixtures laid out as Hermes lays them out: kanban boards, `state.db`
 * and `config.yaml`, with the statements, columns and pragmas of Hermes's own
 * code (`hermes_cli/kanban_db.py`, `hermes_cli/goals.py`), so that no test
 * reads a schema this project invented.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { type SqliteDb, sqliteDriver } from "../_sqlite.ts";

const driver = sqliteDriver();

/** Open (or create) a database for writing, as a test's Hermes process does. */
export function openWritable(file: string): SqliteDb {
  if (!driver) throw new Error("these tests need a SQLite driver");
  fs.mkdirSync(path.dirname(file), { recursive: true });
  return driver.open(file, { readOnly: false });
}

/**
 * The pragmas every Hermes connection to a board sets: WAL, `synchronous=FULL`,
 * `wal_autocheckpoint=100`, `journal_size_limit=8388608` (its busy timeout,
 * 120 s, is left to the writer that wants it).
 */
export const HERMES_PRAGMAS = [
  "PRAGMA journal_mode = WAL",
  "PRAGMA synchronous = FULL",
  "PRAGMA wal_autocheckpoint = 100",
  "PRAGMA journal_size_limit = 8388608",
];

/** The columns every version of Hermes's `tasks` table has. */
const TASKS_FIRST = `CREATE TABLE tasks (
  id             TEXT PRIMARY KEY,
  title          TEXT NOT NULL,
  body           TEXT,
  assignee       TEXT,
  status         TEXT NOT NULL,
  priority       INTEGER NOT NULL DEFAULT 0,
  created_by     TEXT,
  created_at     INTEGER NOT NULL,
  started_at     INTEGER,
  completed_at   INTEGER,
  workspace_kind TEXT NOT NULL DEFAULT 'scratch',
  workspace_path TEXT,
  claim_lock     TEXT,
  claim_expires  INTEGER,
  tenant         TEXT
)`;

/** Columns Hermes added later, by `ALTER TABLE ADD COLUMN` when it opens a board writable. */
const TASKS_ADDED = [
  "ALTER TABLE tasks ADD COLUMN worker_pid INTEGER",
  "ALTER TABLE tasks ADD COLUMN max_runtime_seconds INTEGER",
  "ALTER TABLE tasks ADD COLUMN last_heartbeat_at INTEGER",
  "ALTER TABLE tasks ADD COLUMN current_run_id INTEGER",
  "ALTER TABLE tasks ADD COLUMN goal_mode INTEGER NOT NULL DEFAULT 0",
  "ALTER TABLE tasks ADD COLUMN goal_max_turns INTEGER",
  "ALTER TABLE tasks ADD COLUMN session_id TEXT",
];

const TASK_RUNS = `CREATE TABLE task_runs (
  id                  INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id             TEXT NOT NULL,
  profile             TEXT,
  step_key            TEXT,
  status              TEXT NOT NULL,
  claim_lock          TEXT,
  claim_expires       INTEGER,
  worker_pid          INTEGER,
  max_runtime_seconds INTEGER,
  last_heartbeat_at   INTEGER,
  started_at          INTEGER NOT NULL,
  ended_at            INTEGER,
  outcome             TEXT,
  summary             TEXT,
  metadata            TEXT,
  error               TEXT
)`;

const TASK_COMMENTS = `CREATE TABLE task_comments (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id    TEXT NOT NULL,
  author     TEXT NOT NULL,
  body       TEXT NOT NULL,
  created_at INTEGER NOT NULL
)`;

/** One task of a board, with the columns cap discovery reads. */
export interface HermesTask {
  id: string;
  /** NULL (the default) and 0 mean no cap in Hermes; a string is stored as SQLite's INTEGER affinity makes it. */
  maxRuntimeSeconds?: number | string | null;
  /** Epoch seconds of the task's first claim. */
  startedAt?: number | null;
  goalMode?: boolean;
  goalMaxTurns?: number | null;
  /**
   * The task's current run: a `task_runs` row is made with this start (epoch
   * seconds) and `tasks.current_run_id` names it.
   */
  run?: { startedAt: number; maxRuntimeSeconds?: number | null };
  /** An earlier run of the task, ended, with this start (epoch seconds). */
  earlierRun?: { startedAt: number };
}

/** How old a board is. */
export type BoardAge =
  /** Every column cap discovery reads. */
  | "current"
  /** Tasks with `max_runtime_seconds`, but no `current_run_id`, goal columns or `task_runs`. */
  | "runtime-only"
  /** The first `tasks` table: no `max_runtime_seconds` column at all. */
  | "old";

/**
 * Build a Hermes board at `file` with the given tasks, and close it (its
 * writer gone: WAL mode, no `-wal` file left). Returns the file.
 */
export function hermesBoard(
  file: string,
  tasks: HermesTask[],
  { age = "current", journal = "wal" }: {
    age?: BoardAge;
    /** `delete`: a rollback journal, as Hermes uses on network file systems. */
    journal?: "wal" | "delete";
  } = {},
): string {
  const db = openWritable(file);
  try {
    for (const pragma of HERMES_PRAGMAS) db.exec(pragma);
    if (journal === "delete") db.exec("PRAGMA journal_mode = DELETE");
    db.exec("BEGIN IMMEDIATE");
    db.exec(TASKS_FIRST);
    const added = age === "current"
      ? TASKS_ADDED
      : age === "runtime-only"
      ? TASKS_ADDED.filter((s) => / (worker_pid|max_runtime_seconds) /.test(s))
      : [];
    for (const statement of added) db.exec(statement);
    if (age === "current") db.exec(TASK_RUNS);
    db.exec(TASK_COMMENTS);
    const now = Math.floor(Date.now() / 1000);
    for (const task of tasks) {
      const columns = ["id", "title", "status", "created_at", "started_at"];
      const values: unknown[] = [
        task.id,
        `task ${task.id}`,
        "running",
        now,
        task.startedAt ?? null,
      ];
      if (age !== "old") {
        columns.push("max_runtime_seconds"), values.push(task.maxRuntimeSeconds ?? null);
      }
      if (age === "current") {
        columns.push("goal_mode", "goal_max_turns");
        values.push(task.goalMode ? 1 : 0, task.goalMaxTurns ?? null);
      }
      db.run(
        `INSERT INTO tasks (${columns.join(", ")}) VALUES (${columns.map(() => "?").join(", ")})`,
        ...values,
      );
      if (task.earlierRun && age === "current") {
        db.run(
          "INSERT INTO task_runs (task_id, status, started_at, ended_at, outcome) VALUES (?, ?, ?, ?, ?)",
          task.id,
          "crashed",
          task.earlierRun.startedAt,
          task.earlierRun.startedAt + 1,
          "crashed",
        );
      }
      if (task.run && age === "current") {
        db.run(
          "INSERT INTO task_runs (task_id, status, max_runtime_seconds, started_at) VALUES (?, ?, ?, ?)",
          task.id,
          "running",
          task.run.maxRuntimeSeconds ?? task.maxRuntimeSeconds ?? null,
          task.run.startedAt,
        );
        db.run(
          "UPDATE tasks SET current_run_id = (SELECT max(id) FROM task_runs WHERE task_id = ?) WHERE id = ?",
          task.id,
          task.id,
        );
      }
    }
    db.exec("COMMIT");
  } finally {
    db.close();
  }
  return file;
}

/** A task's current run id on a board. */
export function currentRunId(file: string, taskId: string): number {
  const db = openWritable(file);
  try {
    return Number(db.get("SELECT current_run_id FROM tasks WHERE id = ?", taskId)?.current_run_id);
  } finally {
    db.close();
  }
}

/** A stored goal, as `hermes_cli/goals.py` keeps it in `state_meta`. */
export interface HermesGoal {
  goal?: string;
  status?: "active" | "paused" | "done" | "cleared";
  turns_used?: number;
  max_turns?: number | null;
  created_at?: number;
  last_turn_at?: number;
}

/** Write (or replace) the goal of session `sessionId` in `<home>/state.db`. */
export function hermesGoal(home: string, sessionId: string, goal: HermesGoal): void {
  const db = openWritable(path.join(home, "state.db"));
  try {
    db.exec("PRAGMA journal_mode = WAL");
    db.exec("CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT)");
    const now = Math.floor(Date.now() / 1000);
    const value = {
      goal: "finish the report",
      status: "active",
      turns_used: 0,
      max_turns: 20,
      created_at: now,
      last_turn_at: now,
      ...goal,
    };
    db.run(
      "INSERT OR REPLACE INTO state_meta (key, value) VALUES (?, ?)",
      `goal:${sessionId}`,
      JSON.stringify(value),
    );
  } finally {
    db.close();
  }
}

/** Write `<home>/config.yaml` as Hermes's `config.yaml` with these lines. */
export function hermesConfig(home: string, yaml: string): void {
  fs.mkdirSync(home, { recursive: true });
  fs.writeFileSync(path.join(home, "config.yaml"), yaml);
}

/** What {@linkcode liveBoardReads} measured. */
export interface LiveBoardFigures {
  /** Cap discoveries made while the writer ran. */
  reads: number;
  /** Those that did not take the board's cap (the fallback, or none). */
  fallbacks: number;
  /** The first few problem lines of those. */
  problems: string[];
  /** Single reads without a retry, made between them, that failed. */
  singleTryFailures: number;
  /** Their errors, by message. */
  singleTryErrors: Record<string, number>;
  /** The writer's commits, and its seconds, while the reads ran. */
  commits: number;
  seconds: number;
}

/**
 * Start a Hermes writer process on a fresh board (a task with a 900 s cap),
 * and run `reads` cap discoveries of that task while it commits as fast as it
 * can; between two, one single read without a retry, for the failure rate a
 * read would see without one. Stops the writer and returns the figures.
 */
export async function liveBoardReads(reads: number): Promise<LiveBoardFigures> {
  const { spawn } = await import("node:child_process");
  const os = await import("node:os");
  const { discoverCapsSync } = await import("../discover.ts");
  const { defaultSettings } = await import("../settings.ts");
  const { readWith } = await import("../_sqlite.ts");
  const { scriptCommand, fixture } = await import("./_helpers.ts");
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-board-"));
  const file = hermesBoard(path.join(home, "kanban.db"), [{
    id: "t-1",
    maxRuntimeSeconds: 900,
    startedAt: Math.floor(Date.now() / 1000),
    run: { startedAt: Math.floor(Date.now() / 1000) },
  }]);
  const stop = path.join(home, "stop");
  const [cmd, argv] = scriptCommand(fixture("hermes_board"), ["write", file, stop, "t-1"]);
  const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (d) => {
      out += d;
      if (out.includes("ready")) resolve();
    });
    child.on("exit", (code) => reject(new Error(`the writer exited (${code}): ${out}`)));
  });
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  await ready;
  const figures: LiveBoardFigures = {
    reads: 0,
    fallbacks: 0,
    problems: [],
    singleTryFailures: 0,
    singleTryErrors: {},
    commits: 0,
    seconds: 0,
  };
  const settings = defaultSettings(path.join(home, "agent-checkpoints"));
  const config = { doc: undefined, warnings: [] };
  const env = { HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "60" };
  try {
    for (let k = 0; k < reads; k++) {
      const found = discoverCapsSync({ sessionId: "s", taskId: "t-1" }, {
        home,
        env,
        settings,
        config,
      });
      figures.reads++;
      if (found.caps.time?.source !== "kanban db") {
        figures.fallbacks++;
        if (figures.problems.length < 5) figures.problems.push(...found.problems);
      }
      try {
        readWith(
          driver!,
          file,
          (db) => db.get("SELECT max_runtime_seconds FROM tasks WHERE id = ?", "t-1"),
        );
      } catch (error) {
        figures.singleTryFailures++;
        const message = String((error as Error)?.message ?? error);
        figures.singleTryErrors[message] = (figures.singleTryErrors[message] ?? 0) + 1;
      }
    }
  } finally {
    fs.writeFileSync(stop, "");
    await exited;
  }
  const last = out.trim().split("\n").at(-1) ?? "{}";
  const writer = JSON.parse(last) as { commits?: number; seconds?: number };
  figures.commits = writer.commits ?? 0;
  figures.seconds = writer.seconds ?? 0;
  fs.rmSync(home, { recursive: true, force: true });
  return figures;
}
