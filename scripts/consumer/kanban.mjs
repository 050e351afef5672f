// (c) The kanban path on Node 20: a real WAL-mode board read through better-sqlite3 while
// another connection holds a write transaction; with `absent`, better-sqlite3 is not installed
// and the board is skipped with one log line that names the package.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createAgentCheckpoint } from "agent-checkpoint";

const absent = process.argv[2] === "absent";
const home = mkdtempSync(join(tmpdir(), "ac-kanban-"));
const board = join(home, "kanban.db");
const hash = () => createHash("sha256").update(readFileSync(board)).digest("hex");
let writer;
if (absent) writeFileSync(board, "SQLite format 3\0");
else {
  const Database = createRequire(import.meta.url)("better-sqlite3");
  const db = new Database(board);
  db.pragma("journal_mode = WAL");
  db.exec("CREATE TABLE tasks (id TEXT PRIMARY KEY, max_runtime_seconds)");
  db.prepare("INSERT INTO tasks VALUES (?, ?)").run("task-7", 900);
  db.close();
  writer = new Database(board);
  writer.exec("BEGIN IMMEDIATE");
  writer.prepare("UPDATE tasks SET max_runtime_seconds = 5").run();
}
const before = hash();
const logs = [];
const ac = createAgentCheckpoint({
  home,
  env: { HERMES_KANBAN_DB: board, HERMES_KANBAN_TASK: "task-7", TERMINAL_TIMEOUT: "60" },
  logger: (r) => logs.push(r.message),
});
const run = ac.startRun({ sessionId: "s" });
assert.equal(run.dialect, "kanban");
if (absent) {
  assert.deepEqual(run.caps.time, { value: 90, source: "TERMINAL_TIMEOUT" });
  // One line for the board, one for the run ledger: each names the package.
  const board = logs.filter((l) => /kanban board/.test(l));
  const ledger = logs.filter((l) => /run ledger is off/.test(l));
  assert.equal(board.length, 1, logs.join("\n"));
  assert.match(board[0], /install the better-sqlite3 package/);
  assert.equal(ledger.length, 1, logs.join("\n"));
  assert.match(ledger[0], /better-sqlite3/);
  assert.equal(logs.length, 2, logs.join("\n"));
  console.log(`consumer (c): without better-sqlite3 it falls back and logs: ${board[0]}`);
  console.log(`consumer (c): and says ${ledger[0]}`);
} else {
  assert.deepEqual(run.caps.time, { value: 900, source: "kanban db" });
  assert.deepEqual(logs, []);
  writer.exec("ROLLBACK");
  writer.close();
  console.log("consumer (c): read max_runtime_seconds 900 from a WAL board through better-sqlite3");
}
assert.equal(hash(), before, "the board is byte-identical after the read");
await ac.close();
