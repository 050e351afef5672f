/**
 * Durable progress checkpoints for long, budget-capped AI-agent runs.
 *
 * At fractions of a run's budget, `preLlmCall()` hands the host a text to put
 * before the model ("write everything you found so far into FILE"). Because
 * some runs never reach another model call, the library also writes the
 * checkpoint file itself: at tool-call boundaries, and from a watchdog worker
 * that keeps going while the host's main thread is stuck. It never throws
 * into the host.
 *
 * @example Wire the four hooks into an agent loop
 * ```ts
 * import { createAgentCheckpoint } from "./mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, readFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const run = ac.startRun({ sessionId: "session-1", caps: { turns: 20 } });
 * for (let turn = 0; turn < 12; turn++) {
 *   const prologue = run.preLlmCall(); // put it before the model call when defined
 *   if (prologue) assert.match(prologue, /write everything you have found so far/);
 *   run.preToolCall("search");
 *   run.postToolCall("search", { ok: true });
 * }
 * assert.match(readFileSync(run.checkpointFile, "utf8"), /budget tier 1 checkpoint/);
 * await run.end();
 * await ac.close();
 * ```
 *
 * @module
 */
import {
  AgentCheckpoint,
  type AgentCheckpointOptions,
  type Subsystems,
} from "./agent_checkpoint.ts";
import { openRunStore, thisHost } from "./store/mod.ts";
import type { SqliteRunStore, StoreBridge } from "./store/mod.ts";
import { Workspaces } from "./workspace/mod.ts";
import { openTelemetry } from "./otel/mod.ts";

export {
  AgentCheckpoint,
  type AgentCheckpointOptions,
  type TaskComment,
} from "./agent_checkpoint.ts";

// The one place the core meets its subsystems: the run store, the working-tree snapshots and
// the tracer plug into the keeper through the small interface it defines, so the core never
// imports them.
const SUBSYSTEMS: Subsystems = {
  // Opened `quick`, on the host's thread: the embedded store, or the bridge to a backend's.
  openStore: (options) => openRunStore(options) as SqliteRunStore | StoreBridge | undefined,
  peekLatest: ({ home, settings, runId }) => {
    // Only the embedded ledger is read so: a fleet store's start waits for its answer.
    if (/^postgres(ql)?:\/\//i.test(String(settings.store ?? "").trim())) return undefined;
    const store = openRunStore({ home, settings, mode: "read", busyMs: 0 });
    if (!store || !("closeSync" in store)) return undefined;
    try {
      return store.latestSync(runId);
    } finally {
      store.closeSync();
    }
  },
  thisHost,
  // The watchdog's thread imports the store by this name for its ledger writes.
  storeModule: new URL(
    import.meta.url.endsWith(".ts") ? "./store/mod.ts" : "./store/mod.js",
    import.meta.url,
  ).href,
  workspaces: (options) => new Workspaces(options),
  tracing: (options) => openTelemetry(options),
};

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
  return new AgentCheckpoint(options ?? {}, SUBSYSTEMS);
}

export {
  type AttemptHost,
  BudgetExceededError,
  type BudgetTotals,
  type EffectState,
  type PreviousAttempt,
  type RefusedStart,
  Run,
  RunBudget,
  RunEffects,
  RunJournal,
  RunRefusedError,
  RunTime,
  type StopReason,
  type UsageReport,
} from "./run.ts";
export { ForkError, type ForkOptions, type ForkResult } from "./run/_fork.ts";
export type { CheckpointEvent } from "./_writer.ts";
export { type BoardChoice, discoverCaps, type DiscoveredCaps, type RunInit } from "./discover.ts";
export { type Env, type LoadedSettings, loadSettings, type SettingsOptions } from "./config.ts";
export { type Caps, dueTier, type Tier } from "./tier.ts";
export { formatDuration, formatUsd, renderTemplate, type TemplateValues } from "./template.ts";
export { writeFileAtomic } from "./persist.ts";
export {
  type Axis,
  type JsonSchema,
  type Mode,
  type ModelPrice,
  SETTINGS,
  type Settings,
  type SettingSource,
  type SettingSpec,
  settingsSchema,
  type Verdict,
} from "./settings.ts";
export { AXES, type BudgetAxis, END_STATUSES, type UseReport } from "./_record.ts";
export type {
  CapSource,
  EndStatus,
  RecordKind,
  RecordSource,
  RunCaps,
  TimedOutCall,
  UsageTotals,
} from "./_record.ts";
export type { HostLogger, LogRecord } from "./log.ts";
