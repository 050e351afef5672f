/**
 * The run store (the ledger): a record of every run, from its start to its
 * end, at most a progress interval behind it. {@linkcode openStore} opens the
 * store a home's settings name; the embedded one is a SQLite database,
 * `<home>/agent-checkpoint/runs.db`.
 *
 * @module
 */
import type { RunStore, StoreOptions } from "./types.ts";
import { openStore } from "./_open.ts";
import type { SqliteRunStore } from "./sqlite.ts";
import { isPostgresUrl, openPgStore, type PgRunStore, pgTarget } from "./postgres.ts";
import { openPgBridge, type PgBridge, PortStore } from "./_pg_bridge.ts";
import type { MessagePort } from "node:worker_threads";
import { nameMachine } from "./_host.ts";

export * from "./types.ts";
export { corruptHint, openStore } from "./_open.ts";
export { here, nameMachine, processStart, thisHost } from "./_host.ts";
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
  nameMachine(options.settings.machine);
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
