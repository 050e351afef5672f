/**
 * What an `AgentCheckpoint` starts its watchdog worker with, and the messages
 * the worker sends back. Nothing goes the other way: the worker reads runs
 * from shared memory.
 *
 * @module
 */
import type { Env } from "./config.ts";
import type { MessagePort } from "node:worker_threads";
import type { CheckpointEvent } from "./_writer.ts";
import type { RunTableBuffers } from "./_run_table.ts";

/** What the worker starts with. */
export interface WatchdogData {
  buffers: RunTableBuffers;
  home: string;
  env: Env;
  overrides: Record<string, unknown> | undefined;
  /** Log lines go to the main thread, for the host's logger. */
  hostLogger: boolean;
  /** Comments go to the main thread, for the host's `postComment`. */
  hostComments: boolean;
  commentModule?: string;
  /** The fleet store's port: the watchdog's batches go to its process's store thread. */
  storePort?: MessagePort;
  /** @internal Report heap use every this many ms (benchmarks). */
  statsEveryMs?: number;
}

/** @internal The worker's own heap, as benchmarks read it. */
export interface WatchdogStats {
  heapUsed: number;
  watched: number;
  /** Commits of the run ledger so far. */
  ledgerCommits?: number;
  /** Ledger records waiting for the store. */
  ledgerBacklog?: number;
}

/** Worker to main thread. */
export type FromWorker =
  | { type: "log"; level: "info" | "warn" | "error"; message: string; runId?: string }
  | { type: "comment"; comment: { taskId: string; body: string } }
  | { type: "written"; event: CheckpointEvent }
  | { type: "stats"; stats: WatchdogStats };
