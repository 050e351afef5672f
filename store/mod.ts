/**
 * The run store (the ledger): a record of every run, from its start to its
 * end, at most a progress interval behind it. {@linkcode openStore} opens the
 * store a home's settings name; the embedded one is a SQLite database,
 * `<home>/agent-checkpoint/runs.db`.
 *
 * @module
 */
import type { Backend, RunStore, StoreOptions } from "./types.ts";
import { openStore } from "./_open.ts";
import type { SqliteRunStore } from "./sqlite.ts";
import { backendOf } from "./_backends.ts";
import { openBridge, PortStore, type StoreBridge } from "./_bridge.ts";
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
export { openBridge, StoreBridge } from "./_bridge.ts";
export { START_WAIT_MS } from "./_bridge_protocol.ts";

export { backendOf, BACKENDS } from "./_backends.ts";
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
): SqliteRunStore | RunStore | StoreBridge | PortStore | undefined {
  const url = options.settings.store;
  nameMachine(options.settings.machine);
  const backend = backendOf(url);
  return backend ? openFleet(options, backend, url as string) : openStore(options);
}

/**
 * The store a backend's URL names (the fleet store): on the main thread
 * (`quick`), its side of the bridge to a thread that owns the connection;
 * elsewhere a store of its own, which connects on first use.
 */
function openFleet(
  options: StoreOptions & { mode?: "durable" | "quick" | "read"; storePort?: MessagePort },
  backend: Backend,
  url: string,
): RunStore | StoreBridge | PortStore | undefined {
  const fileMaxKb = Number(options.settings.store_file_max_kb ?? 256);
  try {
    const common = { url, hostTimeoutSeconds: options.settings.host_timeout_seconds, fileMaxKb };
    // The watchdog thread: its batches go through its process's store thread.
    if (options.storePort) {
      return new PortStore(options.storePort, backend.locate(url), backend.engine);
    }
    if (options.mode === "quick") {
      const bridge = { ...common, backend };
      return options.log ? openBridge({ ...bridge, log: options.log }) : openBridge(bridge);
    }
    return backend.open(common);
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
export { liveHolder, recordSupervisedEnd, type SupervisedEnd } from "./_supervised.ts";
