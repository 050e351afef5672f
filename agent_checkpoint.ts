/**
 * The object a host creates once per process: settings, shared run state, the
 * watchdog worker, and `startRun`. It puts together the run slots
 * (`RunSlots`, below), the watchdog worker (`_watchdog_host.ts`), the writer's sinks
 * (`_writer.ts`), the main thread's run ledger writes (`_ledger.ts`) and a
 * run's earlier attempts (`_earlier.ts`), and guards where the host calls in.
 *
 * @module
 */
import * as path from "node:path";
import { capValues, hasCap, PAST_CAP_SECONDS, tierPlan } from "./tier.ts";
import { coreContext, type Env, envOf, resolveHome, type SettingsSource } from "./config.ts";
import { discoverCapsSync, type RunInit } from "./discover.ts";
import { errorText, failOpen, type HostLogger, type Log } from "./log.ts";
import { boundRunId, checkpointFileName } from "./persist.ts";
import {
  type EarlierTrace,
  Run,
  RunContext,
  type RunStart,
  type RunTrace,
  type TraceStart,
  type Tracing,
} from "./run.ts";
import type { WorkspaceHooks } from "./run/_host.ts";
import process from "node:process";
import type { Settings } from "./settings.ts";
import { nowMs, RunTable } from "./_run_table.ts";
import {
  type CheckpointEvent,
  CheckpointWriter,
  hostSinks,
  NO_NOTES,
  type RunInfo,
  type WriterSinks,
} from "./_writer.ts";
import {
  EffectLog,
  type HostId,
  type LedgerCheckpoints,
  LedgerFeed,
  type LedgerSessions,
  type LedgerStore,
  recordOf,
  type RunView,
} from "./_ledger.ts";
import { type TreePlace, TreeSeats } from "./_tree.ts";
import { WatchdogHost, type WatchdogStats } from "./_watchdog_host.ts";
import { resume, type ResumeParts } from "./_earlier.ts";
import { moveIn } from "./_home.ts";
import { type ForkOptions, type ForkResult, forkRun, type ForkStore } from "./run/_fork.ts";
import { SQLITE_FIX, sqliteDriver } from "./_sqlite.ts";

/**
 * Whether the settings want the embedded run ledger and this runtime has no SQLite driver to
 * keep it (Node before 22.5 without a working better-sqlite3).
 */
const noLedgerDriver = (settings: Settings): boolean =>
  settings.enabled && settings.ledger && !/^postgres(ql)?:\/\//i.test(settings.store.trim()) &&
  sqliteDriver() === undefined;

/** The stderr line that says the ledger is off, once per process (the log file alone is missed). */
let toldNoDriver = false;
const NO_DRIVER_LINE =
  `agent-checkpoint: the run ledger is off (no SQLite driver): a killed run leaves only its checkpoint file, a retry does not resume where it died, and replay / effect_tools cannot keep a side effect from running twice. To have it, ${SQLITE_FIX}.\n`;

/** A kanban task comment (S8). */
export interface TaskComment {
  /** The kanban task to comment on. */
  taskId: string;
  /** The comment, headed with the plugin's name, at most 4,000 characters. */
  body: string;
}

/** Options of {@linkcode createAgentCheckpoint}. */
export interface AgentCheckpointOptions {
  /** The profile directory. @default {env.HERMES_HOME, else ~/.hermes} */
  home?: string;
  /** The environment to read. @default {process.env} */
  env?: Env;
  /** Settings that win over `config.yaml`, with S3's snake_case keys. */
  settings?: Record<string, unknown>;
  /** Posts a kanban task comment; may return a promise. */
  postComment?: (comment: TaskComment) => unknown;
  /** Receives log lines. @default {a bounded file, <home>/logs/agent-checkpoint.log} */
  logger?: HostLogger;
  /**
   * An ES module exporting `postComment`, imported by the watchdog worker so
   * comments go out even while the main thread is blocked.
   */
  commentModule?: string | URL;
  /**
   * Called on the main thread after every write of a checkpoint file, the
   * watchdog's included (those arrive when the main thread is next free). A
   * listener that throws costs a log line.
   */
  onCheckpoint?: (event: CheckpointEvent) => void;
  /** @internal The most live runs, for tests of the table's bound. @default {65536} */
  maxRuns?: number;
  /** @internal Ask the watchdog for heap figures every this many ms (benchmarks). */
  watchdogStatsEveryMs?: number;
}

/**
 * The subsystems the keeper works with, plugged in where the library is put
 * together (`mod.ts`), so that the core never imports them. @internal
 */
export interface Subsystems {
  /** Open the run ledger's store on the main thread (short lock waits); undefined when it cannot. */
  openStore(options: {
    home: string;
    settings: Settings;
    mode: "quick";
    /** Never wait on another process's lock: the host's thread is not the store's. */
    busyMs: 0;
    /** At close: a damaged file is moved aside (never deleted) and a new ledger started. */
    setAside?: boolean;
    log: (level: "info" | "warn" | "error", message: string) => void;
  }): LedgerStore | undefined;
  /**
   * The newest record of a run id from the embedded ledger opened for reading
   * only (never waiting on a lock), for a start whose ledger cannot be opened
   * now; undefined when it cannot be read either (or the store is a fleet's).
   */
  peekLatest?(options: { home: string; settings: Settings; runId: string }): RunView | undefined;
  /** This process, as run records name their host. */
  thisHost(): HostId;
  /**
   * The run store's module (`store/mod.ts`), as a specifier the watchdog's thread imports for
   * its run ledger writes: the core never imports it.
   */
  storeModule?: string;
  /** The working-tree snapshots. */
  workspaces(options: {
    home: string;
    log: Log;
    settings: () => Settings;
    env: Env;
  }): WorkspaceHooks;
  /** Runs as OpenTelemetry traces, when a tracer provider is registered. */
  tracing?(options: { log: Log; enabled: () => boolean }): Tracing;
}

/** A run whose hooks do nothing, for when a real one cannot be had. */
const inertRun = (runId: string) =>
  new Run(undefined, {
    info: {
      slot: -1,
      gen: -1,
      runId,
      dialect: "chat",
      caps: {},
      checkpointFile: "",
      notes: NO_NOTES,
    },
    attempt: 1,
  });

/** How long `close()` waits for the watchdog's write in flight. */
const CLOSE_WAIT_MS = 5000;

/** The run's working tree: the one given, else the current directory, else none. */
function workspaceOf(dir: unknown): string {
  return failOpen(
    () => typeof dir === "string" && dir !== "" ? path.resolve(dir) : process.cwd(),
    () => "", // the current directory was deleted: no snapshots for this run
  );
}

/** The working-tree snapshots, made on first use (none without the subsystem). */
class LazyWorkspaces {
  #hooks: WorkspaceHooks | undefined;
  readonly #make: () => WorkspaceHooks | undefined;

  constructor(make: () => WorkspaceHooks | undefined) {
    this.#make = make;
  }

  get(): WorkspaceHooks | undefined {
    return this.#hooks ??= this.#make();
  }
}

/**
 * When the watchdog starts: at a run's hook whose settings want it (the watchdog, or the run
 * ledger the worker keeps), never once the keeper closed; then the runs' contact is a field read.
 */
class WatchdogContact {
  /** The keeper closed: no start from now on. */
  closed = false;
  /** The shared table's run context, whose runs' contact this switches off. */
  context: RunContext | undefined;
  readonly #watchdog: WatchdogHost;
  readonly #ledger: LedgerFeed;
  readonly #source: SettingsSource;

  constructor(watchdog: WatchdogHost, ledger: LedgerFeed, source: SettingsSource) {
    this.#watchdog = watchdog;
    this.#ledger = ledger;
    this.#source = source;
  }

  /** Whether these settings want the watchdog: for its checkpoints, or the run ledger's records. */
  #wants(settings: Settings): boolean {
    return settings.watchdog || (settings.ledger && this.#ledger.wanted);
  }

  /**
   * The keeper is made: the watchdog's thread starts now when its settings want it (after the
   * store, whose port it may take). Starting a thread blocks its caller for tens of
   * milliseconds, which a run's first hook must not pay.
   */
  start(settings: Settings): void {
    if (settings.enabled && this.#wants(settings)) this.#watchdog.start();
    this.#settle();
  }

  /**
   * A run's start or hook saw these settings: when they want the watchdog and it does not run,
   * its start is queued for when the host's event loop next turns, never made on this path.
   */
  contact(settings: Settings): void {
    const watchdog = this.#watchdog;
    if (!this.closed && !watchdog.running && !watchdog.queued && this.#wants(settings)) {
      watchdog.startSoon(() => this.contact(this.#source.at(nowMs())));
    }
    this.#settle();
  }

  /** Running, or never to run: the runs' contact is a field read from now on. */
  #settle(): void {
    const watchdog = this.#watchdog;
    if ((watchdog.running || watchdog.failed || this.closed) && this.context) {
      this.context.watchdogDue = false;
    }
  }

  /** Running, or started for a run (the ledger wants it) once its startRun returns. */
  watched(): boolean {
    return this.#watchdog.running || (!this.#watchdog.failed && !this.closed);
  }
}

/** What every run context of a keeper works with. */
interface RunContextParts {
  source: SettingsSource;
  log: Log;
  workspaces: LazyWorkspaces;
  contact: WatchdogContact;
  trees: TreeSeats;
  effects: EffectLog;
  ledger: LedgerFeed;
  host: () => HostId;
}

/** Makes the run context of a table (the keeper's shared one, or a run's own when it is full). */
class RunContexts {
  readonly #parts: RunContextParts;
  /** The turns and tokens of each run as its record was last written ahead of an intent. */
  readonly #progressed = new WeakMap<RunInfo, string>();

  constructor(parts: RunContextParts) {
    this.#parts = parts;
  }

  /** The context of the runs of one table; `release` lets a run's slot go when it ends. */
  of(table: RunTable, writer: CheckpointWriter, release: (info: RunInfo) => void): RunContext {
    const { source, log, workspaces, contact, trees, effects, ledger, host } = this.#parts;
    const progressed = this.#progressed;
    return new RunContext({
      source,
      shared: table,
      log,
      writer,
      workspaces: () => workspaces.get(),
      watchdog: (settings) => contact.contact(settings),
      trees,
      effects: {
        intent: (intent) => effects.intent(intent),
        receipt: (receipt) => effects.receipt(receipt),
        read: (runId) => effects.read(runId),
        progress: (info) => {
          const settings = source.at(nowMs());
          if (!settings.enabled || !settings.ledger || !ledger.wanted) return;
          // Once per turn and spend: the intents of one turn need the record written only once.
          const use = `${table.turns(info.slot)}:${table.tokens(info.slot)}`;
          if (progressed.get(info) === use) return;
          progressed.set(info, use);
          const record = recordOf(info, table, host(), nowMs());
          ledger.write([record], "the run's progress");
        },
      },
      journal: {
        write: (entry) => effects.journal(entry),
        read: (runId) => effects.readJournal(runId),
      },
      ended: (info, end) => {
        if (end) ledger.end(table, info, end);
        release(info);
      },
    });
  }
}

/** Who besides the host hears of each write (the writer's sinks read it at each write). */
interface WriteListeners {
  ledger: { readonly store: LedgerStore | undefined; written?(file: string): void };
  tracing: Tracing | undefined;
  spans: boolean;
}

/** A keeper's parts, wired to each other and never to the keeper. */
interface KeeperParts {
  home: string;
  env: Env;
  log: Log;
  source: SettingsSource;
  shared: RunTable;
  writer: CheckpointWriter;
  sinks: WriterSinks;
  listeners: WriteListeners;
  slots: RunSlots;
  tracing: Tracing | undefined;
  ledger: LedgerFeed;
  effects: EffectLog;
  resumeParts: ResumeParts;
  watchdog: WatchdogHost;
  trees: TreeSeats;
  contact: WatchdogContact;
  contexts: RunContexts;
  context: RunContext;
  /** This process, as run records name it: asked only once the run store is open. */
  host: () => HostId;
}

/**
 * Wire a keeper's parts: the core context (settings, run table, writer and its sinks), the run
 * slots, tracing, the run ledger's main-thread writes, side effects, a start's ledger reads, the
 * watchdog's host and its contact, the trees, and the run context of the shared table. Each part
 * gets the parts it uses; none points back at the keeper, which holds them.
 */
function keeperParts(options: AgentCheckpointOptions, subsystems?: Subsystems): KeeperParts {
  const env = envOf(options.env);
  const home = resolveHome(options.home, env);
  const listeners: WriteListeners = {
    ledger: { store: undefined },
    tracing: undefined,
    spans: false,
  };
  // The same core context as the watchdog's thread builds, over a new run table.
  const core = coreContext({
    home,
    env,
    overrides: options.settings,
    ...(options.maxRuns !== undefined ? { maxRuns: options.maxRuns } : {}),
    ...(options.logger !== undefined ? { logger: options.logger } : {}),
    // State an earlier version left in Hermes's folder is moved into the library's own, once.
    beforeSettings: (log) => moveIn(home, log),
    onLoad: (loaded, log) => {
      for (const warning of loaded.warnings) log("warn", warning);
    },
    // Every write, the watchdog's included, is told to the run ledger's store and, once a
    // run has a span, the tracer, read from the listeners at each write.
    sinks: (log) => hostSinks(log, options, listeners),
  });
  const { log, shared, source, writer, sinks } = core;
  const settingsAt = (now: number) => source.at(now);
  const host = (): HostId => subsystems!.thisHost();
  const slots = new RunSlots(shared, log, settingsAt);
  const tracing = failOpen(
    () => subsystems?.tracing?.({ log, enabled: () => source.at(nowMs()).otel }),
    (error) => {
      log("warn", `OpenTelemetry is off: ${errorText(error)}`);
      return undefined;
    },
  );
  listeners.tracing = tracing;
  const ledger: LedgerFeed = new LedgerFeed({
    // Undefined: not now, tried again; null: never (no store subsystem, no driver).
    open: (settings, feedLog, closing) => {
      if (!subsystems) return null;
      let never = false;
      const store = subsystems.openStore({
        home,
        settings,
        mode: "quick",
        busyMs: 0,
        ...(closing ? { setAside: true } : {}),
        log: (level, message) => {
          if (level === "info") never = true; // the one line that says there is no driver
          feedLog(level, message);
        },
      });
      if (never && !toldNoDriver && noLedgerDriver(settings)) {
        toldNoDriver = true;
        failOpen(() => void process.stderr.write(NO_DRIVER_LINE), () => {});
      }
      return store ?? (never ? null : undefined);
    },
    host,
    log,
    settingsAt,
    shared,
    runs: () => slots.runs,
    handOn: (records) => watchdog.handOn(records),
  });
  // Built before any write can come: the sinks read its store at each write.
  listeners.ledger = ledger;
  const effects = new EffectLog({
    store: () => {
      const settings = source.at(nowMs());
      if (!settings.enabled || !settings.ledger || !ledger.wanted) return null;
      return ledger.open(settings);
    },
    log,
  });
  const watchdog = new WatchdogHost({
    shared,
    home,
    env,
    options,
    log,
    comment: (comment) => sinks.comment(comment, ""),
    written: (event) => sinks.written(event),
    storePort: () => ledger.store?.relay?.watchdogPort(),
    ...(subsystems?.storeModule !== undefined ? { storeModule: subsystems.storeModule } : {}),
  });
  const contact = new WatchdogContact(watchdog, ledger, source);
  const resumeParts: ResumeParts = {
    log,
    store: (settings) => ledger.open(settings),
    ...(subsystems?.peekLatest
      ? { peek: (settings, runId) => subsystems.peekLatest!({ home, settings, runId }) }
      : {}),
    host,
    write: (records, what) => ledger.write(records, what),
    watched: () => contact.watched(),
  };
  const trees = new TreeSeats(() => {
    const group = ledger.store?.trees;
    if (!group) return undefined;
    return {
      read: (root) => group.readSync(root),
      join: (runId, place) => group.joinSync(runId, place.root, place.parent),
      push: (info) => group.writeSync(recordOf(info, shared, host(), nowMs())),
      admit: (root, info, decide) =>
        group.admitSync(
          root,
          (rows) => decide(rows) ? recordOf(info, shared, host(), nowMs()) : undefined,
        ),
    };
  }, (what, error) => log("warn", `${what} failed: ${errorText(error)}`));
  const workspaces = new LazyWorkspaces(() =>
    subsystems?.workspaces({ home, log, settings: () => source.at(nowMs()), env })
  );
  const contexts = new RunContexts({
    source,
    log,
    workspaces,
    contact,
    trees,
    effects,
    ledger,
    host,
  });
  const context = contexts.of(shared, writer, (info) => slots.free(info.slot, "ended"));
  contact.context = context;
  return {
    home,
    env,
    log,
    source,
    shared,
    writer,
    sinks,
    listeners,
    slots,
    tracing,
    ledger,
    effects,
    resumeParts,
    watchdog,
    trees,
    contact,
    contexts,
    context,
    host,
  };
}

/**
 * Durable checkpoints for the runs of one host process. Create it with
 * {@linkcode createAgentCheckpoint}.
 */
export class AgentCheckpoint {
  readonly #home: string;
  readonly #env: Env;
  readonly #log: Log;
  readonly #source: SettingsSource;
  readonly #shared: RunTable;
  readonly #slots: RunSlots;
  readonly #writer: CheckpointWriter;
  readonly #sinks: WriterSinks;
  /** Who besides the host hears of each write. */
  readonly #listeners: WriteListeners;
  readonly #watchdog: WatchdogHost;
  /** When the watchdog starts, and whether the keeper closed. */
  readonly #contact: WatchdogContact;
  /** What the runs of the shared table work with. */
  readonly #context: RunContext;
  /** Makes the context of a table's runs. */
  readonly #contexts: RunContexts;
  /** The run ledger's main-thread writes. */
  readonly #ledger: LedgerFeed;
  /** What a run's start reads and writes of the run ledger. */
  readonly #resumeParts: ResumeParts;
  /** The trees of runs that share a budget. */
  readonly #trees: TreeSeats;
  /** Runs as OpenTelemetry traces. */
  readonly #tracing: Tracing | undefined;
  /** Side effects' intents and receipts on their way to the run ledger. */
  readonly #effects: EffectLog;
  /** This process, as run records name it. */
  readonly #host: () => HostId;

  /** @internal Use {@linkcode createAgentCheckpoint}. */
  constructor(options: AgentCheckpointOptions, subsystems?: Subsystems) {
    const parts = keeperParts(options, subsystems);
    this.#home = parts.home;
    this.#env = parts.env;
    this.#log = parts.log;
    this.#source = parts.source;
    this.#shared = parts.shared;
    this.#slots = parts.slots;
    this.#writer = parts.writer;
    this.#sinks = parts.sinks;
    this.#listeners = parts.listeners;
    this.#watchdog = parts.watchdog;
    this.#contact = parts.contact;
    this.#context = parts.context;
    this.#contexts = parts.contexts;
    this.#ledger = parts.ledger;
    this.#resumeParts = parts.resumeParts;
    this.#trees = parts.trees;
    this.#tracing = parts.tracing;
    this.#effects = parts.effects;
    this.#host = parts.host;
    // Opened now, not in the first startRun: creating a store costs a few disk flushes.
    const settings = this.#source.at(nowMs());
    if (settings.enabled && settings.ledger) this.#ledger.open(settings);
    // The watchdog's thread too, off every hook's path. A keeper whose settings want no
    // watchdog yet starts it once a hook sees settings that do.
    this.#contact.start(settings);
  }

  /** The settings in force now. */
  get settings(): Settings {
    return this.#source.at(nowMs());
  }

  /** @internal The watchdog's last heap report, when asked for (benchmarks). */
  get watchdogStats(): WatchdogStats | undefined {
    return this.#watchdog.stats;
  }

  /** @internal The run ledger's statements so far, when its store counts them (benchmarks). */
  get ledgerStatements(): number | undefined {
    return this.#ledger.store?.relay?.statements;
  }

  /** @internal The commits of side effects' intents and receipts so far (tests, benchmarks). */
  get effectCommits(): number {
    return this.#effects.commits;
  }

  /** @internal Settles once the OpenTelemetry API is loaded or known absent (tests). */
  get tracingReady(): Promise<void> {
    return this.#tracing?.ready ?? Promise.resolve();
  }

  /**
   * @internal Throw when `what` (a setting, an adapter's option) needs the run ledger and this
   * runtime has no SQLite driver to keep it: exactly-once effects and enforced budgets must not
   * quietly do nothing.
   */
  needLedger(what: string): void {
    if (!failOpen(() => noLedgerDriver(this.#source.at(nowMs())), () => false)) return;
    const message =
      `agent-checkpoint: ${what} needs the run ledger, which is off: this runtime has no SQLite driver (Node ${process.versions.node} has no node:sqlite, and the better-sqlite3 package is not installed or did not build); ${SQLITE_FIX}`;
    this.#log("error", message);
    throw new Error(message);
  }

  /**
   * @internal A graph framework's checkpoints in this keeper's run store (its
   * embedded ledger, or the fleet store the `store` setting names), opened
   * when first asked.
   *
   * @throws {Error} When the keeper is closed, the settings turn the run
   * ledger off, this runtime has no SQLite driver, or the store cannot be
   * opened now (it is tried again at the next call).
   */
  graphCheckpoints(): LedgerCheckpoints {
    return this.#storeGroup("graph checkpoints", (store) => store.checkpoints);
  }

  /**
   * @internal A framework's session transcripts in this keeper's run store
   * (its embedded ledger, or the fleet store the `store` setting names),
   * opened when first asked.
   *
   * @throws {Error} As {@linkcode AgentCheckpoint.graphCheckpoints} does.
   */
  sessionTranscripts(): LedgerSessions {
    return this.#storeGroup("session transcripts", (store) => store.sessions);
  }

  /** A group of the run store, which the run ledger's settings and driver must allow. */
  #storeGroup<T>(what: string, group: (store: LedgerStore) => T | undefined): T {
    if (this.#contact.closed) throw new Error("agent-checkpoint: the keeper is closed");
    const settings = this.#source.at(nowMs());
    if (!settings.enabled || !settings.ledger) {
      throw new Error(
        `agent-checkpoint: ${what} need the run ledger, which the settings turn off (${
          settings.enabled ? "ledger" : "enabled"
        }: false)`,
      );
    }
    this.needLedger(what);
    const store = this.#ledger.open(settings);
    if (!store) {
      throw new Error(
        "agent-checkpoint: the run ledger cannot be opened now (the log says why); tried again at the next call",
      );
    }
    const port = group(store);
    if (!port) {
      throw new Error(
        `agent-checkpoint: the run store at ${
          (store as { location?: string }).location ?? "this home"
        } keeps no ${what}`,
      );
    }
    return port;
  }

  /**
   * Fork a run at a step: make run `options.as`, whose journal is run
   * `runId`'s first `options.at` steps (a step: a model call and the tool
   * calls made after it, before the next model call), copied from its
   * attempt that got furthest (or `options.attempt`). The new run's first
   * start replays them (no model call, no tool run) and goes live at step
   * `at + 1`; `agent-checkpoint show NEW --steps` says it was forked. The
   * new run is written as one ended attempt marked forked, so its first start
   * is attempt 2.
   *
   * @param runId The run forked, in this keeper's run ledger.
   * @param options `at`: the steps copied, from 1; `as`: the new run's id (not taken);
   * `attempt`: the source attempt.
   * @returns What was copied: the source attempt, its steps, the calls copied.
   * @throws {RangeError} When `at` is not a whole number of at least 1.
   * @throws {ForkError} When `runId` is unknown, `as` is taken, or `at` is past the run's steps.
   * @throws {Error} When the keeper is closed or has no run ledger (off, no driver, not open now).
   *
   * @example Fork a finished run at step 1: the fork replays it, then goes live
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * let calls = 0;
   * const agent = async (sessionId: string) => {
   *   const run = ac.startRun({ sessionId });
   *   for (const step of [1, 2]) {
   *     await run.journal.model({ step }, () => ({ text: `answer ${++calls}` }));
   *     await run.journal.tool("note", { step }, () => "noted");
   *   }
   *   const replayed = run.journal.replayed;
   *   await run.end();
   *   return replayed;
   * };
   * await agent("first");
   * assert.equal(calls, 2);
   * const made = await ac.fork("first", { at: 1, as: "second" });
   * assert.deepEqual([made.steps, made.models, made.tools], [2, 1, 1]);
   * assert.equal(await agent("second"), 1); // step 1 replayed from the fork
   * assert.equal(calls, 3); // step 2 went to the model
   * await ac.close();
   * ```
   */
  async fork(runId: string, options: ForkOptions): Promise<ForkResult> {
    if (this.#contact.closed) throw new Error("agent-checkpoint: the keeper is closed");
    const settings = this.#source.at(nowMs());
    if (!settings.enabled || !settings.ledger) {
      throw new Error(
        `agent-checkpoint: a fork needs the run ledger, which the settings turn off (${
          settings.enabled ? "ledger" : "enabled"
        }: false)`,
      );
    }
    this.needLedger("a fork");
    const store = this.#ledger.open(settings);
    const sync = store?.sync;
    if (!store || !sync) {
      throw new Error(
        "agent-checkpoint: the run ledger cannot be opened now (the log says why); tried again at the next call",
      );
    }
    const forkStore: ForkStore = {
      latest: (id) => sync.latest(id),
      write: (batch) => store.write(batch),
      ...(store.journal ? { journal: store.journal } : {}),
    };
    return await forkRun(forkStore, runId, { ...options, host: this.#host() });
  }

  /** @internal The shared run table, for tests that move a run's clock. */
  get sharedRuns(): RunTable {
    return this.#shared;
  }

  /**
   * Start a run: discover its dialect and caps (S4), pick its checkpoint file
   * (S8), resume from an earlier attempt's checkpoint (S16), and return its
   * hooks. On an internal error the run's hooks are no-ops and a log line
   * says why. Without a run ledger (no SQLite driver), the checkpoint file is
   * written at the start, so a killed run always leaves one.
   *
   * @throws {Error} Only when the settings `effect_tools` or `enforce` need
   * the run ledger and this runtime has no SQLite driver to keep it (the
   * message names the package to install).
   *
   * @param init The session, and the task, dialect, caps and goal when known.
   * @returns The run.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "abc", caps: { turns: 40, timeSeconds: 900 } });
   * assert.equal(run.runId, "abc");
   * assert.deepEqual(run.caps.turns, { value: 40, source: "host" });
   * assert.ok(run.checkpointFile.endsWith("abc.md"));
   * assert.equal(run.attempt, 1);
   * // A second live run with the same id gets a file of its own.
   * assert.equal(ac.startRun({ sessionId: "abc" }).runId, "abc.2");
   * await ac.close();
   * ```
   */
  startRun(init: RunInit): Run {
    const sessionId = failOpen(() => String(init?.sessionId ?? ""), (error) => {
      this.#log("error", `startRun: the session id cannot be read (${errorText(error)})`);
      return undefined;
    });
    if (sessionId === undefined) return inertRun("");
    if (this.#contact.closed) {
      this.#log("info", "startRun() after close(): this run gets no checkpoints", sessionId);
      return inertRun(sessionId);
    }
    const wants = failOpen(() => {
      const settings = this.#source.at(nowMs());
      return [
        settings.effect_tools.length !== 0 ? "the setting effect_tools" : "",
        settings.enforce.length !== 0 ? "the setting enforce" : "",
      ].filter((what) => what !== "").join(" and ");
    }, () => "");
    if (wants !== "") this.needLedger(wants);
    let claimed: { slot: number; gen: number } | undefined;
    let taken = false;
    return failOpen(() => {
      const now = nowMs();
      const settings = this.#source.at(now);
      const found = discoverCapsSync({ ...init, sessionId }, {
        home: this.#home,
        env: this.#env,
        settings,
        config: this.#source.config,
      });
      for (const problem of found.problems) this.#log("warn", problem, found.runId);
      claimed = this.#slots.claim(now);
      const runId = this.#slots.ownId(found.runId);
      const own = claimed ? undefined : this.#slots.unwatched(
        runId,
        now,
        (table, release) =>
          this.#contexts.of(table, new CheckpointWriter(table, this.#sinks), release),
      );
      const info: RunInfo = {
        slot: claimed?.slot ?? 0,
        gen: claimed?.gen ?? own!.gen,
        runId,
        dialect: found.dialect,
        caps: found.caps,
        checkpointFile: path.join(settings.checkpoint_dir, checkpointFileName(runId)),
        notes: NO_NOTES,
        attempt: 1,
      };
      if (found.taskId !== undefined) info.taskId = found.taskId;
      const place = this.#placeOf(init, runId);
      if (place) info.tree = place;
      const model = (init as { model?: unknown } | undefined)?.model;
      if (typeof model === "string" && model !== "") info.model = model.slice(0, 200);
      const table = own ? own.context.shared : this.#shared;
      // Where the run's clock and turn count start when Hermes began them earlier.
      if (found.origin) {
        table.setStart(info.slot, now - Math.max(0, Date.now() - found.origin.atMs));
      }
      if (found.turnsUsed) table.raiseTurns(info.slot, found.turnsUsed.value);
      if (found.goalSession !== undefined) info.goalSession = found.goalSession;
      const began = resume(info, table, settings, now, this.#resumeParts);
      if (began && "refused" in began) {
        // Another live attempt holds the run (on_duplicate: refuse): this one does nothing.
        if (claimed) this.#slots.unclaim(claimed.slot);
        claimed = undefined;
        return new Run(undefined, {
          info: { ...info, slot: -1, gen: -1, checkpointFile: "", notes: NO_NOTES },
          attempt: info.attempt ?? 1,
          refused: began.refused,
        });
      }
      const resumed = began;
      const trace = this.#traceOf(info, table, settings, now, init, resumed?.trace);
      this.#slots.take(info, claimed !== undefined);
      if (claimed) {
        taken = true;
        this.#context.publish(info);
        this.#shared.wake();
      }
      // The worker keeps the run's ledger record up to date from now on. Started with the keeper;
      // when it was not (the settings wanted none then), once the host's event loop turns.
      if (claimed && settings.enabled && this.#context.watchdogDue) this.#contact.contact(settings);
      const start: RunStart = {
        info,
        attempt: info.attempt ?? 1,
        workspace: workspaceOf(init?.workspace),
      };
      if (place) start.tree = this.#trees.seat(runId, place);
      if (resumed) start.previous = resumed.previous;
      if (resumed?.resumeNote !== undefined) start.resumeNote = resumed.resumeNote;
      if (trace) start.trace = trace;
      if (resumed?.noFile) start.noFile = true;
      if (resumed?.effects) start.effects = resumed.effects;
      const run = new Run(own?.context ?? this.#context, start);
      // No ledger to say where a killed run was: its file says it was started.
      if (noLedgerDriver(settings)) {
        void run.checkpoint("Run started (written at the start: the run ledger is off).");
      }
      return run;
    }, (error) => {
      if (claimed && !taken) this.#slots.unclaim(claimed.slot);
      this.#log("error", `startRun failed; this run gets no checkpoints: ${errorText(error)}`);
      return inertRun(sessionId);
    });
  }

  /**
   * Where a run sits in a tree of runs sharing a budget: under the parent it
   * was given (a run of this keeper joins a tree as its root when it has
   * none), else under env `AGENT_CHECKPOINT_PARENT`; undefined for a run of
   * its own.
   */
  #placeOf(init: RunInit, runId: string): TreePlace | undefined {
    const given = (init as { parent?: unknown }).parent;
    if (given instanceof Run) {
      if (given.runId === runId || given.runId === "") return undefined;
      let seat = given.budget.seat;
      if (!seat) {
        seat = this.#trees.seat(given.runId, { root: given.runId });
        given.budget.join(seat);
      }
      return { root: seat.place.root, parent: given.runId };
    }
    let parent: string | undefined;
    if (typeof given === "string" && given.trim() !== "") parent = given;
    else if (given !== undefined) {
      this.#log("warn", "startRun: parent must be a run or a run id; this run has none", runId);
      return undefined;
    } else parent = this.#env.AGENT_CHECKPOINT_PARENT?.trim() || undefined;
    // A long id names its run as the run keeps it (its head and a hash), as that run's own start did.
    if (parent !== undefined) parent = boundRunId(parent);
    if (parent === undefined || parent === runId) return undefined;
    const local = this.#trees.of(parent);
    if (local) return { root: local.place.root, parent };
    const treeEnv = given === undefined ? this.#env.AGENT_CHECKPOINT_TREE?.trim() : undefined;
    const root = (treeEnv ? boundRunId(treeEnv) : undefined) ||
      failOpen(
        () => this.#ledger.store?.sync?.latest(parent)?.record.tree?.root,
        () => undefined,
      ) ||
      parent;
    return { root, parent };
  }

  /**
   * The run's span, when a tracer listens: its ids go into the run's description, so that
   * its ledger records name it, and into the ledger now, so a kill cannot lose them.
   */
  #traceOf(
    info: RunInfo,
    table: RunTable,
    settings: Settings,
    now: number,
    init: RunInit,
    earlier: EarlierTrace | undefined,
  ): RunTrace | undefined {
    const tracing = this.#tracing;
    if (!tracing || !settings.enabled) return undefined;
    const start: TraceStart = {
      runId: info.runId,
      attempt: info.attempt ?? 1,
      dialect: info.dialect,
      caps: info.caps,
      startedAt: table.start(info.slot) || now,
      checkpointFile: info.checkpointFile,
    };
    const agent = (init as { agentName?: unknown } | undefined)?.agentName;
    if (typeof agent === "string" && agent !== "") start.agentName = agent.slice(0, 200);
    if (info.model !== undefined) start.model = info.model;
    if (earlier) start.earlier = earlier;
    let later = false;
    const trace = tracing.start(start, (ref) => {
      info.trace = ref;
      // A span started once the API was loaded: the run's next record carries its ids (a record
      // written now could land over the run's end).
      if (later) return;
      if (settings.ledger && this.#ledger.store) {
        this.#ledger.write([recordOf(info, table, this.#host(), now)], "the run's span");
      }
    });
    later = true;
    if (!trace) return undefined;
    // Every write of a checkpoint file, the watchdog's included, is an event on its run's span.
    this.#listeners.spans = true;
    return trace;
  }

  /**
   * Stop the watchdog, after its write in flight lands, and make every run's
   * hooks no-ops. Safe to call twice.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * await ac.close();
   * await ac.close();
   * ```
   */
  async close(): Promise<void> {
    if (this.#contact.closed) return;
    this.#contact.closed = true;
    // Intents and receipts on their way land first (bounded), while the store is open.
    if (this.#effects.busy) await this.#effects.close().catch(() => {});
    this.#shared.beginClose();
    this.#trees.close();
    // A checkpoint write that failed (a full disk) is tried once more, before the runs' records.
    this.#writer.settle();
    const ledgerClosed = this.#ledger.close();
    const runs = this.#slots.runs;
    for (let slot = 0; slot < runs.length; slot++) {
      if (runs[slot]) this.#slots.free(slot, "closed");
    }
    failOpen(() => this.#tracing?.close(), () => {});
    await this.#watchdog.stop(CLOSE_WAIT_MS);
    await ledgerClosed;
  }
}

/**
 * The run slots of one keeper's table. @internal
 *
 * @example
 * ```ts
 * import { RunSlots } from "./agent_checkpoint.ts";
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
