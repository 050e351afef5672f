/**
 * The messages between an `AgentCheckpoint` and its watchdog worker.
 *
 * @module
 */
import type { Env } from "./discover.ts";
import type { RunInfo } from "./snapshot.ts";

/** What the worker starts with. */
export interface WatchdogData {
  buffer: SharedArrayBuffer;
  home: string;
  env: Env;
  overrides: Record<string, unknown> | undefined;
  /** Log lines go to the main thread, for the host's logger. */
  hostLogger: boolean;
  /** Comments go to the main thread, for the host's `postComment`. */
  hostComments: boolean;
  commentModule?: string;
  runs: RunInfo[];
  toolNames: string[];
}

/** Main thread to worker. */
export type ToWorker =
  | { type: "run"; info: RunInfo }
  | { type: "note"; slot: number; gen: number; text: string }
  | { type: "tool"; id: number; name: string };

/** Worker to main thread. */
export type FromWorker =
  | { type: "log"; level: "info" | "warn" | "error"; message: string; runId?: string }
  | { type: "comment"; comment: { taskId: string; body: string } };
