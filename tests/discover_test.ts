import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { createHash } from "node:crypto";
import {
  createAgentCheckpoint,
  discoverCaps,
  type DiscoveredCaps,
  loadSettings,
  type RunInit,
} from "../mod.ts";
import { spawn } from "node:child_process";
import { discoverCapsSync } from "../discover.ts";
import { defaultSettings } from "../settings.ts";
import { parseRecord } from "../_record.ts";
import { explain } from "../cli/_explain_report.ts";
import { explainCommand, explainText } from "../cli/_explain.ts";
import { paint } from "../cli/_format.ts";
import { memoryIo } from "../cli/_io.ts";
import { type SqliteDb, sqliteDriver } from "../_sqlite.ts";
import process from "node:process";
import { fixture, runScript, scriptCommand, tempHome, waitFor, writeConfig } from "./_helpers.ts";
import { currentRunId, hermesBoard, hermesConfig, hermesGoal, liveBoardReads } from "./_hermes.ts";

const driver = sqliteDriver();
const openDb = (file: string): SqliteDb => {
  if (!driver) throw new Error("these tests need a SQLite driver");
  return driver.open(file, { readOnly: false });
};

/** A Hermes board at `<home>/kanban.db` with one task, its writer gone (WAL mode). */
function board(home: string, runtime: number | string | null, taskId = "t-1"): string {
  return hermesBoard(path.join(home, "kanban.db"), [{ id: taskId, maxRuntimeSeconds: runtime }]);
}

const hash = (file: string) => createHash("sha256").update(fs.readFileSync(file)).digest("hex");

async function discover(
  init: RunInit,
  { home = tempHome(), env = {}, yaml, overrides }: {
    home?: string;
    env?: Record<string, string>;
    yaml?: string;
    overrides?: Record<string, unknown>;
  } = {},
): Promise<DiscoveredCaps> {
  if (yaml !== undefined) writeConfig(home, yaml);
  return await discoverCaps(init, overrides ? { home, env, overrides } : { home, env });
}

test("discoverCaps() takes the host's caps first in every dialect", async () => {
  for (const dialect of ["chat", "kanban", "goal"] as const) {
    const found = await discover(
      { sessionId: "s", dialect, caps: { turns: 7, timeSeconds: 70 } },
      { env: { TERMINAL_TIMEOUT: "100" }, overrides: { caps: { turns: 9, time_seconds: 90 } } },
    );
    assert.deepEqual(found.caps, {
      turns: { value: 7, source: "host" },
      time: { value: 70, source: "host" },
    }, dialect);
  }
});

test("discoverCaps() reads a WAL board while another connection holds a write transaction", async () => {
  const home = tempHome();
  const file = board(home, 900);
  const writer = openDb(file);
  writer.exec("BEGIN IMMEDIATE");
  writer.run("UPDATE tasks SET max_runtime_seconds = 5 WHERE id = 't-1'");
  const before = hash(file);
  try {
    const found = await discover({ sessionId: "s", taskId: "t-1" }, {
      home,
      env: { HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "100" },
    });
    assert.equal(found.dialect, "kanban");
    assert.equal(found.runId, "t-1");
    assert.deepEqual(found.caps.time, { value: 900, source: "kanban db" });
    assert.deepEqual(found.problems, []);
    assert.equal(hash(file), before);
  } finally {
    writer.exec("ROLLBACK");
    writer.close();
  }
});

test("discoverCaps() takes the kanban task from HERMES_KANBAN_TASK", async () => {
  const home = tempHome();
  const file = board(home, "1200", "env-task");
  const found = await discover({ sessionId: "s" }, {
    home,
    env: { HERMES_KANBAN_TASK: "env-task", HERMES_KANBAN_DB: file },
  });
  assert.equal(found.runId, "env-task");
  assert.deepEqual(found.caps.time, { value: 1200, source: "kanban db" });
});

for (
  const [what, runtime] of [
    ["NULL", null],
    ["zero", 0],
    ["negative", -30],
  ] as const
) {
  test(`discoverCaps() gives no time cap from the board, nor TERMINAL_TIMEOUT, when max_runtime_seconds is ${what}`, async () => {
    const home = tempHome();
    const file = board(home, runtime);
    const before = hash(file);
    const env = { HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "180" };
    const found = await discover({ sessionId: "s", taskId: "t-1" }, { home, env });
    assert.equal(found.caps.time, undefined, "Hermes does not stop this task: no cap");
    assert.deepEqual(found.problems, []);
    // The plugin's own cap still applies.
    const own = await discover({ sessionId: "s", taskId: "t-1" }, {
      home,
      env,
      overrides: { caps: { time_seconds: 500 } },
    });
    assert.deepEqual(own.caps.time, { value: 500, source: "caps.time_seconds" });
    assert.equal(hash(file), before);
  });
}

test("discoverCaps() falls back to TERMINAL_TIMEOUT + 30 when max_runtime_seconds is not a number", async () => {
  const home = tempHome();
  const file = board(home, "soon");
  const found = await discover({ sessionId: "s", taskId: "t-1" }, {
    home,
    env: { HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "600" },
  });
  assert.deepEqual(found.caps.time, { value: 630, source: "TERMINAL_TIMEOUT" });
  assert.match(found.problems.join("\n"), /max_runtime_seconds "soon", not a number of seconds/);
});

test("discoverCaps() falls back with a problem line when the board is missing", async () => {
  const home = tempHome();
  const found = await discover({ sessionId: "s", taskId: "t-1" }, {
    home,
    env: { HERMES_KANBAN_DB: path.join(home, "nope.db"), TERMINAL_TIMEOUT: "60" },
  });
  assert.deepEqual(found.caps.time, { value: 90, source: "TERMINAL_TIMEOUT" });
  assert.equal(found.problems.length, 1);
  assert.match(found.problems[0]!, /cannot read the kanban board .*nope\.db/);
  assert.ok(!fs.existsSync(path.join(home, "nope.db")), "the board must not be created");
});

test("discoverCaps() falls back when the board is corrupt, and leaves it as it was", async () => {
  const home = tempHome();
  const file = path.join(home, "kanban.db");
  fs.writeFileSync(file, "SQLite format 3\0" + "garbage".repeat(200));
  const before = hash(file);
  const found = await discover({ sessionId: "s", taskId: "t-1" }, {
    home,
    env: { HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "60" },
  });
  assert.equal(found.caps.time?.source, "TERMINAL_TIMEOUT");
  assert.match(found.problems[0]!, /cannot read the kanban board/);
  assert.equal(hash(file), before);
});

test("discoverCaps() falls back when the board has no tasks table", async () => {
  const home = tempHome();
  const file = path.join(home, "other.db");
  const db = openDb(file);
  db.exec("CREATE TABLE notes (id TEXT)");
  db.close();
  const before = hash(file);
  const found = await discover({ sessionId: "s", taskId: "t-1" }, {
    home,
    env: { HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "60" },
  });
  assert.equal(found.caps.time?.source, "TERMINAL_TIMEOUT");
  assert.match(found.problems[0]!, /no such table: tasks/);
  assert.equal(hash(file), before);
});

test("discoverCaps() ignores garbage in TERMINAL_TIMEOUT and names it", async () => {
  for (const raw of ["abc", "-5", "0", "NaN"]) {
    const found = await discover({ sessionId: "s", taskId: "t" }, {
      env: { TERMINAL_TIMEOUT: raw },
      overrides: { caps: { time_seconds: 77 } },
    });
    assert.deepEqual(found.caps.time, { value: 77, source: "caps.time_seconds" }, raw);
    assert.match(found.problems.join("\n"), /TERMINAL_TIMEOUT=.* is not a number/, raw);
  }
});

test("discoverCaps() takes kanban turns from agent.max_turns, then caps.turns", async () => {
  const a = await discover({ sessionId: "s", taskId: "t" }, {
    yaml: "agent: { max_turns: 60 }\nagent_checkpoint: { caps: { turns: 20 } }",
  });
  assert.deepEqual(a.caps.turns, { value: 60, source: "agent.max_turns" });
  for (const none of ["0", "-1", "none", "inf", "null"]) {
    const b = await discover({ sessionId: "s", taskId: "t" }, {
      yaml: `agent: { max_turns: ${none} }\nagent_checkpoint: { caps: { turns: 20 } }`,
    });
    assert.deepEqual(b.caps.turns, { value: 20, source: "caps.turns" }, none);
  }
});

/** A state.db with a goal for session `s`, as Hermes stores one. */
function stateDb(home: string, goal: Parameters<typeof hermesGoal>[2]): void {
  hermesGoal(home, "s", goal);
}

test("discoverCaps() finds an active goal in state.db and takes its max_turns", async () => {
  const home = tempHome();
  stateDb(home, { status: "active", max_turns: 25 });
  const found = await discover({ sessionId: "s" }, {
    home,
    yaml: "agent: { max_turns: 80 }\nagent_checkpoint: { caps: { time_seconds: 500 } }",
  });
  assert.equal(found.dialect, "goal");
  assert.deepEqual(found.caps, {
    turns: { value: 25, source: "goal" },
    time: { value: 500, source: "caps.time_seconds" },
  });
});

test("discoverCaps() treats a finished goal as no goal", async () => {
  const home = tempHome();
  stateDb(home, { status: "done", max_turns: 25 });
  const found = await discover({ sessionId: "s" }, { home, yaml: "agent: { max_turns: 80 }" });
  assert.equal(found.dialect, "chat");
  assert.deepEqual(found.caps, {});
});

test("discoverCaps() takes a goal run's turns from the goal, 20, then caps.turns", async () => {
  const a = await discover({ sessionId: "s", dialect: "goal", goal: { maxTurns: 12 } }, {
    yaml: "agent: { max_turns: 80 }",
  });
  assert.deepEqual(a.caps.turns, { value: 12, source: "goal" });
  // A goal without max_turns has 20, as Hermes counts, never agent.max_turns.
  const b = await discover({ sessionId: "s", dialect: "goal", goal: {} }, {
    yaml: "agent: { max_turns: 80 }",
  });
  assert.deepEqual(b.caps.turns, { value: 20, source: "goal default" });
  const none = await discover({ sessionId: "s", dialect: "goal" }, {
    yaml: "agent: { max_turns: 80 }",
  });
  assert.equal(none.caps.turns, undefined, "no goal known: not agent.max_turns either");
  const c = await discover({ sessionId: "s", dialect: "goal" }, {
    yaml: "agent_checkpoint: { caps: { turns: 15 } }",
  });
  assert.deepEqual(c.caps.turns, { value: 15, source: "caps.turns" });
});

test("discoverCaps() makes a run the host gives a goal a goal run, its maxTurns first", async () => {
  const home = tempHome();
  stateDb(home, { status: "active", max_turns: 25 });
  const found = await discover({ sessionId: "s", goal: { maxTurns: 12 } }, { home });
  assert.equal(found.dialect, "goal");
  assert.deepEqual(found.caps.turns, { value: 12, source: "goal" });
  const fallback = await discover({ sessionId: "s", goal: {} }, { home });
  assert.deepEqual(fallback.caps.turns, { value: 25, source: "goal" }, "then the stored goal's");
});

test("discoverCaps() never arms a chat run from agent.max_turns alone", async () => {
  const found = await discover({ sessionId: "s" }, { yaml: "agent: { max_turns: 80 }" });
  assert.equal(found.dialect, "chat");
  assert.deepEqual(found.caps, {});
});

test("discoverCaps() reads agent.run_budget_seconds for chat only when usable", async () => {
  const cases: Array<[string, number | undefined]> = [
    ["850", 850],
    ["'850'", 850],
    ["true", undefined],
    ["false", undefined],
    ["0", undefined],
    [".nan", undefined],
    ["-3", undefined],
    ["soon", undefined],
  ];
  for (const [yaml, expected] of cases) {
    const found = await discover({ sessionId: "s" }, {
      yaml: `agent: { run_budget_seconds: ${yaml} }`,
    });
    assert.deepEqual(
      found.caps.time,
      expected === undefined ? undefined : { value: expected, source: "agent.run_budget_seconds" },
      yaml,
    );
  }
});

test("discoverCaps() prefers caps.time_seconds over agent.run_budget_seconds in chat", async () => {
  const found = await discover({ sessionId: "s" }, {
    yaml: "agent: { run_budget_seconds: 850 }\nagent_checkpoint: { caps: { time_seconds: 400 } }",
  });
  assert.deepEqual(found.caps.time, { value: 400, source: "caps.time_seconds" });
});

test("discoverCaps() applies floors, enabled_axes and the 1-turn rule, saying why", async () => {
  const a = await discover({ sessionId: "s", caps: { turns: 1, timeSeconds: 100 } }, {
    overrides: { min_budget_floor_seconds: 200 },
  });
  assert.deepEqual(a.caps, {});
  assert.deepEqual(a.found.turns, { value: 1, source: "host" });
  assert.match(a.dropped.join("\n"), /1-turn run/);
  assert.match(a.dropped.join("\n"), /below min_budget_floor_seconds 200/);
  const b = await discover({ sessionId: "s", caps: { turns: 30, timeSeconds: 100 } }, {
    overrides: { enabled_axes: ["time"] },
  });
  assert.deepEqual(b.caps, { time: { value: 100, source: "host" } });
  assert.match(b.dropped[0]!, /turns is not in enabled_axes/);
});

test("discoverCaps() takes a bad description or bad options without throwing", async () => {
  for (const init of [undefined, null, 7, "s", {}]) {
    const found = await discoverCaps(init as never, { home: tempHome(), env: {} });
    assert.equal(found.dialect, "chat", String(init));
    assert.deepEqual(found.caps, {});
  }
  const found = await discoverCaps({ sessionId: "s" }, null as never);
  assert.equal(found.runId, "s");
});

test("discoverCaps() makes a numeric task id a string, and names one it cannot use", async () => {
  const home = tempHome();
  const file = board(home, 700, "42");
  const found = await discover({ sessionId: "s", taskId: 42 as unknown as string }, {
    home,
    env: { HERMES_KANBAN_DB: file },
  });
  assert.equal(found.dialect, "kanban");
  assert.equal(found.runId, "42");
  assert.equal(found.taskId, "42");
  assert.deepEqual(found.caps.time, { value: 700, source: "kanban db" });
  const bad = await discover({ sessionId: "s", taskId: { id: 1 } as unknown as string });
  assert.equal(bad.dialect, "chat");
  assert.equal(bad.runId, "s");
  assert.match(bad.problems.join("\n"), /taskId \{"id":1\} is not a string; ignoring it/);
  const numericSession = await discover({ sessionId: 7 as unknown as string });
  assert.equal(numericSession.runId, "7");
});

test("discoverCaps() takes the run id from AGENT_CHECKPOINT_RUN_ID over the session id, never over a task id", async () => {
  const env = { AGENT_CHECKPOINT_RUN_ID: "sup-1" };
  assert.equal((await discover({ sessionId: "s" }, { env })).runId, "sup-1");
  const kanban = await discover({ sessionId: "s", taskId: "t-9" }, { env });
  assert.equal(kanban.runId, "t-9");
  assert.equal(
    (await discover({ sessionId: "s" }, { env: { AGENT_CHECKPOINT_RUN_ID: "" } })).runId,
    "s",
  );
});

test("discoverCaps() takes AGENT_CHECKPOINT_DEADLINE as a time cap from the supervisor", async () => {
  const deadline = (seconds: number) => ({
    AGENT_CHECKPOINT_DEADLINE: String(Date.now() + seconds * 1000),
  });
  const a = await discover({ sessionId: "s" }, { env: deadline(600) });
  assert.equal(a.caps.time?.source, "supervisor");
  assert.ok(a.caps.time!.value > 590 && a.caps.time!.value <= 600, String(a.caps.time!.value));
  // It wins over the config sources when it comes first…
  const b = await discover({ sessionId: "s" }, {
    env: deadline(600),
    overrides: { caps: { time_seconds: 3600 } },
  });
  assert.equal(b.caps.time?.source, "supervisor");
  // …and over the host's cap when it comes first; a smaller cap wins over it.
  const c = await discover({ sessionId: "s", caps: { timeSeconds: 3600 } }, { env: deadline(600) });
  assert.equal(c.caps.time?.source, "supervisor");
  const d = await discover({ sessionId: "s", caps: { timeSeconds: 60 } }, { env: deadline(600) });
  assert.deepEqual(d.caps.time, { value: 60, source: "host" });
  const e = await discover({ sessionId: "s", taskId: "t" }, {
    env: { ...deadline(600), TERMINAL_TIMEOUT: "100" },
  });
  assert.deepEqual(e.caps.time, { value: 130, source: "TERMINAL_TIMEOUT" });
});

test("discoverCaps() names a bad or past AGENT_CHECKPOINT_DEADLINE", async () => {
  const bad = await discover({ sessionId: "s" }, { env: { AGENT_CHECKPOINT_DEADLINE: "soon" } });
  assert.equal(bad.caps.time, undefined);
  assert.match(
    bad.problems[0]!,
    /AGENT_CHECKPOINT_DEADLINE="soon" is not a time in ms since the epoch/,
  );
  const past = await discover({ sessionId: "s" }, {
    env: { AGENT_CHECKPOINT_DEADLINE: String(Date.now() - 5000) },
  });
  assert.equal(past.caps.time?.source, "supervisor");
  assert.match(past.problems[0]!, /AGENT_CHECKPOINT_DEADLINE passed \d+s before the run started/);
});

test("discoverCaps() reads a WAL board nobody has open without creating -wal or -shm files", async () => {
  const home = tempHome();
  const file = board(home, 900);
  assert.ok(!fs.existsSync(`${file}-wal`), "the board's writer closed it");
  const before = hash(file);
  const found = await discover({ sessionId: "s", taskId: "t-1" }, {
    home,
    env: { HERMES_KANBAN_DB: file },
  });
  assert.deepEqual(found.caps.time, { value: 900, source: "kanban db" });
  assert.deepEqual(fs.readdirSync(home).sort(), ["kanban.db"]);
  assert.equal(hash(file), before);
});

test("discoverCaps() reads a WAL board in use from another process without changing its files", async () => {
  const home = tempHome();
  const file = board(home, 900);
  const writer = openDb(file);
  writer.run("UPDATE tasks SET max_runtime_seconds = 1000 WHERE id = 't-1'");
  // better-sqlite3 (Node 20) cannot open SQLite URIs, so it reads a WAL board in
  // use read-only, which may update the -shm read marks as any reader does.
  const files = driver?.name === "node:sqlite"
    ? [file, `${file}-wal`, `${file}-shm`]
    : [file, `${file}-wal`];
  const before = files.map(hash);
  try {
    const result = await runScript(fixture("config_probe"), ["read-board", home], {
      timeoutMs: 60_000,
    });
    assert.equal(result.code, 0, result.stderr);
    const found = JSON.parse(result.stdout.trim().split("\n").at(-1)!);
    assert.deepEqual(found.time, { value: 1000, source: "kanban db" }, "the committed value");
    assert.deepEqual(found.problems, []);
    assert.deepEqual(files.map(hash), before);
    assert.deepEqual(fs.readdirSync(home).sort(), ["kanban.db", "kanban.db-shm", "kanban.db-wal"]);
  } finally {
    writer.close();
  }
});

test("discoverCaps() gives up on a board still locked after its retries: a problem line and the fallback", async () => {
  const home = tempHome();
  // A rollback-journal board (Hermes's mode on network file systems): a writer's exclusive lock
  // keeps its readers out.
  const file = hermesBoard(path.join(home, "kanban.db"), [{ id: "t-1", maxRuntimeSeconds: 900 }], {
    journal: "delete",
  });
  const writer = openDb(file);
  writer.exec("BEGIN EXCLUSIVE");
  writer.run("UPDATE tasks SET max_runtime_seconds = 5");
  try {
    const found = await discover({ sessionId: "s", taskId: "t-1" }, {
      home,
      env: { HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "60" },
    });
    assert.deepEqual(found.caps.time, { value: 90, source: "TERMINAL_TIMEOUT" });
    assert.match(
      found.problems.join("\n"),
      /cannot read the kanban board .*locked.*tried 4 times, 50 ms apart/,
    );
  } finally {
    writer.exec("ROLLBACK");
    writer.close();
  }
  // Every connection the library opens gives up on a lock at once (the retries are its own).
  const db = openDb(file);
  assert.equal(Object.values(db.get("PRAGMA busy_timeout")!)[0], 0);
  db.close();
});

test("discoverCaps() does not hang on a board or state.db that is a FIFO", {
  skip: process.platform === "win32" && "no FIFOs",
}, async () => {
  const result = await runScript(fixture("config_probe"), ["fifo-board", tempHome()], {
    timeoutMs: 60_000,
  });
  assert.equal(result.code, 0, result.stderr);
  const { time, problems } = JSON.parse(result.stdout.trim().split("\n").at(-1)!);
  assert.deepEqual(time, { value: 90, source: "TERMINAL_TIMEOUT" });
  assert.match(problems.join("\n"), /kanban\.db is not a regular file/);
  assert.match(problems.join("\n"), /state\.db is not a regular file/);
});

// ---- Hermes's real layout: which board, which cap, which clock, which turns ----

/** The line of explain's text whose label is `label`, trimmed. */
const row = (text: string, label: string) =>
  text.split("\n").map((l) => l.trim()).find((l) => l.startsWith(`${label} `)) ?? "";

test("discoverCaps() finds the board as Hermes does when HERMES_KANBAN_DB is unset", async () => {
  const root = tempHome();
  const task = (seconds: number) => [{ id: "t-1", maxRuntimeSeconds: seconds }];
  hermesBoard(path.join(root, "kanban.db"), task(900));
  const at = async (home: string, env: Record<string, string> = {}) => {
    const found = await discover({ sessionId: "s", taskId: "t-1" }, { home, env });
    return { time: found.caps.time, file: found.board?.file, why: found.board?.why ?? "" };
  };
  // The default board, in the Hermes root: the home itself here…
  let r = await at(root);
  assert.deepEqual(r.time, { value: 900, source: "kanban db" });
  assert.equal(r.file, path.join(root, "kanban.db"));
  assert.match(r.why, /the default board in the Hermes root/);
  // …and the root above a profile's home (<root>/profiles/<name>), not the profile's own.
  const profile = path.join(root, "profiles", "coder");
  fs.mkdirSync(profile, { recursive: true });
  r = await at(profile);
  assert.deepEqual(r.time, { value: 900, source: "kanban db" });
  assert.equal(r.file, path.join(root, "kanban.db"));
  // Under ~/.hermes, any home's root is ~/.hermes.
  const user = tempHome();
  hermesBoard(path.join(user, ".hermes", "kanban.db"), task(333));
  r = await at(path.join(user, ".hermes", "profiles", "x"), { HOME: user });
  assert.deepEqual(r.time, { value: 333, source: "kanban db" });
  // A board named by HERMES_KANBAN_BOARD, then by <kroot>/kanban/current.
  hermesBoard(path.join(root, "kanban", "boards", "proj", "kanban.db"), task(300));
  r = await at(root, { HERMES_KANBAN_BOARD: "Proj" });
  assert.deepEqual(r.time, { value: 300, source: "kanban db" });
  assert.match(r.why, /HERMES_KANBAN_BOARD names board "proj"/);
  fs.writeFileSync(path.join(root, "kanban", "current"), "proj\n");
  r = await at(root);
  assert.deepEqual(r.time, { value: 300, source: "kanban db" });
  assert.match(r.why, /kanban[/\\]current names board "proj"/);
  // A board that does not exist is passed over, and said so; "default" is <kroot>/kanban.db.
  r = await at(root, { HERMES_KANBAN_BOARD: "gone" });
  assert.deepEqual(r.time, { value: 300, source: "kanban db" });
  assert.match(r.why, /HERMES_KANBAN_BOARD names board "gone", which does not exist/);
  r = await at(root, { HERMES_KANBAN_BOARD: "default" });
  assert.deepEqual(r.time, { value: 900, source: "kanban db" });
  // HERMES_KANBAN_HOME moves <kroot>; HERMES_KANBAN_DB wins over everything.
  const kroot = tempHome();
  hermesBoard(path.join(kroot, "kanban.db"), task(450));
  r = await at(root, { HERMES_KANBAN_HOME: kroot });
  assert.deepEqual(r.time, { value: 450, source: "kanban db" });
  assert.match(r.why, /HERMES_KANBAN_HOME/);
  r = await at(root, {
    HERMES_KANBAN_HOME: kroot,
    HERMES_KANBAN_BOARD: "proj",
    HERMES_KANBAN_DB: path.join(user, ".hermes", "kanban.db"),
  });
  assert.deepEqual(r.time, { value: 333, source: "kanban db" });
  assert.equal(r.why, "HERMES_KANBAN_DB");
});

test("explain names the board file and why, and a kanban run with no board is a problem (exit 1)", async () => {
  const home = tempHome();
  const none = explain({ home, env: {}, taskId: "t-1" });
  assert.equal(none.run.board?.file, undefined);
  assert.match(none.problems.join("\n"), /cannot read the kanban board: no board found/);
  const m = memoryIo({ env: {} });
  assert.equal(await explainCommand.run(["--home", home, "--task", "t-1"], m.io), 1);
  assert.match(m.stdout(), /kanban board +none {2}\(no board found/);
  const file = hermesBoard(path.join(home, "kanban.db"), [{ id: "t-1", maxRuntimeSeconds: 900 }]);
  const e = explain({ home, env: {}, taskId: "t-1" });
  assert.deepEqual(e.problems, []);
  assert.equal(e.run.board?.file, file);
  assert.deepEqual(e.run.caps.time, { value: 900, source: "kanban db" });
  const text = explainText(e, paint({ isTTY: false, env: {} }));
  assert.ok(
    row(text, "kanban board").endsWith(`${file}  (the default board in the Hermes root ${home})`),
    text,
  );
});

test("discoverCaps() reads a task's NULL cap on a board written by Hermes: an uncapped run gets no tier 2", async () => {
  // The case: TERMINAL_TIMEOUT 180 made a 210 s cap, tier 2 at 168 s, on an uncapped task.
  const home = tempHome();
  const file = hermesBoard(path.join(home, "kanban.db"), [{ id: "t-1", maxRuntimeSeconds: null }]);
  const ac = createAgentCheckpoint({
    home,
    env: { HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "180" },
    logger: () => {},
  });
  const run = ac.startRun({ sessionId: "s", taskId: "t-1" });
  assert.deepEqual(run.caps, {});
  ac.sharedRuns.rewind(run.slot, 200_000);
  assert.equal(run.preLlmCall(), undefined, "no tier at 200 s");
  await ac.close();
});

test("discoverCaps() falls back only for a board it cannot read: no file, no row, no column", async () => {
  const home = tempHome();
  const env = (file: string) => ({ HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "60" });
  const old = hermesBoard(path.join(home, "old.db"), [{ id: "t-1" }], { age: "old" });
  const a = await discover({ sessionId: "s", taskId: "t-1" }, { home, env: env(old) });
  assert.deepEqual(a.caps.time, { value: 90, source: "TERMINAL_TIMEOUT" });
  assert.match(a.problems.join("\n"), /has no max_runtime_seconds column: an old board/);
  const current = board(home, 900);
  const b = await discover({ sessionId: "s", taskId: "t-9" }, { home, env: env(current) });
  assert.deepEqual(b.caps.time, { value: 90, source: "TERMINAL_TIMEOUT" });
  assert.match(b.problems.join("\n"), /has no task "t-9"/);
  // A board with max_runtime_seconds but no later columns is read.
  const mid = hermesBoard(path.join(home, "mid.db"), [{ id: "t-1", maxRuntimeSeconds: 700 }], {
    age: "runtime-only",
  });
  const c = await discover({ sessionId: "s", taskId: "t-1" }, { home, env: env(mid) });
  assert.deepEqual(c.caps.time, { value: 700, source: "kanban db" });
  assert.deepEqual(c.problems, []);
});

/** A process holding an exclusive lock on `file` for `holdMs`; resolves when it holds it. */
async function lockFor(file: string, holdMs: number) {
  const [cmd, argv] = scriptCommand(fixture("hermes_board"), ["lock", file, String(holdMs)]);
  const child = spawn(cmd, argv, { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  const line = (word: string) =>
    new Promise<number>((resolve, reject) => {
      const look = () => {
        const m = out.match(new RegExp(`${word} (\\d+)`));
        if (m) resolve(Number(m[1]));
      };
      child.stdout!.on("data", (d) => {
        out += d;
        look();
      });
      child.on("exit", () => {
        look();
        reject(new Error(`the locker exited: ${out}`));
      });
    });
  const released = line("released");
  released.catch(() => {});
  await line("locked");
  return { released };
}

test("discoverCaps() tries a locked board again, 50 ms apart, and reads it once the lock is gone", async () => {
  // A board locked for 40 ms by another process is read, not fallen back from. A round counts
  // when the lock was still held as the read began and gone within 100 ms of it (a busy machine
  // can delay the other process's release past the retries: such a round says nothing).
  const home = tempHome();
  const file = hermesBoard(path.join(home, "kanban.db"), [{ id: "t-1", maxRuntimeSeconds: 900 }], {
    journal: "delete",
  });
  let counted = 0;
  for (let round = 0; round < 10 && counted < 3; round++) {
    const { released } = await lockFor(file, 40);
    const began = Date.now();
    const found = discoverCapsSync({ sessionId: "s", taskId: "t-1" }, {
      home,
      env: { HERMES_KANBAN_DB: file, TERMINAL_TIMEOUT: "60" },
      settings: defaultSettings(path.join(home, "cp")),
      config: { doc: undefined, warnings: [] },
    });
    const at = await released;
    if (!(began < at && at - began < 100)) continue;
    counted++;
    assert.deepEqual(found.caps.time, { value: 900, source: "kanban db" }, found.problems.join());
    assert.deepEqual(found.problems, []);
  }
  assert.ok(counted > 0, "no round read the board while it was locked");
});

test("discoverCaps() reads a board another process commits to without a pause: 2,000 reads, no fallback", async () => {
  // With Hermes's pragmas and BEGIN IMMEDIATE; scripts/bench_board.ts does 20,000.
  const f = await liveBoardReads(2000);
  assert.equal(f.reads, 2000);
  assert.ok(f.commits > 0, "the writer committed while the reads ran");
  assert.equal(f.fallbacks, 0, f.problems.join("\n"));
});

test("discoverCaps() starts the time axis when Hermes started the task's run", async () => {
  const now = Math.floor(Date.now() / 1000);
  const home = tempHome();
  const file = hermesBoard(path.join(home, "kanban.db"), [{
    id: "t-1",
    maxRuntimeSeconds: 200,
    startedAt: now - 1000,
    earlierRun: { startedAt: now - 1000 },
    run: { startedAt: now - 170 },
  }]);
  const runId = currentRunId(file, "t-1");
  const env = { HERMES_KANBAN_DB: file };
  const a = await discover({ sessionId: "s", taskId: "t-1" }, { home, env });
  assert.deepEqual(a.origin, {
    atMs: (now - 170) * 1000,
    source: `task_runs.started_at of run ${runId} (tasks.current_run_id)`,
  });
  const b = await discover({ sessionId: "s", taskId: "t-1" }, {
    home,
    env: { ...env, HERMES_KANBAN_RUN_ID: String(runId - 1) },
  });
  assert.deepEqual(b.origin, {
    atMs: (now - 1000) * 1000,
    source: `task_runs.started_at of run ${runId - 1} (HERMES_KANBAN_RUN_ID)`,
  });
  const mid = hermesBoard(path.join(home, "mid.db"), [{
    id: "t-1",
    maxRuntimeSeconds: 200,
    startedAt: now - 50,
  }], { age: "runtime-only" });
  const c = await discover({ sessionId: "s", taskId: "t-1" }, {
    home,
    env: { HERMES_KANBAN_DB: mid },
  });
  assert.deepEqual(c.origin, { atMs: (now - 50) * 1000, source: "tasks.started_at" });
  const old = hermesBoard(path.join(home, "old.db"), [{ id: "t-1", startedAt: now - 50 }], {
    age: "old",
  });
  assert.equal(
    (await discover({ sessionId: "s", taskId: "t-1" }, {
      home,
      env: { HERMES_KANBAN_DB: old },
    })).origin,
    undefined,
    "startRun is the origin when no start is readable",
  );
  // The run's clock: 170 s of 200 used when it starts, so its first model call is past tier 2
  // (at 160 s), where Hermes's kill at 200 s falls.
  const ac = createAgentCheckpoint({ home, env, logger: () => {} });
  const run = ac.startRun({ sessionId: "s", taskId: "t-1" });
  assert.match(run.preLlmCall() ?? "", /Final budget checkpoint/);
  await ac.close();
  const text = explainText(explain({ home, env, taskId: "t-1" }), paint({ isTTY: false, env: {} }));
  assert.ok(
    row(text, "time origin").endsWith(
      `${
        new Date((now - 170) * 1000).toISOString()
      }  (task_runs.started_at of run ${runId} (tasks.current_run_id))`,
    ),
    text,
  );
});

test("discoverCaps() takes a goal-mode task's turn cap from HERMES_KANBAN_GOAL_MAX_TURNS, then goal_max_turns", async () => {
  const home = tempHome();
  const file = hermesBoard(path.join(home, "kanban.db"), [
    { id: "t-1", goalMode: true, goalMaxTurns: 9 },
    { id: "t-2", goalMode: true },
  ]);
  const yaml = "agent: { max_turns: 60 }";
  const goalMode = { HERMES_KANBAN_DB: file, HERMES_KANBAN_GOAL_MODE: "1" };
  const turns = async (taskId: string, env: Record<string, string>) =>
    (await discover({ sessionId: "s", taskId }, { home, env, yaml })).caps.turns;
  assert.deepEqual(await turns("t-1", { ...goalMode, HERMES_KANBAN_GOAL_MAX_TURNS: "7" }), {
    value: 7,
    source: "HERMES_KANBAN_GOAL_MAX_TURNS",
  });
  assert.deepEqual(await turns("t-1", goalMode), { value: 9, source: "tasks.goal_max_turns" });
  assert.deepEqual(await turns("t-2", goalMode), { value: 20, source: "goal default" });
  assert.deepEqual(await turns("t-1", { HERMES_KANBAN_DB: file }), {
    value: 60,
    source: "agent.max_turns",
  });
});

test("a goal run counts goal turns from the stored turns_used: 12 turns, 3 used, tier 2 at the 8th call", async () => {
  const home = tempHome();
  hermesGoal(home, "s", { max_turns: 12, turns_used: 3 });
  const found = await discover({ sessionId: "s" }, { home });
  assert.equal(found.dialect, "goal");
  assert.deepEqual(found.caps.turns, { value: 12, source: "goal" });
  assert.deepEqual(found.turnsUsed, { value: 3, source: "state.db goal turns_used" });
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: () => {},
    settings: { watchdog: false },
  });
  const run = ac.startRun({ sessionId: "s" });
  const texts = Array.from({ length: 9 }, () => run.preLlmCall());
  assert.equal(texts.findIndex((t) => /Final budget checkpoint/.test(t ?? "")), 7);
  await ac.close();
  // explain counts the same way: from the 3 turns already used.
  const e = explain({ home, env: {}, sessionId: "s" });
  assert.equal(e.schedule[1]?.prologueModelCall, 8);
  const text = explainText(e, paint({ isTTY: false, env: {} }));
  assert.match(row(text, "turns used"), /^turns used +3 {2}\(state\.db goal turns_used\)$/);
  assert.match(text, /^ {2}2 +model call 8 \(10 turns used\)/m);
  // A goal with no max_turns (or 0) has 20, whatever agent.max_turns says.
  for (const maxTurns of [null, 0]) {
    hermesGoal(home, "g", { max_turns: maxTurns });
    writeConfig(home, "agent: { max_turns: 60 }");
    const g = await discoverCaps({ sessionId: "g" }, { home, env: {} });
    assert.deepEqual(g.caps.turns, { value: 20, source: "goal default" }, String(maxTurns));
  }
});

test("the watchdog follows a goal's stored turns_used and writes tier 2 when it gets there", async () => {
  const home = tempHome();
  hermesGoal(home, "s", { max_turns: 12, turns_used: 3 });
  const ac = createAgentCheckpoint({
    home,
    env: {},
    logger: () => {},
    settings: { watchdog_poll_seconds: 0.2 },
  });
  const run = ac.startRun({ sessionId: "s" });
  run.activity();
  assert.equal(ac.sharedRuns.turns(run.slot), 3);
  // Hermes judges seven more turns (in this process or another).
  hermesGoal(home, "s", { max_turns: 12, turns_used: 10 });
  const record = () =>
    fs.existsSync(run.checkpointFile)
      ? parseRecord(fs.readFileSync(run.checkpointFile))
      : undefined;
  assert.ok(await waitFor(() => record()?.tier === 2), "tier 2 written by the watchdog");
  assert.equal(ac.sharedRuns.turns(run.slot), 10);
  assert.equal(record()?.source, "watchdog");
  await ac.close();
});

test("plugins.entries.agent-checkpoint.config is read below .settings, key by key", () => {
  const home = tempHome();
  hermesConfig(
    home,
    [
      "plugins:",
      "  enabled: [agent-checkpoint]",
      "  entries:",
      "    agent-checkpoint:",
      "      config: { mode: notify, stall_window_seconds: 77 }",
      "      settings: { mode: log-only }",
    ].join("\n"),
  );
  const { settings, sources } = loadSettings({ home, env: {} });
  assert.equal(settings.mode, "log-only");
  assert.equal(sources.mode, "config.yaml plugins.entries.agent-checkpoint.settings");
  assert.equal(settings.stall_window_seconds, 77);
  assert.equal(sources.stall_window_seconds, "config.yaml plugins.entries.agent-checkpoint.config");
});

test("explain notes when Hermes's plugin lists leave the plugin off, and when budget_warning_ratio is set", () => {
  const home = tempHome();
  // Notes about Hermes's own Python plugin, never problems of this library.
  const problems = (yaml: string) => {
    hermesConfig(home, yaml);
    const e = explain({ home, env: {} });
    assert.deepEqual(e.problems, []);
    return e.notes.join("\n");
  };
  assert.equal(problems("plugins:\n  enabled: [agent-checkpoint]\n"), "");
  assert.match(problems("plugins:\n  enabled: [other]\n"), /plugins.enabled does not name/);
  assert.match(
    problems("plugins:\n  enabled: [agent-checkpoint]\n  disabled: [agent-checkpoint]\n"),
    /plugins.disabled names agent-checkpoint/,
  );
  assert.match(
    problems("plugins:\n  entries:\n    agent-checkpoint:\n      settings: { mode: notify }\n"),
    /no plugins.enabled list naming it: Hermes plugins are opt-in/,
  );
  hermesConfig(home, "agent:\n  budget_warning_ratio: 0.8\n");
  const e = explain({ home, env: {} });
  assert.deepEqual(e.problems, []);
  assert.match(e.notes.join("\n"), /budget_warning_ratio is 0.8: .*two wrap-up messages/);
});
