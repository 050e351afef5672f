/**
 * The one SQLite interface the library needs, over `node:sqlite` (Deno, Node
 * 22.5 and later) or the optional `better-sqlite3` package (Node 20).
 * Loading is synchronous so that cap discovery can run inside `startRun`.
 *
 * @module
 */
import process from "node:process";
import { createRequire } from "node:module";

/** An open database. */
export interface SqliteDb {
  get(sql: string, ...params: unknown[]): Record<string, unknown> | undefined;
  exec(sql: string): void;
  run(sql: string, ...params: unknown[]): void;
  close(): void;
}

/** A driver that opens databases. */
export interface SqliteDriver {
  name: "node:sqlite" | "better-sqlite3";
  open(file: string, options: { readOnly: boolean }): SqliteDb;
}

/** What to install when no driver is found. */
export const SQLITE_FIX =
  "install the better-sqlite3 package (npm install better-sqlite3@12) or use Node 22.5+ or Deno";

interface Statement {
  get(...params: unknown[]): unknown;
  run(...params: unknown[]): unknown;
}
interface RawDb {
  prepare(sql: string): Statement;
  exec(sql: string): unknown;
  close(): unknown;
}

const wrap = (db: RawDb): SqliteDb => ({
  get: (sql, ...params) => db.prepare(sql).get(...params) as Record<string, unknown> | undefined,
  exec: (sql) => void db.exec(sql),
  run: (sql, ...params) => void db.prepare(sql).run(...params),
  close: () => void db.close(),
});

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
        open: (file, { readOnly }) => wrap(new mod.DatabaseSync(file, { readOnly })),
      };
    }
  } catch { /* not built in here */ }
  try {
    const Database = createRequire(import.meta.url)("better-sqlite3") as new (
      file: string,
      options: object,
    ) => RawDb;
    return {
      name: "better-sqlite3",
      open: (file, { readOnly }) =>
        wrap(new Database(file, { readonly: readOnly, fileMustExist: readOnly, timeout: 0 })),
    };
  } catch {
    return null;
  }
}

/** The SQLite driver of this runtime, or undefined when there is none. */
export function sqliteDriver(): SqliteDriver | undefined {
  if (cached === undefined) cached = load();
  return cached ?? undefined;
}

/** Run one read-only SELECT for one row, and close the database. */
export function selectOne(
  driver: SqliteDriver,
  file: string,
  sql: string,
  ...params: unknown[]
): Record<string, unknown> | undefined {
  const db = driver.open(file, { readOnly: true });
  try {
    return db.get(sql, ...params);
  } finally {
    db.close();
  }
}
