/**
 * The run store (the ledger): a record of every run, from its start to its
 * end, at most a progress interval behind it. {@linkcode openStore} opens the
 * store a home's settings name; the embedded one is a SQLite database,
 * `<home>/agent-checkpoint/runs.db`.
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
import type { RunStore, StoreOptions } from "./types.ts";
import { isPostgresUrl, openPgStore, type PgRunStore, pgTarget } from "./postgres.ts";
import { openPgBridge, type PgBridge, PortStore } from "./_pg_bridge.ts";
import type { MessagePort } from "node:worker_threads";

export * from "./types.ts";
export { here, processStart, thisHost } from "./_host.ts";
export {
  isCorruptError,
  NO_DRIVER,
  SCHEMA_VERSION,
  setAsideCorrupt,
  SqliteRunStore,
  storeFile,
} from "./sqlite.ts";
export { isPostgresUrl, openPgStore, PG_SCHEMA_VERSION, PgRunStore, pgTarget } from "./postgres.ts";
export { PgBridge, START_WAIT_MS } from "./_pg_bridge.ts";
export { type TreeMember, treeSummaries, type TreeSummary, treeTotalsText } from "./trees.ts";

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
  options: StoreOptions & {
    mode?: "durable" | "quick" | "read";
    busyMs?: number;
    setAside?: boolean;
  },
): SqliteRunStore | undefined {
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
 * import { corruptHint } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(corruptHint("/h/runs.db"), /mv \/h\/runs\.db /);
 * ```
 */
export function corruptHint(file: string): string {
  return `the file is damaged: set it aside with \`mv ${file} ${file}.corrupt\` (and its -wal and -shm files beside it, if any); the next run starts a new ledger, and the old one is kept for you to inspect`;
}

/**
 * Open the store the settings name: the fleet store when `store` is a
 * `postgres://` URL, else the embedded one ({@linkcode openStore}). Never
 * throws: a reason is one line to `log`.
 *
 * @param options As {@linkcode openStore}'s, and the watchdog's port to its
 * process's fleet store thread.
 * @returns The store, or undefined.
 *
 * @example
 * ```ts
 * import { openRunStore } from "./mod.ts";
 * import assert from "node:assert/strict";
 *
 * const store = openRunStore({
 *   home: "/nonexistent",
 *   settings: { host_timeout_seconds: 30, store: "postgres://db.internal/fleet" },
 *   mode: "read",
 * });
 * assert.equal(store?.engine, "postgres");
 * await store?.close();
 * ```
 */
export function openRunStore(
  options: StoreOptions & {
    mode?: "durable" | "quick" | "read";
    storePort?: MessagePort;
    busyMs?: number;
    setAside?: boolean;
  },
): SqliteRunStore | PgRunStore | PgBridge | PortStore | undefined {
  const url = options.settings.store;
  return isPostgresUrl(url) ? openFleet(options, url) : openStore(options);
}

/**
 * The fleet store a `postgres://` URL names: on the main thread (`quick`),
 * its side of a thread that owns the connection; elsewhere a connection of
 * its own, made on first use.
 */
function openFleet(
  options: StoreOptions & { mode?: "durable" | "quick" | "read"; storePort?: MessagePort },
  url: string,
): PgRunStore | PgBridge | PortStore | undefined {
  const fileMaxKb = Number(options.settings.store_file_max_kb ?? 256);
  try {
    const common = { url, hostTimeoutSeconds: options.settings.host_timeout_seconds, fileMaxKb };
    // The watchdog thread: its batches go through its process's store thread.
    if (options.storePort) return new PortStore(options.storePort, pgTarget(url).location);
    if (options.mode === "quick") {
      const bridge = { ...common };
      return options.log ? openPgBridge({ ...bridge, log: options.log }) : openPgBridge(bridge);
    }
    return openPgStore(common);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    options.log?.(
      "warn",
      `the fleet store cannot be opened (${message}); check the store setting`,
    );
    return undefined;
  }
}

/** A store as the interface sees it. */
export type { RunStore };
export { recordSupervisedEnd, type SupervisedEnd } from "./_supervised.ts";
