/**
 * One run's hooks (S6, S13). Every hook is a boundary where the host calls
 * in, so each guards itself: any error becomes a log line and a no-op.
 *
 * @module
 */
import { errorText, type Log } from "./log.ts";
import type { RecordSource, RunCaps } from "./record.ts";
import type { Settings } from "./settings.ts";
import { nowMs, type SharedRuns } from "./shared.ts";
import {
  MAX_NOTES,
  type PersistEvent,
  type RunInfo,
  templateValues,
  tierMessage,
} from "./snapshot.ts";
import { capValues, fireTier, tierFor, type TierPlan, tierPlan } from "./tier.ts";

/** What a run needs from its `AgentCheckpoint`. @internal */
export interface RunHost {
  readonly shared: SharedRuns;
  readonly log: Log;
  /** Current settings and their version. */
  settingsAt(now: number): Settings;
  settingsVersion(): number;
  /** Start the watchdog if it should run and does not yet. */
  contact(settings: Settings): void;
  toolId(name: string): number;
  persist(info: RunInfo, event: PersistEvent, source: RecordSource, now: number): void;
  noted(info: RunInfo, text: string): void;
  ended(info: RunInfo): void;
}

const MAX_NOTE = 2000;

/**
 * A run: one conversation run or task. Created by
 * {@linkcode AgentCheckpoint.startRun}; the host calls its hooks.
 */
export class Run {
  /** The kanban task id in the kanban dialect, else the session id. */
  readonly runId: string;
  /** `chat`, `kanban` or `goal` (S4). */
  readonly dialect: "chat" | "kanban" | "goal";
  /** The caps that count, per axis, with their sources (S4). */
  readonly caps: RunCaps;
  /** The checkpoint file of this run (S8). */
  readonly checkpointFile: string;

  readonly #host: RunHost | undefined;
  readonly #info: RunInfo;
  #plan: TierPlan | undefined;
  #planVersion = -1;
  #prologue = 0;

  /** @internal */
  constructor(host: RunHost | undefined, info: RunInfo, dialect: Run["dialect"]) {
    this.#host = host;
    this.#info = info;
    this.runId = info.runId;
    this.dialect = dialect;
    this.caps = info.caps;
    this.checkpointFile = info.checkpointFile;
  }

  /** @internal The run's slot in shared memory. */
  get slot(): number {
    return this.#info.slot;
  }

  /** The host of a run still holding its slot. */
  #live(): RunHost | undefined {
    const host = this.#host;
    return host && host.shared.gen(this.#info.slot) === this.#info.gen ? host : undefined;
  }

  #planFor(host: RunHost, settings: Settings): TierPlan {
    const version = host.settingsVersion();
    if (this.#plan === undefined || version !== this.#planVersion) {
      this.#plan = tierPlan(capValues(this.caps), settings);
      this.#planVersion = version;
    }
    return this.#plan;
  }

  #fail(hook: string, error: unknown): void {
    try {
      this.#host?.log("error", `${hook} failed: ${errorText(error)}`, this.runId);
    } catch { /* the logger itself is guarded; this is the last line */ }
  }

  /**
   * Call before each model call. Returns the text to put before it when a
   * tier is due on the prologue surface, else undefined (S6).
   *
   * @returns The tier text (snapshot mode), the budget numbers (notify mode) or undefined.
   *
   * @example Tier 2 on the penultimate turn of ten
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s1", caps: { turns: 10 } });
   * const texts = Array.from({ length: 10 }, () => run.preLlmCall());
   * assert.equal(texts.findIndex((t) => t !== undefined), 8);
   * assert.match(texts[8]!, /INCOMPLETE/);
   * await ac.close();
   * ```
   */
  preLlmCall(): string | undefined {
    try {
      const host = this.#live();
      if (!host) return undefined;
      const now = nowMs();
      const slot = this.#info.slot;
      const used = host.shared.addTurn(slot);
      host.shared.touch(slot, now);
      const settings = host.settingsAt(now);
      if (!settings.enabled) return undefined;
      host.contact(settings);
      const elapsed = (now - host.shared.start(slot)) / 1000;
      const tier = tierFor(this.#planFor(host, settings), used, elapsed);
      if (tier === 0) return undefined;
      const latch = fireTier(this.#prologue, tier);
      if (latch === undefined) return undefined;
      this.#prologue = latch;
      if (settings.mode === "log-only") {
        host.log("info", `tier ${tier} due on the prologue surface (turn ${used})`, this.runId);
        return undefined;
      }
      return tierMessage(settings, tier, templateValues(this.#info, used, elapsed));
    } catch (error) {
      this.#fail("preLlmCall", error);
      return undefined;
    }
  }

  /** The mid-run surface at a tool boundary: persist a due tier once (S6). */
  #midRun(host: RunHost, now: number, source: RecordSource): void {
    const settings = host.settingsAt(now);
    if (!settings.enabled) return;
    host.contact(settings);
    if (!settings.mid_run_persist) return;
    const slot = this.#info.slot;
    const elapsed = (now - host.shared.start(slot)) / 1000;
    const tier = tierFor(this.#planFor(host, settings), host.shared.turns(slot), elapsed);
    if (tier === 0 || !host.shared.claimTier(slot, tier)) return;
    if (settings.mode === "log-only") {
      host.log("info", `tier ${tier} due on the mid-run surface (${source})`, this.runId);
    } else host.persist(this.#info, { kind: "tier", tier }, source, now);
  }

  /**
   * Call before each tool call. Persists the checkpoint file itself when a
   * tier is due on the mid-run surface, so the file is durable before the
   * tool runs.
   *
   * @param tool The tool's name, as the record should show it.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import assert from "node:assert/strict";
   * import { existsSync, mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s2", caps: { turns: 4 } });
   * run.preLlmCall();
   * run.preLlmCall();
   * run.preToolCall("search"); // two turns used of four: tier 2 is due
   * assert.ok(existsSync(run.checkpointFile));
   * await ac.close();
   * ```
   */
  preToolCall(tool: string): void {
    try {
      const host = this.#live();
      if (!host) return;
      const now = nowMs();
      const slot = this.#info.slot;
      host.shared.touch(slot, now);
      host.shared.toolStart(slot, host.toolId(tool), now);
      this.#midRun(host, now, "pre_tool_call");
    } catch (error) {
      this.#fail("preToolCall", error);
    }
  }

  /**
   * Call after each tool call, with its outcome when known. Persists like
   * {@linkcode Run.preToolCall} when a tier is due.
   *
   * @param tool The tool's name.
   * @param outcome Whether it succeeded and how long it took.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * const run = ac.startRun({ sessionId: "s3" });
   * run.preToolCall("bash");
   * run.postToolCall("bash", { ok: true, durationMs: 1200 });
   * await ac.close();
   * ```
   */
  postToolCall(tool: string, outcome?: { ok?: boolean; durationMs?: number }): void {
    try {
      const host = this.#live();
      if (!host) return;
      const now = nowMs();
      const slot = this.#info.slot;
      host.shared.touch(slot, now);
      host.shared.toolEnd(slot, host.toolId(tool), outcome?.ok, outcome?.durationMs ?? -1, now);
      this.#midRun(host, now, "post_tool_call");
    } catch (error) {
      this.#fail("postToolCall", error);
    }
  }

  /**
   * Tell the run it is alive without a model or tool call (streamed output,
   * progress): moves the stall deadline (S10).
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * ac.startRun({ sessionId: "s4" }).activity();
   * await ac.close();
   * ```
   */
  activity(): void {
    try {
      const host = this.#live();
      if (!host) return;
      const now = nowMs();
      host.shared.touch(this.#info.slot, now);
      host.contact(host.settingsAt(now));
    } catch (error) {
      this.#fail("activity", error);
    }
  }

  /**
   * Add a line to the run's record: it appears in the next checkpoint
   * persisted (the last ten notes are kept).
   *
   * @param text What to remember, such as the step the agent is on.
   *
   * @example
   * ```ts
   * import { createAgentCheckpoint } from "./mod.ts";
   * import { mkdtempSync } from "node:fs";
   * import { tmpdir } from "node:os";
   * import { join } from "node:path";
   *
   * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
   * ac.startRun({ sessionId: "s5" }).note("cloned the repository; reading the tests");
   * await ac.close();
   * ```
   */
  note(text: string): void {
    try {
      const host = this.#live();
      if (!host) return;
      const now = nowMs();
      host.shared.touch(this.#info.slot, now);
      let line = String(text);
      if (line.length > MAX_NOTE) line = Array.from(line).slice(0, MAX_NOTE).join("");
      const notes = this.#info.notes;
      notes.push(line);
      if (notes.length > MAX_NOTES) notes.splice(0, notes.length - MAX_NOTES);
      host.noted(this.#info, line);
      host.contact(host.settingsAt(now));
    } catch (error) {
      this.#fail("note", error);
    }
  }

  /**
   * End the run: the watchdog stops watching it and its hooks become no-ops.
   * Safe to call twice.
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
   * const run = ac.startRun({ sessionId: "s6", caps: { turns: 2 } });
   * await run.end();
   * assert.equal(run.preLlmCall(), undefined);
   * await ac.close();
   * ```
   */
  end(): Promise<void> {
    try {
      const host = this.#live();
      if (host) host.ended(this.#info);
    } catch (error) {
      this.#fail("end", error);
    }
    return Promise.resolve();
  }
}
