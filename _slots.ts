/**
 * The slots of the shared run table, as the main thread hands them out: which
 * run holds each, which are free, and which run ids are live (so that two live
 * runs never share a file, S15). A new run takes a free slot, else a new chunk
 * of the table, else the least recently active run's that can be let go; at
 * the table's bound with every run busy, it runs unwatched, on a table of its
 * own.
 *
 * @module
 */
import type { Log } from "./log.ts";
import type { RunContext } from "./run.ts";
import { RunTable } from "./_run_table.ts";
import type { Settings } from "./settings.ts";
import { capValues, hasCap, PAST_CAP_SECONDS, tierPlan } from "./tier.ts";
import type { RunInfo } from "./_writer.ts";

/**
 * The run slots of one keeper's table. @internal
 *
 * @example
 * ```ts
 * import { RunSlots } from "./_slots.ts";
 * import { RunTable } from "./_run_table.ts";
 * import { loadSettings } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * const settings = loadSettings({ home: "/nonexistent", env: {} }).settings;
 * const slots = new RunSlots(new RunTable(undefined, 256), () => {}, () => settings);
 * const claimed = slots.claim(0)!;
 * slots.take({ slot: claimed.slot, gen: claimed.gen, runId: "a" } as never, true);
 * assert.equal(slots.ownId("a"), "a.2");
 * slots.free(claimed.slot, "ended");
 * assert.equal(slots.ownId("a"), "a");
 * ```
 */
export class RunSlots {
  readonly #shared: RunTable;
  readonly #log: Log;
  readonly #settingsAt: (now: number) => Settings;
  /** The run in each slot of the table. */
  readonly #runs: (RunInfo | undefined)[] = [];
  /** Free slots, the lowest last. */
  readonly #freeSlots: number[] = [];
  /** Live runs by run id (-1 for a run without a slot), so that two live runs never share a file. */
  readonly #live = new Map<string, number>();

  /**
   * @param shared The table whose slots these are.
   * @param log Where evictions and a full table are said.
   * @param settingsAt The settings in force at a time (eviction reads the caps' plan).
   */
  constructor(shared: RunTable, log: Log, settingsAt: (now: number) => Settings) {
    this.#shared = shared;
    this.#log = log;
    this.#settingsAt = settingsAt;
  }

  /** The run in each slot, undefined for a free one. */
  get runs(): readonly (RunInfo | undefined)[] {
    return this.#runs;
  }

  /**
   * A slot for a new run: a free one, else a new chunk of the table, else the
   * least recently active run's that has no tool call in flight and no
   * crossing to come. Undefined when every run is busy at the table's bound.
   */
  claim(now: number): { slot: number; gen: number } | undefined {
    if (this.#freeSlots.length === 0) {
      const from = this.#shared.slots;
      if (this.#shared.grow()) {
        for (let slot = this.#shared.slots - 1; slot >= from; slot--) this.#freeSlots.push(slot);
      } else {
        const victim = this.#evictable(now);
        if (victim === undefined) return undefined;
        this.free(
          victim,
          `evicted: the run table is at its bound of ${this.#shared.maxSlots} runs`,
        );
      }
    }
    const slot = this.#freeSlots.pop()!;
    return { slot, gen: this.#shared.claim(slot, now) };
  }

  /** A slot claimed for a run that did not start: free again. */
  unclaim(slot: number): void {
    this.#shared.free(slot);
    this.#freeSlots.push(slot);
  }

  /** A run starts: in the slot it claimed (`watched`), else without one. */
  take(info: RunInfo, watched: boolean): void {
    if (watched) this.#runs[info.slot] = info;
    this.#live.set(info.runId, watched ? info.slot : -1);
  }

  /** The least recently active run that can be let go without losing a checkpoint. */
  #evictable(now: number): number | undefined {
    const settings = this.#settingsAt(now);
    let best: number | undefined;
    for (let slot = 0; slot < this.#runs.length; slot++) {
      const info = this.#runs[slot];
      if (!info || this.#shared.toolInFlight(slot)) continue;
      const plan = tierPlan(capValues(info.caps), settings);
      const capped = hasCap(plan);
      const pastCap = plan.timeCap !== undefined &&
        now - this.#shared.start(slot) > (plan.timeCap + PAST_CAP_SECONDS) * 1000;
      if (capped && !this.#shared.tierClaimed(slot, 2) && !pastCap) continue;
      if (best === undefined || this.#shared.activity(slot) < this.#shared.activity(best)) {
        best = slot;
      }
    }
    return best;
  }

  /**
   * A run the table has no room for: its hooks work on the main thread (the
   * prologue, tool-boundary checkpoints) from a table of its own, which the
   * watchdog does not see. The host is told.
   *
   * @param contextOf Makes the run's context on its table; `release` lets the table go when the run ends.
   */
  unwatched(
    runId: string,
    now: number,
    contextOf: (table: RunTable, release: () => void) => RunContext,
  ): { context: RunContext; gen: number } {
    this.#log(
      "warn",
      `the run table is full (${this.#shared.maxSlots} runs, each busy); this run gets no watchdog checkpoints`,
      runId,
    );
    const table = new RunTable(undefined, 1);
    table.grow();
    const context = contextOf(table, () => {
      table.free(0);
      if (this.#live.get(runId) === -1) this.#live.delete(runId);
    });
    return { context, gen: table.claim(0, now) };
  }

  /** Let a run's slot go; `why` is said unless the run ended or the keeper closed. */
  free(slot: number, why: string): void {
    const info = this.#runs[slot];
    if (!info) return;
    this.#runs[slot] = undefined;
    this.#shared.free(slot);
    this.#freeSlots.push(slot);
    if (this.#live.get(info.runId) === slot) this.#live.delete(info.runId);
    if (why !== "ended" && why !== "closed") this.#log("info", why, info.runId);
  }

  /** The run id itself, or with `.2`, `.3` … when a live run has it (S15). */
  ownId(runId: string): string {
    if (!this.#live.has(runId)) return runId;
    let n = 2;
    while (this.#live.has(`${runId}.${n}`)) n++;
    const own = `${runId}.${n}`;
    this.#log(
      "warn",
      `run id ${runId} is already live in this process; this run writes ${own} instead`,
      own,
    );
    return own;
  }
}
