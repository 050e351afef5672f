/**
 * A fork: a new run whose journal is an earlier run's first steps, so that
 * its first start replays them (no model call, no tool run) and goes live at
 * the next step. The fork writes the new run as one ended attempt, marked
 * forked, whose journal entries are copied from the source's (bodies are
 * kept by content: the copy costs rows only); the new run's first start is
 * then a retry of it, attempt 2, and the journal's own replay does the rest.
 *
 * @module
 */
import * as os from "node:os";
import process from "node:process";
import type {
  ForkOrigin,
  HostId,
  JournalBatch,
  JournalEntry,
  RunRecord,
  RunView,
  WriteBatch,
} from "../_ledger.ts";
import { orderCalls, placesOf } from "./_journal_order.ts";

/** What a fork needs of a run store: its records and its journal. */
export interface ForkStore {
  /** The newest record of a run id. */
  latest(runId: string): Promise<RunView | undefined> | RunView | undefined;
  /** Write records in one durable commit. */
  write(batch: WriteBatch): Promise<void>;
  /** The run journal. */
  readonly journal?: {
    read(runId: string): Promise<JournalEntry[]>;
    write(batch: JournalBatch): Promise<void>;
  };
}

/** What to fork. */
export interface ForkOptions {
  /** The steps copied, from 1: the new run goes live at step `at + 1`. */
  at: number;
  /** The new run's id: a run id the store does not know yet. */
  as: string;
  /**
   * The source run's attempt copied. @default {the attempt that got furthest
   * (the most model calls, the newest of those), as a retry's replay picks it}
   */
  attempt?: number;
}

/** What a fork made. */
export interface ForkResult {
  /** The new run's id. */
  runId: string;
  /** The run forked. */
  from: string;
  /** Its attempt whose journal was copied. */
  attempt: number;
  /** The steps copied. */
  step: number;
  /** The source attempt's steps (its model calls, contiguous from the first). */
  steps: number;
  /** The journal entries copied: model calls. */
  models: number;
  /** The journal entries copied: tool calls. */
  tools: number;
}

/**
 * A fork refused: an unknown run, a new id already taken, a step past the
 * run's journal, or a store with no journal.
 *
 * @example
 * ```ts
 * import { createAgentCheckpoint, ForkError } from "../mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * await assert.rejects(ac.fork("nope", { at: 1, as: "new" }), ForkError);
 * await ac.close();
 * ```
 */
export class ForkError extends Error {
  /**
   * Makes the error.
   *
   * @param message What is wrong, naming the bad value.
   */
  constructor(message: string) {
    super(message);
    this.name = "ForkError";
  }
}

/** A journal entry as the order reads it. */
type Call = JournalEntry & { replayedFrom?: number };
const callOf = (e: JournalEntry): Call =>
  e.replayed === undefined ? e : { ...e, replayedFrom: e.replayed };

/** Each attempt's calls in the order it made them (an attempt replays the order of its earlier one). */
function ordersOf(entries: readonly JournalEntry[]): Map<number, Call[]> {
  const by = new Map<number, Call[]>();
  for (const e of entries) {
    let list = by.get(e.attempt);
    if (!list) by.set(e.attempt, list = []);
    list.push(callOf(e));
  }
  const places = new Map<number, Map<string, number>>();
  const out = new Map<number, Call[]>();
  for (const attempt of [...by.keys()].sort((a, b) => a - b)) {
    const calls = orderCalls(by.get(attempt)!, places);
    places.set(attempt, placesOf(calls));
    out.set(attempt, calls);
  }
  return out;
}

/** An attempt's steps: its model calls, contiguous from the first (past a gap, none is replayed). */
function stepCount(calls: readonly Call[]): number {
  const models = new Set(calls.filter((c) => c.kind === "model").map((c) => c.index));
  let n = 0;
  while (models.has(n)) n++;
  return n;
}

/**
 * Fork a run at a step: make run `options.as`, whose journal is the first
 * `options.at` steps of run `runId`'s attempt that got furthest (or
 * `options.attempt`), so its first start replays them and goes live at step
 * `at + 1`. A step is a model call and the tool calls the attempt made after
 * it and before its next model call; the tool calls made before the first
 * model call go with step 1. The new run is written as one ended attempt
 * (status `aborted`, its end summary `forked from RUN at step STEP`, its
 * record's `fork` naming the source), so its first start is attempt 2, a
 * retry, which replays attempt 1's journal as any retry does. Replayed tool
 * calls do not run, so they need no receipts; the source's effects are not
 * copied: a live step of the new run acts as a new run's does.
 *
 * @param store The run store (records and journal).
 * @param runId The run forked.
 * @param options The step, the new id, and the source attempt.
 * @returns What was copied.
 * @throws {RangeError} When `at` is not a whole number of at least 1.
 * @throws {ForkError} When the store has no journal, `runId` is unknown,
 * `as` is taken, the attempt has no journal, or `at` is past its steps.
 *
 * @example
 * ```ts
 * import { forkRun } from "./_fork.ts";
 * import { memoryBackend } from "../store/memory.ts";
 * import assert from "node:assert/strict";
 *
 * const store = memoryBackend.open({ url: "memory://fork", hostTimeoutSeconds: 30, fileMaxKb: 4 });
 * const host = { machine: "m", pid: 1, start: "" };
 * await store.write({ records: [{
 *   runId: "a", attempt: 1, dialect: "chat", caps: {}, turnsUsed: 2, elapsedSeconds: 1, tier: 0,
 *   inFlight: [], recent: [], notes: [], host, status: "done", startedAt: 1, updatedAt: 9,
 *   end: { status: "done", at: 9 },
 * }] });
 * const entry = (kind: "model" | "tool", index: number, at: number) =>
 *   ({ runId: "a", attempt: 1, kind, index, key: `${kind}${index}`, body: "1", at });
 * await store.journal!.write({
 *   entries: [entry("model", 0, 10), entry("tool", 0, 11), entry("model", 1, 12), entry("tool", 1, 13)],
 * });
 * const made = await forkRun(store, "a", { at: 1, as: "b" });
 * assert.deepEqual([made.steps, made.models, made.tools], [2, 1, 1]);
 * assert.equal((await store.latest("b"))?.record.end?.summary, "forked from a at step 1");
 * await assert.rejects(forkRun(store, "a", { at: 3, as: "c" }), /has 2 steps/);
 * await assert.rejects(forkRun(store, "a", { at: 1, as: "b" }), /already exists/);
 * await store.close();
 * ```
 */
export async function forkRun(
  store: ForkStore,
  runId: string,
  options: ForkOptions & {
    /** The process the fork's record names (default: this process, by its host name). */
    host?: HostId;
    /** Now, ms since the epoch (default: `Date.now()`). */
    now?: number;
  },
): Promise<ForkResult> {
  const { at, as } = options;
  if (!Number.isInteger(at) || at < 1) {
    throw new RangeError(`a fork's step is a whole number from 1, not ${at}`);
  }
  if (typeof as !== "string" || as === "") throw new ForkError("a fork needs a new run id");
  const journal = store.journal;
  if (!journal) throw new ForkError("this run store keeps no run journal: nothing to fork");
  const source = await store.latest(runId);
  if (!source) throw new ForkError(`no such run "${runId}" in the run ledger`);
  if (await store.latest(as) !== undefined) {
    throw new ForkError(`run "${as}" already exists: a fork makes a new run`);
  }
  if ((await journal.read(as)).length > 0) {
    throw new ForkError(`run "${as}" already has journal entries: a fork makes a new run`);
  }
  const orders = ordersOf(await journal.read(runId));
  let attempt = options.attempt;
  if (attempt === undefined) {
    // As a retry's replay picks it: of the run's newest generation, the most model calls, newest.
    const first = source.record.generation ?? 1;
    let best = 0;
    for (const [a, calls] of orders) {
      if (a < first) continue;
      const n = stepCount(calls);
      if (attempt === undefined || n > best || (n === best && a > attempt)) {
        attempt = a;
        best = n;
      }
    }
    if (attempt === undefined) throw new ForkError(`run "${runId}" has no journaled call`);
  }
  const calls = orders.get(attempt);
  if (!calls) throw new ForkError(`attempt ${attempt} of run "${runId}" has no journaled call`);
  const steps = stepCount(calls);
  if (at > steps) {
    throw new ForkError(
      `run "${runId}" has ${steps} step${
        steps === 1 ? "" : "s"
      } in its attempt ${attempt}: cannot fork at step ${at}`,
    );
  }
  // Every call before model call `at`, in the order the attempt made them.
  const cut = calls.findIndex((c) => c.kind === "model" && c.index === at);
  const copied = (cut === -1 ? calls : calls.slice(0, cut)).map((c): JournalEntry => {
    const e: JournalEntry = {
      runId: as,
      attempt: 1,
      kind: c.kind,
      index: c.index,
      key: c.key,
      body: c.body,
      at: c.at,
    };
    if (c.tool !== undefined) e.tool = c.tool;
    if (c.usage !== undefined) e.usage = c.usage;
    if (c.ms !== undefined) e.ms = c.ms;
    return e;
  });
  const now = Math.round(options.now ?? Date.now());
  const origin: ForkOrigin = { from: runId, attempt, step: at };
  const summary = `forked from ${runId} at step ${at}`;
  const r = source.record;
  const record: RunRecord = {
    runId: as,
    attempt: 1,
    dialect: r.dialect,
    caps: r.caps,
    // The fork made no call: the new run's budget is its own (replayed calls count no turn).
    turnsUsed: 0,
    elapsedSeconds: 0,
    tier: 0,
    inFlight: [],
    recent: [],
    notes: [],
    fork: origin,
    host: options.host ?? { machine: os.hostname(), pid: process.pid, start: "" },
    status: "aborted",
    end: { status: "aborted", at: now, summary },
    startedAt: now,
    updatedAt: now,
  };
  // The record first: a journal without its run would be another run's first attempt later.
  await store.write({ records: [record] });
  await journal.write({ entries: copied });
  return {
    ...origin,
    runId: as,
    steps,
    models: copied.filter((e) => e.kind === "model").length,
    tools: copied.filter((e) => e.kind === "tool").length,
  };
}
