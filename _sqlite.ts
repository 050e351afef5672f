/**
 * The one SQLite interface the library needs, over `node:sqlite` (Deno, Node
 * 22.5 and later) or the optional `better-sqlite3` package (Node 20).
 * Loading is synchronous so that cap discovery can run inside `startRun`.
 *
 * Databases the library does not own (the kanban board, `state.db`) are read
 * with {@linkcode selectOne}, which never writes to them, never waits on a
 * lock and never blocks on a file that is not a regular one.
 *
 * @module
 */
import * as fs from "node:fs";
import process from "node:process";
import { Buffer } from "node:buffer";
import { createRequire } from "node:module";

/** An open database. */
export interface SqliteDb {
  /** The first row of a query, or undefined. */
  get(sql: string, ...params: unknown[]): Record<string, unknown> | undefined;
  /** Every row of a query. */
  all(sql: string, ...params: unknown[]): Record<string, unknown>[];
  /** Run SQL with no result. */
  exec(sql: string): void;
  /** Run one statement with parameters; returns the rows it changed. */
  run(sql: string, ...params: unknown[]): number;
  /** Close the database. */
  close(): void;
}

/** How to open a database. */
export interface OpenOptions {
  /** Open it read-only. */
  readOnly: boolean;
  /**
   * Read the main file as it is, ignoring locks and any write-ahead log, and
   * create no file beside it (SQLite's `immutable=1`). Only safe when no one
   * is writing it in WAL mode.
   */
  immutable?: boolean;
  /**
   * For a WAL database in use: read its `-shm` file without writing to it
   * (SQLite's `readonly_shm=1`), where the driver can.
   */
  readOnlyShm?: boolean;
}

/** A driver that opens databases. */
export interface SqliteDriver {
  /** Which driver it is. */
  name: "node:sqlite" | "better-sqlite3";
  /** Open a database file. */
  open(file: string, options: OpenOptions): SqliteDb;
}

/** What to install when no driver is found. */
export const SQLITE_FIX =
  "install the better-sqlite3 package (npm install better-sqlite3@12) or use Node 22.5+ or Deno";

/** The largest database copied into memory to read it as `immutable` under better-sqlite3. */
export const SQLITE_COPY_LIMIT = 64 * 1024 * 1024;

interface Statement {
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown;
  run(...params: unknown[]): unknown;
}
interface RawDb {
  prepare(sql: string): Statement;
  exec(sql: string): unknown;
  close(): unknown;
}

/** Prepared statements kept per database: a store's few statements run many times. */
const STATEMENTS_KEPT = 64;

const wrap = (db: RawDb): SqliteDb => {
  const prepared = new Map<string, Statement>();
  const prepare = (sql: string): Statement => {
    let statement = prepared.get(sql);
    if (statement === undefined) {
      statement = db.prepare(sql);
      if (prepared.size >= STATEMENTS_KEPT) prepared.clear();
      prepared.set(sql, statement);
    }
    return statement;
  };
  return {
    get: (sql, ...params) => prepare(sql).get(...params) as Record<string, unknown> | undefined,
    all: (sql, ...params) => prepare(sql).all(...params) as Record<string, unknown>[],
    exec: (sql) => void db.exec(sql),
    run: (sql, ...params) =>
      Number((prepare(sql).run(...params) as { changes?: number | bigint })?.changes ?? 0),
    close: () => {
      prepared.clear();
      db.close();
    },
  };
};

/** A `file:` URI for SQLite, with the path's special characters escaped. */
const fileUri = (file: string, query: string) =>
  `file:${
    file.replace(/[%?#]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
  }?${query}`;

/** Lock waits end at once: a locked database is a problem to report, not to wait out. */
const noWait = (db: SqliteDb): SqliteDb => {
  try {
    db.exec("PRAGMA busy_timeout = 0");
  } catch (error) {
    db.close();
    throw error;
  }
  return db;
};

let cached: SqliteDriver | null | undefined;

function load(): SqliteDriver | null {
  const getBuiltin = (process as { getBuiltinModule?: (id: string) => unknown })
    .getBuiltinModule;
  try {
    const mod = getBuiltin?.("node:sqlite") as
      | { DatabaseSync: new (file: string, options: object) => RawDb }
      | undefined;
    if (mod?.DatabaseSync) {
      return {
        name: "node:sqlite",
        open: (file, { readOnly, immutable, readOnlyShm }) =>
          immutable
            ? wrap(new mod.DatabaseSync(fileUri(file, "immutable=1"), { readOnly: true }))
            : readOnlyShm
            ? noWait(
              wrap(
                new mod.DatabaseSync(fileUri(file, "mode=ro&readonly_shm=1"), { readOnly: true }),
              ),
            )
            : noWait(wrap(new mod.DatabaseSync(file, { readOnly, timeout: 0 }))),
      };
    }
  } catch { /* not built in here */ }
  try {
    type Ctor = new (file: string | Uint8Array, options: object) => RawDb;
    const Database = createRequire(import.meta.url)("better-sqlite3") as Ctor;
    // The package can be there without its native part (an optional dependency whose build
    // failed): it loads that only at the first open, so a failed build shows here, once.
    new Database(":memory:", {}).close();
    return {
      name: "better-sqlite3",
      open: (file, { readOnly, immutable }) => {
        if (immutable) {
          // better-sqlite3 is built without URI support: read a copy of the file
          // into memory, marked as a rollback-journal database.
          const bytes = readSmallFile(file, SQLITE_COPY_LIMIT);
          if (bytes) {
            bytes[18] = 1;
            bytes[19] = 1;
            return wrap(new Database(bytes, { readonly: true }));
          }
        }
        const flags = { readonly: readOnly || !!immutable, fileMustExist: readOnly, timeout: 0 };
        return noWait(wrap(new Database(file, flags)));
      },
    };
  } catch {
    // no SQLite driver here: null, which the store says once as its info line
    return null;
  }
}

/** A regular file's bytes when it holds at most `limit`, else undefined. */
function readSmallFile(file: string, limit: number): Buffer | undefined {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | (fs.constants.O_NONBLOCK ?? 0));
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile() || stat.size > limit) return undefined;
    const bytes = Buffer.alloc(stat.size);
    let length = 0;
    while (length < bytes.length) {
      const n = fs.readSync(fd, bytes, length, bytes.length - length, null);
      if (n <= 0) break;
      length += n;
    }
    return bytes.subarray(0, length);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The SQLite driver of this runtime, or undefined when there is none.
 *
 * @example
 * ```ts
 * import { sqliteDriver } from "./_sqlite.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(sqliteDriver()?.name, "node:sqlite"); // under Deno
 * ```
 */
export function sqliteDriver(): SqliteDriver | undefined {
  if (cached === undefined) cached = load();
  return cached ?? undefined;
}

/** How a database that someone else owns is read; see {@linkcode readMode}. */
export type ReadMode = "read-only" | "wal" | "immutable";

/**
 * How to read a database the library does not own, so that nothing is
 * created or changed beside it and no lock is waited on:
 *
 * - `immutable` for a WAL-mode database with no `-wal` file: no connection
 *   has it open, so the main file holds every committed row, and a read-only
 *   open would create `-wal` and `-shm` files.
 * - `wal` for a WAL database in use: its committed rows may be in its `-wal`
 *   file, read through its existing `-shm` without writing to it
 *   (`readonly_shm=1`; better-sqlite3, built without URI support, opens it
 *   read-only, which may update the `-shm` read marks as any reader does).
 * - `read-only` for a rollback-journal database: a read-only open creates
 *   nothing.
 *
 * Throws when the file is missing, is not a regular file (a FIFO, a device,
 * a directory) or is not a SQLite database, without blocking on it.
 *
 * @example
 * ```ts
 * import { readMode } from "./_sqlite.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(() => readMode("/dev/zero"), /not a regular file/);
 * ```
 */
export function readMode(file: string): ReadMode {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | (fs.constants.O_NONBLOCK ?? 0));
  const header = Buffer.alloc(100);
  let length = 0;
  try {
    if (!fs.fstatSync(fd).isFile()) throw new Error(`${file} is not a regular file`);
    while (length < header.length) {
      const n = fs.readSync(fd, header, length, header.length - length, null);
      if (n <= 0) break;
      length += n;
    }
  } finally {
    fs.closeSync(fd);
  }
  if (length > 0 && header.toString("latin1", 0, 16) !== "SQLite format 3\0") {
    throw new Error(`${file} is not a SQLite database`);
  }
  const wal = length >= 20 && header[18] === 2 && header[19] === 2;
  return !wal ? "read-only" : fs.existsSync(`${file}-wal`) ? "wal" : "immutable";
}

/**
 * Run one SELECT for one row on a database the library does not own, and
 * close it: opened as {@linkcode readMode} says, never waiting on a lock.
 * Throws on any failure (the caller reports it).
 *
 * @example
 * ```ts
 * import { selectOne, sqliteDriver } from "./_sqlite.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const driver = sqliteDriver()!;
 * const file = join(mkdtempSync(join(tmpdir(), "ac-")), "k.db");
 * const db = driver.open(file, { readOnly: false });
 * db.exec("CREATE TABLE t (x); INSERT INTO t VALUES (42)");
 * db.close();
 * assert.deepEqual({ ...selectOne(driver, file, "SELECT x FROM t") }, { x: 42 });
 * ```
 */
export function selectOne(
  driver: SqliteDriver,
  file: string,
  sql: string,
  ...params: unknown[]
): Record<string, unknown> | undefined {
  return readWith(driver, file, (db) => db.get(sql, ...params));
}

/**
 * Run `read` on a database the library does not own, opened as
 * {@linkcode readMode} says (never waiting on a lock), and close it: for a
 * few SELECTs on one open. Throws on any failure (the caller reports it).
 *
 * @example
 * ```ts
 * import { readWith, sqliteDriver } from "./_sqlite.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const driver = sqliteDriver()!;
 * const file = join(mkdtempSync(join(tmpdir(), "ac-")), "k.db");
 * const db = driver.open(file, { readOnly: false });
 * db.exec("CREATE TABLE t (x); INSERT INTO t VALUES (42)");
 * db.close();
 * const columns = readWith(driver, file, (db) => db.all("SELECT name FROM pragma_table_info('t')"));
 * assert.deepEqual(columns.map((c) => c.name), ["x"]);
 * ```
 */
export function readWith<T>(driver: SqliteDriver, file: string, read: (db: SqliteDb) => T): T {
  const mode = readMode(file);
  const db = driver.open(file, {
    readOnly: true,
    immutable: mode === "immutable",
    readOnlyShm: mode === "wal",
  });
  try {
    return read(db);
  } finally {
    db.close();
  }
}
