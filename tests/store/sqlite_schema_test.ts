/** The embedded store's schema: a file of an older version is brought up to date on open. */
import { test } from "node:test";
import assert from "node:assert/strict";
import * as path from "node:path";
import * as fs from "node:fs";
import { sqliteDriver } from "../../_sqlite.ts";
import { openSqliteStore, SCHEMA_VERSION, storeFile } from "../../store/sqlite.ts";
import { bodyKey, packBody } from "../../store/_journal.ts";
import { Buffer } from "node:buffer";
import { fixture, runScript, tempHome } from "../_helpers.ts";

/** The schema of version 1, as the library wrote it before version 2. */
const SCHEMA_V1 = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  newest INTEGER NOT NULL,
  status TEXT NOT NULL,
  machine TEXT NOT NULL,
  pid INTEGER NOT NULL,
  host_start TEXT NOT NULL,
  started_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  record TEXT NOT NULL,
  file_content TEXT,
  PRIMARY KEY (run_id, attempt)
);
CREATE INDEX IF NOT EXISTS runs_newest ON runs (newest, started_at);
CREATE INDEX IF NOT EXISTS runs_ended ON runs (updated_at) WHERE status <> 'live';
CREATE TABLE IF NOT EXISTS heartbeats (
  machine TEXT NOT NULL,
  pid INTEGER NOT NULL,
  host_start TEXT NOT NULL,
  at INTEGER NOT NULL,
  interval_seconds REAL NOT NULL,
  PRIMARY KEY (machine, pid, host_start)
);
INSERT INTO meta (key, value) VALUES ('schema', '1');
`;

/** A home whose store is a version-1 file holding `runs` failed runs `old-0`…, as version 1 wrote them. */
function version1Home(runs: number): string {
  const home = tempHome();
  const file = storeFile(home);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const db = sqliteDriver()!.open(file, { readOnly: false });
  db.get("PRAGMA journal_mode = WAL");
  db.exec(SCHEMA_V1);
  db.exec("BEGIN");
  for (let i = 0; i < runs; i++) {
    const record = {
      dialect: "chat",
      caps: { turns: { value: 12, source: "host" } },
      turnsUsed: 7,
      elapsedSeconds: 30,
      tier: 1,
      inFlight: [{ tool: "deploy", callId: `c${i}`, startedAt: 1_700_000_000_000 }],
      recent: [],
      notes: ["reading the tests"],
      checkpointFile: path.join(home, "agent-checkpoints", `old-${i}.md`),
      end: { status: "failed", at: 1_700_000_030_000 },
    };
    db.run(
      `INSERT INTO runs (run_id, attempt, newest, status, machine, pid, host_start, started_at,
        updated_at, record) VALUES (?, 1, 1, 'failed', 'ci-runner', 4242, 'boot-1', ?, ?, ?)`,
      `old-${i}`,
      1_700_000_000_000,
      1_700_000_030_000,
      JSON.stringify(record),
    );
  }
  db.exec("COMMIT");
  db.close();
  return home;
}

const schemaOf = (home: string) => {
  const db = sqliteDriver()!.open(storeFile(home), { readOnly: true });
  try {
    return Number(db.get("SELECT value FROM meta WHERE key = 'schema'")?.value);
  } finally {
    db.close();
  }
};

test("a version-1 runs.db is brought up to the current schema on open and keeps its runs", () => {
  const home = version1Home(3);
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30, mode: "quick" });
  try {
    const view = store.latestSync("old-1");
    assert.equal(view?.state, "ended");
    assert.equal(view?.record.status, "failed");
    assert.equal(view?.record.turnsUsed, 7);
    assert.deepEqual(view?.record.inFlight.map((c) => c.callId), ["c1"]);
    assert.equal(view?.record.host.machine, "ci-runner");
    const summary = store.summarySync();
    assert.equal(summary.total, 3);
    assert.deepEqual(summary.byEnd, { failed: 3 });
    assert.deepEqual(summary.byMachine["ci-runner"], { live: 0, ended: 3, "cut-off": 0 });
    assert.equal(store.listSync().length, 3);
  } finally {
    store.closeSync();
  }
  assert.equal(schemaOf(home), SCHEMA_VERSION);
  assert.ok(SCHEMA_VERSION > 1);
});

test("processes opening a version-1 runs.db at once all start their runs; one upgrade, no run lost", async () => {
  const home = version1Home(2000);
  const opened = await Promise.all(
    [0, 1, 2, 3].map((k) =>
      runScript(fixture("store_open"), [home, k % 2 === 0 ? `old-${k}` : `new-${k}`])
    ),
  );
  for (const [k, result] of opened.entries()) {
    assert.equal(result.code, 0, result.stderr);
    // An earlier attempt that failed is resumed: attempt 2; a new run id is attempt 1.
    assert.deepEqual(JSON.parse(result.stdout), { attempt: k % 2 === 0 ? 2 : 1 });
  }
  assert.equal(schemaOf(home), SCHEMA_VERSION);
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30, mode: "read" });
  try {
    assert.equal(store.summarySync().total, 2002);
    assert.equal(store.latestSync("old-1999")?.record.status, "failed");
    assert.equal(store.latestSync("old-2")?.record.attempt, 2);
    assert.equal(store.listSync({ runId: "old-2" }).length, 2);
  } finally {
    store.closeSync();
  }
});

test("a runs.db of a newer schema is left alone, with a message saying to upgrade", () => {
  const home = version1Home(1);
  const db = sqliteDriver()!.open(storeFile(home), { readOnly: false });
  db.run("UPDATE meta SET value = ? WHERE key = 'schema'", String(SCHEMA_VERSION + 1));
  db.close();
  assert.throws(
    () => openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 }),
    /newer than this library's .*upgrade agent-checkpoint/,
  );
  assert.equal(schemaOf(home), SCHEMA_VERSION + 1);
});

/** The journal's table as version 3 made it: no `replayed`, no `ms`. */
const JOURNAL_V3 = `CREATE TABLE journal (
  run_id TEXT NOT NULL, attempt INTEGER NOT NULL, kind TEXT NOT NULL, idx INTEGER NOT NULL,
  key TEXT NOT NULL, tool TEXT, body TEXT NOT NULL, usage TEXT, at INTEGER NOT NULL,
  PRIMARY KEY (run_id, attempt, kind, idx));
CREATE INDEX journal_body ON journal (body);
CREATE TABLE journal_bodies (hash TEXT PRIMARY KEY, packed BLOB NOT NULL);`;

/** A home whose store holds a journal table of version 3's shape, with one run's two entries. */
function oldJournalHome(version: number): string {
  const home = tempHome();
  openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 }).closeSync();
  const db = sqliteDriver()!.open(storeFile(home), { readOnly: false });
  try {
    db.exec(JOURNAL_V3);
    for (const [kind, idx, body] of [["model", 0, '{"text":"hi"}'], ["tool", 0, '"ok"']] as const) {
      db.run(
        "INSERT OR IGNORE INTO journal_bodies (hash, packed) VALUES (?, ?)",
        bodyKey(body),
        Buffer.from(packBody(body)),
      );
      db.run(
        `INSERT INTO journal (run_id, attempt, kind, idx, key, tool, body, usage, at)
          VALUES ('old-run', 1, ?, ?, 'k', ?, ?, ?, 1700000000000)`,
        kind,
        idx,
        kind === "tool" ? "append" : null,
        bodyKey(body),
        kind === "model" ? '{"inputTokens":5,"outputTokens":1}' : null,
      );
    }
    db.run("UPDATE meta SET value = ? WHERE key = 'schema'", String(version));
  } finally {
    db.close();
  }
  return home;
}

const journalColumns = (home: string) => {
  const db = sqliteDriver()!.open(storeFile(home), { readOnly: true });
  try {
    return db.all("PRAGMA table_info(journal)").map((c) => String(c.name));
  } finally {
    db.close();
  }
};

const later = {
  runId: "old-run",
  attempt: 2,
  kind: "model" as const,
  index: 0,
  key: "k",
  body: '{"text":"hi"}',
  at: 1_700_000_100_000,
  replayed: 1,
};
const { replayed: _, ...live } = later;

test("a version-3 runs.db's journal table gets the replayed and ms columns on open; its rows still read", async () => {
  const home = oldJournalHome(3);
  assert.ok(!journalColumns(home).includes("replayed"));
  // Read-only (the command line) before any upgrade: the old rows read, as live calls.
  const reader = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30, mode: "read" });
  try {
    const entries = await reader.journal.read("old-run");
    assert.deepEqual(entries.map((e) => [e.kind, e.body, e.replayed, e.ms]), [
      ["model", '{"text":"hi"}', undefined, undefined],
      ["tool", '"ok"', undefined, undefined],
    ]);
  } finally {
    reader.closeSync();
  }
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30, mode: "quick" });
  try {
    assert.equal(schemaOf(home), SCHEMA_VERSION);
    assert.ok(["replayed", "ms"].every((c) => journalColumns(home).includes(c)));
    await store.journal.write({
      entries: [later, { ...live, index: 1, ms: 42 }],
    });
    const entries = await store.journal.read("old-run");
    assert.deepEqual(entries.map((e) => [e.attempt, e.kind, e.index, e.usage, e.replayed, e.ms]), [
      [1, "model", 0, '{"inputTokens":5,"outputTokens":1}', undefined, undefined],
      [1, "tool", 0, undefined, undefined, undefined],
      [2, "model", 0, undefined, 1, undefined],
      [2, "model", 1, undefined, undefined, 42],
    ]);
  } finally {
    store.closeSync();
  }
});

test("a journal table of the old shape made after the file's upgrade (an older process) gets the columns at the first write", async () => {
  // The file is at the current version, yet its journal table is version 3's.
  const home = oldJournalHome(SCHEMA_VERSION);
  const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
  try {
    await store.journal.write({ entries: [later] });
    assert.deepEqual((await store.journal.read("old-run")).map((e) => e.replayed), [
      undefined,
      undefined,
      1,
    ]);
  } finally {
    store.closeSync();
  }
});
