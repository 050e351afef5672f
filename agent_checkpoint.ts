/**
 * The object a host creates once per process: settings, shared run state, the
 * watchdog worker, and `startRun`.
 *
 * @module
 */
import * as path from "node:path";
import { Worker } from "node:worker_threads";
import {
  discoverCapsSync,
  type Env,
  envOf,
  type LoadedSettings,
  resolveHome,
  type RunInit,
  SettingsSource,
} from "./discover.ts";
import { createLog, errorText, type HostLogger, type Log } from "./log.ts";
import { checkpointFileName } from "./persist.ts";
import { commentBody, type RecordSource } from "./record.ts";
import { Run, type RunHost } from "./run.ts";
import type { Settings } from "./settings.ts";
import { MAX_RUNS, nowMs, SharedRuns } from "./shared.ts";
import {
  encodeRunInfo,
  type PersistEvent,
  persistRecord,
  type RunInfo,
  snapshot,
} from "./snapshot.ts";
import type { FromWorker, WatchdogData, WatchdogStats } from "./watchdog_protocol.ts";
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
  /** @internal Ask the watchdog for heap figures every this many ms (benchmarks). */
  watchdogStatsEveryMs?: number;
}

const MAX_TOOL_NAME = 200;

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

const cloneable = (value: unknown): Record<string, unknown> | undefined => {
  try {
    return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
  } catch {
    return undefined;
  }
};

/** A run whose hooks do nothing, for when a real one cannot be had. */
const inertRun = (runId: string) =>
  new Run(undefined, {
    slot: -1,
    gen: -1,
    runId,
    dialect: "chat",
    caps: {},
    checkpointFile: "",
    notes: [],
  }, "chat");

/**
 * Durable checkpoints for the runs of one host process. Create it with
 * {@linkcode createAgentCheckpoint}.
 */
export class AgentCheckpoint {
  readonly #home: string;
  readonly #env: Env;
  readonly #options: AgentCheckpointOptions;
  readonly #log: Log;
  readonly #source: SettingsSource;
  readonly #shared = new SharedRuns();
  readonly #runs: (RunInfo | undefined)[] = new Array(MAX_RUNS);
  readonly #toolIds = new Map<string, number>();
  #worker: Worker | undefined;
  #workerFailed = false;
  #stats: WatchdogStats | undefined;
  #closed = false;
  readonly #host: RunHost;

  /** @internal Use {@linkcode createAgentCheckpoint}. */
  constructor(options: AgentCheckpointOptions) {
    this.#options = options;
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
    this.#host = {
      shared,
      log: this.#log,
      settingsAt: (now) => source.at(now),
      settingsVersion: () => source.version,
      contact: (settings) => {
        if (this.#worker === undefined && settings.watchdog) this.#startWatchdog();
      },
      toolId: (name) => this.#toolId(name),
      persist: (info, event, src, now) => this.#persist(info, event, src, now),
      noted: (info) => this.#publish(info),
      ended: (info) => this.#free(info.slot, "ended"),
    };
  }

  /** The settings in force now. */
  get settings(): Settings {
    return this.#source.at(nowMs());
  }

  /** @internal The watchdog's last heap report, when asked for (benchmarks). */
  get watchdogStats(): WatchdogStats | undefined {
    return this.#stats;
  }

  /** @internal The shared run table, for tests that move a run's clock. */
  get sharedRuns(): SharedRuns {
    return this.#shared;
  }

  /**
   * Start a run: discover its dialect and caps (S4), pick its checkpoint file
   * (S8) and return its hooks. Never throws: on an internal error the run's
   * hooks are no-ops and a log line says why.
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
   * await ac.close();
   * ```
   */
  startRun(init: RunInit): Run {
    const sessionId = String(init?.sessionId ?? "");
    if (this.#closed) {
      this.#log("info", "startRun() after close(): this run gets no checkpoints", sessionId);
      return inertRun(sessionId);
    }
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
      let claimed = this.#shared.claimSlot(now);
      if (!claimed) {
        const oldest = this.#shared.leastRecentlyActive();
        this.#free(oldest, `evicted: at most ${MAX_RUNS} runs are kept`);
        claimed = this.#shared.claimSlot(now);
      }
      if (!claimed) throw new Error("no run slot could be freed");
      const info: RunInfo = {
        slot: claimed.slot,
        gen: claimed.gen,
        runId: found.runId,
        dialect: found.dialect,
        caps: found.caps,
        checkpointFile: path.join(settings.checkpoint_dir, checkpointFileName(found.runId)),
        notes: [],
      };
      if (found.taskId !== undefined) info.taskId = found.taskId;
      this.#runs[info.slot] = info;
      this.#publish(info);
      this.#shared.wake();
      return new Run(this.#host, info, found.dialect);
    } catch (error) {
      this.#log("error", `startRun failed; this run gets no checkpoints: ${errorText(error)}`);
      return inertRun(sessionId);
    }
  }

  /**
   * Stop the watchdog and make every run's hooks no-ops. Safe to call twice.
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
    for (let slot = 0; slot < MAX_RUNS; slot++) if (this.#runs[slot]) this.#free(slot, "closed");
    const worker = this.#worker;
    this.#worker = undefined;
    if (worker) {
      try {
        await worker.terminate();
      } catch (error) {
        this.#log("warn", `stopping the watchdog failed: ${errorText(error)}`);
      }
    }
  }

  #free(slot: number, why: string): void {
    const info = this.#runs[slot];
    this.#runs[slot] = undefined;
    this.#shared.free(slot);
    if (info && why !== "ended" && why !== "closed") this.#log("info", why, info.runId);
  }

  #toolId(name: string): number {
    const known = this.#toolIds.get(name);
    if (known !== undefined) return known;
    const id = this.#shared.internName(String(name).slice(0, MAX_TOOL_NAME));
    if (id !== 0) this.#toolIds.set(name, id);
    return id;
  }

  /** Put a run's description where the watchdog reads it. */
  #publish(info: RunInfo): void {
    const bytes = encodeRunInfo(info);
    if (!bytes || !this.#shared.writeInfo(info.slot, bytes)) {
      this.#log("warn", "the run's description is too large for the watchdog", info.runId);
    }
  }

  #persist(info: RunInfo, event: PersistEvent, source: RecordSource, now: number): void {
    let record;
    try {
      record = snapshot(
        info,
        this.#shared,
        this.#source.at(now),
        event,
        source,
        now,
      );
      persistRecord(info, record);
    } catch (error) {
      this.#log(
        "error",
        `could not persist the checkpoint to ${info.checkpointFile}: ${errorText(error)}`,
        info.runId,
      );
      return;
    }
    if (info.taskId !== undefined) {
      this.#comment({ taskId: info.taskId, body: commentBody(record) });
    }
  }

  /** Post a comment through the host's sink, else the comment module. */
  #comment(comment: TaskComment): void {
    const fail = (error: unknown) =>
      this.#log("warn", `posting the task comment failed: ${errorText(error)}`, comment.taskId);
    try {
      const sink = this.#options.postComment;
      if (sink) {
        const result = sink(comment);
        if (result instanceof Promise) result.catch(fail);
      } else if (this.#options.commentModule !== undefined) {
        import(String(this.#options.commentModule)).then((mod) => mod.postComment(comment)).catch(
          fail,
        );
      }
    } catch (error) {
      fail(error);
    }
  }

  #startWatchdog(): void {
    if (this.#closed || this.#workerFailed) return;
    try {
      const data: WatchdogData = {
        buffer: this.#shared.buffer,
        home: this.#home,
        env: this.#env,
        overrides: cloneable(this.#options.settings),
        hostLogger: this.#options.logger !== undefined,
        hostComments: this.#options.postComment !== undefined,
      };
      if (this.#options.commentModule !== undefined) {
        data.commentModule = String(this.#options.commentModule);
      }
      if (this.#options.watchdogStatsEveryMs) {
        data.statsEveryMs = this.#options.watchdogStatsEveryMs;
      }
      const worker = new Worker(workerUrl(), { workerData: data });
      worker.on("message", (message: FromWorker) => {
        if (message.type === "log") this.#log(message.level, message.message, message.runId);
        else if (message.type === "comment") this.#comment(message.comment);
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

/**
 * Create the checkpoint keeper for one host process. Never throws: bad
 * settings become warnings in the log and their defaults.
 *
 * @param options Home directory, environment, settings, comment sink and logger.
 * @returns The keeper; call `startRun` for each run and `close()` at the end.
 *
 * @example A capped run gets tier 2 on its penultimate turn
 * ```ts
 * import { createAgentCheckpoint } from "./mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const run = ac.startRun({ sessionId: "demo", caps: { turns: 3 } });
 * assert.equal(run.preLlmCall(), undefined); // turn 0 of 3
 * assert.match(run.preLlmCall() ?? "", /Final budget checkpoint/); // the penultimate turn
 * await run.end();
 * await ac.close();
 * ```
 */
export function createAgentCheckpoint(options: AgentCheckpointOptions = {}): AgentCheckpoint {
  return new AgentCheckpoint(options ?? {});
}
