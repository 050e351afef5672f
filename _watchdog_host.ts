/**
 * The watchdog worker as the main thread sees it: where its module is, what it
 * starts with, its start (once, and never again after it failed), its
 * messages handed on (log lines, comments, written files, heap figures), and
 * its stop at close, after its write in flight lands.
 *
 * The protocol between the two threads (`WatchdogData`, `FromWorker`) is the
 * worker's (`watchdog.ts`), taken here as types only. The worker starts from
 * its entry module (`_watchdog_worker.ts`), which starts the loop only in a
 * thread started with the watchdog's data. Nothing goes from the main thread
 * to the worker once it runs: the worker reads runs from shared memory.
 *
 * @module
 */
import process from "node:process";
import { clearTimeout, setTimeout } from "node:timers";
import type { MessagePort, Worker } from "node:worker_threads";
import type { Env } from "./config.ts";
import { deniedRead, errorText, failOpen, failOpenAsync, type Log, say } from "./log.ts";
import type { RunTable } from "./_run_table.ts";
import type { CheckpointEvent } from "./_writer.ts";
import type { RunRecord } from "./_ledger.ts";
import { builtin } from "./_write_steps.ts";
// Types only: the main thread loads the worker's code only for Deno's graph (below).
import type { FromWorker, ToWorker, WatchdogData, WatchdogStats } from "./watchdog.ts";
// In the static module graph so that Deno, importing the library by URL, fetches the
// watchdog with it: a worker that fetched it later would do so while the host may be
// blocked. Outside the watchdog's own thread the module does nothing.
import "./_watchdog_worker.ts";

export type { WatchdogStats };

/**
 * The watchdog's entry module: `_watchdog_worker.ts` under Deno from sources,
 * `_watchdog_worker.js` in the npm build.
 */
function watchdogModule(): URL {
  return new URL(
    import.meta.url.endsWith(".ts") ? "./_watchdog_worker.ts" : "./_watchdog_worker.js",
    import.meta.url,
  );
}

/**
 * Whether the host's Node options would stop a worker started from a file. A
 * worker inherits them, and Node refuses `--input-type` (`node
 * --input-type=module -e …`, a module piped to stdin, or the same in
 * `NODE_OPTIONS`) for any input but a string. Only Node reads the options:
 * under Deno, `NODE_OPTIONS` could ask for a permission.
 */
function hostWantsStringInput(): boolean {
  if (process.versions.deno !== undefined) return false;
  const given = (arg: string) => arg === "--input-type" || arg.startsWith("--input-type=");
  return failOpen(
    () => process.execArgv.some(given) || /--input-type\b/.test(process.env.NODE_OPTIONS ?? ""),
    () => false,
  );
}

/**
 * Where the worker starts. `node:worker_threads` starts only `file:` and
 * `data:` URLs, so a library imported by https URL (Deno) starts a `data:`
 * module that imports the watchdog from where the library came from. So does
 * a Node host whose options want string input: Node runs a `data:` module as
 * a string, where `--input-type` applies, and every other option the host
 * gave (V8 flags, `--import`, loaders, conditions) still reaches the worker
 * as it is. An `execArgv` without `--input-type` could not do that: Node
 * refuses V8 and process-wide flags there (`--expose-gc`,
 * `--max-old-space-size`), and gives no list of which flags those are.
 */
function workerUrl(module: URL): URL {
  if (module.protocol === "file:" && !hostWantsStringInput()) return module;
  return new URL(
    `data:text/javascript,${encodeURIComponent(`import ${JSON.stringify(module.href)};`)}`,
  );
}

/**
 * The watchdog's young generation, in MB. V8 gives a worker the same young
 * generation as a main thread and doubles it once 2 MiB of objects have
 * survived; the watchdog, which allocates a few objects per run it writes,
 * crossed that at about a thousand runs and then held 4 MiB more of resident
 * memory for good. 3 MB gives it 1 MiB semi-spaces, V8's smallest: the watchdog's
 * objects are short-lived, so more scavenges cost it next to nothing. Node
 * applies it; Deno's workers ignore it.
 */
const WATCHDOG_YOUNG_MB = 3;
/**
 * How long the keeper's close waits for the worker to write what waits for its run ledger
 * (for at most 2 s) and close the store, ms.
 */
const STORE_CLOSE_WAIT_MS = 3000;

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
    failOpen(
      () => {
        out[key] = structuredClone(value[key]);
      },
      () =>
        warn(
          `setting ${key} cannot be passed to the watchdog thread; the watchdog uses its default`,
        ),
    );
  }
  return out;
}

/** The host's options the worker starts with. @internal */
export interface WatchdogOptions {
  /** Settings that win over `config.yaml`. */
  settings?: Record<string, unknown>;
  /** Whether the host gave a logger: the worker's lines then come to the main thread. */
  logger?: unknown;
  /** Whether the host gave a comment sink: the worker's comments then come to the main thread. */
  postComment?: unknown;
  /** The module the worker imports `postComment` from. */
  commentModule?: string | URL;
  /** Ask the worker for heap figures every this many ms (benchmarks). */
  watchdogStatsEveryMs?: number;
}

/** What the watchdog is started with and hands its messages to. @internal */
export interface WatchdogParts {
  /** The run table it watches. */
  shared: RunTable;
  home: string;
  env: Env;
  options: WatchdogOptions;
  log: Log;
  /** Where the worker's comments go. */
  comment(comment: { taskId: string; body: string }): void;
  /** Where the worker's written files go. */
  written(event: CheckpointEvent): void;
  /** The fleet store's port, when the run ledger's store has one: the worker writes through it. */
  storePort(): MessagePort | undefined;
  /** The run store's module, which the worker imports for the run ledger; none, no ledger there. */
  storeModule?: string;
}

/**
 * The watchdog worker of one keeper. @internal
 *
 * @example
 * ```ts
 * import { WatchdogHost } from "./_watchdog_host.ts";
 * import { RunTable } from "./_run_table.ts";
 * import assert from "node:assert/strict";
 *
 * const watchdog = new WatchdogHost({
 *   shared: new RunTable(undefined, 1),
 *   home: "/nonexistent",
 *   env: {},
 *   options: {},
 *   log: () => {},
 *   comment: () => {},
 *   written: () => {},
 *   storePort: () => undefined,
 * });
 * await watchdog.stop(0);
 * watchdog.start(); // stopped: it never starts again
 * assert.equal(watchdog.running, false);
 * ```
 */
/**
 * Watchdogs running in this process (this module's instance), and whether the
 * host was told it has many: each keeper runs its own thread, so a host that
 * makes a keeper per task pays a thread and its start for each.
 */
const running = { count: 0, told: false };

/** From this many watchdogs at once in a process, the host is told (once) to share one keeper. */
export const MANY_WATCHDOGS = 4;

export class WatchdogHost {
  readonly #parts: WatchdogParts;
  #worker: Worker | undefined;
  #failed = false;
  #stopped = false;
  /** Told when the worker has closed its run ledger's store, at stop. */
  #closedStore: (() => void) | undefined;
  #stats: WatchdogStats | undefined;
  /** The start queued by {@linkcode WatchdogHost.startSoon}, until it runs. */
  #soon: ReturnType<typeof setTimeout> | undefined;

  /** @param parts What it starts with and hands its messages to. */
  constructor(parts: WatchdogParts) {
    this.#parts = parts;
  }

  /** Whether the worker runs. */
  get running(): boolean {
    return this.#worker !== undefined;
  }

  /** Whether it failed to start or stopped on an error: it is never started again. */
  get failed(): boolean {
    return this.#failed;
  }

  /**
   * Hand ledger records to the worker, whose next commit writes them (the
   * host's thread found the store busy); false when no worker runs.
   */
  handOn(records: RunRecord[]): boolean {
    const worker = this.#worker;
    if (!worker || this.#stopped) return false;
    worker.postMessage({ type: "records", records } satisfies ToWorker);
    return true;
  }

  /** The worker's last heap report, when asked for (benchmarks). */
  get stats(): WatchdogStats | undefined {
    return this.#stats;
  }

  /** Whether a start is queued ({@linkcode WatchdogHost.startSoon}) and has not run yet. */
  get queued(): boolean {
    return this.#soon !== undefined;
  }

  /**
   * Start the worker once the host's event loop next turns (a macrotask),
   * never on the caller's path: creating a thread blocks its caller for tens
   * of milliseconds (Deno creates it synchronously), and the caller is a run's
   * start or hook. Records made before it runs are written by the host's
   * thread. Queued once; `then` is called after the start was tried. The
   * timer does not keep the process alive.
   */
  startSoon(then: () => void): void {
    if (this.#soon !== undefined || this.#worker !== undefined || this.#stopped || this.#failed) {
      return;
    }
    this.#soon = setTimeout(() => {
      this.#soon = undefined;
      this.start();
      then();
    }, 0);
    this.#soon.unref?.();
  }

  /** Start the worker, unless it runs, failed, or was stopped; a failure costs a log line. */
  start(): void {
    if (this.#worker !== undefined || this.#stopped || this.#failed) return;
    const { log, options } = this.#parts;
    failOpen(() => {
      const data: WatchdogData = {
        entry: "agent-checkpoint/watchdog", // WatchdogData's type holds it to WATCHDOG_ENTRY
        buffers: this.#parts.shared.buffers,
        home: this.#parts.home,
        env: this.#parts.env,
        overrides: cloneableOverrides(options.settings, (m) => log("warn", m)),
        hostLogger: options.logger !== undefined,
        hostComments: options.postComment !== undefined,
      };
      if (options.commentModule !== undefined) {
        data.commentModule = String(options.commentModule);
      }
      if (this.#parts.storeModule !== undefined) data.storeModule = this.#parts.storeModule;
      if (options.watchdogStatsEveryMs) {
        data.statsEveryMs = options.watchdogStatsEveryMs;
      }
      const module = watchdogModule();
      // Under Deno, a worker whose module cannot be read fails in a way no listener catches.
      const denied = deniedRead(module);
      if (denied !== undefined) {
        this.#failed = true;
        log("error", `the watchdog cannot start: ${denied}`);
        return;
      }
      // The fleet store: the watchdog's batches go through the store's own thread.
      const storePort = this.#parts.storePort();
      if (storePort) data.storePort = storePort;
      // node:worker_threads is loaded here, not at import (in Node it brings the streams).
      const threads = builtin<typeof import("node:worker_threads")>("node:worker_threads");
      const worker = new threads.Worker(workerUrl(module), {
        workerData: data,
        resourceLimits: { maxYoungGenerationSizeMb: WATCHDOG_YOUNG_MB },
        transferList: storePort ? [storePort] : [],
      });
      worker.on("message", (message: FromWorker) => {
        if (message.type === "log") log(message.level, message.message, message.runId);
        else if (message.type === "comment") this.#parts.comment(message.comment);
        else if (message.type === "written") this.#parts.written(message.event);
        else if (message.type === "stats") this.#stats = message.stats;
        else if (message.type === "closed") this.#closedStore?.();
      });
      worker.on("error", (error) => {
        this.#failed = true;
        if (this.#worker !== undefined) running.count--;
        this.#worker = undefined;
        log("error", `the watchdog stopped: ${errorText(error)}`);
      });
      // After the listeners: in Node, adding a message listener re-refs the worker.
      worker.unref();
      this.#worker = worker;
      if (++running.count >= MANY_WATCHDOGS && !running.told) {
        running.told = true;
        const message =
          `${running.count} keepers (createAgentCheckpoint) in this process each run a watchdog thread of their own, and each costs the host a thread and its start: make one keeper per process and start every run from it (said once)`;
        log("warn", message);
        // On stderr too, even with a host logger: the host's author, not its log, has to act.
        say(`agent-checkpoint: ${message}`);
      }
    }, (error) => {
      this.#failed = true;
      log("error", `the watchdog could not start: ${errorText(error)}`);
    });
  }

  /**
   * Stop the worker for good, once its write in flight has landed (waiting at
   * most `waitMs`). Never rejects: a failure costs a log line.
   */
  async stop(waitMs: number): Promise<void> {
    this.#stopped = true;
    if (this.#soon !== undefined) clearTimeout(this.#soon);
    this.#soon = undefined;
    const worker = this.#worker;
    this.#worker = undefined;
    if (!worker) return;
    running.count--;
    const { log, shared } = this.#parts;
    await failOpenAsync(async () => {
      if (!await shared.writesDone(waitMs)) {
        log("warn", `the watchdog's write did not land within ${waitMs} ms of close()`);
      }
      // Its ledger connection closed first (bounded): a lock of it never outlives close().
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, STORE_CLOSE_WAIT_MS);
        this.#closedStore = () => {
          clearTimeout(timer);
          resolve();
        };
        worker.postMessage({ type: "close" } satisfies ToWorker);
      });
      await worker.terminate();
    }, (error) => log("warn", `stopping the watchdog failed: ${errorText(error)}`));
  }
}
