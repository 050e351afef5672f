/**
 * The fleet store: the run ledger in one PostgreSQL database that every
 * process of a fleet names (setting `store`, a `postgres://` URL). Same
 * records and queries as the embedded SQLite store, behind the same
 * {@linkcode RunStore} interface.
 *
 * The driver is the optional peer dependency `postgres` (postgres.js 3.x),
 * imported only when a store names PostgreSQL. Every method is one round
 * trip: a batch of records and the heartbeat go in one statement, and the
 * start of an attempt is one call of a function of the schema that takes a
 * lock on the run id, so two starts of one id, on any machines, get distinct
 * attempt numbers.
 *
 * The tables live in a schema of their own (`agent_checkpoint`, or the URL's
 * `schema` parameter), created and migrated on first use under an advisory
 * lock, so many processes may start at once.
 *
 * @module
 */
import type { EndStatus } from "../_record.ts";
import type { TreeRow } from "../_tree.ts";
import { treeRowOf } from "./trees.ts";
import { here } from "./_host.ts";
import { boundContent } from "./_content.ts";
import { Buffer } from "node:buffer";
import { bodyKey, journalOf, packBody, StoredBodies, unpackBody } from "./_journal.ts";
import { checkpointOf, writesOnce } from "./_checkpoints.ts";
import {
  type AttemptStart,
  type Backend,
  type CheckpointsPort,
  type EffectBatch,
  effectOf,
  type EffectRow,
  type EffectsPort,
  type FencedRecord,
  type FilesPort,
  type GraphChannelValue,
  type GraphCheckpointPut,
  type GraphCheckpointQuery,
  type GraphCheckpointRow,
  type GraphWrite,
  type GraphWrites,
  type Heartbeat,
  type HostId,
  type JournalBatch,
  type JournalEntry,
  type JournalPort,
  type LeasesPort,
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
 * The schema version this code writes; a newer one in the database is left
 * alone, an older one is brought up to this one. 2 added the index that counts
 * runs by status and machine; 3 the processes' leases and the runs' fences; 4 a run id
 * started again after a done end numbered after the attempts it keeps; 5 the
 * journal's `replayed` and `ms` columns (a journal table made before them gets them).
 */
export const PG_SCHEMA_VERSION = 5;

/** The schema the tables go in when the URL names none. */
export const PG_DEFAULT_SCHEMA = "agent_checkpoint";

/** The driver, as the build names it. */
const DRIVER = "npm:postgres@^3.4.9";

/** What to install when the driver is missing. */
export const PG_FIX = "install the postgres package (npm install postgres@3)";

/**
 * Whether a `store` setting names PostgreSQL.
 *
 * @example
 * ```ts
 * import { isPostgresUrl } from "./postgres.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isPostgresUrl("postgres://db.internal/fleet"), true);
 * assert.equal(isPostgresUrl("postgresql://u@db/fleet"), true);
 * assert.equal(isPostgresUrl(""), false);
 * ```
 */
export function isPostgresUrl(value: unknown): value is string {
  return typeof value === "string" && /^postgres(ql)?:\/\//i.test(value.trim());
}

/** Where a store URL points: the URL for the driver, the schema, and how to show it. */
export interface PgTarget {
  /** The URL the driver connects with (without the `schema` parameter). */
  url: string;
  /** The schema the tables go in. */
  schema: string;
  /** The URL without its password, for log lines. */
  location: string;
}

/**
 * Read a store URL: its `schema` parameter (default `agent_checkpoint`)
 * and the URL to show (its password hidden). Throws on a URL that cannot be
 * parsed or a schema name that is not a plain identifier.
 *
 * @example
 * ```ts
 * import { pgTarget } from "./postgres.ts";
 * import assert from "node:assert/strict";
 *
 * const t = pgTarget("postgres://ci:secret@db:5432/fleet?schema=runs_ci");
 * assert.equal(t.schema, "runs_ci");
 * assert.equal(t.location, "postgres://ci:***@db:5432/fleet?schema=runs_ci");
 * assert.equal(t.url, "postgres://ci:secret@db:5432/fleet");
 * ```
 */
export function pgTarget(url: string): PgTarget {
  const parsed = new URL(url.trim());
  const schema = parsed.searchParams.get("schema") ?? PG_DEFAULT_SCHEMA;
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(schema)) {
    throw new Error(`the store URL's schema ${JSON.stringify(schema)} is not a plain name`);
  }
  const shown = new URL(parsed.href);
  if (shown.password !== "") shown.password = "***";
  parsed.searchParams.delete("schema");
  return { url: parsed.href, schema, location: shown.href };
}

/** The little of postgres.js this store (and its tests and benchmark) use. */
export interface Sql {
  unsafe(
    query: string,
    params?: unknown[],
    options?: { prepare?: boolean },
  ): Promise<Record<string, unknown>[]>;
  begin<T>(body: (sql: Sql) => Promise<T>): Promise<T>;
  end(options?: { timeout?: number }): Promise<void>;
}

/** postgres.js's connect function. */
export type Postgres = (url: string, options: Record<string, unknown>) => Sql;

let driver: Promise<Postgres> | undefined;

/**
 * Import the driver once per thread; rejects with what to install when it is
 * missing.
 *
 * @example
 * ```ts
 * import { loadDriver } from "./postgres.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(typeof await loadDriver(), "function");
 * ```
 */
export function loadDriver(): Promise<Postgres> {
  driver ??= import(DRIVER).then(
    (mod) => (mod.default ?? mod) as Postgres,
    (error) => {
      driver = undefined;
      throw new Error(
        `the PostgreSQL driver cannot be loaded (${
          error instanceof Error ? error.message : String(error)
        }); ${PG_FIX}`,
      );
    },
  );
  return driver;
}

const ddl = (s: string) => `
CREATE TABLE IF NOT EXISTS ${s}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS ${s}.runs (
  run_id text NOT NULL,
  attempt integer NOT NULL,
  newest boolean NOT NULL,
  status text NOT NULL,
  machine text NOT NULL,
  pid integer NOT NULL,
  host_start text NOT NULL,
  started_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  record text NOT NULL,
  file_content text,
  PRIMARY KEY (run_id, attempt)
) WITH (fillfactor = 70);
CREATE INDEX IF NOT EXISTS runs_newest ON ${s}.runs (started_at DESC) WHERE newest;
CREATE INDEX IF NOT EXISTS runs_machine ON ${s}.runs (machine, started_at DESC) WHERE newest;
-- No index names updated_at: a live run's progress then changes no indexed column, and
-- PostgreSQL rewrites the row in its page (a HOT update) without touching any index.
CREATE INDEX IF NOT EXISTS runs_ended ON ${s}.runs (started_at) WHERE status <> 'live';
-- Ended runs counted by machine and status from this index alone (none of its columns changes
-- with a live run's progress).
CREATE INDEX IF NOT EXISTS runs_state ON ${s}.runs (status, machine, pid, host_start) WHERE newest;
CREATE TABLE IF NOT EXISTS ${s}.heartbeats (
  machine text NOT NULL,
  pid integer NOT NULL,
  host_start text NOT NULL,
  at bigint NOT NULL,
  interval_seconds real NOT NULL,
  PRIMARY KEY (machine, pid, host_start)
);
-- A process's lease: a session-level advisory lock its store connection holds, keyed by this
-- row's key. The server lets it go when the process dies or its connection ends; a live record
-- whose process's lock is free is cut off at once.
CREATE TABLE IF NOT EXISTS ${s}.host_leases (
  machine text NOT NULL,
  pid integer NOT NULL,
  host_start text NOT NULL,
  key bigint NOT NULL,
  PRIMARY KEY (machine, pid, host_start)
);
-- A run taken from a live attempt (its lease free, or on_duplicate: take-over): the records of
-- attempts below this one are refused from then on (a fencing token). Only such runs have a row.
CREATE TABLE IF NOT EXISTS ${s}.run_fences (run_id text PRIMARY KEY, attempt integer NOT NULL);
-- The journal's table is made by its first write; one made before these columns gets them.
${journalColumns(s)};
-- Whether no session holds the advisory lock of a bigint key (NULL for no key).
CREATE OR REPLACE FUNCTION ${s}.lease_free(k bigint) RETURNS boolean
LANGUAGE sql STABLE RETURNS NULL ON NULL INPUT AS $lf$
  SELECT NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
    AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid = ((k >> 32) & 4294967295)::oid AND l.objid = (k & 4294967295)::oid)
$lf$;
DROP FUNCTION IF EXISTS ${s}.start_attempt(json);
CREATE FUNCTION ${s}.start_attempt(p json)
RETURNS TABLE (o_attempt integer, o_prev_attempt integer, o_record text, o_status text,
  o_updated_at bigint, o_file text, o_hb_at bigint, o_hb_interval real, o_machine text,
  o_pid integer, o_host_start text, o_started_at bigint, o_lease_free boolean,
  o_refused boolean, o_fenced boolean)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_run text := p->>'run_id';
  v_mode text := coalesce(p->>'on_duplicate', 'warn');
  prev ${s}.runs%ROWTYPE;
  n integer;
  afresh boolean;
  v_free boolean;
  v_held boolean := false;
  v_fenced boolean := false;
  v_seen bigint;
BEGIN
  -- Starts of one run id, from any machine, one at a time: each sees the one before.
  PERFORM pg_advisory_xact_lock(hashtextextended('agent-checkpoint start ' || v_run, 0));
  SELECT * INTO prev FROM ${s}.runs r WHERE r.run_id = v_run
    ORDER BY r.newest DESC, r.attempt DESC LIMIT 1;
  -- Started again after a done end: a fresh run, numbered after the attempts it keeps.
  afresh := coalesce((p->>'fresh')::boolean, false) OR prev.run_id IS NULL;
  n := CASE WHEN afresh THEN (p->>'min')::integer
    ELSE GREATEST((p->>'min')::integer, prev.attempt + 1) END;
  IF prev.run_id IS NOT NULL AND prev.status = 'live' THEN
    -- Held while its process's lock is held and it has been heard of within the timeout.
    SELECT ${s}.lease_free(l.key) INTO v_free FROM ${s}.host_leases l
      WHERE l.machine = prev.machine AND l.pid = prev.pid AND l.host_start = prev.host_start;
    SELECT GREATEST(coalesce(max(h.at), 0), prev.updated_at) INTO v_seen FROM ${s}.heartbeats h
      WHERE h.machine = prev.machine AND h.pid = prev.pid AND h.host_start = prev.host_start;
    v_held := NOT coalesce(v_free, false) AND v_seen >= (p->>'stale_before')::bigint;
  END IF;
  IF v_held AND v_mode = 'refuse' THEN
    -- Refused: nothing is written, and the holder goes on alone.
    RETURN QUERY SELECT n, prev.attempt, prev.record, prev.status, prev.updated_at,
      prev.file_content, h.at, h.interval_seconds, prev.machine, prev.pid, prev.host_start,
      prev.started_at, v_free, true, false
      FROM (SELECT 1) one LEFT JOIN ${s}.heartbeats h
      ON h.machine = prev.machine AND h.pid = prev.pid AND h.host_start = prev.host_start;
    RETURN;
  END IF;
  IF afresh THEN
    DELETE FROM ${s}.runs r WHERE r.run_id = v_run;
    DELETE FROM ${s}.run_fences f WHERE f.run_id = v_run;
  ELSE
    UPDATE ${s}.runs r SET newest = false WHERE r.run_id = v_run AND r.newest;
  END IF;
  IF prev.run_id IS NOT NULL AND prev.status = 'live' AND (NOT v_held OR v_mode = 'take-over') THEN
    -- Taken from a live record: the earlier attempts' later records are refused.
    INSERT INTO ${s}.run_fences AS f (run_id, attempt) VALUES (v_run, n)
      ON CONFLICT (run_id) DO UPDATE SET attempt = GREATEST(f.attempt, excluded.attempt);
    v_fenced := true;
  END IF;
  INSERT INTO ${s}.runs AS r (run_id, attempt, newest, status, machine, pid, host_start,
      started_at, updated_at, record, file_content)
    VALUES (v_run, n, true, 'live', p->>'machine', (p->>'pid')::integer, p->>'host_start',
      (p->>'started_at')::bigint, (p->>'updated_at')::bigint, p->>'record', NULL)
    ON CONFLICT (run_id, attempt) DO UPDATE SET newest = true, status = excluded.status,
      machine = excluded.machine, pid = excluded.pid, host_start = excluded.host_start,
      started_at = excluded.started_at, updated_at = excluded.updated_at,
      record = excluded.record, file_content = NULL;
  IF p->>'hb_at' IS NOT NULL THEN
    INSERT INTO ${s}.heartbeats AS h (machine, pid, host_start, at, interval_seconds)
      VALUES (p->>'machine', (p->>'pid')::integer, p->>'host_start', (p->>'hb_at')::bigint,
        (p->>'hb_interval')::real)
      ON CONFLICT (machine, pid, host_start) DO UPDATE
        SET at = GREATEST(h.at, excluded.at), interval_seconds = excluded.interval_seconds;
  END IF;
  RETURN QUERY SELECT n, prev.attempt, prev.record, prev.status, prev.updated_at,
    prev.file_content, h.at, h.interval_seconds, prev.machine, prev.pid, prev.host_start,
    prev.started_at, v_free, false, v_fenced
    FROM (SELECT 1) one LEFT JOIN ${s}.heartbeats h
    ON h.machine = prev.machine AND h.pid = prev.pid AND h.host_start = prev.host_start;
END
$fn$;
`;

/**
 * Side effects across attempts: a table of their own, made by the first write
 * of one (most stores never need it; no schema version for it).
 */
const effectsDdl = (s: string) =>
  `CREATE TABLE IF NOT EXISTS ${s}.effects (
  run_id text NOT NULL, key text NOT NULL, tool text NOT NULL, input_digest text NOT NULL,
  call_id text, attempt integer NOT NULL, at bigint NOT NULL,
  receipt_ok boolean, receipt_result text, receipt_truncated boolean,
  receipt_attempt integer, receipt_at bigint,
  PRIMARY KEY (run_id, key))`;

/**
 * The run journal: each attempt's calls, and their bodies once by content
 * (compressed), tables of their own made by the first write of an entry.
 */
const journalDdl = (s: string) =>
  `CREATE TABLE IF NOT EXISTS ${s}.journal (
  run_id text NOT NULL, attempt integer NOT NULL, kind text NOT NULL, idx integer NOT NULL,
  key text NOT NULL, tool text, body text NOT NULL, usage text, at bigint NOT NULL,
  replayed integer, ms bigint,
  PRIMARY KEY (run_id, attempt, kind, idx));
${journalColumns(s)};
CREATE INDEX IF NOT EXISTS journal_body ON ${s}.journal (body);
CREATE TABLE IF NOT EXISTS ${s}.journal_bodies (hash text PRIMARY KEY, packed bytea NOT NULL)`;

/**
 * The journal's columns added after its table was first made (schema 5), to a
 * table an older version made (when there is one): its rows keep them empty.
 */
function journalColumns(s: string): string {
  return `ALTER TABLE IF EXISTS ${s}.journal ADD COLUMN IF NOT EXISTS replayed integer,
  ADD COLUMN IF NOT EXISTS ms bigint`;
}

/** A batch of entries and their bodies: one statement, one commit. */
const journalSql = (s: string) => `
WITH b AS (
  INSERT INTO ${s}.journal_bodies (hash, packed)
  SELECT x.hash, decode(x.packed, 'base64') FROM json_to_recordset($1::text::json)
    AS x(hash text, packed text)
  ON CONFLICT DO NOTHING RETURNING 1
)
INSERT INTO ${s}.journal (run_id, attempt, kind, idx, key, tool, body, usage, at, replayed, ms)
SELECT x.run_id, x.attempt, x.kind, x.idx, x.key, x.tool, x.body, x.usage, x.at, x.replayed, x.ms
FROM json_to_recordset($2::text::json) AS x(run_id text, attempt integer, kind text,
  idx integer, key text, tool text, body text, usage text, at bigint, replayed integer,
  ms bigint)
ON CONFLICT DO NOTHING`;

/**
 * A graph framework's checkpoints (LangGraph's): each checkpoint without its
 * channel values, each value once per thread, namespace, channel and version,
 * and the pending writes of each checkpoint's tasks; tables of their own made
 * by the first checkpoint kept. Ids and task keys compare as bytes (`"C"`),
 * as the embedded store's do.
 */
const graphDdl = (s: string) =>
  `CREATE TABLE IF NOT EXISTS ${s}.graph_checkpoints (
  thread_id text NOT NULL, ns text NOT NULL, checkpoint_id text COLLATE "C" NOT NULL,
  parent_id text, type text NOT NULL, checkpoint bytea NOT NULL, meta_type text NOT NULL,
  metadata bytea NOT NULL, versions text NOT NULL,
  PRIMARY KEY (thread_id, ns, checkpoint_id));
CREATE TABLE IF NOT EXISTS ${s}.graph_values (
  thread_id text NOT NULL, ns text NOT NULL, channel text NOT NULL, version text NOT NULL,
  type text NOT NULL, blob bytea,
  PRIMARY KEY (thread_id, ns, channel, version));
CREATE TABLE IF NOT EXISTS ${s}.graph_writes (
  thread_id text NOT NULL, ns text NOT NULL, checkpoint_id text NOT NULL,
  task_id text COLLATE "C" NOT NULL, idx integer NOT NULL, channel text NOT NULL,
  type text NOT NULL, blob bytea NOT NULL, task_path text COLLATE "C" NOT NULL,
  PRIMARY KEY (thread_id, ns, checkpoint_id, task_id, idx))`;

/** A checkpoint and the values it brings: one statement, one commit. */
const graphPutSql = (s: string) => `
WITH v AS (
  INSERT INTO ${s}.graph_values (thread_id, ns, channel, version, type, blob)
  SELECT $1, $2, x.channel, x.version, x.type, decode(x.blob, 'base64')
  FROM json_to_recordset($3::text::json) AS x(channel text, version text, type text, blob text)
  ON CONFLICT DO NOTHING RETURNING 1
)
INSERT INTO ${s}.graph_checkpoints AS c
  (thread_id, ns, checkpoint_id, parent_id, type, checkpoint, meta_type, metadata, versions)
VALUES ($1, $2, $4, $5, $6, decode($7, 'base64'), $8, decode($9, 'base64'), $10)
ON CONFLICT (thread_id, ns, checkpoint_id) DO UPDATE SET type = excluded.type,
  checkpoint = excluded.checkpoint, meta_type = excluded.meta_type,
  metadata = excluded.metadata, versions = excluded.versions`;

/** A task's writes: a regular one kept as first written, a special one (a negative index) replaced. */
const graphWritesSql = (s: string) => `
INSERT INTO ${s}.graph_writes AS w
  (thread_id, ns, checkpoint_id, task_id, idx, channel, type, blob, task_path)
SELECT $1, $2, $3, x.task_id, x.idx, x.channel, x.type, decode(x.blob, 'base64'), x.task_path
FROM json_to_recordset($4::text::json) AS x(task_id text, idx integer, channel text, type text,
  blob text, task_path text)
ON CONFLICT (thread_id, ns, checkpoint_id, task_id, idx) DO UPDATE SET
  channel = excluded.channel, type = excluded.type, blob = excluded.blob,
  task_path = excluded.task_path
WHERE excluded.idx < 0`;

/** Checkpoints with their channels' values and their pending writes, in one statement. */
const graphReadSql = (s: string, where: string, limit: string) => `
SELECT c.thread_id, c.ns, c.checkpoint_id, c.parent_id, c.type,
  encode(c.checkpoint, 'base64') AS checkpoint, c.meta_type, encode(c.metadata, 'base64') AS metadata,
  (SELECT json_agg(json_build_array(v.channel, v.version, v.type, encode(v.blob, 'base64'))
    ORDER BY v.channel)
    FROM json_each_text(c.versions::json) j JOIN ${s}.graph_values v
    ON v.thread_id = c.thread_id AND v.ns = c.ns AND v.channel = j.key AND v.version = j.value
  )::text AS vals,
  (SELECT json_agg(json_build_array(w.task_id, w.idx, w.channel, w.type, encode(w.blob, 'base64'),
    w.task_path) ORDER BY w.task_path, w.task_id, w.idx)
    FROM ${s}.graph_writes w
    WHERE w.thread_id = c.thread_id AND w.ns = c.ns AND w.checkpoint_id = c.checkpoint_id
  )::text AS writes
FROM ${s}.graph_checkpoints c ${where} ORDER BY c.checkpoint_id DESC${limit}`;

/**
 * A framework's session transcripts: entries in the order kept (`seq`), by
 * scope, session and subpath, a uuid once per transcript; a table of its own
 * made by the first entry kept.
 */
const sessionsDdl = (s: string) =>
  `CREATE TABLE IF NOT EXISTS ${s}.session_entries (
  seq bigserial PRIMARY KEY, scope text NOT NULL, session_id text NOT NULL,
  subpath text COLLATE "C" NOT NULL, uuid text, entry text NOT NULL, at bigint NOT NULL);
CREATE INDEX IF NOT EXISTS session_entries_key ON ${s}.session_entries
  (scope, session_id, subpath, seq);
CREATE UNIQUE INDEX IF NOT EXISTS session_entries_uuid ON ${s}.session_entries
  (scope, session_id, subpath, uuid)`;

/** A batch of entries, in its order, a uuid the transcript holds left out: one statement. */
const sessionAppendSql = (s: string) => `
INSERT INTO ${s}.session_entries (scope, session_id, subpath, uuid, entry, at)
SELECT $1, $2, $3, x.e ->> 'uuid', x.e ->> 'entry', $5
FROM json_array_elements($4::text::json) WITH ORDINALITY AS x(e, n)
ORDER BY x.n
ON CONFLICT DO NOTHING`;

/** Bodies no entry names any more (after a run's entries went). */
const journalOrphans = (s: string) =>
  `DELETE FROM ${s}.journal_bodies b WHERE NOT EXISTS
    (SELECT 1 FROM ${s}.journal j WHERE j.body = b.hash)`;

/**
 * A batch of intents and receipts, one row per key: one statement. A row
 * with an input digest carries an intent (kept only while the effect has no
 * receipt); one with `receipt_at`, a receipt.
 */
const effectsSql = (s: string) => `
INSERT INTO ${s}.effects AS e (run_id, key, tool, input_digest, call_id, attempt, at,
  receipt_ok, receipt_result, receipt_truncated, receipt_attempt, receipt_at)
SELECT x.run_id, x.key, x.tool, coalesce(x.input_digest, ''), x.call_id, x.attempt, x.at,
  x.receipt_ok, x.receipt_result, x.receipt_truncated, x.receipt_attempt, x.receipt_at
FROM json_to_recordset($1::text::json) AS x(run_id text, key text, tool text,
  input_digest text, call_id text, attempt integer, at bigint, receipt_ok boolean,
  receipt_result text, receipt_truncated boolean, receipt_attempt integer, receipt_at bigint)
ON CONFLICT (run_id, key) DO UPDATE SET
  tool = excluded.tool,
  input_digest = CASE WHEN excluded.input_digest <> '' AND e.receipt_at IS NULL
    THEN excluded.input_digest ELSE e.input_digest END,
  call_id = CASE WHEN excluded.input_digest <> '' AND e.receipt_at IS NULL
    THEN excluded.call_id ELSE e.call_id END,
  attempt = CASE WHEN excluded.input_digest <> '' AND e.receipt_at IS NULL
    THEN excluded.attempt ELSE e.attempt END,
  at = CASE WHEN excluded.input_digest <> '' AND e.receipt_at IS NULL
    THEN excluded.at ELSE e.at END,
  receipt_ok = coalesce(excluded.receipt_ok, e.receipt_ok),
  receipt_result = CASE WHEN excluded.receipt_at IS NOT NULL
    THEN excluded.receipt_result ELSE e.receipt_result END,
  receipt_truncated = coalesce(excluded.receipt_truncated, e.receipt_truncated),
  receipt_attempt = coalesce(excluded.receipt_attempt, e.receipt_attempt),
  receipt_at = coalesce(excluded.receipt_at, e.receipt_at)`;

/** The rows of {@linkcode effectsSql}: each key's last intent and last receipt of the batch, merged. */
function effectRows(batch: EffectBatch): Record<string, unknown>[] {
  const rows = new Map<string, Record<string, unknown>>();
  const of = (runId: string, key: string, tool: string, attempt: number, at: number) => {
    const k = `${runId}\u0000${key}`;
    let r = rows.get(k);
    if (!r) {
      r = { run_id: runId, key, tool, input_digest: null, attempt, at: Math.round(at) };
      rows.set(k, r);
    }
    return r;
  };
  for (const i of batch.intents) {
    const r = of(i.runId, i.key, i.tool, i.attempt, i.at);
    Object.assign(r, {
      tool: i.tool,
      input_digest: i.inputDigest,
      call_id: i.callId ?? null,
      attempt: i.attempt,
      at: Math.round(i.at),
    });
  }
  for (const c of batch.receipts) {
    const r = of(c.runId, c.key, c.tool, c.attempt, c.at);
    Object.assign(r, {
      receipt_ok: c.ok,
      receipt_result: c.result ?? null,
      receipt_truncated: c.truncated === true,
      receipt_attempt: c.attempt,
      receipt_at: Math.round(c.at),
    });
  }
  return [...rows.values()];
}

/** A PostgreSQL error's code, when it has one. */
const codeOf = (error: unknown) => (error as { code?: string } | undefined)?.code;

/** One batch and the heartbeat: one statement, so one round trip and one commit. */
const writeSql = (s: string) => `
WITH b AS (
  SELECT * FROM json_to_recordset($1::text::json) AS b(run_id text, attempt integer, status text,
    machine text, pid integer, host_start text, started_at bigint, updated_at bigint,
    record json, file_content text, top boolean)
), fenced AS (
  -- Records of attempts a later one took the run from: refused (a fencing token). Few runs
  -- have a fence, so this reads the fences, not the batch.
  SELECT b.run_id, b.attempt, f.attempt AS holder FROM ${s}.run_fences f
  JOIN b ON b.run_id = f.run_id AND f.attempt > b.attempt
), hb AS (
  INSERT INTO ${s}.heartbeats AS h (machine, pid, host_start, at, interval_seconds)
  SELECT * FROM json_to_recordset($2::text::json) AS x(machine text, pid integer, host_start text,
    at bigint, interval_seconds real)
  ON CONFLICT (machine, pid, host_start) DO UPDATE
    SET at = GREATEST(h.at, excluded.at), interval_seconds = excluded.interval_seconds
  RETURNING 1
), older AS (
  UPDATE ${s}.runs o SET newest = false FROM b
  WHERE b.top AND o.run_id = b.run_id AND o.attempt < b.attempt AND o.newest
    AND NOT EXISTS (SELECT 1 FROM b b2 WHERE b2.run_id = o.run_id AND b2.attempt = o.attempt)
  RETURNING 1
), up AS (
  INSERT INTO ${s}.runs AS r (run_id, attempt, newest, status, machine, pid, host_start,
    started_at, updated_at, record, file_content)
  SELECT b.run_id, b.attempt,
    b.top AND NOT EXISTS
      (SELECT 1 FROM ${s}.runs o WHERE o.run_id = b.run_id AND o.attempt > b.attempt),
    b.status, b.machine, b.pid, b.host_start, b.started_at, b.updated_at, b.record::text,
    b.file_content
  FROM b
  WHERE NOT EXISTS (SELECT 1 FROM ${s}.run_fences f WHERE f.run_id = b.run_id AND f.attempt > b.attempt)
  ON CONFLICT (run_id, attempt) DO UPDATE SET
    status = excluded.status, machine = excluded.machine, pid = excluded.pid,
    host_start = excluded.host_start, updated_at = excluded.updated_at, record = excluded.record,
    file_content = COALESCE(excluded.file_content, r.file_content)
  WHERE (r.status = 'live' AND (excluded.status <> 'live' OR excluded.updated_at >= r.updated_at))
    OR (r.status <> 'live' AND excluded.status <> 'live')
  RETURNING 1
)
SELECT (SELECT count(*) FROM up) AS written, (SELECT count(*) FROM hb) AS beats,
  (SELECT count(*) FROM older) AS superseded,
  (SELECT json_agg(json_build_array(run_id, attempt, holder))::text FROM fenced) AS fenced`;

/**
 * The advisory locks held in this database, as the bigint keys they were
 * taken with: one scan of the server's lock table for a whole read.
 */
const HELD = `held AS MATERIALIZED (
  SELECT (l.classid::bigint << 32) | l.objid::bigint AS k FROM pg_locks l
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`;

const selectView = (s: string) =>
  `WITH ${HELD}
  SELECT r.run_id, r.attempt, r.machine, r.pid, r.host_start, r.started_at, r.record, r.status,
    r.updated_at, h.at AS hb_at,
    h.interval_seconds AS hb_interval,
    CASE WHEN r.status = 'live' AND hl.key IS NOT NULL
      THEN NOT EXISTS (SELECT 1 FROM held WHERE held.k = hl.key) END AS lease_free
  FROM ${s}.runs r LEFT JOIN ${s}.heartbeats h
  ON h.machine = r.machine AND h.pid = r.pid AND h.host_start = r.host_start
  LEFT JOIN ${s}.host_leases hl
  ON hl.machine = r.machine AND hl.pid = r.pid AND hl.host_start = r.host_start`;

/**
 * Trees of runs sharing a budget: a table of their own, made by the first run
 * that joins one (as the embedded store does: no schema version for a table
 * most stores never need), under the schema's advisory lock.
 */
const treeDdl = (s: string) => `
CREATE TABLE IF NOT EXISTS ${s}.run_trees (run_id text PRIMARY KEY, root text NOT NULL, parent text);
CREATE INDEX IF NOT EXISTS run_trees_root ON ${s}.run_trees (root);`;

const treeJoinSql = (s: string) =>
  `INSERT INTO ${s}.run_trees (run_id, root, parent) VALUES ($1, $2, $3)
  ON CONFLICT (run_id) DO UPDATE SET root = excluded.root, parent = excluded.parent`;

const treeRowsSql = (s: string) =>
  `SELECT t.run_id, t.parent, r.record, r.status FROM ${s}.run_trees t
  JOIN ${s}.runs r ON r.run_id = t.run_id AND r.newest WHERE t.root = $1`;

/**
 * Admissions to one tree, from any machine, one at a time: each sees the one
 * before. Bounded both ways: a wait for the lock gives up after 2 s (as the
 * main thread's wait for the rows does), and a holder that stalls (its
 * process stopped, its network gone) loses its session after 5 s, so it never
 * holds the tree's other runs back for long.
 */
const TREE_LOCK = `SELECT set_config('lock_timeout', '2000', true),
  set_config('idle_in_transaction_session_timeout', '5000', true),
  pg_advisory_xact_lock(hashtextextended('agent-checkpoint tree ' || $1, 0))`;

/** The record as stored, as text. */
const recordJson = (record: RunRecord): string => JSON.stringify(recordObject(record));

/** The record as stored: without what has a column of its own (a row is rewritten each interval). */
function recordObject(record: RunRecord): Partial<RunRecord> {
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
  return rest;
}

/** A record as a row of the batch. */
function row(record: RunRecord, fileContent: string | undefined): Record<string, unknown> {
  return {
    run_id: record.runId,
    attempt: record.attempt,
    status: record.status,
    machine: record.host.machine,
    pid: record.host.pid,
    host_start: record.host.start,
    started_at: Math.round(record.startedAt),
    updated_at: Math.round(record.updatedAt),
    // Nested, not a string in a string: the batch is serialized once.
    record: recordObject(record),
    file_content: fileContent ?? null,
  };
}

/** What opening a PostgreSQL store needs. */
export interface PgOpenOptions {
  /** The `postgres://` URL (its `schema` parameter names the schema). */
  url: string;
  /** A heartbeat older than this many seconds means its process is gone. */
  hostTimeoutSeconds: number;
  /** The most file content kept per record, KiB. @default {256} */
  fileMaxKb?: number;
  /** Seconds a connection attempt may take. @default {5} */
  connectTimeoutSeconds?: number;
  /**
   * The process whose lease this connection holds (the store thread's): at
   * each connect it takes the process's session lock, which the server lets
   * go when the process dies or the connection ends, and its TCP keepalives
   * are short, so a lost machine is noticed in seconds.
   */
  lease?: HostId;
  /** Told when the lease connection ends (the lease went with it): take it again soon. */
  onLeaseLost?: () => void;
}

/** Seconds without traffic before the lease connection's TCP keepalives start. */
const KEEPALIVE_IDLE_S = 5;
/** How long the server waits on unacknowledged data to a lost machine before it drops it, ms. */
const USER_TIMEOUT_MS = 10_000;

/**
 * The run ledger in PostgreSQL. It connects on first use (one connection),
 * and reconnects by itself after the connection is lost: a method that fails
 * rejects, and the next one tries again.
 */
export class PgRunStore implements RunStore {
  readonly engine = "postgres";
  readonly location: string;
  readonly #target: PgTarget;
  readonly #s: string;
  readonly #timeout: number;
  readonly #fileMaxKb: number;
  readonly #connectTimeout: number;
  #sql: Promise<Sql> | undefined;
  #closed = false;
  readonly #lease: HostId | undefined;
  readonly #onLeaseLost: (() => void) | undefined;
  /** Whether this connection holds the process's lock now. */
  #leased = false;
  /** Records refused since the last {@linkcode PgRunStore.takeFenced}. */
  #fenced: FencedRecord[] = [];
  /** Statements sent, for the benchmark's count of round trips. */
  roundTrips = 0;

  /** {@linkcode RunStore.leases}: the process's lease is held by a connection's session lock. */
  readonly leases: LeasesPort = ((store: PgRunStore): LeasesPort => ({
    takeFenced: () => store.takeFenced(),
    get held() {
      return store.leased;
    },
    renew: () => store.ping(),
  }))(this);
  /** {@linkcode RunStore.effects}. */
  readonly effects: EffectsPort = {
    write: (batch) => this.writeEffects(batch),
    read: (runId) => this.effectsOf(runId),
  };
  /** {@linkcode RunStore.journal}. */
  readonly journal: JournalPort = {
    write: (batch) => this.writeJournal(batch),
    read: (runId) => this.journalOf(runId),
  };
  /** {@linkcode RunStore.checkpoints}. */
  readonly checkpoints: CheckpointsPort = {
    put: (put) => this.putCheckpoint(put),
    putWrites: (writes) => this.putGraphWrites(writes),
    get: async (query) => (await this.graphCheckpoints({ ...query, limit: 1 }))[0],
    list: (query) => this.graphCheckpoints(query),
    deleteThread: (thread) => this.deleteGraphThread(thread),
  };
  /** {@linkcode RunStore.sessions}. */
  readonly sessions: SessionsPort = {
    append: (key, entries) => this.appendSession(key, entries),
    load: (key, last) => this.sessionOf(key, last),
    list: async (scope) =>
      (await this.#sessionRead(
        `SELECT session_id, max(at) AS mtime FROM ${this.#s}.session_entries WHERE scope = $1
          GROUP BY session_id`,
        [scope],
      )).map((r) => ({ sessionId: String(r.session_id), mtime: Number(r.mtime) })),
    delete: async (key) => {
      await this.#makeSessions();
      await this.#query(
        `DELETE FROM ${this.#s}.session_entries WHERE scope = $1 AND session_id = $2${
          key.subpath === "" ? "" : " AND subpath = $3"
        }`,
        key.subpath === "" ? [key.scope, key.sessionId] : [key.scope, key.sessionId, key.subpath],
      );
    },
    subkeys: async (scope, sessionId) =>
      (await this.#sessionRead(
        `SELECT DISTINCT subpath FROM ${this.#s}.session_entries WHERE scope = $1
          AND session_id = $2 AND subpath <> '' ORDER BY subpath`,
        [scope, sessionId],
      )).map((r) => String(r.subpath)),
    pop: async (key) => {
      await this.#makeSessions();
      const s = this.#s;
      // The last entry locked, then removed: a pop at the same time takes the one before.
      const rows = await this.#query(
        `DELETE FROM ${s}.session_entries WHERE seq = (SELECT seq FROM ${s}.session_entries
          WHERE scope = $1 AND session_id = $2 AND subpath = $3 ORDER BY seq DESC LIMIT 1
          FOR UPDATE) RETURNING entry`,
        [key.scope, key.sessionId, key.subpath],
      );
      return rows.length === 0 ? undefined : String(rows[0]!.entry);
    },
  };
  /** {@linkcode RunStore.trees}. */
  readonly trees: TreesPort = {
    list: (query) => this.treeRuns(query),
    read: (root) => this.tree(root),
    join: (runId, root, parent) => this.joinTree(runId, root, parent),
    admit: (root, decide) => this.admit(root, async (rows) => await decide(rows)),
  };
  /** {@linkcode RunStore.files}: the fleet store keeps each attempt's checkpoint file. */
  readonly files: FilesPort = {
    write: (host, files) => this.writeFiles(host, files),
    read: (runId, attempt) => this.fileContent(runId, attempt),
  };

  /** @internal Use {@linkcode openPgStore}. */
  constructor(options: PgOpenOptions) {
    this.#target = pgTarget(options.url);
    this.location = this.#target.location;
    this.#s = `"${this.#target.schema}"`;
    this.#timeout = options.hostTimeoutSeconds;
    this.#fileMaxKb = options.fileMaxKb ?? 256;
    this.#connectTimeout = options.connectTimeoutSeconds ?? 5;
    this.#lease = options.lease;
    this.#onLeaseLost = options.onLeaseLost;
    // The store thread's connection (the one that holds the lease) is made now, while the host
    // sets up, not by its first start: that start then costs one round trip, not a connect.
    if (this.#lease) this.#warm().catch(() => {}); // the first query tries again, and says why
  }

  /** Connect, migrate and take the lease now; what fails is tried again by the next query. */
  async #warm(): Promise<void> {
    const sql = await this.#connection();
    await this.#leaseOn(sql);
  }

  /** Whether this store's connection holds its process's lease now (with `lease` only). */
  get leased(): boolean {
    return this.#leased;
  }

  /** The schema the tables are in. */
  get schema(): string {
    return this.#target.schema;
  }

  #vantage(): Vantage {
    return here(this.#timeout);
  }

  /** The connection, made (and the schema migrated) on first use. */
  #connection(): Promise<Sql> {
    if (this.#closed) return Promise.reject(new Error("the fleet store is closed"));
    this.#sql ??= (async () => {
      const postgres = await loadDriver();
      const connection: Record<string, string> = {
        // Named for its schema, so an operator (or a test) can tell whose connection it is.
        application_name: `agent-checkpoint ${this.#target.schema}`.slice(0, 63),
      };
      if (this.#lease) {
        // The server's side of the lease connection: a machine lost (not only a process killed,
        // whose socket its kernel closes) is noticed in seconds, and the lease let go.
        connection.tcp_keepalives_idle = String(KEEPALIVE_IDLE_S);
        connection.tcp_keepalives_interval = "2";
        connection.tcp_keepalives_count = "3";
        connection.tcp_user_timeout = String(USER_TIMEOUT_MS);
      }
      const sql = postgres(this.#target.url, {
        max: 1,
        onnotice: () => {},
        connect_timeout: this.#connectTimeout,
        idle_timeout: 0,
        max_lifetime: null,
        fetch_types: false,
        keep_alive: this.#lease ? KEEPALIVE_IDLE_S : 60,
        // The driver's own wait before it connects again grows to 20 s by default: bounded, so
        // a server answering again is reached within a second (the store thread's probe).
        backoff: (retries: number) => Math.min(0.5, 3 ** retries / 100),
        // A connection that ended took the lease with it: the next query takes it again.
        onclose: () => {
          const had = this.#leased;
          this.#leased = false;
          if (had && !this.#closed) this.#onLeaseLost?.();
        },
        connection,
      });
      try {
        await this.#migrate(sql);
      } catch (error) {
        // the migration's own error is what the caller is told
        await sql.end({ timeout: 0 }).catch(() => {});
        throw error;
      }
      return sql;
    })().catch((error) => {
      this.#sql = undefined;
      throw error;
    });
    return this.#sql;
  }

  /**
   * One statement. `prepare`: the hot ones (a start, a batch of records, a batch of effects) are
   * parsed and planned once per connection, not at every call.
   */
  async #query(
    text: string,
    params: unknown[] = [],
    prepare = false,
  ): Promise<Record<string, unknown>[]> {
    const sql = await this.#connection();
    await this.#leaseOn(sql);
    this.roundTrips++;
    return await (prepare ? sql.unsafe(text, params, { prepare }) : sql.unsafe(text, params));
  }

  /** A lease being taken: a query sent meanwhile waits for it rather than taking it again. */
  #leasing: Promise<void> | undefined;

  /** Take the lease on `sql` when this store holds one and has it not. */
  async #leaseOn(sql: Sql): Promise<void> {
    if (!this.#lease || this.#leased) return;
    const lease = this.#lease;
    this.#leasing ??= this.#takeLease(sql, lease).finally(() => {
      this.#leasing = undefined;
    });
    await this.#leasing;
  }

  /**
   * Take the process's lease on this connection: its row (the lock's key)
   * and the session lock, in one statement. The lock is a shared one: every
   * store connection of the process (several keepers, a connection lost that
   * the server has not yet seen go) may hold it, and the lease is free once
   * none does. Should it not be granted, it is tried again at the next query.
   */
  async #takeLease(sql: Sql, host: HostId): Promise<void> {
    this.roundTrips++;
    const rows = await sql.unsafe(
      `WITH k AS (SELECT hashtextextended($1, 0) AS key), up AS (
        INSERT INTO ${this.#s}.host_leases (machine, pid, host_start, key)
        SELECT $2, $3::integer, $4, key FROM k
        ON CONFLICT (machine, pid, host_start) DO UPDATE SET key = excluded.key RETURNING 1
      ) SELECT pg_try_advisory_lock_shared((SELECT key FROM k)) AS ok, (SELECT count(*) FROM up) AS n`,
      [leaseName(host), host.machine, String(host.pid), host.start],
    );
    this.#leased = rows[0]?.ok === true;
  }

  /** The records refused since the last call: their attempt lost the run to a later one. */
  takeFenced(): FencedRecord[] {
    const out = this.#fenced;
    if (out.length > 0) this.#fenced = [];
    return out;
  }

  /** Create the tables, or bring an older schema up to this one, once, whoever gets there first. */
  async #migrate(sql: Sql): Promise<void> {
    const s = this.#s;
    try {
      const rows = await sql.unsafe(`SELECT value FROM ${s}.meta WHERE key = 'schema'`);
      const known = Number(rows[0]?.value ?? 0);
      if (known === PG_SCHEMA_VERSION) return;
      if (known > PG_SCHEMA_VERSION) throw this.#newer(known);
    } catch (error) {
      // 42P01: no such table; 3F000: no such schema. Anything else is a real failure.
      const code = (error as { code?: string }).code;
      if (code !== "42P01" && code !== "3F000") throw error;
    }
    await sql.begin(async (tx) => {
      // One process at a time creates or migrates the schema; the others find it done.
      await tx.unsafe(
        `SELECT pg_advisory_xact_lock(hashtextextended('agent-checkpoint schema', 0))`,
      );
      await tx.unsafe(`CREATE SCHEMA IF NOT EXISTS ${s}`);
      await tx.unsafe(
        `CREATE TABLE IF NOT EXISTS ${s}.meta (key text PRIMARY KEY, value text NOT NULL)`,
      );
      const rows = await tx.unsafe(`SELECT value FROM ${s}.meta WHERE key = 'schema'`);
      const known = Number(rows[0]?.value ?? 0);
      if (known === PG_SCHEMA_VERSION) return;
      if (known > PG_SCHEMA_VERSION) throw this.#newer(known);
      await tx.unsafe(ddl(s));
      await tx.unsafe(
        `INSERT INTO ${s}.meta (key, value) VALUES ('schema', $1)
          ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
        [String(PG_SCHEMA_VERSION)],
      );
    });
  }

  #newer(version: number): Error {
    return new Error(
      `${this.location} has schema version ${version}, newer than this library's ${PG_SCHEMA_VERSION}; upgrade agent-checkpoint`,
    );
  }

  #view(r: Record<string, unknown>, vantage: Vantage): RunView {
    const record = JSON.parse(String(r.record)) as RunRecord;
    record.runId = String(r.run_id);
    record.host = { machine: String(r.machine), pid: Number(r.pid), start: String(r.host_start) };
    record.startedAt = Number(r.started_at);
    // The columns are the truth: the attempt a start was given, an end written over a record.
    record.attempt = Number(r.attempt);
    record.status = String(r.status) as RunRecord["status"];
    record.updatedAt = Number(r.updated_at);
    const view: RunView = { record, state: "live" };
    if (r.hb_at !== null && r.hb_at !== undefined) {
      view.heartbeat = {
        host: record.host,
        at: Number(r.hb_at),
        intervalSeconds: Number(r.hb_interval),
      };
    }
    if (r.lease_free === true) view.lease = "free";
    else if (r.lease_free === false) view.lease = "held";
    view.state = runState(record, view.heartbeat, vantage, view.lease);
    return view;
  }

  /**
   * Write a batch of records and the heartbeat in one statement. A record's
   * `fileContent`, when given, is kept (cut to `store_file_max_kb`); when not,
   * the content stored before stays.
   */
  async write(batch: WriteBatch): Promise<void> {
    if (batch.records.length === 0 && !batch.heartbeat) return;
    const [out] = await this.#query(writeSql(this.#s), this.#writeParams(batch), true);
    this.#noteFenced(out);
  }

  /** A batch as the write statement's two parameters. */
  #writeParams(batch: WriteBatch): [string, string] {
    // One row per run and attempt: the newest wins.
    const byKey = new Map<string, RunRecord>();
    for (const r of batch.records) {
      const k = `${r.attempt}\u0000${r.runId}`;
      const known = byKey.get(k);
      if (known && known.status !== "live" && r.status === "live") continue; // an end stays
      // A newer live record stays too, whichever came later in the batch.
      if (known?.status === "live" && r.status === "live" && r.updatedAt < known.updatedAt) {
        continue;
      }
      byKey.delete(k);
      byKey.set(k, r);
    }
    // Whether a record is its run's newest attempt in the batch, worked out here: once, not per row.
    const top = new Map<string, number>();
    for (const r of byKey.values()) top.set(r.runId, Math.max(top.get(r.runId) ?? 0, r.attempt));
    const rows = [...byKey.values()].map((r) => ({
      ...row(
        r,
        r.fileContent === undefined ? undefined : boundContent(r.fileContent, this.#fileMaxKb),
      ),
      top: top.get(r.runId) === r.attempt,
    }));
    const beats = batch.heartbeat ? [heartbeatRow(batch.heartbeat)] : [];
    return [JSON.stringify(rows), JSON.stringify(beats)];
  }

  /** The records a write's statement refused (their attempt lost the run), kept to be said. */
  #noteFenced(out: Record<string, unknown> | undefined): void {
    if (typeof out?.fenced === "string" && this.#fenced.length < 1000) {
      for (const [runId, attempt, holder] of JSON.parse(out.fenced) as [string, number, number][]) {
        this.#fenced.push({ runId, attempt, holder });
      }
    }
  }

  /** Whether this connection made the trees' table (or found it). */
  #treesMade = false;

  /** Record that a run sits in a tree (the table is made by the first run that does). */
  async joinTree(runId: string, root: string, parent: string | undefined): Promise<void> {
    const sql = await this.#connection();
    await this.#makeTrees(sql);
    this.roundTrips++;
    await sql.unsafe(treeJoinSql(this.#s), [runId, root, parent ?? null]);
  }

  /** The trees' table, made once per store (one process at a time, under the schema's lock). */
  async #makeTrees(sql: Sql): Promise<void> {
    if (this.#treesMade) return;
    await sql.begin(async (tx) => {
      this.roundTrips += 2;
      await tx.unsafe(
        `SELECT pg_advisory_xact_lock(hashtextextended('agent-checkpoint schema', 0))`,
      );
      await tx.unsafe(treeDdl(this.#s));
    });
    this.#treesMade = true;
  }

  /**
   * The newest attempt of every run in the tree rooted at `root`, as trees of
   * runs sharing a budget count it: each run's own use, caps and parent.
   */
  async tree(root: string): Promise<TreeRow[]> {
    return this.#treeRows(await this.#connection(), root);
  }

  async #treeRows(sql: Sql, root: string): Promise<TreeRow[]> {
    let rows: Record<string, unknown>[];
    try {
      this.roundTrips++;
      rows = await sql.unsafe(treeRowsSql(this.#s), [root]);
    } catch (error) {
      // 42P01: no such table: no run of this store is in a tree.
      if ((error as { code?: string }).code === "42P01") return [];
      throw error;
    }
    const now = Date.now();
    return rows.map((r) => treeRowOf(r, now));
  }

  /**
   * Look at a tree and write the record `decide` makes of it, in one
   * transaction that holds the tree's lock: admissions to one tree, from any
   * machine, follow one another, each seeing what the one before reserved.
   */
  async admit(
    root: string,
    decide: (rows: TreeRow[]) => Promise<RunRecord | undefined>,
  ): Promise<void> {
    const sql = await this.#connection();
    await this.#makeTrees(sql); // a missing table would abort the transaction
    await sql.begin(async (tx) => {
      this.roundTrips++;
      await tx.unsafe(TREE_LOCK, [root]);
      // A statement of its own after the lock: its snapshot sees what the one before committed.
      const record = await decide(await this.#treeRows(tx, root));
      if (record) {
        this.roundTrips++;
        const [out] = await tx.unsafe(writeSql(this.#s), this.#writeParams({ records: [record] }));
        this.#noteFenced(out);
      }
    });
  }

  /** One round trip that only tells whether the database answers (connecting when needed). */
  async ping(): Promise<void> {
    await this.#query("SELECT 1");
  }

  /**
   * Keep the content of the checkpoint files of runs of the process `host`:
   * each goes to the newest record of its run id that this process wrote. One
   * statement.
   */
  async writeFiles(
    host: Heartbeat["host"],
    files: { runId: string; content: string }[],
  ): Promise<void> {
    if (files.length === 0) return;
    const rows = files.map((f) => ({
      run_id: f.runId,
      file_content: boundContent(f.content, this.#fileMaxKb),
    }));
    await this.#query(
      `UPDATE ${this.#s}.runs r SET file_content = f.file_content
        FROM json_to_recordset($1::text::json) AS f(run_id text, file_content text)
        WHERE r.run_id = f.run_id AND r.newest AND r.machine = $2 AND r.pid = $3
        AND r.host_start = $4`,
      [JSON.stringify(rows), host.machine, String(host.pid), host.start],
    );
  }

  /**
   * Record the start of a new attempt: one call of the schema's function,
   * which takes a lock on the run id, so concurrent starts anywhere get
   * distinct numbers. `previous` carries the earlier attempt's file content.
   */
  async startAttempt(record: RunRecord, options?: StartOptions): Promise<AttemptStart> {
    const vantage = this.#vantage();
    const p: Record<string, unknown> = {
      run_id: record.runId,
      min: Math.max(1, Math.floor(options?.minAttempt ?? 1)),
      fresh: options?.fresh === true,
      on_duplicate: options?.onDuplicate ?? "warn",
      stale_before: Math.round(vantage.now - vantage.hostTimeoutSeconds * 1000),
      machine: record.host.machine,
      pid: record.host.pid,
      host_start: record.host.start,
      started_at: Math.round(record.startedAt),
      updated_at: Math.round(record.updatedAt),
      record: recordJson(record),
    };
    if (options?.heartbeat) {
      p.hb_at = Math.round(options.heartbeat.at);
      p.hb_interval = options.heartbeat.intervalSeconds;
    }
    const rows = await this.#query(
      `SELECT * FROM ${this.#s}.start_attempt($1::text::json)`,
      [JSON.stringify(p)],
      true,
    );
    const r = rows[0];
    if (!r) throw new Error("the fleet store's start_attempt returned no row");
    const out: AttemptStart = { attempt: Number(r.o_attempt) };
    if (r.o_record !== null && r.o_record !== undefined) {
      const view = this.#view({
        run_id: record.runId,
        machine: r.o_machine,
        pid: r.o_pid,
        host_start: r.o_host_start,
        started_at: r.o_started_at,
        attempt: r.o_prev_attempt,
        record: r.o_record,
        status: r.o_status,
        updated_at: r.o_updated_at,
        hb_at: r.o_hb_at,
        hb_interval: r.o_hb_interval,
        lease_free: r.o_status === "live" ? r.o_lease_free : null,
      }, vantage);
      if (typeof r.o_file === "string") view.record.fileContent = r.o_file;
      out.previous = view;
      // A run id started afresh (resume off) owes nothing to the earlier run's effects.
      if (options?.fresh) {
        await this.#query(`DELETE FROM ${this.#s}.effects WHERE run_id = $1`, [record.runId])
          .catch((error) => {
            if (codeOf(error) !== "42P01") throw error;
          });
        await this.#query(`DELETE FROM ${this.#s}.journal WHERE run_id = $1`, [record.runId])
          .then(() => this.#query(journalOrphans(this.#s)))
          .catch((error) => {
            if (codeOf(error) !== "42P01") throw error;
          });
      }
    }
    if (r.o_refused === true) out.refused = true;
    if (r.o_fenced === true) out.fenced = true;
    return out;
  }

  /** Whether this store made (or found) the effects table. */
  #effectsMade = false;

  /**
   * Write intents and receipts in one statement (one round trip, one
   * commit); the effects table is made by the first write.
   */
  async writeEffects(batch: EffectBatch): Promise<void> {
    const rows = effectRows(batch);
    if (rows.length === 0) return;
    if (!this.#effectsMade) {
      try {
        await this.#query(effectsDdl(this.#s));
      } catch (error) {
        // Made by another process at the same moment.
        if (codeOf(error) !== "42P07" && codeOf(error) !== "23505") throw error;
      }
      this.#effectsMade = true;
    }
    await this.#query(effectsSql(this.#s), [JSON.stringify(rows)], true);
  }

  /** Bodies this store gave back, which its next journal write need not keep again. */
  readonly #seen = new StoredBodies();
  /** Whether this store made (or found) the journal's tables. */
  #journalMade = false;

  /**
   * Write journal entries and their bodies (compressed, once by content) in
   * one statement; the tables are made by the first write.
   */
  async writeJournal(batch: JournalBatch): Promise<void> {
    if (batch.entries.length === 0) return;
    if (!this.#journalMade) {
      const sql = await this.#connection();
      await sql.begin(async (tx) => {
        this.roundTrips += 2;
        await tx.unsafe(
          `SELECT pg_advisory_xact_lock(hashtextextended('agent-checkpoint schema', 0))`,
        );
        await tx.unsafe(journalDdl(this.#s));
      });
      this.#journalMade = true;
    }
    const bodies = new Map<string, string>();
    const rows = batch.entries.map((e) => {
      // A replayed call's body, read from this store, is kept there already.
      const known = this.#seen.take(e.body);
      const hash = known ?? bodyKey(e.body);
      if (known === undefined) bodies.set(hash, e.body);
      return {
        run_id: e.runId,
        attempt: e.attempt,
        kind: e.kind,
        idx: e.index,
        key: e.key,
        tool: e.tool ?? null,
        body: hash,
        usage: e.usage ?? null,
        at: Math.round(e.at),
        replayed: e.replayed ?? null,
        ms: e.ms === undefined ? null : Math.round(e.ms),
      };
    });
    const packed = [...bodies].map(([hash, text]) => ({
      hash,
      packed: Buffer.from(packBody(text)).toString("base64"),
    }));
    await this.#query(journalSql(this.#s), [JSON.stringify(packed), JSON.stringify(rows)], true);
  }

  /** The journal of a run id, every attempt's: by attempt, kind, index. */
  async journalOf(runId: string): Promise<JournalEntry[]> {
    try {
      const rows = await this.#query(
        `SELECT j.*, encode(b.packed, 'base64') AS packed FROM ${this.#s}.journal j
          JOIN ${this.#s}.journal_bodies b ON b.hash = j.body
          WHERE j.run_id = $1 ORDER BY j.attempt, j.kind, j.idx`,
        [runId],
      );
      return rows.map((row) =>
        journalOf(row, unpackBody(Buffer.from(String(row.packed), "base64")), this.#seen)
      );
    } catch (error) {
      if (codeOf(error) === "42P01") return []; // no entry was ever journaled here
      throw error;
    }
  }

  /** Whether this store made (or found) the graph checkpoints' tables. */
  #graphMade = false;

  /** The graph checkpoints' tables, made once per store (one process at a time, under the schema's lock). */
  async #makeGraph(): Promise<void> {
    if (this.#graphMade) return;
    const sql = await this.#connection();
    await sql.begin(async (tx) => {
      this.roundTrips += 2;
      await tx.unsafe(
        `SELECT pg_advisory_xact_lock(hashtextextended('agent-checkpoint schema', 0))`,
      );
      await tx.unsafe(graphDdl(this.#s));
    });
    this.#graphMade = true;
  }

  /** Keep a graph checkpoint and the channel values it brings: one statement. */
  async putCheckpoint(put: GraphCheckpointPut): Promise<void> {
    await this.#makeGraph();
    const b64 = (bytes: Uint8Array) =>
      Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
    const values = put.values.map((v) => ({
      channel: v.channel,
      version: v.version,
      type: v.type,
      blob: v.bytes === undefined ? null : b64(v.bytes),
    }));
    await this.#query(graphPutSql(this.#s), [
      put.thread,
      put.ns,
      JSON.stringify(values),
      put.id,
      put.parent ?? null,
      put.checkpoint.type,
      b64(put.checkpoint.bytes),
      put.metadata.type,
      b64(put.metadata.bytes),
      JSON.stringify(put.versions),
    ], true);
  }

  /** Keep a task's pending writes on a graph checkpoint: one statement. */
  async putGraphWrites(batch: GraphWrites): Promise<void> {
    if (batch.writes.length === 0) return;
    await this.#makeGraph();
    const rows = writesOnce(batch.writes).map((w) => ({
      task_id: w.taskId,
      idx: w.index,
      channel: w.channel,
      type: w.type,
      blob: Buffer.from(w.bytes.buffer, w.bytes.byteOffset, w.bytes.byteLength).toString("base64"),
      task_path: w.taskPath,
    }));
    await this.#query(
      graphWritesSql(this.#s),
      [batch.thread, batch.ns, batch.id, JSON.stringify(rows)],
      true,
    );
  }

  /** Graph checkpoints, the newest first, with their values and pending writes: one statement. */
  async graphCheckpoints(query: GraphCheckpointQuery): Promise<GraphCheckpointRow[]> {
    const where: string[] = [];
    const params: unknown[] = [];
    const when = (clause: string, value: string | undefined) => {
      if (value === undefined) return;
      params.push(value);
      where.push(`${clause} $${params.length}`);
    };
    when("c.thread_id =", query.thread);
    when("c.ns =", query.ns);
    when("c.checkpoint_id =", query.id);
    when("c.checkpoint_id <", query.before);
    const limit = query.limit === undefined ? "" : ` LIMIT ${Math.max(0, Math.floor(query.limit))}`;
    let rows: Record<string, unknown>[];
    try {
      rows = await this.#query(
        graphReadSql(this.#s, where.length > 0 ? `WHERE ${where.join(" AND ")}` : "", limit),
        params,
      );
    } catch (error) {
      if (codeOf(error) === "42P01") return []; // no checkpoint was ever kept here
      throw error;
    }
    const bytes = (b64: string) => new Uint8Array(Buffer.from(b64, "base64"));
    return rows.map((row) => {
      const values = (JSON.parse(String(row.vals ?? "[]")) as (string | null)[][]).map(
        ([channel, version, type, blob]): GraphChannelValue => {
          const value = { channel: String(channel), version: String(version), type: String(type) };
          return blob === null || blob === undefined ? value : { ...value, bytes: bytes(blob) };
        },
      );
      const writes = (JSON.parse(String(row.writes ?? "[]")) as [
        string,
        number,
        string,
        string,
        string,
        string,
      ][]).map(([taskId, index, channel, type, blob, taskPath]): GraphWrite => ({
        taskId,
        index: Number(index),
        channel,
        type,
        bytes: bytes(blob),
        taskPath,
      }));
      return checkpointOf(
        {
          ...row,
          checkpoint: bytes(String(row.checkpoint)),
          metadata: bytes(String(row.metadata)),
        },
        values,
        writes,
      );
    });
  }

  /** Remove a thread's graph checkpoints, values and writes: one statement, one commit. */
  async deleteGraphThread(thread: string): Promise<void> {
    await this.#makeGraph();
    const s = this.#s;
    await this.#query(
      `WITH a AS (DELETE FROM ${s}.graph_values WHERE thread_id = $1 RETURNING 1),
        b AS (DELETE FROM ${s}.graph_writes WHERE thread_id = $1 RETURNING 1)
        DELETE FROM ${s}.graph_checkpoints WHERE thread_id = $1`,
      [thread],
    );
  }

  /** Whether this store made (or found) the session transcripts' table. */
  #sessionsMade = false;

  /** The session transcripts' table, made once per store (under the schema's lock). */
  async #makeSessions(): Promise<void> {
    if (this.#sessionsMade) return;
    const sql = await this.#connection();
    await sql.begin(async (tx) => {
      this.roundTrips += 2;
      await tx.unsafe(
        `SELECT pg_advisory_xact_lock(hashtextextended('agent-checkpoint schema', 0))`,
      );
      await tx.unsafe(sessionsDdl(this.#s));
    });
    this.#sessionsMade = true;
  }

  /** A read of session transcripts; none when no entry was ever kept here. */
  async #sessionRead(text: string, params: unknown[]): Promise<Record<string, unknown>[]> {
    try {
      return await this.#query(text, params);
    } catch (error) {
      if (codeOf(error) === "42P01") return [];
      throw error;
    }
  }

  /** Keep entries at the end of a session transcript: one statement, one commit. */
  async appendSession(key: SessionPath, entries: SessionEntry[]): Promise<void> {
    if (entries.length === 0) return;
    await this.#makeSessions();
    await this.#query(sessionAppendSql(this.#s), [
      key.scope,
      key.sessionId,
      key.subpath,
      JSON.stringify(entries.map((e) => ({ uuid: e.uuid ?? null, entry: e.json }))),
      Date.now(),
    ], true);
  }

  /** A session transcript's entries in order (the last `last` when given); null when none. */
  async sessionOf(key: SessionPath, last?: number): Promise<string[] | null> {
    const s = this.#s;
    const params: unknown[] = [key.scope, key.sessionId, key.subpath];
    const where = "scope = $1 AND session_id = $2 AND subpath = $3";
    let text = `SELECT entry FROM ${s}.session_entries WHERE ${where} ORDER BY seq`;
    if (last !== undefined) {
      params.push(Math.max(0, Math.floor(last)));
      text = `SELECT entry FROM (SELECT seq, entry FROM ${s}.session_entries WHERE ${where}
        ORDER BY seq DESC LIMIT $4) x ORDER BY seq`;
    }
    const rows = await this.#sessionRead(text, params);
    if (rows.length === 0) {
      // Only a transcript that holds no entry at all reads as null, not a `last` of 0.
      return last === undefined || last > 0 || (await this.sessionOf(key)) === null ? null : [];
    }
    return rows.map((r) => String(r.entry));
  }

  /** The effects recorded for a run id, every attempt's, the oldest first. */
  async effectsOf(runId: string): Promise<EffectRow[]> {
    try {
      const rows = await this.#query(
        `SELECT * FROM ${this.#s}.effects WHERE run_id = $1 ORDER BY at, key`,
        [runId],
      );
      return rows.map(effectOf);
    } catch (error) {
      if (codeOf(error) === "42P01") return []; // no effect was ever recorded here
      throw error;
    }
  }

  async latest(runId: string): Promise<RunView | undefined> {
    const rows = await this.#query(
      `${selectView(this.#s)} WHERE r.run_id = $1 ORDER BY r.newest DESC, r.attempt DESC LIMIT 1`,
      [runId],
    );
    return rows[0] ? this.#view(rows[0], this.#vantage()) : undefined;
  }

  /** The file content the store keeps for a run's attempt, when any. */
  async fileContent(runId: string, attempt: number): Promise<string | undefined> {
    const rows = await this.#query(
      `SELECT file_content FROM ${this.#s}.runs WHERE run_id = $1 AND attempt = $2`,
      [runId, String(attempt)],
    );
    const content = rows[0]?.file_content;
    return typeof content === "string" ? content : undefined;
  }

  async list(query: ListQuery = {}): Promise<RunView[]> {
    const where: string[] = [];
    const params: unknown[] = [];
    const param = (v: unknown) => {
      params.push(v);
      return `$${params.length}`;
    };
    if (query.earlierOf !== undefined) {
      where.push(`r.run_id IN (${query.earlierOf.map(param).join(", ") || "NULL"})`);
      where.push("NOT r.newest");
    } else if (query.runId !== undefined) where.push(`r.run_id = ${param(query.runId)}`);
    else where.push("r.newest");
    if (query.since !== undefined) {
      where.push(`r.updated_at >= ${param(String(Math.floor(query.since)))}`);
    }
    if (query.machine !== undefined) where.push(`r.machine = ${param(query.machine)}`);
    if (query.state === "ended") where.push("r.status <> 'live'");
    else if (query.state !== undefined) where.push("r.status = 'live'");
    const limit = Math.max(0, Math.floor(query.limit ?? 1000));
    const vantage = this.#vantage();
    const out: RunView[] = [];
    if (limit === 0) return out;
    // Live rows are filtered by state after reading: read on in pages until the limit is met.
    const page = Math.max(limit, 100);
    let offset = 0;
    for (;;) {
      const rows = await this.#query(
        `${selectView(this.#s)} WHERE ${where.join(" AND ")}
          ORDER BY r.started_at DESC LIMIT ${page} OFFSET ${offset}`,
        params,
      );
      for (const r of rows) {
        const view = this.#view(r, vantage);
        if (query.state === undefined || view.state === query.state) out.push(view);
        if (out.length >= limit) return out;
      }
      if (rows.length < page) return out;
      offset += page;
    }
  }

  /** {@linkcode TreesPort.list}. */
  async treeRuns(query: TreeQuery = {}): Promise<RunView[]> {
    const limit = Math.max(0, Math.floor(query.limit ?? 1000));
    const params = query.root === undefined ? [] : [query.root];
    let rows: Record<string, unknown>[];
    try {
      rows = await this.#query(
        `${selectView(this.#s)} JOIN ${this.#s}.run_trees t ON t.run_id = r.run_id AND r.newest
          ${query.root === undefined ? "" : "WHERE t.root = $1"}
          ORDER BY r.started_at DESC LIMIT ${limit}`,
        params,
      );
    } catch (error) {
      if ((error as { code?: string }).code === "42P01") return []; // no run is in a tree
      throw error;
    }
    const vantage = this.#vantage();
    return rows.map((r) => this.#view(r, vantage));
  }

  async summary(query: SummaryQuery = {}): Promise<StoreSummary> {
    const vantage = this.#vantage();
    const where = ["r.newest"];
    const params: unknown[] = [String(vantage.now - vantage.hostTimeoutSeconds * 1000)];
    if (query.since !== undefined) {
      params.push(String(Math.floor(query.since)));
      where.push(`r.updated_at >= $${params.length}`);
    }
    if (query.machine !== undefined) {
      params.push(query.machine);
      where.push(`r.machine = $${params.length}`);
    }
    // One round trip: ended runs counted by machine and status; live ones by process, with
    // how many were heard of within the timeout (the rest are cut off).
    const rows = await this.#query(
      `SELECT r.machine, r.status, NULL::integer AS pid, NULL::text AS host_start,
          count(*) AS n, 0::bigint AS fresh,
          NULL::boolean AS lease_free
        FROM ${this.#s}.runs r WHERE ${where.join(" AND ")} AND r.status <> 'live'
        GROUP BY r.machine, r.status
      UNION ALL
      SELECT r.machine, 'live', r.pid, r.host_start, count(*) AS n,
          count(*) FILTER (WHERE GREATEST(COALESCE(h.at, 0), r.updated_at) >= $1::bigint) AS fresh,
          ${this.#s}.lease_free(hl.key) AS lease_free
        FROM ${this.#s}.runs r LEFT JOIN ${this.#s}.heartbeats h
        ON h.machine = r.machine AND h.pid = r.pid AND h.host_start = r.host_start
        LEFT JOIN ${this.#s}.host_leases hl
        ON hl.machine = r.machine AND hl.pid = r.pid AND hl.host_start = r.host_start
        WHERE ${where.join(" AND ")} AND r.status = 'live'
        GROUP BY r.machine, r.pid, r.host_start, hl.key`,
      params,
    );
    const out: StoreSummary = {
      total: 0,
      byState: { live: 0, ended: 0, "cut-off": 0 },
      byEnd: {},
      byMachine: {},
    };
    const count = (machine: string, state: RunState, n: number) => {
      if (n === 0) return;
      out.total += n;
      out.byState[state] += n;
      const m = out.byMachine[machine] ??= { live: 0, ended: 0, "cut-off": 0 };
      m[state] += n;
    };
    for (const r of rows) {
      const machine = String(r.machine);
      const n = Number(r.n);
      if (r.status !== "live") {
        count(machine, "ended", n);
        const status = String(r.status) as EndStatus;
        out.byEnd[status] = (out.byEnd[status] ?? 0) + n;
        continue;
      }
      // The process's own state, as runState decides it for a record heard of just now.
      const host = { machine, pid: Number(r.pid), start: String(r.host_start) };
      const gone = runState({ status: "live", host, updatedAt: vantage.now }, undefined, vantage);
      // Its lease free (the server saw its connection end): every run of it is cut off.
      const fresh = gone === "cut-off" || r.lease_free === true ? 0 : Number(r.fresh);
      count(machine, "live", fresh);
      count(machine, "cut-off", n - fresh);
    }
    // The model use of the runs that reported any (their records are the only ones parsed).
    const usageWhere = ["r.newest", `r.record LIKE '%"usage":{%'`];
    const usageParams: unknown[] = [];
    if (query.since !== undefined) {
      usageParams.push(String(Math.floor(query.since)));
      usageWhere.push(`r.updated_at >= $${usageParams.length}`);
    }
    if (query.machine !== undefined) {
      usageParams.push(query.machine);
      usageWhere.push(`r.machine = $${usageParams.length}`);
    }
    const [used] = !query.usage ? [] : await this.#query(
      `SELECT count(*) AS runs,
          COALESCE(sum((u->>'inputTokens')::float8), 0) AS input,
          COALESCE(sum((u->>'outputTokens')::float8), 0) AS output,
          COALESCE(sum((u->>'usd')::float8) FILTER (WHERE u->'unpriced' IS NULL), 0) AS usd,
          count(u->'usd') FILTER (WHERE u->'unpriced' IS NULL) AS usd_runs
        FROM (SELECT (r.record::jsonb)->'usage' AS u FROM ${this.#s}.runs r
          WHERE ${usageWhere.join(" AND ")}) used
        WHERE jsonb_typeof(u) = 'object'`,
      usageParams,
    );
    if (used && Number(used.runs) > 0) {
      out.usage = {
        runs: Number(used.runs),
        inputTokens: Number(used.input),
        outputTokens: Number(used.output),
        usd: Number(used.usd),
        usdRuns: Number(used.usd_runs),
      };
    }
    return out;
  }

  async prune(before: number, limit: number): Promise<number> {
    const n = Math.max(0, Math.floor(limit));
    if (n === 0) return 0;
    const s = this.#s;
    // Every attempt of a run whose newest ended goes with it; a live run's older ones stay.
    const rows = await this.#query(
      `WITH doomed AS (
        SELECT run_id, attempt FROM ${s}.runs
        WHERE status <> 'live' AND started_at < $1::bigint AND updated_at < $1::bigint
        ORDER BY updated_at LIMIT ${n}
      ), gone AS (
        DELETE FROM ${s}.runs r USING doomed d
        WHERE r.run_id = d.run_id AND r.attempt <= d.attempt
          AND NOT EXISTS (SELECT 1 FROM ${s}.runs l WHERE l.run_id = r.run_id AND l.status = 'live')
        RETURNING 1
      ), beats AS (
        DELETE FROM ${s}.heartbeats h WHERE h.at < $1::bigint AND NOT EXISTS (
          SELECT 1 FROM ${s}.runs r WHERE r.machine = h.machine AND r.pid = h.pid
          AND r.host_start = h.host_start)
        RETURNING 1
      ), leases AS (
        -- Leases of processes gone (their lock free) that no record names any more.
        DELETE FROM ${s}.host_leases hl WHERE ${s}.lease_free(hl.key) AND NOT EXISTS (
          SELECT 1 FROM ${s}.runs r WHERE r.machine = hl.machine AND r.pid = hl.pid
          AND r.host_start = hl.host_start)
        RETURNING 1
      ), fences AS (
        DELETE FROM ${s}.run_fences f
        WHERE NOT EXISTS (SELECT 1 FROM ${s}.runs r WHERE r.run_id = f.run_id)
        RETURNING 1
      )
      SELECT (SELECT count(*) FROM doomed) AS n, (SELECT count(*) FROM gone) AS g,
        (SELECT count(*) FROM beats) AS b, (SELECT count(*) FROM leases) AS l,
        (SELECT count(*) FROM fences) AS f`,
      [String(Math.floor(before))],
    );
    const pruned = Number(rows[0]?.n ?? 0);
    if (pruned > 0) {
      // Runs gone from the ledger take their effects with them.
      await this.#query(
        `DELETE FROM ${s}.effects e WHERE NOT EXISTS
          (SELECT 1 FROM ${s}.runs r WHERE r.run_id = e.run_id)`,
      ).catch((error) => {
        if (codeOf(error) !== "42P01") throw error;
      });
      await this.#query(
        `DELETE FROM ${s}.journal j WHERE NOT EXISTS
          (SELECT 1 FROM ${s}.runs r WHERE r.run_id = j.run_id)`,
      ).then(() => this.#query(journalOrphans(s))).catch((error) => {
        if (codeOf(error) !== "42P01") throw error;
      });
    }
    return pruned;
  }

  async close(): Promise<void> {
    this.#closed = true;
    const sql = this.#sql;
    this.#sql = undefined;
    // a connection that never opened has nothing to end
    if (sql) await (await sql.catch(() => undefined))?.end({ timeout: 1 });
  }
}

/** The text a process's lease key is made of (hashed by the server). */
const leaseName = (host: HostId) =>
  `agent-checkpoint host ${host.machine}\t${host.pid}\t${host.start}`;

function heartbeatRow(heartbeat: Heartbeat): Record<string, unknown> {
  return {
    machine: heartbeat.host.machine,
    pid: heartbeat.host.pid,
    host_start: heartbeat.host.start,
    at: Math.round(heartbeat.at),
    interval_seconds: heartbeat.intervalSeconds,
  };
}

/**
 * Open the fleet store at a `postgres://` URL. Nothing goes over the network
 * until the first method call, which connects and creates or migrates the
 * schema. Throws only on a URL that cannot be read.
 *
 * @param options The URL, the heartbeat timeout and the file content bound.
 * @returns The store.
 *
 * @example
 * ```ts
 * import { openPgStore } from "./postgres.ts";
 * import assert from "node:assert/strict";
 *
 * const store = openPgStore({ url: "postgres://u:pw@db.internal/fleet", hostTimeoutSeconds: 30 });
 * assert.equal(store.engine, "postgres");
 * assert.equal(store.location, "postgres://u:***@db.internal/fleet");
 * await store.close();
 * ```
 */
export function openPgStore(options: PgOpenOptions): PgRunStore {
  return new PgRunStore(options);
}

/**
 * The PostgreSQL backend, as the store's bridge opens it on its thread.
 *
 * @example
 * ```ts
 * import { backend } from "./postgres.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(backend.accepts("postgres://db.internal/fleet"), true);
 * assert.equal(backend.locate("postgres://u:pw@db/fleet"), "postgres://u:***@db/fleet");
 * ```
 */
export const backend: Backend = {
  engine: "postgres",
  module: import.meta.url,
  accepts: isPostgresUrl,
  locate: (url) => pgTarget(url).location,
  open: (options, lease) =>
    openPgStore(
      lease ? { ...options, lease: lease.host, onLeaseLost: () => lease.lost() } : options,
    ),
};
