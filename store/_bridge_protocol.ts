/**
 * The protocol between the main thread's side of the store's bridge
 * (`_bridge.ts`) and the store's thread (`_bridge_worker.ts`), for any
 * backend: what the thread starts with, the messages each way, and the
 * shared state word. Either side imports it; neither imports the other.
 *
 * @module
 */
import type { MessagePort } from "node:worker_threads";
import type { TreeRow } from "../_tree.ts";
import type {
  AttemptStart,
  BackendOptions,
  EffectBatch,
  EffectRow,
  GraphCheckpointPut,
  GraphCheckpointQuery,
  GraphCheckpointRow,
  GraphWrites,
  HostId,
  JournalBatch,
  JournalEntry,
  RunRecord,
  RunView,
  SessionEntry,
  SessionPath,
  StartOptions,
  WriteBatch,
} from "./types.ts";

/** The longest a run's start waits for the store's answer, ms. */
export const START_WAIT_MS = 2000;
/** @internal The state word: not yet known, reachable, away. */
export const STATE_UNKNOWN = 0;
/** @internal */
export const STATE_UP = 1;
/** @internal */
export const STATE_DOWN = 2;

/**
 * The mark of the store thread's own start data: its entry module starts the thread's work
 * only with it, never in a host's worker that imports the library.
 */
export const BRIDGE_ENTRY = "agent-checkpoint/store-thread";

/** @internal What the store thread starts with. */
export interface BridgeData {
  /** {@linkcode BRIDGE_ENTRY}: the data is the store thread's. */
  entry: typeof BRIDGE_ENTRY;
  /** The URL of the backend's module: the thread imports it, and opens its `backend`. */
  backend: string;
  /** What the backend opens its store with. */
  options: BackendOptions;
  /** This process: the store thread's connection holds its lease. */
  host: HostId;
  /** [answers posted, state, statements sent]. */
  flag: SharedArrayBuffer;
  reply: MessagePort;
}

/** @internal Main thread to store thread. */
export type ToBridge =
  | {
    type: "start";
    id: number;
    record: RunRecord;
    options?: StartOptions;
  }
  | { type: "write"; records: RunRecord[] }
  | { type: "file"; runId: string; file: string; host: HostId }
  | { type: "late"; id: number }
  | { type: "latest"; id: number; runId: string }
  | { type: "effects"; id: number; batch: EffectBatch }
  | { type: "effectsOf"; id: number; runId: string }
  | { type: "journal"; id: number; batch: JournalBatch }
  | { type: "journalOf"; id: number; runId: string }
  | { type: "graph"; id: number; call: CheckpointCall }
  | { type: "sessions"; id: number; call: SessionCall }
  | { type: "drain"; id: number; ms: number }
  | { type: "close"; ms: number }
  | { type: "port"; port: MessagePort }
  | { type: "tree"; id: number; root: string }
  | { type: "admit"; id: number; root: string }
  | { type: "decided"; id: number; record?: RunRecord }
  | { type: "join"; runId: string; root: string; parent?: string };

/** @internal A call of the store's graph checkpoints, carried to the store thread. */
export type CheckpointCall =
  | { op: "put"; put: GraphCheckpointPut }
  | { op: "putWrites"; writes: GraphWrites }
  | { op: "list"; query: GraphCheckpointQuery }
  | { op: "deleteThread"; thread: string };

/** @internal A call of the store's session transcripts, carried to the store thread. */
export type SessionCall =
  | { op: "append"; key: SessionPath; entries: SessionEntry[] }
  | { op: "load"; key: SessionPath; last?: number }
  | { op: "list"; scope: string }
  | { op: "delete"; key: SessionPath }
  | { op: "subkeys"; scope: string; sessionId: string }
  | { op: "pop"; key: SessionPath };

/** @internal The watchdog to the store thread: its batch each interval, or a prune. */
export type FromWatchdog =
  | { type: "batch"; batch: WriteBatch }
  | { type: "prune"; before: number; limit: number };

/** @internal Store thread to main thread. */
export type FromBridge =
  | { type: "log"; level: "info" | "warn" | "error"; message: string }
  | { type: "started"; id: number; started?: AttemptStart; error?: string }
  | { type: "drained"; id: number; waiting: number }
  | { type: "latest"; id: number; view?: RunView; error?: string }
  | { type: "effectsOf"; id: number; rows?: EffectRow[]; error?: string }
  | { type: "tree"; id: number; rows?: TreeRow[]; error?: string }
  | { type: "closed" };

/**
 * Whether a thread's `workerData` is the store thread's: a host's own worker, with data of
 * its own or none, is never taken for it. @internal
 *
 * @example
 * ```ts
 * import { isBridgeData } from "./_bridge_protocol.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isBridgeData(undefined), false);
 * assert.equal(isBridgeData({ bridge: true }), false);
 * ```
 */
export function isBridgeData(data: unknown): data is BridgeData {
  return typeof data === "object" && data !== null &&
    (data as { entry?: unknown }).entry === BRIDGE_ENTRY;
}

/** @internal Store thread to main thread, through the worker's own channel: an effect (or journal) batch's commit. */
export type EffectsDone = {
  type: "effected";
  id: number;
  error?: string;
  /** A journal read's entries. */
  entries?: JournalEntry[];
  /** A read of graph checkpoints: its rows. */
  rows?: GraphCheckpointRow[];
  /** A call of the session transcripts: its answer (absent for undefined). */
  answer?: unknown;
};
