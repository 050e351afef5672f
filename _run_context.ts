/**
 * What a run's hooks work with, handed to the run once instead of asked of
 * its keeper on every hook: the shared table, the writer, the log, the
 * settings in force with their version, the tool ids, and the working-tree
 * snapshots when the settings turn them on. The context follows `config.yaml`
 * itself (a stat at most once per poll interval) and renews what depends on
 * the settings when they change.
 *
 * @module
 */
import type { SettingsReading, SettingsSource } from "./config.ts";
import type { Log } from "./log.ts";
import type { EndStatus } from "./_record.ts";
import { nowMs, type RunTable } from "./_run_table.ts";
import type { Settings } from "./settings.ts";
import { TierPlans } from "./tier.ts";
import { type CheckpointWriter, encodeRunInfo, type RunInfo } from "./_writer.ts";

/** What a run calls of the working-tree snapshots (S19). @internal */
export interface WorkspaceHooks {
  beforeWrite(
    dir: string,
    turn: number,
    paths?: string[],
    runId?: string,
  ): unknown;
  beforeTool(
    dir: string,
    turn: number,
    tool: string,
    input: unknown,
    options: { callId?: string; runId?: string },
  ): unknown;
  /** A snapshot now, whatever the turn; an unchanged tree gives the newest one. */
  snapshot(dir: string, reason: string, runId?: string): WorkspaceRef | undefined;
  afterTool(
    dir: string,
    tool: string,
    options: { ok?: boolean; callId?: string; runId?: string },
  ): void;
  afterWrite(dir: string, paths: string[], runId?: string): void;
}

/** A working-tree snapshot, as a record names it. @internal */
export interface WorkspaceRef {
  snapshot: string;
  project: string;
}

/** What a context is made of. @internal */
export interface RunContextParts {
  source: SettingsSource;
  shared: RunTable;
  writer: CheckpointWriter;
  log: Log;
  /** The working-tree snapshots, made on first use; called only while the settings turn them on. */
  workspaces: () => WorkspaceHooks | undefined;
  /** Start the watchdog if these settings want it; the keeper clears `watchdogDue` once it runs. */
  watchdog: (settings: Settings) => void;
  /** A run ended (its end goes to the run ledger), or its slot is let go without one. */
  ended: (info: RunInfo, end?: { status: EndStatus; summary?: string }) => void;
}

/** The most bytes of a tool name kept in the names table. */
const MAX_TOOL_NAME = 200;

/**
 * The context of the runs of one run table. @internal
 *
 * @example
 * ```ts
 * import { RunContext } from "./_run_context.ts";
 * import { SettingsSource } from "./config.ts";
 * import { RunTable } from "./_run_table.ts";
 * import { CheckpointWriter } from "./_writer.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const shared = new RunTable(undefined, 1);
 * const log = () => {};
 * const context = new RunContext({
 *   source: new SettingsSource(mkdtempSync(join(tmpdir(), "ac-")), {}, undefined),
 *   shared,
 *   writer: new CheckpointWriter(shared, { log, comment: () => {}, written: () => {} }),
 *   log,
 *   workspaces: () => undefined,
 *   watchdog: () => {},
 *   ended: () => {},
 * });
 * assert.equal(context.at(0).enabled, true);
 * assert.equal(context.toolId("search"), context.toolId("search"));
 * ```
 */
export class RunContext {
  readonly shared: RunTable;
  readonly writer: CheckpointWriter;
  readonly log: Log;
  /** A run ended, or its slot is let go without an end. */
  readonly ended: (info: RunInfo, end?: { status: EndStatus; summary?: string }) => void;
  /** The version of the settings in force as of the last {@linkcode RunContext.at}. */
  version: number;
  /** False once the watchdog runs (or cannot): contact is then a field read. */
  watchdogDue = true;
  /** The runs' tier plans, shared by the runs whose caps are the same. */
  readonly plans: TierPlans = new TierPlans();
  readonly #source: SettingsSource;
  /** The settings in force as of the last {@linkcode RunContext.at}, and until when they hold. */
  #reading: SettingsReading;
  readonly #makeWorkspaces: () => WorkspaceHooks | undefined;
  readonly #watchdog: (settings: Settings) => void;
  readonly #toolIds = new Map<string, number>();
  #namesFull = false;
  #snapshotsOn: boolean;
  #workspaces: WorkspaceHooks | undefined;

  constructor(parts: RunContextParts) {
    this.#source = parts.source;
    this.shared = parts.shared;
    this.writer = parts.writer;
    this.log = parts.log;
    this.ended = parts.ended;
    this.#makeWorkspaces = parts.workspaces;
    this.#watchdog = parts.watchdog;
    this.#reading = parts.source.read(nowMs());
    this.version = this.#reading.version;
    this.#snapshotsOn = this.#reading.settings.workspace_snapshots;
  }

  /** The settings as of `now`, renewing what depends on them when they changed. */
  at(now: number): Settings {
    // Until the poll is due, and unless a reload replaced them (whoever's look saw it: the
    // source then drops their `until` to 0), the settings are the ones held.
    const held = this.#reading;
    if (now < held.until) return held.settings;
    const reading = this.#source.read(now);
    this.#reading = reading;
    if (reading.version !== this.version) {
      this.version = reading.version;
      this.#snapshotsOn = reading.settings.workspace_snapshots;
    }
    return reading.settings;
  }

  /** The working-tree snapshots while the settings turn them on (made on first use), else undefined. */
  get workspaces(): WorkspaceHooks | undefined {
    return this.#snapshotsOn ? (this.#workspaces ??= this.#makeWorkspaces()) : undefined;
  }

  /** A run's hook saw these settings: start the watchdog when they want it and it does not run. */
  contact(settings: Settings): void {
    if (this.watchdogDue) this.#watchdog(settings);
  }

  /** A tool name's id in the shared table's names (0 once the table is full). */
  toolId(name: string): number {
    const known = this.#toolIds.get(name);
    if (known !== undefined) return known;
    if (this.#namesFull) return 0;
    const id = this.shared.internName(Array.from(String(name)).slice(0, MAX_TOOL_NAME).join(""));
    if (id !== 0) this.#toolIds.set(name, id);
    else {
      this.#namesFull = true;
      this.log(
        "warn",
        "the tool-name table is full (16 MiB of distinct names); new tool names show as (unknown)",
      );
    }
    return id;
  }

  /** Put a run's description where the watchdog reads it. */
  publish(info: RunInfo): void {
    const bytes = encodeRunInfo(info);
    if (!bytes || !this.shared.writeInfo(info.slot, bytes)) {
      this.log("warn", "the run's description is too large for the watchdog", info.runId);
    }
  }
}
