/**
 * The main thread's writes to the run ledger (S20): its store, opened on
 * first use with short lock waits and tried again a while after a failure to
 * open; a run's start and end; the live runs' records at close and when the
 * process exits. Records the store cannot take wait in memory, bounded, and
 * are tried again on a timer with a growing wait. The worker's writes, and a
 * record made from shared memory, are in `_ledger.ts`.
 *
 * @module
 */
import process from "node:process";
import { failOpen, type Log } from "./log.ts";
import type { EndStatus } from "./_record.ts";
import { nowMs, type RunTable } from "./_run_table.ts";
import type { Settings } from "./settings.ts";
import type { RunInfo } from "./_writer.ts";
import {
  endRecord,
  type HostId,
  ledgerFailed,
  type LedgerStore,
  recordOf,
  type RunRecord,
} from "./_ledger.ts";

/** How long the main thread waits before it tries to open a store that failed to open again. */
const LEDGER_REOPEN_MS = 30_000;
/** Ledger records the main thread keeps while the store cannot take them. */
const LEDGER_PENDING = 10_000;

/** What the feed works with. @internal */
export interface LedgerFeedParts {
  /** Open the store (short lock waits); undefined when it cannot. */
  open(settings: Settings): LedgerStore | undefined;
  /** This process, as run records name it: asked only once the store is open. */
  host(): HostId;
  log: Log;
  /** The settings in force at a time. */
  settingsAt(now: number): Settings;
  /** The shared run table, whose live runs' records go at close and at exit. */
  shared: RunTable;
  /** The run in each slot of the shared table. */
  runs(): readonly (RunInfo | undefined)[];
}

/** The feeds whose live runs' records are written when the process exits. */
const exiting = new Set<WeakRef<LedgerFeed>>();

/** Write a feed's live runs' records when the process exits; one listener for them all. */
let listening = false;
function atExit(feed: LedgerFeed): void {
  if (!listening) {
    listening = true;
    process.on("exit", () => {
      for (const ref of exiting) ref.deref()?.live("the live runs at exit");
      // A store that writes from another thread (the fleet store): a bounded wait for it.
      for (const ref of exiting) ref.deref()?.drain();
    });
  }
  for (const ref of exiting) if (ref.deref() === undefined) exiting.delete(ref);
  exiting.add(new WeakRef(feed));
}

/**
 * The main thread's side of the run ledger, for one keeper. @internal
 *
 * @example
 * ```ts
 * import { LedgerFeed } from "./_ledger_feed.ts";
 * import { RunTable } from "./_run_table.ts";
 * import { loadSettings } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * const settings = loadSettings({ home: "/nonexistent", env: {} }).settings;
 * const feed = new LedgerFeed({
 *   open: () => undefined, // no store to be had
 *   host: () => ({ machine: "m", pid: 1, start: "" }),
 *   log: () => {},
 *   settingsAt: () => settings,
 *   shared: new RunTable(undefined, 1),
 *   runs: () => [],
 * });
 * assert.equal(feed.open(settings), undefined);
 * await feed.close();
 * ```
 */
export class LedgerFeed {
  readonly #parts: LedgerFeedParts;
  #store: LedgerStore | undefined;
  #retryAt = 0;
  #pending: RunRecord[] = [];
  #failures = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  /** @param parts What the feed works with. */
  constructor(parts: LedgerFeedParts) {
    this.#parts = parts;
  }

  /** The store, once opened; undefined before, after a failure to open, and after close. */
  get store(): LedgerStore | undefined {
    return this.#store;
  }

  /**
   * The store: opened on first use, with short lock waits; after a failure to
   * open, tried again a while later.
   */
  open(settings: Settings): LedgerStore | undefined {
    if (this.#store !== undefined) return this.#store;
    if (nowMs() < this.#retryAt) return undefined;
    const store = this.#parts.open(settings);
    if (!store) this.#retryAt = nowMs() + LEDGER_REOPEN_MS;
    else {
      this.#store = store;
      atExit(this);
    }
    return store;
  }

  /** The live runs' records as they stand. */
  live(what: string): void {
    if (!this.#store) return;
    failOpen(() => {
      const now = nowMs();
      const host = this.#parts.host();
      const records: RunRecord[] = [];
      for (const info of this.#parts.runs()) {
        if (info) records.push(recordOf(info, this.#parts.shared, host, now));
      }
      this.write(records, what);
    }, (error) => ledgerFailed(this.#parts.log, what, error));
  }

  /** The process exits: a bounded wait for a store thread's writes to land. */
  drain(): void {
    failOpen(() => {
      this.#store?.drainSync?.();
    }, () => {/* exiting: nothing more can be done */});
  }

  /** Record a run's end, when the settings keep the ledger and its store is open. */
  end(table: RunTable, info: RunInfo, end: { status: EndStatus; summary?: string }): void {
    failOpen(() => {
      const now = nowMs();
      const settings = this.#parts.settingsAt(now);
      if (!settings.enabled || !settings.ledger || this.open(settings) === undefined) return;
      const record = endRecord(
        recordOf(info, table, this.#parts.host(), now),
        end.status,
        end.summary,
        now,
      );
      this.write([record], "the run's end");
    }, (error) => ledgerFailed(this.#parts.log, "the run's end", error, info.runId));
  }

  /**
   * Write records on the main thread (a start, an end): at once when the
   * store takes them without waiting; else they wait, bounded, and are tried
   * again with a growing wait.
   */
  write(records: RunRecord[], what: string): void {
    const store = this.#store;
    if (!store) return;
    const batch = [...this.#pending, ...records];
    failOpen(() => {
      if (store.writeSync) store.writeSync({ records: batch });
      else {
        store.write({ records: batch }).catch((error) => this.#keep(batch, what, error));
      }
      this.#pending = [];
      if (this.#failures > 0) {
        this.#failures = 0;
        this.#parts.log("info", "the run ledger takes the main thread's records again");
      }
    }, (error) => this.#keep(batch, what, error));
  }

  #keep(batch: RunRecord[], what: string, error: unknown): void {
    const dropped = Math.max(0, batch.length - LEDGER_PENDING);
    this.#pending = batch.slice(dropped);
    this.#failures++;
    if (this.#failures === 1 || dropped > 0) {
      ledgerFailed(
        this.#parts.log,
        `${what} (${this.#pending.length} record(s) wait in memory${
          dropped > 0 ? `, ${dropped} dropped` : ""
        })`,
        error,
      );
    }
    if (this.#timer === undefined && !this.#closed) {
      const wait = Math.min(60_000, 1000 * 2 ** Math.min(6, this.#failures - 1));
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        if (this.#pending.length > 0) this.write([], "records kept in memory");
      }, wait);
      (this.#timer as { unref?: () => void }).unref?.();
    }
  }

  /** At close: the live runs' records as they stand, the last kept ones, and the store closed. */
  close(): Promise<void> {
    this.#closed = true;
    const store = this.#store;
    if (!store) return Promise.resolve();
    this.live("the live runs at close");
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#store = undefined;
    this.#retryAt = Infinity;
    // A store thread (the fleet store) writes what waits first, bounded.
    return store.close().catch(() => {});
  }
}
