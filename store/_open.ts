/**
 * Opening the embedded store a home's settings name ({@linkcode openStore}),
 * and the hint a damaged one gets. The store's `mod.ts` and the supervisor's
 * end records (`_supervised.ts`) both open it from here, so neither imports
 * the other.
 *
 * @module
 */
import { SQLITE_FIX } from "../_sqlite.ts";
import {
  isCorruptError,
  NO_DRIVER,
  openSqliteStore,
  type SqliteRunStore,
  storeFile,
} from "./sqlite.ts";
import type { StoreOptions } from "./types.ts";
import { nameMachine } from "./_host.ts";

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
 * import { openStore } from "./_open.ts";
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
  options: StoreOptions & {
    mode?: "durable" | "quick" | "read";
    busyMs?: number;
    setAside?: boolean;
  },
): SqliteRunStore | undefined {
  // Runs are recorded under the machine name the settings give (`machine`), in every thread.
  nameMachine(options.settings.machine);
  const file = storeFile(options.home);
  try {
    const open: Parameters<typeof openSqliteStore>[0] = {
      file,
      hostTimeoutSeconds: options.settings.host_timeout_seconds,
      mode: options.mode ?? "durable",
    };
    if (options.busyMs !== undefined) open.busyMs = options.busyMs;
    if (options.setAside) {
      open.setAside = (aside, error) =>
        options.log?.(
          "warn",
          `the run ledger at ${file} is damaged (${
            error instanceof Error ? error.message : String(error)
          }): moved aside to ${aside}, kept there, and a new ledger started`,
        );
    }
    return openSqliteStore(open);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    options.log?.(
      message.startsWith(NO_DRIVER) ? "info" : "warn",
      message.startsWith(NO_DRIVER)
        ? `the run ledger is off: there is no SQLite driver; ${SQLITE_FIX}`
        : `the run ledger at ${file} cannot be opened: ${message}${
          isCorruptError(error) ? `; ${corruptHint(file)}` : ""
        }`,
    );
    return undefined;
  }
}

/**
 * How to set a damaged ledger aside, as the command line and the log say it.
 *
 * @example
 * ```ts
 * import { corruptHint } from "./_open.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(corruptHint("/h/runs.db"), /mv \/h\/runs\.db /);
 * ```
 */
export function corruptHint(file: string): string {
  return `the file is damaged: set it aside with \`mv ${file} ${file}.corrupt\` (and its -wal and -shm files beside it, if any); the next run starts a new ledger, and the old one is kept for you to inspect`;
}
