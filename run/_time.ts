/**
 * A run's time: its deadline (the time cap plus `deadline_grace_seconds`),
 * the patience of its provider requests, and its tool calls' deadlines and
 * their signals. A part of the run (`run.time`), with its own state.
 *
 * @module
 */
import { longTimeout, type LongTimer } from "../_timer.ts";
import { nowMs } from "../_run_table.ts";
import type { PersistEvent } from "../_writer.ts";
import { FILE_LOCK_WAIT_MS } from "../_write_steps.ts";
import type { PartContext, RunHost, ToolEnd } from "./_host.ts";
import type { Settings } from "../settings.ts";

/** Calls remembered while in flight. */
const MAX_OPEN_CALLS = 64;
/**
 * How long a signal waits for the record the watchdog claimed (`tool_timeout`,
 * `deadline`) before it aborts: the watchdog's write may wait FILE_LOCK_WAIT_MS
 * for the file's lock; thrice that leaves room for a busy machine.
 */
const SETTLE_MS = 3 * FILE_LOCK_WAIT_MS;
/** A signal that never aborts. */
const NEVER = new AbortController().signal;

/** A tool call whose deadline the main thread keeps. */
interface ToolTimer {
  timer: LongTimer;
  tool: string;
  callId: string | undefined;
  startedAt: number;
  timeoutSeconds: number;
}

/**
 * A run's time, as `run.time` gives it: the patience for the next provider
 * request ({@linkcode RunTime.requestTimeout}), one tool call's deadline
 * signal ({@linkcode RunTime.toolSignal}), and the run's deadline as a stop
 * of `run.signal` ({@linkcode RunTime.stopAtDeadline}).
 *
 * @example
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const run = ac.startRun({ sessionId: "timed", caps: { timeSeconds: 600 } });
 * assert.equal(run.time.requestTimeout(900), 300);
 * assert.equal(run.time.toolSignal("c1").aborted, false);
 * await ac.close();
 * ```
 */
export class RunTime {
  readonly #host: RunHost;
  /** The deadline's timer, once `stopAtDeadline()` armed it. */
  #deadline: LongTimer | undefined = undefined;
  #armed = false;
  #fired = false;
  /** Main-thread timers of the tool calls with a deadline, by sequence number. */
  #timers: Map<number, ToolTimer> | undefined = undefined;
  /** The signals handed out by {@linkcode RunTime.toolSignal}, by call id. */
  #signals: Map<string, AbortController> | undefined = undefined;
  #engagedYet = false;

  /** @internal */
  constructor(host: RunHost) {
    this.#host = host;
  }

  /** The first map made engages the part: the hooks then tell it of calls' ends. */
  #engaged<T>(made: T): T {
    if (!this.#engagedYet) {
      this.#engagedYet = true;
      this.#host.engage(this);
    }
    return made;
  }

  /** @internal A tool call ended: its timer and signal let go. */
  toolEnd(_ctx: PartContext, _settings: Settings, end: ToolEnd): void {
    if (end.seq >= 0) this.#timers?.get(end.seq)?.timer.clear();
    this.#timers?.delete(end.seq);
    if (end.callId !== undefined) this.#signals?.delete(end.callId);
  }

  /** @internal The run ends: every timer cleared. */
  ended(): void {
    this.#deadline?.clear();
    for (const kept of this.#timers?.values() ?? []) kept.timer.clear();
    this.#timers?.clear();
    this.#signals?.clear();
  }

  /**
   * The patience to give the next provider request (S18): while a time cap
   * is armed, `min(seconds, max(60, remaining / 2))`, so a request never
   * waits out the budget; never longer than `seconds`. A timeout the user
   * configured (`explicit: true`) is returned unchanged.
   *
   * @param seconds The timeout the request would have.
   * @param options `explicit`: the user set this timeout themselves.
   * @returns Seconds.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s8", caps: { timeSeconds: 600 } });
   * assert.equal(run.time.requestTimeout(900), 300); // half of the ten minutes left
   * assert.equal(run.time.requestTimeout(120), 120); // never longer than asked
   * assert.equal(run.time.requestTimeout(900, { explicit: true }), 900);
   * await ac.close();
   * ```
   */
  requestTimeout(seconds: number, options?: { explicit?: boolean }): number {
    return this.#host.guard("requestTimeout", seconds, (ctx) => {
      const cap = this.#host.caps.time?.value;
      if (options?.explicit || cap === undefined || !(seconds > 0)) return seconds;
      const remaining = cap - this.#host.elapsed(ctx, nowMs());
      return Math.min(seconds, Math.max(60, Math.ceil(remaining / 2)));
    });
  }

  /**
   * From now on `run.signal` also aborts at the run's deadline: the time cap
   * plus `deadline_grace_seconds` (S18); nothing happens for a run without a
   * time cap. Just before it aborts, a checkpoint of kind `deadline` is
   * written (by the watchdog when the main thread is blocked; when the
   * watchdog's write is held up, the signal waits for it at most 6 s, then
   * aborts and logs a warning). Its reason is then a `TimeoutError`
   * `DOMException`, and `run.stopReason` is `{ kind: "deadline" }`. Its timer
   * never keeps the process alive. Safe to call twice.
   *
   * @returns `run.signal`.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s9", caps: { timeSeconds: 0.2 } });
   * const signal = run.time.stopAtDeadline();
   * const work = setInterval(() => {}, 50); // the host's own work keeps the process alive
   * await new Promise((resolve) => signal.addEventListener("abort", resolve));
   * clearInterval(work);
   * assert.equal((run.signal.reason as DOMException).name, "TimeoutError");
   * assert.equal(run.stopReason?.kind, "deadline");
   * await ac.close();
   * ```
   */
  stopAtDeadline(): AbortSignal {
    if (!this.#armed) this.#arm();
    return this.#host.signal();
  }

  #arm(): void {
    this.#host.guard("time.stopAtDeadline", undefined, (ctx) => {
      const cap = this.#host.caps.time?.value;
      if (cap === undefined || this.#host.ended) return;
      this.#armed = true;
      this.#engaged(undefined);
      const settings = ctx.at(nowMs());
      const grace = Number(
        (settings as unknown as Record<string, unknown>).deadline_grace_seconds ?? 0,
      );
      const at = ctx.shared.start(this.#host.info.slot) + (cap + (grace > 0 ? grace : 0)) * 1000;
      ctx.shared.armDeadline(this.#host.info.slot, at);
      const wait = at - nowMs();
      if (wait <= 0) this.#fireDeadline();
      else this.#deadline = longTimeout(() => this.#fireDeadline(), wait, { unref: true });
    });
  }

  /** Write the deadline checkpoint unless the watchdog did, then abort once it is written. */
  #fireDeadline(): void {
    if (this.#fired) return;
    this.#fired = true;
    const slot = this.#host.info.slot;
    let atSeconds = this.#host.caps.time?.value ?? 0;
    this.#host.guard("deadline", undefined, (ctx) => {
      if (ctx.shared.claimDeadline(slot)) {
        const now = nowMs();
        const settings = ctx.at(now);
        const atSeconds = (ctx.shared.deadlineAt(slot) - ctx.shared.start(slot)) / 1000;
        // mid_run_persist: false promises no file writes from timers.
        if (settings.enabled && settings.mid_run_persist) {
          ctx.writer.write(this.#host.info, settings, { kind: "deadline", atSeconds }, "host", now);
        }
        ctx.shared.settleDeadline(slot);
      }
      atSeconds = (ctx.shared.deadlineAt(slot) - ctx.shared.start(slot)) / 1000;
    });
    // A run that ended has nothing to wait for: its signal aborts now, as it always did.
    this.#afterSettled(
      "deadline",
      () => this.#host.guard("deadline", true, (ctx) => ctx.shared.deadlineSettled(slot)),
      () =>
        this.#host.stop(
          { kind: "deadline", atSeconds },
          new DOMException("The run's deadline passed", "TimeoutError"),
        ),
    );
  }

  /** @internal Keep a tool call's deadline on this thread too: the watchdog's twin, and the signal's clock. */
  arm(
    ctx: PartContext,
    seq: number,
    tool: string,
    callId: string | undefined,
    now: number,
    timeoutSeconds: number,
  ): void {
    // The watchdog plans the new deadline now rather than at its next poll.
    ctx.shared.wake();
    const startedAt = this.#host.elapsed(ctx, now);
    const timer = longTimeout(() => this.#fireToolTimeout(seq), timeoutSeconds * 1000, {
      unref: true,
    });
    const timers = this.#timers ??= this.#engaged(new Map());
    timers.set(seq, { timer, tool, callId, startedAt, timeoutSeconds });
    if (timers.size > MAX_OPEN_CALLS) {
      const [oldest, kept] = timers.entries().next().value!;
      kept.timer.clear();
      timers.delete(oldest);
    }
  }

  /** A tool call's deadline passed: write its record unless the watchdog did, then abort its signal. */
  #fireToolTimeout(seq: number): void {
    const timers = this.#timers;
    const kept = timers?.get(seq);
    timers?.delete(seq);
    if (!kept) return;
    this.#host.guard("tool timeout", undefined, (ctx) => {
      if (ctx.shared.toolDeadline(this.#host.info.slot, seq) === 0) return; // it ended
      if (ctx.shared.claimTimeout(this.#host.info.slot, seq)) {
        const now = nowMs();
        const settings = ctx.at(now);
        if (settings.enabled && settings.mid_run_persist) {
          const call: PersistEvent & { kind: "tool_timeout" } = {
            kind: "tool_timeout",
            call: {
              tool: kept.tool,
              timeoutSeconds: kept.timeoutSeconds,
              startedAt: kept.startedAt,
            },
          };
          if (kept.callId !== undefined) call.call.callId = kept.callId;
          ctx.writer.write(this.#host.info, settings, call, "host", now);
        }
        ctx.shared.settleTimeout(this.#host.info.slot, seq);
      }
      if (kept.callId !== undefined) this.#abortWhenSettled(seq, kept.callId);
    });
  }

  /**
   * Abort a timed-out call's signal once its `tool_timeout` record is written;
   * never once the call or run ended.
   */
  #abortWhenSettled(seq: number, callId: string): void {
    const slot = this.#host.info.slot;
    this.#afterSettled(
      `tool_timeout of call ${callId}`,
      () =>
        this.#host.guard("tool timeout", undefined, (ctx) =>
          // undefined: the call ended, or the run did
          ctx.shared.toolDeadline(slot, seq) === 0
            ? undefined
            : ctx.shared.timeoutSettled(slot, seq)),
      () => this.#abortTool(callId),
    );
  }

  /**
   * Call `abort` once the record behind a signal is in the file (`settled`):
   * the watchdog may have claimed the record and still be writing it. Looks
   * again on this thread's timers, which never keep the process alive; after
   * SETTLE_MS it says so in the log and aborts anyway. `settled` answering
   * undefined means there is nothing left to abort.
   */
  #afterSettled(
    record: string,
    settled: () => boolean | undefined,
    abort: () => void,
    since = performance.now(),
    pause = 1,
  ): void {
    const ready = settled();
    if (ready === undefined) return;
    if (!ready) {
      if (performance.now() - since < SETTLE_MS) {
        const again = () =>
          this.#afterSettled(record, settled, abort, since, Math.min(pause * 2, 16));
        longTimeout(again, pause, { unref: true });
        return;
      }
      this.#host.log(
        "warn",
        `the watchdog did not write the ${record} record within ${SETTLE_MS / 1000}s; ` +
          "its signal aborts without it",
      );
    }
    this.#host.safe("abort", undefined, abort);
  }

  #abortTool(callId: string): void {
    this.#signals?.get(callId)?.abort(
      new DOMException(`The tool call ${callId} ran past its deadline`, "TimeoutError"),
    );
  }

  /**
   * An `AbortSignal` for one tool call, by its call id: it aborts when the
   * call runs past its deadline (`preToolCall(tool, { callId, timeoutSeconds })`,
   * else the `tool_timeout_seconds` setting), right after the `tool_timeout`
   * checkpoint that names the call (written by the watchdog when the main
   * thread is blocked; when the watchdog's write is held up, the signal waits
   * for it at most 6 s, then aborts and logs a warning). It never aborts for a
   * call without a deadline, or once the call has ended. Its reason is a
   * `TimeoutError` `DOMException`. Its timer never keeps the process alive.
   *
   * @param callId The call id given to `preToolCall()`.
   * @returns The call's signal.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "../mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync, readFileSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "slow-tool" });
   * run.preToolCall("fetch_page", { callId: "c1", timeoutSeconds: 0.1 });
   * const signal = run.time.toolSignal("c1");
   * const work = setInterval(() => {}, 50); // the host's own work keeps the process alive
   * await new Promise((resolve) => signal.addEventListener("abort", resolve));
   * clearInterval(work);
   * run.postToolCall("fetch_page", { callId: "c1", error: signal.reason });
   * assert.match(readFileSync(run.checkpointFile, "utf8"), /fetch_page \[c1\] ran past its 0.1s deadline/);
   * await ac.close();
   * ```
   */
  toolSignal(callId: string): AbortSignal {
    return this.#host.safe("toolSignal", NEVER, () => {
      const id = String(callId);
      const known = this.#signals?.get(id);
      if (known) return known.signal;
      const ctx = this.#host.live();
      if (!ctx) return NEVER;
      const controller = new AbortController();
      const signals = this.#signals ??= this.#engaged(new Map());
      signals.set(id, controller);
      if (signals.size > MAX_OPEN_CALLS) signals.delete(signals.keys().next().value as string);
      // Asked for after its deadline passed: the call has timed out already.
      const seq = this.#host.calls?.get(id);
      if (
        seq !== undefined && ctx.shared.toolDeadline(this.#host.info.slot, seq) > 0 &&
        ctx.shared.timedOut(this.#host.info.slot, seq)
      ) this.#abortWhenSettled(seq, id);
      return controller.signal;
    });
  }
}
