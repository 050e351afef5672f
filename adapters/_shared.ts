/**
 * What every framework adapter shares: checking the caps a host gives, starting
 * the run with them, holding a prologue until it can be placed, and telling how
 * a run that threw ended.
 *
 * @module
 */
import type { AgentCheckpoint, Run, RunInit } from "../mod.ts";
import { RunRefusedError } from "../run.ts";
import { failOpen, say } from "../log.ts";
import { AXES } from "../_record.ts";
import type { Caps } from "../tier.ts";

/** Where the prologue goes in the model call it is due for. */
export type Placement = "user" | "system" | "tool-result";

/** What every adapter takes besides its framework's own cap name. */
export interface AdapterInit extends Omit<RunInit, "caps" | "sessionId"> {
  /** The run's session id; adapters that can find one themselves make it optional. */
  sessionId?: string;
  /** The time cap in seconds: a nudge, and with `deadline: true` a hard stop. */
  timeSeconds?: number;
  /** A token cap (input + output tokens over the run's model calls). */
  tokens?: number;
  /** A cost cap in US dollars (the framework's cost, else the `prices` setting). */
  usd?: number;
  /** Where the prologue goes. @default {"user"} */
  placement?: Placement;
  /** Abort the framework's run at the time cap (plus `deadline_grace_seconds`). @default {false} */
  deadline?: boolean;
  /**
   * Tools (by name) that act on the world and are run at most once across
   * the run's attempts (`run.once`): a retried run's call of one of them with
   * the same input returns the result its earlier attempt recorded, and the
   * tool is not run again. @default {[]}
   */
  replay?: string[];
}

const PLACEMENTS: readonly string[] = ["user", "system", "tool-result"];

/**
 * Check a cap a host gave an adapter: a whole number ≥ 1 (turns) or a finite
 * number > 0 (seconds). This is a programming error, so it throws.
 *
 * @throws {TypeError} When the value is not a usable cap.
 */
export function checkCap(
  name: string,
  value: unknown,
  kind: "turns" | "seconds",
  optional = false,
): void {
  if (value === undefined && optional) return;
  const ok = typeof value === "number" && Number.isFinite(value) && value > 0 &&
    (kind === "seconds" || Number.isInteger(value));
  if (!ok) {
    const unit = AXES.find((a) => a.name === name)?.unit ?? "seconds";
    const what = kind === "turns" ? "a whole number of at least 1" : `a number of ${unit} above 0`;
    throw new TypeError(`${name} must be ${what}, got ${describe(value)}`);
  }
}

const describe = (value: unknown): string => {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean" || value == null) {
    return String(value);
  }
  return typeof value;
};

/**
 * Check an adapter's init and start its run with the turn cap it was given.
 *
 * @throws {TypeError} When a cap, the placement or the session id is unusable.
 * @throws {Error} When `replay` names tools and there is no SQLite driver to keep the run ledger.
 */
export function startAdapterRun(
  ac: AgentCheckpoint,
  init: AdapterInit,
  capName: string,
  turns: unknown,
  sessionId: string | undefined = init.sessionId,
): Run {
  checkCap(capName, turns, "turns");
  // The other axes' caps are options of their own: `timeSeconds` (the time axis), `tokens`, `usd`.
  const capKeys = AXES.filter((a) => a.name !== "turns").map((a) => ({
    key: (a.name === "time" ? "timeSeconds" : a.name) as Exclude<keyof Caps, "turns">,
    integer: a.integer,
  }));
  for (const { key, integer } of capKeys) {
    checkCap(key, init[key], integer ? "turns" : "seconds", true);
  }
  if (init.placement !== undefined && !PLACEMENTS.includes(init.placement)) {
    throw new TypeError(
      `placement must be "user", "system" or "tool-result", got ${describe(init.placement)}`,
    );
  }
  if (typeof sessionId !== "string" || sessionId === "") {
    throw new TypeError(`sessionId must be a non-empty string, got ${describe(sessionId)}`);
  }
  if (
    init.replay !== undefined &&
    (!Array.isArray(init.replay) || !init.replay.every((t) => typeof t === "string"))
  ) {
    throw new TypeError(`replay must be a list of tool names, got ${describe(init.replay)}`);
  }
  // A tool to run at most once is run again on a retry when no ledger keeps its receipt.
  if (init.replay !== undefined && init.replay.length !== 0) ac.needLedger("replay");
  const { placement: _p, deadline: _d, replay: _r, ...rest } = init;
  const caps: Caps = { turns: turns as number };
  for (const { key } of capKeys) {
    const cap = rest[key];
    delete rest[key];
    if (cap !== undefined) caps[key] = cap;
  }
  return refuseHeld(ac.startRun({ ...rest, sessionId, caps }));
}

/**
 * The guard every adapter's start goes through: a run whose start was refused
 * (another live attempt holds its id) must not reach the framework, or a task
 * picked up twice would make its model calls twice.
 *
 * @throws {RunRefusedError} When `run.refused` is set.
 *
 * @example
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { refuseHeld } from "./_shared.ts";
 * import assert from "node:assert/strict";
 *
 * const ac = createAgentCheckpoint({ settings: { enabled: false } });
 * const run = ac.startRun({ sessionId: "free" });
 * assert.equal(refuseHeld(run), run);
 * await run.end();
 * await ac.close();
 * ```
 */
export function refuseHeld(run: Run): Run {
  if (run.refused) throw new RunRefusedError(run.refused);
  return run;
}

/**
 * A prologue waiting for a place. With `placement: "tool-result"` it rides on
 * the newest tool result not yet sent to the model; a model call that has
 * none leaves it open for a later one. A newer prologue replaces a waiting
 * one (tier 2 supersedes tier 1).
 */
export class PendingPrologue {
  #text: string | undefined;

  /**
   * Offer the prologue of this model call (from `preLlmCall()`, possibly
   * undefined) and say whether this call can carry it; returns the text to
   * place now, or undefined.
   */
  take(text: string | undefined, canPlace: boolean): string | undefined {
    if (text !== undefined) this.#text = text;
    if (!canPlace || this.#text === undefined) return undefined;
    const out = this.#text;
    this.#text = undefined;
    return out;
  }

  /** Whether a prologue is waiting. */
  get waiting(): boolean {
    return this.#text !== undefined;
  }
}

/**
 * How a run whose framework threw ended: `capped` when an enforced cap
 * stopped it (`run.signal`), `deadline` when the adapter handed the run's
 * deadline to the framework and it fired, `aborted` when the host's own
 * signal did, else `failed`.
 */
export function thrownStatus(
  run: Run,
  deadline: boolean | undefined,
  userSignal?: AbortSignal | null,
): "capped" | "deadline" | "aborted" | "failed" {
  if (run.budget.stopped) return "capped";
  if (deadline && run.stopReason?.kind === "deadline") return "deadline";
  if (userSignal?.aborted) return "aborted";
  return "failed";
}

/**
 * An error as a run's end summary (or a tool call's error): `Name: message` for
 * an `Error`, or with `"message"` its message alone; any other value as text.
 * Over 300 characters, it is cut and ends in `…`: to 300 characters in all,
 * or with `"message"` after the first 300 (the Claude Agent SDK adapter's summaries).
 */
export function errorLine(error: unknown, form: "named" | "message" = "named"): string {
  const text = !(error instanceof Error)
    ? String(error)
    : form === "named"
    ? `${error.name}: ${error.message}`
    : error.message;
  if (text.length <= 300) return text;
  return `${text.slice(0, form === "named" ? 299 : 300)}…`;
}

/**
 * Log a fault inside an adapter's own hook code: a log line, never a throw
 * into the framework. A fault that cannot even be logged (a thrown value whose
 * text throws) is dropped: the log is the last line of defence.
 *
 * @example
 * ```ts
 * import { logFault } from "./_shared.ts";
 * import { createAgentCheckpoint } from "../mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const lines: string[] = [];
 * const ac = createAgentCheckpoint({
 *   home: mkdtempSync(join(tmpdir(), "ac-")),
 *   env: {},
 *   settings: { watchdog: false, ledger: false },
 *   logger: ({ message }) => void lines.push(message),
 * });
 * const run = ac.startRun({ sessionId: "fault" });
 * logFault(run, "my hook", new Error("boom"));
 * logFault(run, "my hook", { toString: () => { throw new Error("no text"); } }); // dropped
 * assert.deepEqual(lines.filter((l) => l.includes("my hook")), ["my hook failed: boom"]);
 * await ac.close();
 * ```
 */
export function logFault(run: Run, hook: string, error: unknown): void {
  failOpen(
    () =>
      run.log("error", `${hook} failed: ${error instanceof Error ? error.message : String(error)}`),
    () => {},
  );
}

/**
 * An adapter's one guard around its own work inside the framework's call:
 * what `body` returns, or, when it throws, the fault logged
 * ({@linkcode logFault}) and what `fallback` returns (the framework's value as
 * given).
 *
 * @param run The run a fault is logged to.
 * @param hook Where, for the log line.
 * @param body The adapter's work.
 * @param fallback What to go on with after a fault.
 * @returns `body`'s value, else `fallback`'s.
 *
 * @example
 * ```ts
 * import { guarded } from "./_shared.ts";
 * import { createAgentCheckpoint } from "../mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const lines: string[] = [];
 * const ac = createAgentCheckpoint({
 *   home: mkdtempSync(join(tmpdir(), "ac-")),
 *   env: {},
 *   settings: { watchdog: false, ledger: false },
 *   logger: ({ message }) => void lines.push(message),
 * });
 * const run = ac.startRun({ sessionId: "guarded" });
 * assert.equal(guarded(run, "merge", () => 1, () => 0), 1);
 * const broken = () => {
 *   throw new Error("boom");
 * };
 * assert.equal(guarded(run, "merge", broken, () => 0), 0);
 * assert.ok(lines.includes("merge failed: boom"));
 * await ac.close();
 * ```
 */
export function guarded<T>(run: Run, hook: string, body: () => T, fallback: () => T): T {
  return failOpen(body, (error) => {
    logFault(run, hook, error);
    return fallback();
  });
}

/**
 * The host's signal and the run's own (`run.signal`), as one: the run's
 * signal when the adapter hands its deadline on (`deadline`, which arms it)
 * or the settings enforce a cap.
 */
export function runSignal(
  run: Run,
  deadline: boolean | undefined,
  userSignal?: AbortSignal | null,
): AbortSignal | undefined {
  if (deadline) run.time.stopAtDeadline();
  const signals = [
    userSignal ?? undefined,
    deadline || run.budget.enforced ? run.signal : undefined,
  ].filter(
    (s): s is AbortSignal => s !== undefined,
  );
  if (signals.length <= 1) return signals[0];
  return AbortSignal.any(signals);
}

/** What this realm has said on stderr already, shared by every copy of this module in it. */
const TOLD: Set<string> = ((globalThis as Record<symbol, unknown>)[
  Symbol.for("agent-checkpoint.adapters.told")
] ??= new Set<string>()) as Set<string>;

/**
 * Say `line` on stderr once per process (per thread), under `key`: for a
 * mistake in the host's setup that a log line alone would leave unseen. Never
 * throws. Returns whether it was said now.
 */
export function tellOnce(key: string, line: string): boolean {
  if (TOLD.has(key)) return false;
  TOLD.add(key);
  say(`agent-checkpoint: ${line}`);
  return true;
}

/**
 * A tool call's signal: the call's deadline signal (`run.time.toolSignal`) joined
 * to the framework's own signal for the call, when it has one.
 */
export function toolCallSignal(
  run: Run,
  callId: string,
  theirs?: AbortSignal | null,
): AbortSignal {
  const own = run.time.toolSignal(callId);
  return theirs instanceof AbortSignal ? AbortSignal.any([theirs, own]) : own;
}

/**
 * A tool's input as its effect key takes it: a framework that hands a tool
 * its arguments as JSON text (OpenAI Agents) gives the value they encode, so
 * the key does not depend on the order the model wrote the keys in.
 */
export function effectInput(input: unknown): unknown {
  if (typeof input !== "string") return input;
  try {
    return JSON.parse(input);
  } catch {
    // not JSON: the text itself is the input the key takes
    return input;
  }
}

/**
 * Run a tool's call as the run's side effects have it: a tool in `replay`
 * through `run.once` (in a retried run, a call done before returns the
 * result recorded then, and `call` is not run); a tool in the
 * `effect_tools` setting after its intent is durable (its receipt comes with
 * the adapter's `postToolCall`); any other as it is. `call` runs the tool,
 * given its effect key. Resolves to what `call` (or the receipt) gave, and
 * whether it was replayed.
 */
export async function effectful<T>(
  run: Run,
  init: AdapterInit,
  name: string,
  input: unknown,
  callId: string | undefined,
  call: (key: string) => T | Promise<T>,
): Promise<{ value: T; replayed: boolean }> {
  const options = callId === undefined ? undefined : { callId };
  if (init.replay?.includes(name)) {
    let ran = false;
    const value = await run.effects.once(name, input, (key) => {
      ran = true;
      return call(key);
    }, options);
    return { value, replayed: !ran };
  }
  if (run.effects.isEffectTool(name)) await run.effects.intent(name, input, options);
  return { value: await call(run.effects.key(name, input)), replayed: false };
}
