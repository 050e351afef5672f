/**
 * The object a host creates once per process: settings, shared run state, the
 * watchdog worker, and `startRun`.
 *
 * @module
 */
import * as path from "node:path";
import { Worker } from "node:worker_threads";
import { type Env, envOf, type LoadedSettings, resolveHome, SettingsSource } from "./config.ts";
import { discoverCapsSync, type RunInit } from "./discover.ts";
import { createLog, deniedRead, errorText, type HostLogger, type Log } from "./log.ts";
import { checkpointFileName, ensureDir, readCheckpoint, writeFileAtomicSync } from "./persist.ts";
import { MAX_ATTEMPTS, summaryLine, type UsageTotals } from "./_record.ts";
import { type PreviousAttempt, Run, type RunStart } from "./run.ts";
import { RunContext, type WorkspaceHooks } from "./_run_context.ts";
import process from "node:process";
import type { Settings } from "./settings.ts";
import { capValues, hasCap, PAST_CAP_SECONDS, tierPlan } from "./tier.ts";
import { nowMs, RunTable } from "./_run_table.ts";
import {
  type CheckpointEvent,
  CheckpointWriter,
  type RunInfo,
  type WriterSinks,
} from "./_writer.ts";
import type { FromWorker, WatchdogData, WatchdogStats } from "./_watchdog_protocol.ts";
import {
  endRecord,
  ledgerFailed,
  type LedgerStore,
  ledgerSummary,
  recordOf,
  remainingCaps,
  resumeNote,
  unknownCalls,
} from "./_ledger.ts";
// Types only: the run store's records, as the run ledger (`_ledger.ts`) speaks them too.
import type { HostId, PriorUse, RunRecord, RunView } from "./store/types.ts";
import { existsSync } from "node:fs";
import type { EndStatus } from "./_record.ts";
// In the static module graph so that Deno, importing the library by URL, fetches the
// watchdog with it: a worker that fetched it later would do so while the host may be
// blocked. Outside a worker the module does nothing.
import "./watchdog.ts";

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
 * The watchdog module. `node:worker_threads` starts only `file:` and `data:`
 * URLs, so a library imported by https URL (Deno) starts a `data:` module
 * that imports the watchdog from where the library came from.
 */
function workerUrl(): URL {
  const url = new URL(
    import.meta.url.endsWith(".ts") ? "./watchdog.ts" : "./watchdog.js",
    import.meta.url,
  );
  if (url.protocol === "file:") return url;
  return new URL(
    `data:text/javascript,${encodeURIComponent(`import ${JSON.stringify(url.href)};`)}`,
  );
}

/**
 * The overrides as the worker can take them: each key that survives a
 * structured clone, so one odd value (a bigint, a function) costs only its own
 * key, with a warning, never the others.
 */
function cloneableOverrides(
  value: Record<string, unknown> | undefined,
  warn: (message: string) => void,
): Record<string, unknown> | undefined {
  if (value === undefined || value === null || typeof value !== "object") return undefined;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    try {
      out[key] = structuredClone(value[key]);
    } catch {
      warn(`setting ${key} cannot be passed to the watchdog thread; the watchdog uses its default`);
    }
  }
  return out;
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
    log: (level: "info" | "warn" | "error", message: string) => void;
  }): LedgerStore | undefined;
  /** This process, as run records name their host. */
  thisHost(): HostId;
  /** The working-tree snapshots. */
  workspaces(options: {
    home: string;
    log: Log;
    settings: () => Settings;
    env: Env;
  }): WorkspaceHooks;
}

const fileExists = (file: string) => {
  try {
    return existsSync(file);
  } catch {
    return false;
  }
};

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
      notes: [],
    },
    dialect: "chat",
    attempt: 1,
  });

/** How long the main thread waits before it tries to open a store that failed to open again. */
const LEDGER_REOPEN_MS = 30_000;
/** Ledger records the main thread keeps while the store cannot take them. */
const LEDGER_PENDING = 10_000;
/** How long `close()` waits for the watchdog's write in flight. */
const CLOSE_WAIT_MS = 5000;

/** The run's working tree: the one given, else the current directory, else none. */
function workspaceOf(dir: unknown): string {
  try {
    return typeof dir === "string" && dir !== "" ? path.resolve(dir) : process.cwd();
  } catch {
    return ""; // the current directory was deleted: no snapshots for this run
  }
}

/** What a resumed run starts with: its earlier attempt, their summaries, and what they used. */
interface Earlier {
  previous: PreviousAttempt;
  attempts: string[];
  prior: PriorUse;
  resumeNote?: string;
}

/** What the attempts up to this one used: the earlier ones' (`before`) and this one's. */
function priorUse(
  before: PriorUse | undefined,
  turns: number,
  seconds: number,
  usage: UsageTotals | undefined,
): PriorUse {
  const out: PriorUse = {
    turns: (before?.turns ?? 0) + turns,
    seconds: (before?.seconds ?? 0) + seconds,
  };
  const tokens = (before?.tokens ?? 0) + (usage ? usage.inputTokens + usage.outputTokens : 0);
  if (tokens > 0) out.tokens = tokens;
  // Dollars add up only while every attempt's cost is known (none used is known: $0).
  const earlier = before === undefined
    ? 0
    : before.usd ?? ((before.tokens ?? 0) > 0 ? undefined : 0);
  const now = usage === undefined ? 0 : usage.usd;
  const usd = earlier === undefined || now === undefined ? undefined : earlier + now;
  if (usd !== undefined && usd > 0) out.usd = usd;
  return out;
}

/** The earlier attempt as the run ledger recorded it, with what its file adds when it has one. */
function ledgerAttempt(
  view: RunView,
  file: Earlier | undefined,
  now: number,
): Earlier | undefined {
  const r = view.record;
  if (r.status === "done") return undefined;
  const same = file && file.previous.attempt === r.attempt ? file.previous : undefined;
  const status = view.state === "ended" ? r.status as EndStatus : view.state;
  const host = { machine: r.host.machine, pid: r.host.pid };
  if (same && Date.parse(same.persistedAt) > r.updatedAt) {
    // The file was written after the ledger's last record (the process died within an interval).
    return {
      ...file!,
      previous: { ...same, status, host },
      prior: priorUse(r.prior, same.turnsUsed, same.elapsedSeconds, same.usage ?? r.usage),
    };
  }
  const summary = ledgerSummary(view, now);
  const calls = view.state === "ended" ? [] : unknownCalls(view, now);
  // The file adds the agent's own record, when it is this attempt's.
  const previous: PreviousAttempt = {
    attempt: r.attempt,
    kind: same?.kind ?? "progress",
    tier: Math.max(r.tier, same?.tier ?? 0),
    source: same?.source ?? "ledger",
    turnsUsed: r.turnsUsed,
    elapsedSeconds: r.elapsedSeconds,
    caps: r.caps,
    persistedAt: new Date(r.updatedAt).toISOString(),
    incomplete: file?.previous.incomplete ?? false,
    summary: summary +
      (same ? `; last checkpoint file write: ${same.kind} at ${same.persistedAt}` : "") +
      (file?.previous.incomplete ? "; its file is marked INCOMPLETE" : ""),
    status,
    host,
  };
  if (r.end) previous.endStatus = r.end.status;
  if (calls.length > 0) previous.inFlight = calls;
  if (r.usage) previous.usage = r.usage;
  const attempts = [...(r.attempts ?? file?.attempts.slice(0, -1) ?? []), previous.summary]
    .slice(-MAX_ATTEMPTS);
  const used = Math.max(r.elapsedSeconds, (now - r.startedAt) / 1000);
  const seconds = view.state === "live" ? used : r.end ? r.elapsedSeconds : Math.max(
    r.elapsedSeconds,
    ((view.heartbeat?.at ?? r.updatedAt) - r.startedAt) / 1000,
  );
  const prior = priorUse(r.prior, r.turnsUsed, Math.max(0, seconds), r.usage);
  return { previous, attempts, prior };
}

/** The earlier attempt recorded in a checkpoint file, when it did not end done (S16). */
function earlierAttempt(
  file: string,
  log: (message: string) => void,
): Earlier | undefined {
  const found = readCheckpoint(file);
  if (found.dropped) {
    log(
      `${file}: fields of the wrong type in its record were ignored: ${found.dropped.join(", ")}`,
    );
  }
  const record = found.record;
  if (!record || record.end?.status === "done") return undefined;
  const summary = summaryLine(record) +
    (found.incomplete ? "; its file is marked INCOMPLETE" : "");
  const previous: PreviousAttempt = {
    attempt: record.attempt ?? 1,
    kind: record.kind,
    tier: record.tier,
    source: record.source,
    turnsUsed: record.turnsUsed,
    elapsedSeconds: record.elapsedSeconds,
    caps: record.caps,
    persistedAt: record.persistedAt,
    incomplete: found.incomplete,
    summary,
  };
  if (record.end) previous.endStatus = record.end.status;
  if (record.usage) previous.usage = record.usage;
  const attempts = [...(record.attempts ?? []), summary].slice(-MAX_ATTEMPTS);
  return {
    previous,
    attempts,
    prior: priorUse(undefined, record.turnsUsed, record.elapsedSeconds, record.usage),
  };
}

/** The keepers whose live runs' ledger records are written when the process exits. */
const exiting = new Set<WeakRef<AgentCheckpoint>>();

/** Write a keeper's live runs' records when the process exits; one listener for them all. */
let listening = false;
function atExit(keeper: AgentCheckpoint): void {
  if (!listening) {
    listening = true;
    process.on("exit", () => {
      for (const ref of exiting) ref.deref()?.ledgerAtExit();
      // A store that writes from another thread (the fleet store): a bounded wait for it.
      for (const ref of exiting) ref.deref()?.ledgerDrain();
    });
  }
  for (const ref of exiting) if (ref.deref() === undefined) exiting.delete(ref);
  exiting.add(new WeakRef(keeper));
}

/**
 * Durable checkpoints for the runs of one host process. Create it with
 * {@linkcode createAgentCheckpoint}.
 */
export class AgentCheckpoint {
  readonly #home: string;
  readonly #env: Env;
  readonly #options: AgentCheckpointOptions;
  /** The run store and the working-tree snapshots; without them, neither ledger nor snapshots. */
  readonly #subsystems: Subsystems | undefined;
  readonly #log: Log;
  readonly #source: SettingsSource;
  readonly #shared: RunTable;
  /** The run in each slot of the table. */
  readonly #runs: (RunInfo | undefined)[] = [];
  /** Free slots, the lowest last. */
  readonly #freeSlots: number[] = [];
  /** Live runs by run id, so that two live runs never share a file. */
  readonly #live = new Map<string, number>();
  #workspaces: WorkspaceHooks | undefined;
  readonly #writer: CheckpointWriter;
  readonly #sinks: WriterSinks;
  #worker: Worker | undefined;
  #workerFailed = false;
  #stats: WatchdogStats | undefined;
  #closed = false;
  /** What the runs of the shared table work with. */
  readonly #context: RunContext;
  /** The run ledger's store on the main thread, once opened. */
  #ledger: LedgerStore | undefined;
  #ledgerRetryAt = 0;
  #ledgerPending: RunRecord[] = [];
  #ledgerFailures = 0;
  #ledgerTimer: ReturnType<typeof setTimeout> | undefined;

  /** @internal Use {@linkcode createAgentCheckpoint}. */
  constructor(options: AgentCheckpointOptions, subsystems?: Subsystems) {
    this.#options = options;
    this.#subsystems = subsystems;
    try {
      this.#shared = new RunTable(undefined, options.maxRuns);
    } catch {
      // No address space for the table's reservation: a smaller one.
      this.#shared = new RunTable(undefined, 512);
    }
    this.#env = envOf(options.env);
    this.#home = resolveHome(options.home, this.#env);
    this.#log = createLog(this.#home, options.logger);
    this.#source = new SettingsSource(
      this.#home,
      this.#env,
      options.settings,
      (loaded: LoadedSettings) => {
        for (const warning of loaded.warnings) this.#log("warn", warning);
      },
    );
    const shared = this.#shared;
    const source = this.#source;
    this.#sinks = {
      log: this.#log,
      comment: (comment) => this.#comment(comment),
      written: (event) => this.#written(event),
    };
    this.#writer = new CheckpointWriter(shared, this.#sinks);
    this.#context = new RunContext({
      source,
      shared,
      log: this.#log,
      writer: this.#writer,
      workspaces: () => this.#workspaceHooks(),
      watchdog: (settings) => this.#contact(settings),
      ended: (info, end) => {
        if (end) this.#ledgerEnd(shared, info, end);
        this.#free(info.slot, "ended");
      },
    });
    // Opened now, not in the first startRun: creating a store costs a few disk flushes.
    const settings = source.at(nowMs());
    if (settings.enabled && settings.ledger) this.#ledgerStore(settings);
  }

  /** The settings in force now. */
  get settings(): Settings {
    return this.#source.at(nowMs());
  }

  /** @internal The watchdog's last heap report, when asked for (benchmarks). */
  get watchdogStats(): WatchdogStats | undefined {
    return this.#stats;
  }

  /** @internal The run ledger's statements so far, when its store counts them (benchmarks). */
  get ledgerStatements(): number | undefined {
    return this.#ledger?.statements;
  }

  /** @internal The shared run table, for tests that move a run's clock. */
  get sharedRuns(): RunTable {
    return this.#shared;
  }

  /**
   * Start a run: discover its dialect and caps (S4), pick its checkpoint file
   * (S8), resume from an earlier attempt's checkpoint (S16), and return its
   * hooks. Never throws: on an internal error the run's hooks are no-ops and
   * a log line says why.
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
    let sessionId: string;
    try {
      sessionId = String(init?.sessionId ?? "");
    } catch (error) {
      this.#log("error", `startRun: the session id cannot be read (${errorText(error)})`);
      return inertRun("");
    }
    if (this.#closed) {
      this.#log("info", "startRun() after close(): this run gets no checkpoints", sessionId);
      return inertRun(sessionId);
    }
    let claimed: { slot: number; gen: number } | undefined;
    let taken = false;
    try {
      const now = nowMs();
      const settings = this.#source.at(now);
      const found = discoverCapsSync({ ...init, sessionId }, {
        home: this.#home,
        env: this.#env,
        settings,
        config: this.#source.config,
      });
      for (const problem of found.problems) this.#log("warn", problem, found.runId);
      claimed = this.#claim(now);
      const runId = this.#ownId(found.runId);
      const own = claimed ? undefined : this.#unwatched(runId, now);
      const info: RunInfo = {
        slot: claimed?.slot ?? 0,
        gen: claimed?.gen ?? own!.gen,
        runId,
        dialect: found.dialect,
        caps: found.caps,
        checkpointFile: path.join(settings.checkpoint_dir, checkpointFileName(runId)),
        notes: [],
        attempt: 1,
      };
      if (found.taskId !== undefined) info.taskId = found.taskId;
      const model = (init as { model?: unknown } | undefined)?.model;
      if (typeof model === "string" && model !== "") info.model = model.slice(0, 200);
      const fromFile = settings.resume === false ? undefined : earlierAttempt(
        info.checkpointFile,
        (message) => this.#log("warn", message, runId),
      );
      const table = own ? own.context.shared : this.#shared;
      // The run ledger first (where the earlier attempt was when it stopped), the file second.
      const ledger = this.#ledgerStart(info, table, settings, fromFile);
      const earlier = ledger.seen ? ledger.earlier : fromFile;
      let resumeText: string | undefined;
      if (earlier) {
        if (!ledger.recorded && !ledger.numbered) info.attempt = earlier.previous.attempt + 1;
        info.attempts = earlier.attempts;
        info.prior = earlier.prior;
        const remaining = settings.resume_budget === "remaining"
          ? remainingCaps(info.caps, earlier.prior)
          : undefined;
        if (remaining) info.caps = remaining;
        resumeText = resumeNote(
          earlier.previous.inFlight ?? [],
          remaining,
          fileExists(info.checkpointFile),
        );
        this.#log("info", `resuming: ${earlier.previous.summary}`, runId);
        // The record names what the attempt starts with: its number, caps and what came before.
        if (ledger.recorded) {
          this.#ledgerWrite([recordOf(info, table, this.#thisHost(), now)], "the run's start");
        }
      }
      if (claimed) {
        this.#runs[info.slot] = info;
        taken = true;
        this.#live.set(runId, info.slot);
        this.#context.publish(info);
        this.#shared.wake();
      } else this.#live.set(runId, -1);
      // The worker keeps the run's ledger record up to date from now on. Started once startRun
      // has returned: starting a thread takes tens of milliseconds, the host's, not the run's.
      if (claimed && settings.enabled && settings.ledger && this.#ledger) {
        queueMicrotask(() => this.#context.contact(this.#source.at(nowMs())));
      }
      const start: RunStart = {
        info,
        dialect: found.dialect,
        attempt: info.attempt ?? 1,
        workspace: workspaceOf(init?.workspace),
      };
      if (earlier) start.previous = earlier.previous;
      if (resumeText !== undefined) start.resumeNote = resumeText;
      return new Run(own?.context ?? this.#context, start);
    } catch (error) {
      if (claimed && !taken) {
        this.#shared.free(claimed.slot);
        this.#freeSlots.push(claimed.slot);
      }
      this.#log("error", `startRun failed; this run gets no checkpoints: ${errorText(error)}`);
      return inertRun(sessionId);
    }
  }

  /**
   * A slot for a new run: a free one, else a new chunk of the table, else the
   * least recently active run's that has no tool call in flight and no
   * crossing to come. Undefined when every run is busy at the table's bound.
   */
  #claim(now: number): { slot: number; gen: number } | undefined {
    if (this.#freeSlots.length === 0) {
      const from = this.#shared.slots;
      if (this.#shared.grow()) {
        for (let slot = this.#shared.slots - 1; slot >= from; slot--) this.#freeSlots.push(slot);
      } else {
        const victim = this.#evictable(now);
        if (victim === undefined) return undefined;
        this.#free(
          victim,
          `evicted: the run table is at its bound of ${this.#shared.maxSlots} runs`,
        );
      }
    }
    const slot = this.#freeSlots.pop()!;
    return { slot, gen: this.#shared.claim(slot, now) };
  }

  /** The least recently active run that can be let go without losing a checkpoint. */
  #evictable(now: number): number | undefined {
    const settings = this.#source.at(now);
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
   */
  #unwatched(runId: string, now: number): { context: RunContext; gen: number } {
    this.#log(
      "warn",
      `the run table is full (${this.#shared.maxSlots} runs, each busy); this run gets no watchdog checkpoints`,
      runId,
    );
    const table = new RunTable(undefined, 1);
    table.grow();
    const context = new RunContext({
      source: this.#source,
      shared: table,
      log: this.#log,
      writer: new CheckpointWriter(table, this.#sinks),
      workspaces: () => this.#workspaceHooks(),
      watchdog: (settings) => this.#contact(settings),
      ended: (info, end) => {
        if (end) this.#ledgerEnd(table, info, end);
        table.free(0);
        if (this.#live.get(runId) === -1) this.#live.delete(runId);
      },
    });
    return { context, gen: table.claim(0, now) };
  }

  /**
   * The run ledger's store on the main thread: opened on first use, with
   * short lock waits; after a failure to open, tried again a while later.
   */
  #ledgerStore(settings: Settings): LedgerStore | undefined {
    if (this.#ledger !== undefined) return this.#ledger;
    if (nowMs() < this.#ledgerRetryAt) return undefined;
    const store = this.#subsystems?.openStore({
      home: this.#home,
      settings,
      mode: "quick",
      log: (level, message) => this.#log(level, message),
    });
    if (!store) this.#ledgerRetryAt = nowMs() + LEDGER_REOPEN_MS;
    else {
      this.#ledger = store;
      atExit(this);
    }
    return store;
  }

  /** @internal The process exits: the live runs' records as they stand (an exception, `process.exit`). */
  ledgerAtExit(): void {
    if (!this.#closed) this.#ledgerLive("the live runs at exit");
  }

  /** The live runs' records as they stand. */
  #ledgerLive(what: string): void {
    if (!this.#ledger) return;
    try {
      const now = nowMs();
      const host = this.#thisHost();
      const records: RunRecord[] = [];
      for (const info of this.#runs) {
        if (info) records.push(recordOf(info, this.#shared, host, now));
      }
      this.#ledgerWrite(records, what);
    } catch (error) {
      ledgerFailed(this.#log, what, error);
    }
  }

  /** @internal The process exits: a bounded wait for a store thread's writes to land. */
  ledgerDrain(): void {
    try {
      if (!this.#closed) this.#ledger?.drainSync?.();
    } catch { /* exiting: nothing more can be done */ }
  }

  /**
   * Record a run's start in the ledger, which gives its attempt number, and
   * read the newest earlier record of its run id. `recorded` is false when
   * the ledger is off or failed; `seen` is true when it had a record of the
   * run id, which then decides over the file.
   */
  #ledgerStart(
    info: RunInfo,
    table: RunTable,
    settings: Settings,
    fromFile: Earlier | undefined,
  ): { recorded: boolean; seen?: boolean; numbered?: boolean; earlier?: Earlier } {
    if (!settings.enabled || !settings.ledger) return { recorded: false };
    const store = this.#ledgerStore(settings);
    if (!store?.startAttemptSync) return { recorded: false };
    try {
      const host = this.#thisHost();
      const now = nowMs();
      const started = store.startAttemptSync(recordOf(info, table, host, now), {
        minAttempt: fromFile ? fromFile.previous.attempt + 1 : 1,
        fresh: settings.resume === false,
        heartbeat: {
          host,
          at: Math.round(now),
          intervalSeconds: settings.progress_interval_seconds,
        },
      });
      info.attempt = started.attempt;
      const previous = started.previous;
      if (!previous || settings.resume === false) return { recorded: true };
      // The earlier attempt ran elsewhere (the fleet store): its file, recreated here first.
      const content = previous.record.fileContent;
      if (
        content !== undefined && previous.record.status !== "done" &&
        !fileExists(info.checkpointFile)
      ) {
        try {
          ensureDir(path.dirname(info.checkpointFile));
          writeFileAtomicSync(info.checkpointFile, content);
          this.#log(
            "info",
            `recreated the checkpoint file from the fleet store (attempt ${previous.record.attempt} ran on ${previous.record.host.machine})`,
            info.runId,
          );
          fromFile = earlierAttempt(
            info.checkpointFile,
            (message) => this.#log("warn", message, info.runId),
          );
        } catch (error) {
          ledgerFailed(this.#log, "the earlier attempt's file", error, info.runId);
        }
      }
      const seen = { recorded: true, seen: true };
      if (previous.state === "live") {
        this.#log(
          "warn",
          `run id ${info.runId} is still live in another process (${previous.record.host.machine}, pid ${previous.record.host.pid}); this is attempt ${started.attempt}`,
          info.runId,
        );
      }
      const earlier = ledgerAttempt(previous, fromFile, Date.now());
      return earlier ? { ...seen, earlier } : seen;
    } catch (error) {
      ledgerFailed(this.#log, "the run's start", error, info.runId);
      // Busy or failing for writes, it may still be read (a reader never waits): the ledger
      // still decides, and the worker records the run within an interval.
      try {
        const previous = settings.resume === false ? undefined : store.latestSync?.(info.runId);
        if (!previous) return { recorded: false };
        const earlier = ledgerAttempt(previous, fromFile, Date.now());
        if (!earlier) return { recorded: false, seen: true };
        info.attempt = Math.max(earlier.previous.attempt, fromFile?.previous.attempt ?? 0) + 1;
        return { recorded: false, seen: true, numbered: true, earlier };
      } catch {
        return { recorded: false };
      }
    }
  }

  /** Record a run's end in the ledger. */
  #ledgerEnd(table: RunTable, info: RunInfo, end: { status: EndStatus; summary?: string }): void {
    try {
      const now = nowMs();
      const settings = this.#source.at(now);
      if (!settings.enabled || !settings.ledger || this.#ledgerStore(settings) === undefined) {
        return;
      }
      const record = endRecord(
        recordOf(info, table, this.#thisHost(), now),
        end.status,
        end.summary,
        now,
      );
      this.#ledgerWrite([record], "the run's end");
    } catch (error) {
      ledgerFailed(this.#log, "the run's end", error, info.runId);
    }
  }

  /**
   * Write records on the main thread (a start, an end): at once when the
   * store takes them without waiting; else they wait, bounded, and are tried
   * again with a growing wait.
   */
  #ledgerWrite(records: RunRecord[], what: string): void {
    const store = this.#ledger;
    if (!store) return;
    const batch = [...this.#ledgerPending, ...records];
    try {
      if (store.writeSync) store.writeSync({ records: batch });
      else {
        store.write({ records: batch }).catch((error) => this.#ledgerKeep(batch, what, error));
      }
      this.#ledgerPending = [];
      if (this.#ledgerFailures > 0) {
        this.#ledgerFailures = 0;
        this.#log("info", "the run ledger takes the main thread's records again");
      }
    } catch (error) {
      this.#ledgerKeep(batch, what, error);
    }
  }

  #ledgerKeep(batch: RunRecord[], what: string, error: unknown): void {
    const dropped = Math.max(0, batch.length - LEDGER_PENDING);
    this.#ledgerPending = batch.slice(dropped);
    this.#ledgerFailures++;
    if (this.#ledgerFailures === 1 || dropped > 0) {
      ledgerFailed(
        this.#log,
        `${what} (${this.#ledgerPending.length} record(s) wait in memory${
          dropped > 0 ? `, ${dropped} dropped` : ""
        })`,
        error,
      );
    }
    if (this.#ledgerTimer === undefined && !this.#closed) {
      const wait = Math.min(60_000, 1000 * 2 ** Math.min(6, this.#ledgerFailures - 1));
      this.#ledgerTimer = setTimeout(() => {
        this.#ledgerTimer = undefined;
        if (this.#ledgerPending.length > 0) this.#ledgerWrite([], "records kept in memory");
      }, wait);
      (this.#ledgerTimer as { unref?: () => void }).unref?.();
    }
  }

  /** At close: the live runs' records as they stand, the last kept ones, and the store closed. */
  #ledgerClose(): Promise<void> {
    const store = this.#ledger;
    if (!store) return Promise.resolve();
    this.#ledgerLive("the live runs at close");
    if (this.#ledgerTimer !== undefined) clearTimeout(this.#ledgerTimer);
    this.#ledger = undefined;
    this.#ledgerRetryAt = Infinity;
    // A store thread (the fleet store) writes what waits first, bounded.
    return store.close().catch(() => {});
  }

  /** The working-tree snapshots, made on first use. */
  #workspaceHooks(): WorkspaceHooks | undefined {
    if (this.#workspaces) return this.#workspaces;
    this.#workspaces = this.#subsystems?.workspaces({
      home: this.#home,
      log: this.#log,
      settings: () => this.#source.at(nowMs()),
      env: this.#env,
    });
    return this.#workspaces;
  }

  /** This process, as run records name it: asked only once the run store is open. */
  #thisHost(): HostId {
    return this.#subsystems!.thisHost();
  }

  /** The run id itself, or with `.2`, `.3` … when a live run has it (S15). */
  #ownId(runId: string): string {
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
    if (this.#closed) return;
    this.#closed = true;
    this.#shared.beginClose();
    const ledgerClosed = this.#ledgerClose();
    for (let slot = 0; slot < this.#runs.length; slot++) {
      if (this.#runs[slot]) this.#free(slot, "closed");
    }
    const worker = this.#worker;
    this.#worker = undefined;
    if (worker) {
      try {
        if (!await this.#shared.writesDone(CLOSE_WAIT_MS)) {
          this.#log(
            "warn",
            `the watchdog's write did not land within ${CLOSE_WAIT_MS} ms of close()`,
          );
        }
        await worker.terminate();
      } catch (error) {
        this.#log("warn", `stopping the watchdog failed: ${errorText(error)}`);
      }
    }
    await ledgerClosed;
  }

  #free(slot: number, why: string): void {
    const info = this.#runs[slot];
    if (!info) return;
    this.#runs[slot] = undefined;
    this.#shared.free(slot);
    this.#freeSlots.push(slot);
    if (info && this.#live.get(info.runId) === slot) this.#live.delete(info.runId);
    if (info && why !== "ended" && why !== "closed") this.#log("info", why, info.runId);
  }

  /** Tell the host's listener of a write; a throwing listener costs a log line. */
  #written(event: CheckpointEvent): void {
    // The fleet store keeps the file's content, so a retry elsewhere can recreate it.
    this.#ledger?.fileWritten?.(event);
    const listener = this.#options.onCheckpoint;
    if (!listener) return;
    try {
      const result: unknown = listener(event);
      if (result && typeof (result as PromiseLike<unknown>).then === "function") {
        Promise.resolve(result).catch((error) =>
          this.#log("warn", `onCheckpoint failed: ${errorText(error)}`, event.runId)
        );
      }
    } catch (error) {
      this.#log("warn", `onCheckpoint threw: ${errorText(error)}`, event.runId);
    }
  }

  /** Post a comment through the host's sink, else the comment module. */
  #comment(comment: TaskComment): void {
    const fail = (error: unknown) =>
      this.#log("warn", `posting the task comment failed: ${errorText(error)}`, comment.taskId);
    try {
      const sink = this.#options.postComment;
      if (sink) {
        const result: unknown = sink(comment);
        if (result && typeof (result as PromiseLike<unknown>).then === "function") {
          Promise.resolve(result).catch(fail);
        }
      } else if (this.#options.commentModule !== undefined) {
        import(String(this.#options.commentModule)).then((mod) => mod.postComment(comment)).catch(
          fail,
        );
      }
    } catch (error) {
      fail(error);
    }
  }

  /** A run's hook saw these settings: start the watchdog when they want it and it does not run. */
  #contact(settings: Settings): void {
    if (
      this.#worker === undefined &&
      (settings.watchdog || (settings.ledger && this.#ledger !== undefined))
    ) this.#startWatchdog();
    // Running, or never to run: the runs' contact is a field read from now on.
    if (this.#worker !== undefined || this.#workerFailed || this.#closed) {
      this.#context.watchdogDue = false;
    }
  }

  #startWatchdog(): void {
    if (this.#closed || this.#workerFailed) return;
    try {
      const data: WatchdogData = {
        buffers: this.#shared.buffers,
        home: this.#home,
        env: this.#env,
        overrides: cloneableOverrides(this.#options.settings, (m) => this.#log("warn", m)),
        hostLogger: this.#options.logger !== undefined,
        hostComments: this.#options.postComment !== undefined,
      };
      if (this.#options.commentModule !== undefined) {
        data.commentModule = String(this.#options.commentModule);
      }
      if (this.#options.watchdogStatsEveryMs) {
        data.statsEveryMs = this.#options.watchdogStatsEveryMs;
      }
      const url = workerUrl();
      // Under Deno, a worker whose module cannot be read fails in a way no listener catches.
      const denied = deniedRead(url);
      if (denied !== undefined) {
        this.#workerFailed = true;
        this.#log("error", `the watchdog cannot start: ${denied}`);
        return;
      }
      // The fleet store: the watchdog's batches go through the store's own thread.
      const storePort = this.#ledger?.watchdogPort?.();
      if (storePort) data.storePort = storePort;
      const worker = new Worker(url, {
        workerData: data,
        transferList: storePort ? [storePort] : [],
      });
      worker.on("message", (message: FromWorker) => {
        if (message.type === "log") this.#log(message.level, message.message, message.runId);
        else if (message.type === "comment") this.#comment(message.comment);
        else if (message.type === "written") this.#written(message.event);
        else if (message.type === "stats") this.#stats = message.stats;
      });
      worker.on("error", (error) => {
        this.#workerFailed = true;
        this.#worker = undefined;
        this.#log("error", `the watchdog stopped: ${errorText(error)}`);
      });
      // After the listeners: in Node, adding a message listener re-refs the worker.
      worker.unref();
      this.#worker = worker;
    } catch (error) {
      this.#workerFailed = true;
      this.#log("error", `the watchdog could not start: ${errorText(error)}`);
    }
  }
}
