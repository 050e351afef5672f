/**
 * The embedded run store: one SQLite database per home,
 * `<home>/agent-checkpoint/runs.db`, in WAL mode so that several processes share it
 * (one writer at a time, readers never blocked), through the library's SQLite
 * driver. Its reads and writes are synchronous underneath, so `startRun`,
 * which is synchronous, can use them directly ({@linkcode SqliteRunStore}'s
 * `…Sync` methods); the {@linkcode RunStore} methods wrap them.
 *
 * A run's newest attempt is marked, so listing the newest attempt of every
 * run, the most recently started first, reads one index, and counting them by
 * status and machine reads another alone. A run's newest attempt is found
 * through the primary key (its run id). A live run's progress changes no
 * indexed column: bringing it up to date rewrites its row alone.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { readMode, type SqliteDb, type SqliteDriver, sqliteDriver } from "../_sqlite.ts";
import { stateDir } from "../_home.ts";
import type { EndStatus } from "../_record.ts";
import type { TreeRow } from "../_tree.ts";
import { treeRowOf } from "./trees.ts";
import process from "node:process";
import { here, processStart } from "./_host.ts";
import { Buffer } from "node:buffer";
import { bodyKey, journalOf, packBody, StoredBodies, unpackBody } from "./_journal.ts";
import { bytesOf, checkpointOf, writesOnce } from "./_checkpoints.ts";
import {
  type AttemptStart,
  type CheckpointsPort,
  type EffectBatch,
  effectOf,
  type EffectRow,
  type EffectsPort,
  type FencedRecord,
  type GraphCheckpointPut,
  type GraphCheckpointQuery,
  type GraphCheckpointRow,
  type GraphWrites,
  type Heartbeat,
  type JournalBatch,
  type JournalEntry,
  type JournalPort,
  type LeasesPort,
  type LedgerEffects,
  type LedgerSync,
  type LedgerTrees,
  type LedgerUpkeep,
  type ListQuery,
  type RunRecord,
  type RunState,
  runState,
  type RunStore,
  type RunView,
  type SessionEntry,
  type SessionPath,
  type SessionsPort,
  type StartOptions,
  type StoreSummary,
  type SummaryQuery,
  type TreeQuery,
  type TreesPort,
  type Vantage,
  type WriteBatch,
} from "./types.ts";

/**
 * The schema version this code writes; a newer one in the file is left alone,
 * an older one is brought up to this one on open. 2 added the index that
 * counts runs by status and machine; 3 the fences of runs taken from a live
 * attempt; 4 the journal's `replayed` and `ms` columns (a journal table made
 * before them gets them).
 */
export const SCHEMA_VERSION = 4;

/** The page cache of a connection to the run ledger, KiB. */
const CACHE_KIB = 64;
/** How long opening waits for another process that is bringing the schema up to date, ms. */
const MIGRATE_WAIT_MS = 2000;

/** The size the write-ahead log is cut back to after a checkpoint. */
const WAL_LIMIT_BYTES = 4 * 1024 * 1024;

/**
 * The write-ahead log's size past which a tidying asks for a truncating
 * checkpoint (it waits, bounded by the busy timeout, for readers to move on)
 * rather than a passive one.
 */
const WAL_TRUNCATE_BYTES = 8 * 1024 * 1024;
/**
 * The write-ahead log's size past which a host's thread (a `quick`
 * connection, which never checkpoints: that would cost the host the copy)
 * writes no more rows itself, and hands them on as it does when the store is
 * locked, until the watchdog's checkpoint cuts the log back: a burst of
 * starts with no watchdog yet to checkpoint grew it by 20 KiB a start.
 */
const WAL_HAND_ON_BYTES = 32 * 1024 * 1024;
/** Tidyings between two passive checkpoints of a small write-ahead log. */
const PASSIVE_EVERY = 10;

/**
 * Whether an error says the database file is damaged or not a database at all.
 *
 * @example
 * ```ts
 * import { isCorruptError } from "./sqlite.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isCorruptError(new Error("database disk image is malformed")), true);
 * assert.equal(isCorruptError(new Error("database is locked")), false);
 * ```
 */
export function isCorruptError(error: unknown): boolean {
  const text = error instanceof Error
    ? `${error.message} ${String((error as { code?: unknown }).code ?? "")}`
    : String(error);
  return /malformed|not a database|SQLITE_CORRUPT|SQLITE_NOTADB|file is encrypted/i.test(text);
}

/** A file's device and inode, or undefined when nothing is at its path. */
function identityOf(file: string): { dev: number; ino: number } | undefined {
  try {
    const st = fs.statSync(file);
    return { dev: st.dev, ino: st.ino };
  } catch {
    // no file at the path (deleted): no identity, which the caller takes for a replaced ledger
    return undefined;
  }
}

/**
 * Move a damaged store file (and its `-wal` and `-shm` files) aside, beside
 * it, as `<file>.corrupt-<timestamp>`: never deleted. Returns the new name,
 * or undefined when there was nothing to move.
 *
 * @example
 * ```ts
 * import { setAsideCorrupt } from "./sqlite.ts";
 * import assert from "node:assert/strict";
 * import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const file = join(mkdtempSync(join(tmpdir(), "ac-")), "runs.db");
 * writeFileSync(file, "not a database");
 * const aside = setAsideCorrupt(file, Date.UTC(2026, 0, 2, 3, 4, 5))!;
 * assert.match(aside, /runs\.db\.corrupt-20260102T030405Z$/);
 * assert.equal(existsSync(file), false);
 * assert.equal(existsSync(aside), true);
 * ```
 */
export function setAsideCorrupt(file: string, now: number = Date.now()): string | undefined {
  const stamp = new Date(now).toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
  let aside = `${file}.corrupt-${stamp}`;
  for (let n = 2; fs.existsSync(aside); n++) aside = `${file}.corrupt-${stamp}-${n}`;
  try {
    fs.renameSync(file, aside);
  } catch (error) {
    if ((error as { code?: unknown }).code === "ENOENT") return undefined;
    throw error;
  }
  for (const suffix of ["-wal", "-shm"]) {
    try {
      fs.renameSync(file + suffix, aside + suffix);
    } catch { /* not there */ }
  }
  return aside;
}

/**
 * The embedded store's file in a home: `runs.db` in the library's folder
 * (state an earlier version left in the old place is moved in first).
 *
 * @example
 * ```ts
 * import { storeFile } from "./sqlite.ts";
 * import assert from "node:assert/strict";
 * import { join } from "node:path";
 *
 * assert.equal(storeFile("/h"), join("/h", "agent-checkpoint", "runs.db"));
 * ```
 */
export const storeFile = (home: string): string => path.join(stateDir(home), "runs.db");

const SCHEMA = `
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
CREATE INDEX IF NOT EXISTS runs_state ON runs (newest, status, machine);
CREATE TABLE IF NOT EXISTS heartbeats (
  machine TEXT NOT NULL,
  pid INTEGER NOT NULL,
  host_start TEXT NOT NULL,
  at INTEGER NOT NULL,
  interval_seconds REAL NOT NULL,
  PRIMARY KEY (machine, pid, host_start)
);
-- A run taken from a live attempt (its process gone, or on_duplicate: take-over): the records of
-- attempts below this one are refused from then on (a fencing token). Only such runs have a row.
CREATE TABLE IF NOT EXISTS run_fences (run_id TEXT PRIMARY KEY, attempt INTEGER NOT NULL);
`;

/** How a connection is used: the worker's commits are durable; the main thread's never wait long. */
export interface SqliteOpenOptions {
  /** The store file. */
  file: string;
  /** A heartbeat older than this many seconds means its process is gone. */
  hostTimeoutSeconds: number;
  /**
   * `durable`: every commit reaches the disk (the worker's batches);
   * `quick`: commits reach the operating system, not the disk, and lock waits
   * are short (the main thread's starts and ends, made durable by the
   * worker's next commit).
   * `read`: opened read-only (the command line).
   * @default {"durable"}
   */
  mode?: "durable" | "quick" | "read";
  /** How long a write waits for another process's, ms. @default {250, or 20 when quick} */
  busyMs?: number;
  /** The driver. @default {the runtime's} */
  driver?: SqliteDriver;
  /**
   * A file found damaged at open is moved aside (`runs.db.corrupt-<time>`,
   * never deleted) and a new store made at the path; this is told the new
   * name of the old one. Without it, a damaged file makes the open throw.
   */
  setAside?: (aside: string, error: unknown) => void;
}

const SELECT_VIEW = `SELECT r.run_id, r.attempt, r.machine, r.pid, r.host_start, r.started_at,
  r.record, r.status, r.updated_at, h.at AS hb_at, h.interval_seconds AS hb_interval
  FROM runs r LEFT JOIN heartbeats h
  ON h.machine = r.machine AND h.pid = r.pid AND h.host_start = r.host_start`;

/**
 * A run's newest attempt, found through the primary key: the unary `+` keeps
 * SQLite from choosing an index on `newest`, which would read every run's
 * newest attempt to find one.
 */
const NEWEST_OF_RUN = "r.run_id = ? AND +r.newest = 1";
/** A run's newest attempt with its heartbeat: one string, not one made at each start (~0.5 KB each). */
const SELECT_NEWEST = `${SELECT_VIEW} WHERE ${NEWEST_OF_RUN}`;

const UPSERT = `INSERT INTO runs
  (run_id, attempt, newest, status, machine, pid, host_start, started_at, updated_at, record, file_content)
  VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT (run_id, attempt) DO UPDATE SET
    status = excluded.status, machine = excluded.machine, pid = excluded.pid,
    host_start = excluded.host_start, updated_at = excluded.updated_at, record = excluded.record,
    file_content = COALESCE(excluded.file_content, runs.file_content)
  WHERE runs.status = 'live' AND excluded.updated_at >= runs.updated_at
    OR excluded.status <> 'live'`;

/**
 * A live run's progress, by the process that owns its row: its record and
 * when it was brought up to date, no indexed column touched. Anything else
 * (a start, an end, another process, file content) goes through the upsert.
 * Neither puts an older record of a live run over a newer one: the worker's
 * interval write may land after the main thread's own (a tree's use). Its
 * parameters are anonymous (`?`): better-sqlite3 binds no numbered ones by
 * position.
 */
// Anonymous parameters, `updated_at` given twice: better-sqlite3 (Node 20) refuses numbered ones.
const PROGRESS = `UPDATE runs SET updated_at = ?, record = ?
  WHERE run_id = ? AND attempt = ? AND status = 'live' AND machine = ? AND pid = ?
    AND host_start = ? AND started_at = ? AND updated_at <= ?
    AND NOT EXISTS (SELECT 1 FROM run_fences f WHERE f.run_id = ? AND f.attempt > ?)`;
/** The attempt a run was taken by, when it was taken from a live one. */
const FENCE = "SELECT attempt FROM run_fences WHERE run_id = ?";
/** Records of attempts below this one are refused from now on. */
const SET_FENCE = `INSERT INTO run_fences (run_id, attempt) VALUES (?, ?)
  ON CONFLICT (run_id) DO UPDATE SET attempt = MAX(run_fences.attempt, excluded.attempt)`;

/** A row's state, read before an upsert that may be a new attempt's first row. */
const ROW_STATE = `SELECT status, updated_at, started_at, machine, pid, host_start FROM runs
  WHERE run_id = ? AND attempt = ?`;
/** The attempt a start of a run was given here when its own number was another start's. */
const SAME_START = `SELECT attempt FROM runs WHERE run_id = ? AND started_at = ? AND machine = ?
  AND pid = ? AND host_start = ? ORDER BY attempt DESC LIMIT 1`;
/** The run's next attempt number. */
const NEXT_ATTEMPT = "SELECT COALESCE(MAX(attempt), 0) + 1 AS next FROM runs WHERE run_id = ?";
/**
 * The run's other attempts are no longer its newest: through the primary key
 * (the unary `+` keeps SQLite from reading every newest attempt's index entry).
 */
const NOT_NEWEST = "UPDATE runs SET newest = 0 WHERE run_id = ? AND attempt <> ? AND +newest = 1";

const HEARTBEAT = `INSERT INTO heartbeats (machine, pid, host_start, at, interval_seconds)
  VALUES (?, ?, ?, ?, ?)
  ON CONFLICT (machine, pid, host_start) DO UPDATE SET
    at = MAX(heartbeats.at, excluded.at), interval_seconds = excluded.interval_seconds`;

/**
 * Trees of runs sharing a budget: a table of their own, made by the first run
 * that joins one (no schema version for a table most stores never need).
 */
const TREE_TABLE = `CREATE TABLE IF NOT EXISTS run_trees (
  run_id TEXT PRIMARY KEY, root TEXT NOT NULL, parent TEXT);
CREATE INDEX IF NOT EXISTS run_trees_root ON run_trees (root);`;
/**
 * Side effects across attempts: each effect tool call's intent and receipt,
 * a table of their own, made by the first write of one (most stores never
 * need it; no schema version for it).
 */
const EFFECTS_TABLE = `CREATE TABLE IF NOT EXISTS effects (
  run_id TEXT NOT NULL, key TEXT NOT NULL, tool TEXT NOT NULL, input_digest TEXT NOT NULL,
  call_id TEXT, attempt INTEGER NOT NULL, at INTEGER NOT NULL,
  receipt_ok INTEGER, receipt_result TEXT, receipt_truncated INTEGER,
  receipt_attempt INTEGER, receipt_at INTEGER,
  PRIMARY KEY (run_id, key));`;
/** An intent: the newest attempt's, until the call has a receipt (which a later intent never undoes). */
const EFFECT_INTENT = `INSERT INTO effects (run_id, key, tool, input_digest, call_id, attempt, at)
  VALUES (?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT (run_id, key) DO UPDATE SET tool = excluded.tool,
    input_digest = excluded.input_digest, call_id = excluded.call_id,
    attempt = excluded.attempt, at = excluded.at
  WHERE effects.receipt_at IS NULL`;
// Anonymous parameters only: better-sqlite3 (Node 20) binds no numbered ones (`?1`) by position.
const EFFECT_RECEIPT = `INSERT INTO effects (run_id, key, tool, input_digest, attempt, at,
    receipt_ok, receipt_result, receipt_truncated, receipt_attempt, receipt_at)
  VALUES (?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT (run_id, key) DO UPDATE SET receipt_ok = excluded.receipt_ok,
    receipt_result = excluded.receipt_result, receipt_truncated = excluded.receipt_truncated,
    receipt_attempt = excluded.receipt_attempt, receipt_at = excluded.receipt_at`;
/** How long an effect's commit waits for another process's lock, ms (it is tried again after). */
const EFFECT_WAIT_MS = 250;

/**
 * The run journal: each attempt's calls, and their bodies once by content
 * (compressed), tables of their own made by the first write of an entry.
 */
const JOURNAL_TABLES = `CREATE TABLE IF NOT EXISTS journal (
  run_id TEXT NOT NULL, attempt INTEGER NOT NULL, kind TEXT NOT NULL, idx INTEGER NOT NULL,
  key TEXT NOT NULL, tool TEXT, body TEXT NOT NULL, usage TEXT, at INTEGER NOT NULL,
  replayed INTEGER, ms INTEGER,
  PRIMARY KEY (run_id, attempt, kind, idx));
CREATE INDEX IF NOT EXISTS journal_body ON journal (body);
CREATE TABLE IF NOT EXISTS journal_bodies (hash TEXT PRIMARY KEY, packed BLOB NOT NULL);`;
/** The journal's columns added after its table was first made (schema 4): each `INTEGER`, nullable. */
const JOURNAL_ADDED = ["replayed", "ms"] as const;
const JOURNAL_ENTRY = `INSERT INTO journal (run_id, attempt, kind, idx, key, tool, body, usage, at,
  replayed, ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`;
const JOURNAL_BODY =
  `INSERT INTO journal_bodies (hash, packed) VALUES (?, ?) ON CONFLICT DO NOTHING`;
const JOURNAL_READ = `SELECT j.*, b.packed FROM journal j JOIN journal_bodies b ON b.hash = j.body
  WHERE j.run_id = ? ORDER BY j.attempt, j.kind, j.idx`;
/** Bodies no entry names any more (after a run's entries went). */
const JOURNAL_ORPHANS =
  `DELETE FROM journal_bodies WHERE NOT EXISTS (SELECT 1 FROM journal j WHERE j.body = journal_bodies.hash)`;

/**
 * A graph framework's checkpoints (LangGraph's): each checkpoint without its
 * channel values, each value once per thread, namespace, channel and version,
 * and the pending writes of each checkpoint's tasks; tables of their own made
 * by the first checkpoint kept.
 */
const GRAPH_TABLES = `CREATE TABLE IF NOT EXISTS graph_checkpoints (
  thread_id TEXT NOT NULL, ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, parent_id TEXT,
  type TEXT NOT NULL, checkpoint BLOB NOT NULL, meta_type TEXT NOT NULL, metadata BLOB NOT NULL,
  versions TEXT NOT NULL,
  PRIMARY KEY (thread_id, ns, checkpoint_id));
CREATE TABLE IF NOT EXISTS graph_values (
  thread_id TEXT NOT NULL, ns TEXT NOT NULL, channel TEXT NOT NULL, version TEXT NOT NULL,
  type TEXT NOT NULL, blob BLOB,
  PRIMARY KEY (thread_id, ns, channel, version));
CREATE TABLE IF NOT EXISTS graph_writes (
  thread_id TEXT NOT NULL, ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL,
  idx INTEGER NOT NULL, channel TEXT NOT NULL, type TEXT NOT NULL, blob BLOB NOT NULL,
  task_path TEXT NOT NULL,
  PRIMARY KEY (thread_id, ns, checkpoint_id, task_id, idx));`;
const GRAPH_CHECKPOINT = `INSERT INTO graph_checkpoints
  (thread_id, ns, checkpoint_id, parent_id, type, checkpoint, meta_type, metadata, versions)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT (thread_id, ns, checkpoint_id) DO UPDATE SET type = excluded.type,
    checkpoint = excluded.checkpoint, meta_type = excluded.meta_type,
    metadata = excluded.metadata, versions = excluded.versions`;
const GRAPH_VALUE = `INSERT INTO graph_values (thread_id, ns, channel, version, type, blob)
  VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`;
/** A regular write is kept as first written; a special one (a negative index) is replaced. */
const GRAPH_WRITE = `INSERT INTO graph_writes
  (thread_id, ns, checkpoint_id, task_id, idx, channel, type, blob, task_path)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT (thread_id, ns, checkpoint_id, task_id, idx) DO UPDATE SET
    channel = excluded.channel, type = excluded.type, blob = excluded.blob,
    task_path = excluded.task_path
  WHERE excluded.idx < 0`;
/** The values of a checkpoint's channels at its versions (`json_each` of its versions). */
const GRAPH_VALUES_OF = `SELECT v.channel, v.version, v.type, v.blob FROM json_each(?) j
  JOIN graph_values v ON v.thread_id = ? AND v.ns = ? AND v.channel = j.key AND v.version = j.value
  ORDER BY v.channel`;
const GRAPH_WRITES_OF = `SELECT * FROM graph_writes WHERE thread_id = ? AND ns = ?
  AND checkpoint_id = ? ORDER BY task_path, task_id, idx`;

/**
 * A framework's session transcripts: entries in the order kept (`seq`), by
 * scope, session and subpath, a uuid once per transcript; a table of its own
 * made by the first entry kept.
 */
const SESSION_TABLES = `CREATE TABLE IF NOT EXISTS session_entries (
  seq INTEGER PRIMARY KEY, scope TEXT NOT NULL, session_id TEXT NOT NULL, subpath TEXT NOT NULL,
  uuid TEXT, entry TEXT NOT NULL, at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS session_entries_key ON session_entries (scope, session_id, subpath, seq);
CREATE UNIQUE INDEX IF NOT EXISTS session_entries_uuid
  ON session_entries (scope, session_id, subpath, uuid);`;
const SESSION_ENTRY = `INSERT INTO session_entries (scope, session_id, subpath, uuid, entry, at)
  VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`;
const SESSION_KEY = "scope = ? AND session_id = ? AND subpath = ?";

/** How long a model call under an enforced tree cap waits for the store's lock, ms. */
const ADMIT_WAIT_MS = 250;
const TREE_JOIN = `INSERT INTO run_trees (run_id, root, parent) VALUES (?, ?, ?)
  ON CONFLICT (run_id) DO UPDATE SET root = excluded.root, parent = excluded.parent`;
const TREE_ROWS = `SELECT t.run_id, t.parent, r.record, r.status FROM run_trees t
  JOIN runs r ON r.run_id = t.run_id AND +r.newest = 1 WHERE t.root = ?`;

/** A run's dollars when every call's cost is known (a run with calls of unknown cost has a floor). */
const KNOWN_USD = `CASE WHEN json_extract(r.record, '$.usage.unpriced') IS NULL
  THEN json_extract(r.record, '$.usage.usd') END`;

/** An upsert's parameters. */
const params = (record: RunRecord): unknown[] => [
  record.runId,
  record.attempt,
  record.status,
  record.host.machine,
  record.host.pid,
  record.host.start,
  Math.round(record.startedAt),
  Math.round(record.updatedAt),
  recordJson(record),
  record.fileContent ?? null,
];

/** The record as stored: without what has a column of its own (a row is rewritten each interval). */
function recordJson(record: RunRecord): string {
  const {
    fileContent: _f,
    runId: _r,
    attempt: _a,
    status: _s,
    host: _h,
    startedAt: _t,
    updatedAt: _u,
    ...rest
  } = record;
  return JSON.stringify(rest);
}

/**
 * The embedded run store over one SQLite file. Open it with
 * {@linkcode openSqliteStore}.
 *
 * @example
 * ```ts
 * import { openSqliteStore, storeFile } from "./sqlite.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const store = openSqliteStore({
 *   file: storeFile(mkdtempSync(join(tmpdir(), "ac-"))),
 *   hostTimeoutSeconds: 30,
 * });
 * assert.equal(store.engine, "sqlite");
 * assert.deepEqual(store.summarySync().byState, { live: 0, ended: 0, "cut-off": 0 });
 * await store.close();
 * ```
 */
export class SqliteRunStore implements RunStore {
  readonly engine = "sqlite";
  readonly location: string;
  #db: SqliteDb;
  #treesMade = false;
  readonly #timeout: number;
  readonly #vantage: () => Vantage;
  /** The file's device and inode when it was opened. */
  #identity: { dev: number; ino: number } | undefined;
  /** Open the file at the path anew (made when missing); undefined: this store never does. */
  readonly #reopen: (() => SqliteDb) | undefined;
  /** Set a damaged file aside, and say so; undefined: this store never does. */
  readonly #setAside: ((aside: string, error: unknown) => void) | undefined;
  /** @internal The log size past which this connection writes nothing (the host's); 0: none. */
  walCap = 0;
  /** Records refused since the last {@linkcode SqliteRunStore.takeFenced}: their attempt lost the run. */
  #fenced: FencedRecord[] = [];

  /** {@linkcode LedgerStore.sync}: every call is answered on the caller's thread. */
  readonly sync: LedgerSync = {
    write: (batch) => this.writeSync(batch),
    writeEach: (records, heartbeat) => this.writeEachSync(records, heartbeat),
    startAttempt: (record, options) => this.startAttemptSync(record, options),
    latest: (runId) => this.latestSync(runId),
  };
  /** {@linkcode RunStore.leases}: a file has no server, so its process's lease is always held. */
  readonly leases: LeasesPort = {
    takeFenced: () => this.takeFenced(),
    held: true,
    renew: () => run(() => void this.latestSync("")),
  };
  /** {@linkcode RunStore.effects}, also on the caller's thread. */
  readonly effects: EffectsPort & LedgerEffects = {
    write: (batch) => run(() => this.writeEffectsSync(batch)),
    read: (runId) => run(() => this.effectsSync(runId)),
    readSync: (runId) => this.effectsSync(runId),
  };
  /** {@linkcode RunStore.journal}. */
  readonly journal: JournalPort = {
    write: (batch) => run(() => this.writeJournalSync(batch)),
    read: (runId) => run(() => this.journalSync(runId)),
  };
  /** {@linkcode RunStore.checkpoints}. */
  readonly checkpoints: CheckpointsPort = {
    put: (put) => run(() => this.putCheckpointSync(put)),
    putWrites: (writes) => run(() => this.putWritesSync(writes)),
    get: (query) => run(() => this.checkpointsSync({ ...query, limit: 1 })[0]),
    list: (query) => run(() => this.checkpointsSync(query)),
    deleteThread: (thread) => run(() => this.deleteThreadSync(thread)),
  };
  /** {@linkcode RunStore.sessions}. */
  readonly sessions: SessionsPort = {
    append: (key, entries) => run(() => this.appendSessionSync(key, entries)),
    load: (key, last) => run(() => this.sessionSync(key, last)),
    list: (scope) =>
      run(() =>
        this.#sessionRead(
          () =>
            this.#db.all(
              `SELECT session_id, max(at) AS mtime FROM session_entries WHERE scope = ?
                GROUP BY session_id`,
              scope,
            ).map((r) => ({ sessionId: String(r.session_id), mtime: Number(r.mtime) })),
          [],
        )
      ),
    delete: (key) =>
      run(() =>
        this.#sessionWrite(() => {
          if (key.subpath === "") {
            this.#db.run(
              "DELETE FROM session_entries WHERE scope = ? AND session_id = ?",
              key.scope,
              key.sessionId,
            );
          } else {
            this.#db.run(
              `DELETE FROM session_entries WHERE ${SESSION_KEY}`,
              key.scope,
              key.sessionId,
              key.subpath,
            );
          }
        })
      ),
    subkeys: (scope, sessionId) =>
      run(() =>
        this.#sessionRead(
          () =>
            this.#db.all(
              `SELECT DISTINCT subpath FROM session_entries WHERE scope = ? AND session_id = ?
                AND subpath <> '' ORDER BY subpath`,
              scope,
              sessionId,
            ).map((r) => String(r.subpath)),
          [],
        )
      ),
    pop: (key) => run(() => this.popSessionSync(key)),
  };
  /**
   * {@linkcode RunStore.trees}, also on the caller's thread. An admission
   * decided asynchronously is written when its decision settles, after the
   * lock: the embedded store's callers decide at once.
   */
  readonly trees: TreesPort & LedgerTrees = {
    list: (query) => run(() => this.treesSync(query)),
    read: (root) => run(() => this.treeSync(root)),
    join: (runId, root, parent) => run(() => this.joinTreeSync(runId, root, parent)),
    admit: async (root, decide) => {
      let later: Promise<RunRecord | undefined> | undefined;
      this.admitSync(root, (rows) => {
        const decided = decide(rows);
        if (!(decided instanceof Promise)) return decided;
        later = decided;
        return undefined;
      });
      const record = await later;
      if (record) this.writeTreeSync(record);
    },
    readSync: (root) => this.treeSync(root),
    admitSync: (root, decide) => this.admitSync(root, decide),
    writeSync: (record) => this.writeTreeSync(record),
    joinSync: (runId, root, parent) => this.joinTreeSync(runId, root, parent),
  };
  /** {@linkcode LedgerStore.upkeep}: the file's log moved into it, and the file made anew. */
  readonly upkeep: LedgerUpkeep = {
    maintain: () => this.maintain(),
    heal: (error) => this.heal(error),
  };

  /** @internal Use {@linkcode openSqliteStore}. */
  constructor(
    db: SqliteDb,
    file: string,
    hostTimeoutSeconds: number,
    reopen?: () => SqliteDb,
    setAside?: (aside: string, error: unknown) => void,
  ) {
    this.#db = db;
    this.location = file;
    this.#timeout = hostTimeoutSeconds;
    this.#vantage = () => here(this.#timeout);
    this.#identity = identityOf(file);
    this.#reopen = reopen;
    this.#setAside = setAside;
  }

  /**
   * Open the file the path names now, when it is not the one open (deleted:
   * a new one is made; replaced: the new one is opened); given a failed
   * write's error that says the file is damaged, and a store that sets files
   * aside, the damaged file is renamed `<file>.corrupt-<time>` (never
   * deleted) and a new one started. Returns what it did as a log line, or
   * undefined when nothing was wrong; an empty line when another connection
   * of this process found the new file first (and said so). Throws when the new file cannot be
   * opened (tried again at the next call: the path still names another file).
   */
  heal(error?: unknown): string | undefined {
    if (!this.#reopen) return undefined;
    const gone = this.replaced();
    const damaged = gone === undefined && error !== undefined && this.#setAside !== undefined &&
      isCorruptError(error);
    if (gone === undefined && !damaged) return undefined;
    let what: string;
    if (damaged) {
      const aside = setAsideCorrupt(this.location);
      what = `the run ledger at ${this.location} is damaged (${
        error instanceof Error ? error.message : String(error)
      }): moved aside to ${aside ?? "(gone meanwhile)"}, kept there, and a new ledger started`;
    } else {
      what = `the run ledger at ${this.location} was ${
        gone === "deleted" ? "deleted" : "replaced by another file"
      } under this process: it now writes to the one at that path${
        gone === "deleted" ? ", made anew" : ""
      }`;
    }
    // Closed first: should the new file not open, writes fail (and wait in memory) rather than
    // land in a file no reader will see.
    try {
      this.#db.close();
    } catch { /* already closed */ }
    this.#db = this.#reopen();
    this.#identity = identityOf(this.location);
    return damaged || this.#firstHere() ? what : "";
  }

  /** This connection's mark in a file it opened anew: this process's, and its own. */
  readonly #mark = `${process.pid}:${processStart(process.pid) ?? ""}:${crypto.randomUUID()}`;

  /**
   * Whether this connection is the first of its process to open the file now
   * at the path: the host's and the watchdog's connections each find it, and
   * one line says what became of the old file, not one line each (the second
   * to look would find "another file": the one the first made).
   */
  #firstHere(): boolean {
    try {
      this.#db.run(
        "INSERT INTO meta (key, value) VALUES ('opened_anew_by', ?) ON CONFLICT (key) DO NOTHING",
        this.#mark,
      );
      const by = String(this.#db.get("SELECT value FROM meta WHERE key = 'opened_anew_by'")?.value);
      const ours = this.#mark.slice(0, this.#mark.lastIndexOf(":") + 1);
      return by === this.#mark || !by.startsWith(ours);
    } catch {
      return true; // unmarked: said, rather than never said
    }
  }

  /**
   * Whether the path still names the file this store has open: `deleted`
   * when nothing is there any more, `replaced` when another file is (moved
   * aside, restored from a copy), undefined while it is the same. A stat,
   * no database access.
   */
  replaced(): "deleted" | "replaced" | undefined {
    const now = identityOf(this.location);
    if (now === undefined) return "deleted";
    const then = this.#identity;
    return then && (then.dev !== now.dev || then.ino !== now.ino) ? "replaced" : undefined;
  }

  #transaction<T>(body: () => T): T {
    if (this.walCap > 0 && this.walBytes() > this.walCap) {
      // Not a fault: the rows go the way a locked store's do, and nothing is lost.
      throw Object.assign(
        new Error(
          `the store's write-ahead log is over ${
            Math.round(this.walCap / 1048576)
          } MiB until the watchdog's next checkpoint: handed on`,
        ),
        { handedOn: true },
      );
    }
    this.#db.exec("BEGIN IMMEDIATE");
    try {
      const out = body();
      this.#db.exec("COMMIT");
      return out;
    } catch (error) {
      try {
        this.#db.exec("ROLLBACK");
      } catch { /* nothing was begun, or it is already rolled back */ }
      throw error;
    }
  }

  #upsert(record: RunRecord): void {
    this.#db.run(UPSERT, ...params(record));
  }

  #heartbeat(heartbeat: Heartbeat): void {
    this.#db.run(
      HEARTBEAT,
      heartbeat.host.machine,
      heartbeat.host.pid,
      heartbeat.host.start,
      Math.round(heartbeat.at),
      heartbeat.intervalSeconds,
    );
  }

  #view(row: Record<string, unknown>, vantage: Vantage): RunView {
    const record = JSON.parse(String(row.record)) as RunRecord;
    record.runId = String(row.run_id);
    record.attempt = Number(row.attempt);
    record.status = String(row.status) as RunRecord["status"];
    record.host = {
      machine: String(row.machine),
      pid: Number(row.pid),
      start: String(row.host_start),
    };
    record.startedAt = Number(row.started_at);
    record.updatedAt = Number(row.updated_at);
    const view: RunView = { record, state: "live" };
    if (row.hb_at !== null && row.hb_at !== undefined) {
      view.heartbeat = {
        host: record.host,
        at: Number(row.hb_at),
        intervalSeconds: Number(row.hb_interval),
      };
    }
    view.state = runState(record, view.heartbeat, vantage);
    return view;
  }

  /** {@linkcode RunStore.write}, synchronously: one transaction. */
  writeSync(batch: WriteBatch): void {
    if (batch.records.length === 0 && !batch.heartbeat) return;
    // Made before the write lock is taken, so other processes wait only for the writes.
    const rows = batch.records.map(params);
    this.#transaction(() => {
      for (const row of rows) this.#write(row);
      if (batch.heartbeat) this.#heartbeat(batch.heartbeat);
    });
  }

  /**
   * @internal {@linkcode SqliteRunStore.writeSync} for records made as they
   * are written, in one transaction: each becomes its row and is dropped
   * before the next is made. The watchdog's batch of every changed run, made
   * whole, outlived its thread's young collections (at 20,000 runs ~10 MiB
   * each second) and doubled its heap; this way none lives long. The lock is
   * held while the records are made too, which costs less than their writes.
   */
  writeEachSync(records: Iterable<RunRecord>, heartbeat?: Heartbeat): void {
    this.#transaction(() => {
      for (const record of records) this.#write(params(record));
      if (heartbeat) this.#heartbeat(heartbeat);
    });
  }

  #write(row: ReturnType<typeof params>): void {
    // A live record without file content: its progress, most likely, on the row it owns.
    if (
      row[2] === "live" && row[9] === null &&
      this.#db.run(
          PROGRESS,
          row[7],
          row[8],
          row[0],
          row[1],
          row[3],
          row[4],
          row[5],
          row[6],
          row[7],
          row[0],
          row[1],
        ) > 0
    ) return;
    // A later attempt took the run from this one: its records are refused (a fencing token).
    const fence = this.#db.get(FENCE, row[0]);
    if (fence !== undefined && Number(fence.attempt) > Number(row[1])) {
      if (this.#fenced.length < 1000) {
        this.#fenced.push({
          runId: String(row[0]),
          attempt: Number(row[1]),
          holder: Number(fence.attempt),
        });
      }
      return;
    }
    const existing = this.#db.get(ROW_STATE, row[0], row[1]);
    if (existing === undefined) {
      // The attempt's first row (its start could not be recorded: the store was busy or away,
      // or it was made anew): it is the run's newest.
      this.#db.run(NOT_NEWEST, row[0], row[1]);
    } else if (
      Number(existing.started_at) !== Number(row[6]) || existing.machine !== row[3] ||
      Number(existing.pid) !== Number(row[4]) || String(existing.host_start) !== String(row[5])
    ) {
      // Another start holds this attempt number: this record's start could not be recorded
      // (the store was locked or away when it began) and guessed it.
      // Never over the other start's record (a done one included: a run id started again
      // after it was done keeps its history): this start is the run's next attempt (the one it
      // was given here before, when it was).
      const mine = this.#db.get(SAME_START, row[0], row[6], row[3], row[4], row[5]);
      const attempt = mine !== undefined
        ? Number(mine.attempt)
        : Number(this.#db.get(NEXT_ATTEMPT, row[0])?.next ?? 1);
      row = [...row];
      row[1] = attempt; // the record's text has no attempt of its own: the column says it
      if (mine === undefined) this.#db.run(NOT_NEWEST, row[0], row[1]);
    }
    this.#db.run(UPSERT, ...row);
  }

  /**
   * {@linkcode RunStore.startAttempt}, synchronously, in one transaction: the
   * run's lease is its newest record and that record's process (its pid and
   * start time on this machine, its heartbeat from anywhere), so a start sees
   * at once whether the attempt before it is still there.
   */
  startAttemptSync(record: RunRecord, options?: StartOptions): AttemptStart {
    const vantage = this.#vantage();
    return this.#transaction(() => {
      const row = this.#db.get(SELECT_NEWEST, record.runId);
      const previous = row ? this.#view(row, vantage) : undefined;
      const min = Math.max(1, Math.floor(options?.minAttempt ?? 1));
      // A run id started again after a done end is a fresh run (the caller resumes nothing of
      // it), numbered after the earlier attempts, whose records and effects stay until pruned.
      const afresh = options?.fresh || !previous;
      const attempt = afresh ? min : Math.max(min, previous.record.attempt + 1);
      const held = previous?.state === "live";
      const mode = options?.onDuplicate ?? "warn";
      // Refused: nothing is written, and the holder goes on alone.
      if (held && mode === "refuse") return { attempt, previous: previous!, refused: true };
      if (afresh) {
        this.#db.run("DELETE FROM runs WHERE run_id = ?", record.runId);
        this.#db.run("DELETE FROM run_fences WHERE run_id = ?", record.runId);
        // A run id started afresh (resume off) owes nothing to the earlier run's effects.
        if (previous && this.#effectsExist()) {
          this.#db.run("DELETE FROM effects WHERE run_id = ?", record.runId);
        }
        if (previous && this.#journalExists()) {
          this.#db.run("DELETE FROM journal WHERE run_id = ?", record.runId);
          this.#db.run(JOURNAL_ORPHANS);
        }
      } else this.#db.run("UPDATE runs SET newest = 0 WHERE run_id = ?", record.runId);
      // Taken from a live record (its process gone, or taken over): the earlier attempts'
      // later records are refused.
      const fenced = previous?.record.status === "live" && (!held || mode === "take-over");
      if (fenced) this.#db.run(SET_FENCE, record.runId, attempt);
      this.#upsert({ ...record, attempt });
      if (options?.heartbeat) this.#heartbeat(options.heartbeat);
      const out: AttemptStart = { attempt };
      if (previous) out.previous = previous;
      if (fenced) out.fenced = true;
      return out;
    });
  }

  /** The records refused since the last call: their attempt lost the run to a later one. */
  takeFenced(): FencedRecord[] {
    const out = this.#fenced;
    if (out.length > 0) this.#fenced = [];
    return out;
  }

  /** {@linkcode RunStore.latest}, synchronously. */
  latestSync(runId: string): RunView | undefined {
    const row = this.#db.get(SELECT_NEWEST, runId);
    return row ? this.#view(row, this.#vantage()) : undefined;
  }

  /**
   * The newest attempt of every run in the tree rooted at `root`, as trees of
   * runs sharing a budget count it: each run's own use, caps and parent.
   */
  treeSync(root: string): TreeRow[] {
    let rows: Record<string, unknown>[];
    try {
      rows = this.#db.all(TREE_ROWS, root);
    } catch (error) {
      if (/no such table/.test(String(error))) return []; // no run of this store is in a tree
      throw error;
    }
    const now = Date.now();
    return rows.map((row) => treeRowOf(row, now));
  }

  /** Look at a tree and write the record `decide` makes of it, in one transaction. */
  admitSync(root: string, decide: (rows: TreeRow[]) => RunRecord | undefined): void {
    this.#patiently(() =>
      this.#transaction(() => {
        const record = decide(this.treeSync(root));
        if (record) this.#upsert(record);
      })
    );
  }

  /** Write a run of a tree's record now, so that the tree's other processes see its use. */
  writeTreeSync(record: RunRecord): void {
    this.#patiently(() => this.#transaction(() => this.#upsert(record)));
  }

  /**
   * Run `body` with a longer lock wait than the main thread's others: a tree's
   * spend is settled across processes there, and a model call that takes far
   * longer follows; never an unbounded wait.
   */
  #patiently(body: () => void, waitMs: number = ADMIT_WAIT_MS): void {
    // The connection's own wait is set when it is opened and never changed for good: read once.
    const before = this.#busy ??= Number(this.#db.get("PRAGMA busy_timeout")?.timeout ?? 0);
    this.#db.exec(`PRAGMA busy_timeout = ${waitMs}`);
    try {
      body();
    } finally {
      this.#db.exec(`PRAGMA busy_timeout = ${before}`);
    }
  }
  #busy: number | undefined;

  /**
   * A write that reaches the disk (`synchronous = FULL` for it, then the
   * connection's own level again), waiting at most `waitMs` for another
   * process's lock. The connection's own level is read once (it is set when
   * the connection is opened); a connection that is FULL already changes
   * nothing.
   */
  #durably(body: () => void, waitMs: number): void {
    const own = this.#sync ??= String(this.#db.get("PRAGMA synchronous")?.synchronous ?? "1");
    const full = own === "2" || own === "3"; // FULL, EXTRA
    if (!full) this.#db.exec("PRAGMA synchronous = FULL");
    try {
      this.#patiently(body, waitMs);
    } finally {
      if (!full) this.#db.exec(`PRAGMA synchronous = ${/^\d+$/.test(own) ? own : "1"}`);
    }
  }
  #sync: string | undefined;

  /** Record that a run sits in a tree (the table is made by the first run that does). */
  joinTreeSync(runId: string, root: string, parent: string | undefined): void {
    // A run missing from its tree's rows hides its spend from the tree's other processes.
    this.#patiently(() => {
      if (!this.#treesMade) {
        this.#db.exec(TREE_TABLE);
        this.#treesMade = true;
      }
      this.#db.run(TREE_JOIN, runId, root, parent ?? null);
    });
  }

  /** {@linkcode RunStore.trees}, synchronously. */
  treesSync(query: TreeQuery = {}): RunView[] {
    const limit = Math.max(0, Math.floor(query.limit ?? 1000));
    const where = query.root === undefined ? "" : "WHERE t.root = ?";
    let rows: Record<string, unknown>[];
    try {
      rows = this.#db.all(
        `${SELECT_VIEW} JOIN run_trees t ON t.run_id = r.run_id AND +r.newest = 1 ${where}
          ORDER BY r.started_at DESC LIMIT ${limit}`,
        ...(query.root === undefined ? [] : [query.root]),
      );
    } catch (error) {
      if (/no such table/.test(String(error))) return []; // no run of this store is in a tree
      throw error;
    }
    const vantage = this.#vantage();
    return rows.map((row) => this.#view(row, vantage));
  }

  /** Whether the effects table is there (made by this connection, or found). */
  #effectsExist(): boolean {
    if (this.#effectsMade) return true;
    const found = this.#db.get(
      "SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = 'effects'",
    );
    if (found) this.#effectsMade = true;
    return found !== undefined;
  }
  #effectsMade = false;

  /**
   * {@linkcode RunStore.writeEffects}, synchronously: one transaction that
   * reaches the disk (`synchronous = FULL` for it), waiting at most
   * {@linkcode EFFECT_WAIT_MS} for another process's lock.
   */
  writeEffectsSync(batch: EffectBatch): void {
    if (batch.intents.length === 0 && batch.receipts.length === 0) return;
    if (!this.#effectsMade) {
      this.#db.exec(EFFECTS_TABLE);
      this.#effectsMade = true;
    }
    this.#durably(() =>
      this.#transaction(() => {
        for (const i of batch.intents) {
          this.#db.run(
            EFFECT_INTENT,
            i.runId,
            i.key,
            i.tool,
            i.inputDigest,
            i.callId ?? null,
            i.attempt,
            Math.round(i.at),
          );
        }
        for (const r of batch.receipts) {
          this.#db.run(
            EFFECT_RECEIPT,
            r.runId,
            r.key,
            r.tool,
            r.attempt,
            Math.round(r.at),
            r.ok ? 1 : 0,
            r.result ?? null,
            r.truncated ? 1 : 0,
            r.attempt,
            Math.round(r.at),
          );
        }
      }), EFFECT_WAIT_MS);
  }

  /** Whether the journal's tables are there (made by this connection, or found). */
  #journalExists(): boolean {
    if (this.#journalMade) return true;
    const found = this.#db.get(
      "SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = 'journal'",
    );
    if (found) this.#journalMade = true;
    return found !== undefined;
  }
  #journalMade = false;

  /**
   * {@linkcode RunStore.journal}'s write, synchronously: one transaction that
   * reaches the disk, as an effect's does; each body compressed and kept once.
   */
  writeJournalSync(batch: JournalBatch): void {
    if (batch.entries.length === 0) return;
    if (!this.#journalMade) {
      this.#db.exec(JOURNAL_TABLES);
      this.#journalMade = true;
    }
    // Compressed before the lock is taken: the transaction only writes.
    const bodies = new Map<string, string>();
    const rows = batch.entries.map((e) => {
      // A replayed call's body, read from this store, is kept there already.
      const known = this.#seen.take(e.body);
      const hash = known ?? bodyKey(e.body);
      if (known === undefined) bodies.set(hash, e.body);
      return [
        e.runId,
        e.attempt,
        e.kind,
        e.index,
        e.key,
        e.tool ?? null,
        hash,
        e.usage ?? null,
        Math.round(e.at),
        e.replayed ?? null,
        e.ms === undefined ? null : Math.round(e.ms),
      ];
    });
    const packed = [...bodies].map(([hash, text]) => [hash, Buffer.from(packBody(text))]);
    const shaped = this.#journalShaped;
    this.#durably(() =>
      this.#transaction(() => {
        // A table an older library made (after this file's migration, in a process that had it
        // open) lacks the newer columns: added under the write lock, once per connection.
        if (!shaped) addJournalColumns(this.#db);
        for (const body of packed) this.#db.run(JOURNAL_BODY, ...body);
        for (const row of rows) this.#db.run(JOURNAL_ENTRY, ...row);
      }), EFFECT_WAIT_MS);
    this.#journalShaped = true;
  }
  /** Bodies this store gave back, which its next journal write need not keep again. */
  readonly #seen = new StoredBodies();
  /** Whether this connection found the journal's table with every column it writes. */
  #journalShaped = false;

  /** {@linkcode RunStore.journal}'s read, synchronously. */
  journalSync(runId: string): JournalEntry[] {
    try {
      return this.#db.all(JOURNAL_READ, runId)
        .map((row) => journalOf(row, unpackBody(row.packed as Uint8Array), this.#seen));
    } catch (error) {
      if (/no such table/.test(String(error))) return []; // no entry was ever journaled here
      throw error;
    }
  }

  #graphMade = false;

  /**
   * A durable write of graph checkpoints: one transaction that reaches the
   * disk, as a journal entry's does, waiting a moment for another process's
   * lock; the tables made first when this store has none yet.
   */
  #graphWrite(body: () => void): void {
    this.#durably(() => {
      if (!this.#graphMade) {
        this.#db.exec(GRAPH_TABLES);
        this.#graphMade = true;
      }
      this.#transaction(body);
    }, EFFECT_WAIT_MS);
  }

  /** {@linkcode RunStore.checkpoints}'s put, synchronously: the checkpoint and its values, one commit. */
  putCheckpointSync(put: GraphCheckpointPut): void {
    const blob = (bytes: Uint8Array) =>
      Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.#graphWrite(() => {
      for (const v of put.values) {
        this.#db.run(
          GRAPH_VALUE,
          put.thread,
          put.ns,
          v.channel,
          v.version,
          v.type,
          v.bytes === undefined ? null : blob(v.bytes),
        );
      }
      this.#db.run(
        GRAPH_CHECKPOINT,
        put.thread,
        put.ns,
        put.id,
        put.parent ?? null,
        put.checkpoint.type,
        blob(put.checkpoint.bytes),
        put.metadata.type,
        blob(put.metadata.bytes),
        JSON.stringify(put.versions),
      );
    });
  }

  /** {@linkcode RunStore.checkpoints}'s putWrites, synchronously: one commit. */
  putWritesSync(batch: GraphWrites): void {
    if (batch.writes.length === 0) return;
    const writes = writesOnce(batch.writes);
    this.#graphWrite(() => {
      for (const w of writes) {
        this.#db.run(
          GRAPH_WRITE,
          batch.thread,
          batch.ns,
          batch.id,
          w.taskId,
          w.index,
          w.channel,
          w.type,
          Buffer.from(w.bytes.buffer, w.bytes.byteOffset, w.bytes.byteLength),
          w.taskPath,
        );
      }
    });
  }

  /** {@linkcode RunStore.checkpoints}'s list (and get), synchronously. */
  checkpointsSync(query: GraphCheckpointQuery): GraphCheckpointRow[] {
    const where: string[] = [];
    const params: unknown[] = [];
    const when = (clause: string, value: string | undefined) => {
      if (value === undefined) return;
      where.push(clause);
      params.push(value);
    };
    when("thread_id = ?", query.thread);
    when("ns = ?", query.ns);
    when("checkpoint_id = ?", query.id);
    when("checkpoint_id < ?", query.before);
    const limit = query.limit === undefined ? "" : ` LIMIT ${Math.max(0, Math.floor(query.limit))}`;
    try {
      return this.#db.all(
        `SELECT * FROM graph_checkpoints ${
          where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""
        } ORDER BY checkpoint_id DESC${limit}`,
        ...params,
      ).map((row) => {
        const values = this.#db.all(GRAPH_VALUES_OF, row.versions, row.thread_id, row.ns)
          .map((v) => {
            const value = {
              channel: String(v.channel),
              version: String(v.version),
              type: String(v.type),
            };
            return v.blob === null ? value : { ...value, bytes: bytesOf(v.blob) };
          });
        const writes = this.#db.all(GRAPH_WRITES_OF, row.thread_id, row.ns, row.checkpoint_id)
          .map((w) => ({
            taskId: String(w.task_id),
            index: Number(w.idx),
            channel: String(w.channel),
            type: String(w.type),
            bytes: bytesOf(w.blob),
            taskPath: String(w.task_path),
          }));
        return checkpointOf(row, values, writes);
      });
    } catch (error) {
      if (/no such table/.test(String(error))) return []; // no checkpoint was ever kept here
      throw error;
    }
  }

  /** {@linkcode RunStore.checkpoints}'s deleteThread, synchronously: one commit. */
  deleteThreadSync(thread: string): void {
    this.#graphWrite(() => {
      for (const table of ["graph_checkpoints", "graph_values", "graph_writes"]) {
        this.#db.run(`DELETE FROM ${table} WHERE thread_id = ?`, thread);
      }
    });
  }

  #sessionsMade = false;

  /** A durable write of session transcripts: one transaction, the table made first when none is. */
  #sessionWrite<T>(body: () => T): T {
    let out: T;
    this.#durably(() => {
      if (!this.#sessionsMade) {
        this.#db.exec(SESSION_TABLES);
        this.#sessionsMade = true;
      }
      out = this.#transaction(body);
    }, EFFECT_WAIT_MS);
    return out!;
  }

  /** A read of session transcripts; `none` when no entry was ever kept here. */
  #sessionRead<T>(body: () => T, none: T): T {
    try {
      return body();
    } catch (error) {
      if (/no such table/.test(String(error))) return none;
      throw error;
    }
  }

  /** {@linkcode RunStore.sessions}'s append, synchronously: one commit. */
  appendSessionSync(key: SessionPath, entries: SessionEntry[]): void {
    if (entries.length === 0) return;
    const at = Date.now();
    this.#sessionWrite(() => {
      for (const e of entries) {
        this.#db.run(
          SESSION_ENTRY,
          key.scope,
          key.sessionId,
          key.subpath,
          e.uuid ?? null,
          e.json,
          at,
        );
      }
    });
  }

  /** {@linkcode RunStore.sessions}'s load, synchronously: the last `last` entries when given. */
  sessionSync(key: SessionPath, last?: number): string[] | null {
    const rows = this.#sessionRead(
      () =>
        last === undefined
          ? this.#db.all(
            `SELECT entry FROM session_entries WHERE ${SESSION_KEY} ORDER BY seq`,
            key.scope,
            key.sessionId,
            key.subpath,
          )
          : this.#db.all(
            `SELECT entry FROM (SELECT seq, entry FROM session_entries WHERE ${SESSION_KEY}
              ORDER BY seq DESC LIMIT ?) ORDER BY seq`,
            key.scope,
            key.sessionId,
            key.subpath,
            Math.max(0, Math.floor(last)),
          ),
      [],
    );
    if (rows.length === 0) {
      // Only a transcript that holds no entry at all reads as null, not a `last` of 0.
      return last === undefined || last > 0 || this.sessionSync(key) === null ? null : [];
    }
    return rows.map((r) => String(r.entry));
  }

  /** {@linkcode RunStore.sessions}'s pop, synchronously: the last entry read and removed in one commit. */
  popSessionSync(key: SessionPath): string | undefined {
    return this.#sessionWrite(() => {
      const row = this.#db.get(
        `SELECT seq, entry FROM session_entries WHERE ${SESSION_KEY} ORDER BY seq DESC LIMIT 1`,
        key.scope,
        key.sessionId,
        key.subpath,
      );
      if (!row) return undefined;
      this.#db.run("DELETE FROM session_entries WHERE seq = ?", row.seq);
      return String(row.entry);
    });
  }

  /** {@linkcode RunStore.effects}, synchronously. */
  effectsSync(runId: string): EffectRow[] {
    try {
      return this.#db.all("SELECT * FROM effects WHERE run_id = ? ORDER BY at, key", runId)
        .map(effectOf);
    } catch (error) {
      if (/no such table/.test(String(error))) return []; // no effect was ever recorded here
      throw error;
    }
  }

  /** The file content the store keeps for a run's attempt, when any. */
  fileContentSync(runId: string, attempt: number): string | undefined {
    const row = this.#db.get(
      "SELECT file_content FROM runs WHERE run_id = ? AND attempt = ?",
      runId,
      attempt,
    );
    return typeof row?.file_content === "string" ? row.file_content : undefined;
  }

  /** {@linkcode RunStore.list}, synchronously. */
  listSync(query: ListQuery = {}): RunView[] {
    const where: string[] = [];
    const params: unknown[] = [];
    if (query.earlierOf !== undefined) {
      where.push(`r.run_id IN (${query.earlierOf.map(() => "?").join(", ") || "NULL"})`);
      where.push("r.newest = 0");
      params.push(...query.earlierOf);
    } else if (query.runId !== undefined) {
      where.push("r.run_id = ?");
      params.push(query.runId);
    } else where.push("r.newest = 1");
    if (query.since !== undefined) {
      where.push("r.updated_at >= ?");
      params.push(Math.floor(query.since));
    }
    if (query.machine !== undefined) {
      where.push("r.machine = ?");
      params.push(query.machine);
    }
    if (query.state === "ended") where.push("r.status <> 'live'");
    else if (query.state !== undefined) where.push("r.status = 'live'");
    const limit = Math.max(0, Math.floor(query.limit ?? 1000));
    const vantage = this.#vantage();
    const out: RunView[] = [];
    // Live rows are filtered by state after reading: read on in pages until the limit is met.
    let offset = 0;
    const page = Math.max(limit, 100);
    for (;;) {
      const rows = this.#db.all(
        `${SELECT_VIEW} WHERE ${where.join(" AND ")} ORDER BY r.started_at DESC LIMIT ? OFFSET ?`,
        ...params,
        page,
        offset,
      );
      for (const row of rows) {
        const view = this.#view(row, vantage);
        if (query.state === undefined || view.state === query.state) out.push(view);
        if (out.length >= limit) return out;
      }
      if (rows.length < page) return out;
      offset += page;
    }
  }

  /** {@linkcode RunStore.summary}, synchronously. */
  summarySync(query: SummaryQuery = {}): StoreSummary {
    const where = ["r.newest = 1"];
    const params: unknown[] = [];
    if (query.since !== undefined) {
      where.push("r.updated_at >= ?");
      params.push(Math.floor(query.since));
    }
    if (query.machine !== undefined) {
      where.push("r.machine = ?");
      params.push(query.machine);
    }
    const out: StoreSummary = {
      total: 0,
      byState: { live: 0, ended: 0, "cut-off": 0 },
      byEnd: {},
      byMachine: {},
    };
    const count = (machine: string, state: RunState, n: number) => {
      out.total += n;
      out.byState[state] += n;
      const m = out.byMachine[machine] ??= { live: 0, ended: 0, "cut-off": 0 };
      m[state] += n;
    };
    const ended = this.#db.all(
      `SELECT r.machine, r.status, COUNT(*) AS n FROM runs r
        WHERE ${where.join(" AND ")} AND r.status <> 'live' GROUP BY r.machine, r.status`,
      ...params,
    );
    for (const row of ended) {
      const n = Number(row.n);
      count(String(row.machine), "ended", n);
      const status = String(row.status) as EndStatus;
      out.byEnd[status] = (out.byEnd[status] ?? 0) + n;
    }
    const used = query.usage && this.#db.all(
      `SELECT COUNT(*) AS runs,
        TOTAL(json_extract(r.record, '$.usage.inputTokens')) AS input,
        TOTAL(json_extract(r.record, '$.usage.outputTokens')) AS output,
        TOTAL(${KNOWN_USD}) AS usd,
        COUNT(${KNOWN_USD}) AS usd_runs
        FROM runs r WHERE ${where.join(" AND ")}
        AND json_extract(r.record, '$.usage') IS NOT NULL`,
      ...params,
    )[0];
    if (used && Number(used.runs) > 0) {
      out.usage = {
        runs: Number(used.runs),
        inputTokens: Number(used.input),
        outputTokens: Number(used.output),
        usd: Number(used.usd),
        usdRuns: Number(used.usd_runs),
      };
    }
    const vantage = this.#vantage();
    const live = this.#db.all(
      `SELECT r.machine, r.pid, r.host_start, r.updated_at, h.at AS hb_at FROM runs r
        LEFT JOIN heartbeats h
        ON h.machine = r.machine AND h.pid = r.pid AND h.host_start = r.host_start
        WHERE ${where.join(" AND ")} AND r.status = 'live'`,
      ...params,
    );
    for (const row of live) {
      const host = {
        machine: String(row.machine),
        pid: Number(row.pid),
        start: String(row.host_start),
      };
      const heartbeat = row.hb_at === null || row.hb_at === undefined
        ? undefined
        : { host, at: Number(row.hb_at), intervalSeconds: 0 };
      const state = runState(
        { status: "live", host, updatedAt: Number(row.updated_at) },
        heartbeat,
        vantage,
      );
      count(host.machine, state, 1);
    }
    return out;
  }

  /** {@linkcode RunStore.prune}, synchronously. */
  pruneSync(before: number, limit: number): number {
    const n = Math.max(0, Math.floor(limit));
    if (n === 0) return 0;
    return this.#transaction(() => {
      const rows = this.#db.all(
        `SELECT run_id, attempt FROM runs WHERE status <> 'live' AND updated_at < ?
          ORDER BY updated_at LIMIT ?`,
        Math.floor(before),
        n,
      );
      for (const row of rows) {
        // Every attempt of a run whose newest ended goes with it; a live run's older ones stay.
        this.#db.run(
          `DELETE FROM runs WHERE run_id = ? AND attempt <= ? AND NOT EXISTS
            (SELECT 1 FROM runs l WHERE l.run_id = ? AND l.status = 'live')`,
          row.run_id,
          row.attempt,
          row.run_id,
        );
        // A run gone from the ledger takes its effects and its journal with it.
        if (this.#effectsExist()) {
          this.#db.run(
            `DELETE FROM effects WHERE run_id = ? AND NOT EXISTS
              (SELECT 1 FROM runs r WHERE r.run_id = ?)`,
            row.run_id,
            row.run_id,
          );
        }
        if (this.#journalExists()) {
          this.#db.run(
            `DELETE FROM journal WHERE run_id = ? AND NOT EXISTS
              (SELECT 1 FROM runs r WHERE r.run_id = ?)`,
            row.run_id,
            row.run_id,
          );
        }
      }
      if (rows.length > 0 && this.#journalExists()) this.#db.run(JOURNAL_ORPHANS);
      this.#db.run(
        "DELETE FROM run_fences WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = run_fences.run_id)",
      );
      // Heartbeats of processes no record names any more.
      this.#db.run(
        `DELETE FROM heartbeats WHERE at < ? AND NOT EXISTS (SELECT 1 FROM runs r
          WHERE r.machine = heartbeats.machine AND r.pid = heartbeats.pid
          AND r.host_start = heartbeats.host_start)`,
        Math.floor(before),
      );
      return rows.length;
    });
  }

  /**
   * Keep the write-ahead log bounded; called at every progress interval. Past
   * {@linkcode WAL_TRUNCATE_BYTES} (a burst of starts, a reader that stayed),
   * a truncating checkpoint: it copies the log into the database, waits (at
   * most the busy timeout) for readers to move on, and cuts the log to
   * nothing; writers meanwhile find the store busy (the host's thread does
   * not wait: it hands its rows on). Else, every {@linkcode PASSIVE_EVERY}
   * calls, a passive one, which waits on no one. Returns false when the
   * truncating one could not complete: it is tried again at the next call.
   */
  maintain(): boolean {
    if (this.walBytes() > WAL_TRUNCATE_BYTES) {
      const out = this.#db.get("PRAGMA wal_checkpoint(TRUNCATE)");
      return Number(out?.busy ?? 0) === 0;
    }
    if (++this.#maintained % PASSIVE_EVERY === 0) this.#db.get("PRAGMA wal_checkpoint(PASSIVE)");
    return true;
  }
  #maintained = 0;

  /** The write-ahead log's size on disk, bytes (0 when there is none). */
  walBytes(): number {
    try {
      return fs.statSync(`${this.location}-wal`).size;
    } catch {
      // no write-ahead log: 0 bytes
      return 0;
    }
  }

  /** Close the database; later calls throw. */
  closeSync(): void {
    this.#db.close();
  }

  write(batch: WriteBatch): Promise<void> {
    return run(() => this.writeSync(batch));
  }
  startAttempt(record: RunRecord, options?: StartOptions): Promise<AttemptStart> {
    return run(() => this.startAttemptSync(record, options));
  }
  latest(runId: string): Promise<RunView | undefined> {
    return run(() => this.latestSync(runId));
  }
  list(query?: ListQuery): Promise<RunView[]> {
    return run(() => this.listSync(query));
  }
  summary(query?: SummaryQuery): Promise<StoreSummary> {
    return run(() => this.summarySync(query));
  }
  prune(before: number, limit: number): Promise<number> {
    return run(() => this.pruneSync(before, limit));
  }
  close(): Promise<void> {
    return run(() => this.closeSync());
  }
}

/** A synchronous body as a promise: a throw becomes a rejection. */
function run<T>(body: () => T): Promise<T> {
  try {
    return Promise.resolve(body());
  } catch (error) {
    return Promise.reject(error);
  }
}

/**
 * Open a ledger to read. A write-ahead-logged database in a folder no one can
 * write (a read-only home) cannot be opened so (SQLite cannot make its
 * shared-memory file): when it has no write-ahead log, so that the main file
 * holds every committed row, it is read as immutable instead.
 */
function openToRead(driver: SqliteDriver, file: string): SqliteDb {
  const db = driver.open(file, { readOnly: true });
  try {
    db.get("SELECT count(*) AS n FROM sqlite_master");
    return db;
  } catch {
    let immutable = false;
    try {
      immutable = readMode(file) === "immutable";
    } catch { /* not there, or not a database: the first error says so */ }
    if (!immutable) return db; // its next statement fails as this one did, and says why
    db.close();
    return driver.open(file, { readOnly: true, immutable: true });
  }
}

/** What to say when there is no driver: the ledger is off. */
export const NO_DRIVER = "no SQLite driver";

/**
 * Open (creating it and its directory when needed, except read-only) the
 * embedded store. Throws when there is no driver (the message starts with
 * {@linkcode NO_DRIVER}), or the file cannot be opened, is not a database,
 * or carries a newer schema.
 *
 * @param options The file, the heartbeat timeout and how the connection is used.
 * @returns The store.
 *
 * @example
 * ```ts
 * import { openSqliteStore, storeFile } from "./sqlite.ts";
 * import { thisHost } from "./_host.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const file = storeFile(mkdtempSync(join(tmpdir(), "ac-")));
 * const store = openSqliteStore({ file, hostTimeoutSeconds: 30 });
 * const now = Date.now();
 * const record = {
 *   runId: "r1", attempt: 1, dialect: "chat", caps: {}, turnsUsed: 0, elapsedSeconds: 0,
 *   tier: 0, inFlight: [], recent: [], notes: [], host: thisHost(), status: "live" as const,
 *   startedAt: now, updatedAt: now,
 * };
 * assert.equal(store.startAttemptSync(record).attempt, 1);
 * assert.equal(store.startAttemptSync(record).attempt, 2); // attempt 1 never ended
 * store.writeSync({ records: [{ ...record, attempt: 2, turnsUsed: 3 }] });
 * assert.equal(store.latestSync("r1")?.record.turnsUsed, 3);
 * assert.equal(store.latestSync("r1")?.state, "live");
 * store.closeSync();
 * ```
 */
export function openSqliteStore(options: SqliteOpenOptions): SqliteRunStore {
  const driver = options.driver ?? sqliteDriver();
  if (!driver) throw new Error(`${NO_DRIVER}`);
  const reopen = () => openDb(driver, options);
  const setAside = options.mode === "read" ? undefined : options.setAside;
  let db: SqliteDb;
  try {
    db = reopen();
  } catch (error) {
    if (!setAside || !isCorruptError(error)) throw error;
    const aside = setAsideCorrupt(options.file);
    if (aside === undefined) throw error;
    setAside(aside, error);
    db = reopen();
  }
  const store = new SqliteRunStore(
    db,
    options.file,
    options.hostTimeoutSeconds,
    options.mode === "read" ? undefined : reopen,
    setAside,
  );
  // The host's own connection (it never waits on a lock): the supervisor's may wait and write.
  if (options.mode === "quick" && options.busyMs === 0) store.walCap = WAL_HAND_ON_BYTES;
  return store;
}

/** The connection to a store file, set up as `options` says (made, with its schema, when missing). */
function openDb(driver: SqliteDriver, options: SqliteOpenOptions): SqliteDb {
  const mode = options.mode ?? "durable";
  const file = options.file;
  if (mode !== "read") fs.mkdirSync(path.dirname(file), { recursive: true });
  const db = mode === "read" ? openToRead(driver, file) : driver.open(file, { readOnly: false });
  try {
    const busy = Math.max(0, Math.floor(options.busyMs ?? (mode === "quick" ? 20 : 250)));
    db.exec(`PRAGMA busy_timeout = ${busy}`);
    // SQLite's default page cache (2 MB a connection) fills as the ledger grows, in the main
    // thread's connection and the watchdog's: a run's rows are written and read by key, a few
    // pages each, which the operating system's file cache holds as well.
    db.exec(`PRAGMA cache_size = -${CACHE_KIB}`);
    if (mode !== "read") {
      const journal = db.get("PRAGMA journal_mode = WAL");
      if (String(journal?.journal_mode ?? "").toLowerCase() !== "wal") {
        throw new Error(`${file} cannot use write-ahead logging`);
      }
      // The worker's commits reach the disk; the main thread's starts and ends go with them.
      db.exec(`PRAGMA synchronous = ${mode === "durable" ? "FULL" : "NORMAL"}`);
      if (mode === "quick") db.exec("PRAGMA wal_autocheckpoint = 0");
      // The write-ahead log is cut back to this after each checkpoint, not left at its peak.
      db.exec(`PRAGMA journal_size_limit = ${WAL_LIMIT_BYTES}`);
      migrate(db, file, busy);
    } else {
      const version = db.get("SELECT value FROM meta WHERE key = 'schema'");
      if (Number(version?.value) > SCHEMA_VERSION) throw newer(file, Number(version?.value));
    }
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
}

/**
 * Add the columns a journal table made by an older version lacks (its rows
 * keep them empty: read back as live calls of unknown duration). Nothing when
 * there is no journal table yet: it is made whole by its first write. Run
 * under the write lock.
 */
function addJournalColumns(db: SqliteDb): void {
  const columns = new Set(db.all("PRAGMA table_info(journal)").map((c) => String(c.name)));
  if (columns.size === 0) return; // no journal table
  for (const name of JOURNAL_ADDED) {
    if (!columns.has(name)) db.exec(`ALTER TABLE journal ADD COLUMN ${name} INTEGER`);
  }
}

const newer = (file: string, version: number) =>
  new Error(
    `${file} has schema version ${version}, newer than this library's ${SCHEMA_VERSION}; upgrade agent-checkpoint`,
  );

/** The schema version in the file: 0 when it has none yet. */
function versionOf(db: SqliteDb): number {
  try {
    return Number(db.get("SELECT value FROM meta WHERE key = 'schema'")?.value ?? 0);
  } catch {
    return 0; // no meta table yet
  }
}

/**
 * Create the tables, or bring an older schema up to this one (every statement
 * of the schema creates only what is missing), once, whoever gets there
 * first: the version is read again under the write lock, and a process that
 * opens meanwhile waits up to {@linkcode MIGRATE_WAIT_MS} for the one at work.
 */
function migrate(db: SqliteDb, file: string, busyMs: number): void {
  const known = versionOf(db);
  if (known === SCHEMA_VERSION) return;
  if (known > SCHEMA_VERSION) throw newer(file, known);
  db.exec(`PRAGMA busy_timeout = ${Math.max(busyMs, MIGRATE_WAIT_MS)}`);
  try {
    db.exec("BEGIN IMMEDIATE");
    try {
      const now = versionOf(db);
      if (now > SCHEMA_VERSION) throw newer(file, now);
      if (now < SCHEMA_VERSION) {
        db.exec(SCHEMA);
        addJournalColumns(db);
        db.run(
          "INSERT INTO meta (key, value) VALUES ('schema', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
          String(SCHEMA_VERSION),
        );
      }
      db.exec("COMMIT");
    } catch (error) {
      try {
        db.exec("ROLLBACK");
      } catch { /* not begun */ }
      throw error;
    }
  } finally {
    db.exec(`PRAGMA busy_timeout = ${busyMs}`);
  }
}
