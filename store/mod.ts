/**
 * The run store (the ledger): a record of every run, from its start to its
 * end, at most a progress interval behind it. {@linkcode openStore} opens the
 * store a home's settings name; the embedded one is a SQLite database,
 * `<home>/checkpoints/runs.db`.
 *
 * @module
 */
import { SQLITE_FIX } from "../_sqlite.ts";
import { NO_DRIVER, openSqliteStore, type SqliteRunStore, storeFile } from "./sqlite.ts";
import type { RunStore, StoreOptions } from "./types.ts";

export * from "./types.ts";
export { here, processStart, thisHost } from "./_host.ts";
export { NO_DRIVER, SCHEMA_VERSION, SqliteRunStore, storeFile } from "./sqlite.ts";

/**
 * Open the store a home's settings name, or undefined when there is none to
 * open: no SQLite driver, or a file that cannot be opened. Never throws: the
 * reason is one line to `log`.
 *
 * @param options The home, the settings, where log lines go, and `mode`:
 * `durable` (the default: every commit on disk), `quick` (commits reach the
 * operating system and lock waits are short: the main thread's starts and
 * ends) or `read` (the command line).
 * @returns The store, or undefined.
 *
 * @example
 * ```ts
 * import { openStore } from "./mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * const store = openStore({ home, settings: { host_timeout_seconds: 30 } });
 * assert.equal(store?.engine, "sqlite");
 * assert.deepEqual(await store?.list(), []);
 * await store?.close();
 * ```
 */
export function openStore(
  options: StoreOptions & { mode?: "durable" | "quick" | "read" },
): SqliteRunStore | undefined {
  const file = storeFile(options.home);
  try {
    return openSqliteStore({
      file,
      hostTimeoutSeconds: options.settings.host_timeout_seconds,
      mode: options.mode ?? "durable",
    });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    options.log?.(
      message.startsWith(NO_DRIVER) ? "info" : "warn",
      message.startsWith(NO_DRIVER)
        ? `the run ledger is off: there is no SQLite driver; ${SQLITE_FIX}`
        : `the run ledger at ${file} cannot be opened: ${message}`,
    );
    return undefined;
  }
}

/** A store as the interface sees it. */
export type { RunStore };
export { recordSupervisedEnd, type SupervisedEnd } from "./_supervised.ts";
