/**
 * What a run starts with from its earlier attempts (S16): the earlier attempt
 * as the run ledger recorded it (where it was when it stopped; the ledger also
 * gives the new attempt its number), else as its checkpoint file did; what the
 * attempts used together; and the sentences the resume text adds.
 *
 * @module
 */
import * as path from "node:path";
import { existsSync } from "node:fs";
import { failOpen, type Log } from "./log.ts";
import { ensureDir, readCheckpoint, writeFileAtomicSync } from "./persist.ts";
import { type EndStatus, MAX_ATTEMPTS, summaryLine, type UsageTotals } from "./_record.ts";
import { attemptHost, type EarlierTrace, type PreviousAttempt, type RefusedStart } from "./run.ts";
import { nowMs, type RunTable } from "./_run_table.ts";
import type { Settings } from "./settings.ts";
import type { RunInfo } from "./_writer.ts";
import {
  type AttemptStart,
  busy,
  type EffectRow,
  effectsNote,
  type HostId,
  ledgerFailed,
  type LedgerStore,
  ledgerSummary,
  type PriorUse,
  recordOf,
  remainingCaps,
  resumeNote,
  type RunRecord,
  type RunView,
  type StartOptions,
  unknownCalls,
} from "./_ledger.ts";
import { nothingAt } from "./_file_ops.ts";

const fileExists = (file: string) => failOpen(() => existsSync(file), () => false);

/** What a resumed run starts with: its earlier attempt, their summaries, and what they used. */
interface Earlier {
  previous: PreviousAttempt;
  attempts: string[];
  prior: PriorUse;
  resumeNote?: string;
  /** Its span, when the ledger kept one. */
  trace?: EarlierTrace;
}

/** The earlier attempt's span and where it got to, when its record names a span. */
function traceOf(view: RunView, state: EarlierTrace["state"]): EarlierTrace | undefined {
  const r = view.record;
  if (!r.trace) return undefined;
  return {
    trace: r.trace,
    attempt: r.attempt,
    state,
    startedAt: r.startedAt,
    lastSeen: Math.max(r.updatedAt, view.heartbeat?.at ?? 0),
    turnsUsed: r.turnsUsed,
    elapsedSeconds: r.elapsedSeconds,
    tier: r.tier,
    inFlight: r.inFlight.map((call) => call.tool),
  };
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

/**
 * The view with the cut-off attempt's last sign of life raised to its newest
 * intent or receipt: killed within a progress interval, its record and
 * heartbeat are older than the email it sent.
 */
function seenByEffects(view: RunView, store: LedgerStore | undefined): RunView {
  const r = view.record;
  const effects = store?.effects;
  if (view.state !== "cut-off" || !effects) return view;
  const rows = failOpen(() => effects.readSync(r.runId), () => undefined) ?? [];
  let last = 0;
  for (const row of rows) {
    if (row.attempt === r.attempt) last = Math.max(last, row.at);
    if (row.receipt?.attempt === r.attempt) last = Math.max(last, row.receipt.at);
  }
  if (last <= Math.max(r.updatedAt, view.heartbeat?.at ?? 0)) return view;
  const heartbeat = { host: r.host, intervalSeconds: 0, ...view.heartbeat, at: last };
  return { ...view, heartbeat };
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
  const host = attemptHost(r.host.machine, r.host.pid);
  const trace = traceOf(view, status);
  if (same && Date.parse(same.persistedAt) > r.updatedAt) {
    // The file was written after the ledger's last record (the process died within an interval).
    const out: Earlier = {
      ...file!,
      previous: { ...same, status, host },
      prior: priorUse(r.prior, same.turnsUsed, same.elapsedSeconds, same.usage ?? r.usage),
    };
    if (trace) out.trace = trace;
    return out;
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
  return trace ? { previous, attempts, prior, trace } : { previous, attempts, prior };
}

/** The earlier attempt recorded in a checkpoint file, when it did not end done (S16). */
function earlierAttempt(
  file: string,
  log: (message: string) => void,
): Earlier | undefined {
  if (nothingAt(file)) return undefined; // a fresh run's case: no file, nothing to resume
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

/** What a run's start reads and writes of the run ledger. @internal */
export interface ResumeParts {
  log: Log;
  /** The run ledger's store, opened on first use; undefined when it cannot be had. */
  store(settings: Settings): LedgerStore | undefined;
  /**
   * The newest record of a run id, read from a store opened for reading only
   * (it never waits on a lock), for a start whose store cannot be opened now.
   */
  peek?(settings: Settings, runId: string): RunView | undefined;
  /** This process, as run records name it: asked only once the store is open. */
  host(): HostId;
  /** Write records on the main thread. */
  write(records: RunRecord[], what: string): void;
  /** Whether the watchdog's thread runs: it records a started run within an interval. */
  watched?(): boolean;
}

/** What the run ledger said at a run's start. */
interface LedgerStart {
  /** False when the ledger is off or failed. */
  recorded: boolean;
  /** True when it had a record of the run id, which then decides over the file. */
  seen?: boolean;
  /** True when the attempt number was worked out here (the ledger could not give one). */
  numbered?: boolean;
  earlier?: Earlier;
  /** The start was refused (`on_duplicate: refuse`): the live attempt that holds the run. */
  refused?: RefusedStart;
}

/** How long a start that must know the holder (`refuse`, `take-over`) tries a busy store, ms. */
const LEASE_WAIT_MS = 1000;

/** The live holder a refused start names, and the line that says so. */
function refusal(info: RunInfo, view: RunView, log: Log, settings: Settings): RefusedStart {
  const r = view.record;
  const host = attemptHost(r.host.machine, r.host.pid);
  const reason =
    `run id ${info.runId} is live in another process (attempt ${r.attempt} on ${host}); on_duplicate is refuse, so this start does nothing`;
  log("warn", reason, info.runId);
  const beat = view.heartbeat?.at ?? r.updatedAt;
  return {
    attempt: r.attempt,
    host,
    reason,
    runId: info.runId,
    since: r.startedAt,
    freesBy: beat + settings.host_timeout_seconds * 1000,
  };
}

/**
 * The store's start of an attempt: with `on_duplicate` other than `warn`,
 * a busy store (another process's write lock) is tried again for a bounded
 * while, since the answer decides whether this attempt may run.
 */
function startIn(
  store: LedgerStore,
  record: RunRecord,
  options: StartOptions,
): AttemptStart {
  if ((options.onDuplicate ?? "warn") === "warn") return store.sync!.startAttempt(record, options);
  const until = nowMs() + LEASE_WAIT_MS;
  const cell = new Int32Array(new SharedArrayBuffer(4));
  for (let wait = 1;; wait = Math.min(20, wait * 2)) {
    try {
      return store.sync!.startAttempt(record, options);
    } catch (error) {
      // A store that handed the write on (its log is long until the watchdog's next
      // checkpoint) stays so for longer than this wait: the start reads the holder instead.
      if (nowMs() + wait > until || (error as { handedOn?: boolean })?.handedOn) throw error;
      Atomics.wait(cell, 0, 0, wait);
    }
  }
}

/**
 * The run this attempt belongs to: a new one when the run id's newest record
 * ended done (numbered from this attempt), else the newest record's.
 */
function generationOf(info: RunInfo, previous: RunView, attempt: number): void {
  const generation = previous.record.status === "done" ? attempt : previous.record.generation;
  if (generation !== undefined && generation > 1) info.generation = generation;
}

/**
 * Record a run's start in the ledger, which gives its attempt number, and
 * read the newest earlier record of its run id.
 */
function ledgerStart(
  info: RunInfo,
  table: RunTable,
  settings: Settings,
  fromFile: Earlier | undefined,
  parts: ResumeParts,
): LedgerStart {
  if (!settings.enabled || !settings.ledger) return { recorded: false };
  const store = parts.store(settings);
  const { log } = parts;
  /** The start is not recorded now: the ledger's newest record of the run id still numbers it. */
  const unrecorded = (previous: RunView | undefined): LedgerStart => {
    if (!previous) return { recorded: false };
    // The store cannot take the start, but says the run is held: refused all the same.
    if (settings.on_duplicate === "refuse" && previous.state === "live") {
      return { recorded: false, refused: refusal(info, previous, log, settings) };
    }
    if (settings.resume === false) return { recorded: false };
    generationOf(info, previous, previous.record.attempt + 1);
    if (previous.record.status === "done") info.attempt = previous.record.attempt + 1;
    const earlier = ledgerAttempt(seenByEffects(previous, store), fromFile, Date.now());
    if (!earlier) return { recorded: false, seen: true };
    info.attempt = Math.max(earlier.previous.attempt, fromFile?.previous.attempt ?? 0) + 1;
    return { recorded: false, seen: true, numbered: true, earlier };
  };
  if (!store) {
    // Not open now (another process holds it locked as it opens or closes): read it, never
    // waiting, so that the retry still resumes; the worker records the run once it opens.
    if (!parts.peek || (settings.resume === false && settings.on_duplicate !== "refuse")) {
      return { recorded: false };
    }
    return failOpen(() => unrecorded(parts.peek!(settings, info.runId)), () => ({
      recorded: false,
    }));
  }
  if (!store.sync) return { recorded: false };
  return failOpen((): LedgerStart => {
    const host = parts.host();
    const now = nowMs();
    // The start row is stamped with the run's claim (its first activity): any record made of the
    // run later, on either thread and whatever its clock read, is not older (the store keeps the
    // newer of a live run's two records).
    const first = recordOf(info, table, host, now);
    first.updatedAt = Math.round(table.activity(info.slot));
    const started = startIn(store, first, {
      minAttempt: fromFile ? fromFile.previous.attempt + 1 : 1,
      fresh: settings.resume === false,
      heartbeat: {
        host,
        at: Math.round(now),
        intervalSeconds: settings.progress_interval_seconds,
      },
      onDuplicate: settings.on_duplicate,
    });
    if (started.refused && started.previous) {
      return { recorded: false, refused: refusal(info, started.previous, log, settings) };
    }
    info.attempt = started.attempt;
    const previous = started.previous;
    if (!previous || settings.resume === false) return { recorded: true };
    generationOf(info, previous, started.attempt);
    // The earlier attempt ran elsewhere (the fleet store): its file, recreated here first.
    const content = previous.record.fileContent;
    if (
      content !== undefined && previous.record.status !== "done" &&
      !fileExists(info.checkpointFile)
    ) {
      failOpen(() => {
        ensureDir(path.dirname(info.checkpointFile));
        writeFileAtomicSync(info.checkpointFile, content);
        log(
          "info",
          `recreated the checkpoint file from the fleet store (attempt ${previous.record.attempt} ran on ${previous.record.host.machine})`,
          info.runId,
        );
        fromFile = earlierAttempt(
          info.checkpointFile,
          (message) => log("warn", message, info.runId),
        );
      }, (error) => ledgerFailed(log, "the earlier attempt's file", error, info.runId));
    }
    const seen = { recorded: true, seen: true };
    if (previous.state === "live") {
      log(
        "warn",
        `run id ${info.runId} is still live in another process (${previous.record.host.machine}, pid ${previous.record.host.pid}); this is attempt ${started.attempt}${
          settings.on_duplicate === "take-over"
            ? `, which takes the run over: attempt ${previous.record.attempt}'s records are refused from now on`
            : ""
        }`,
        info.runId,
      );
    }
    const earlier = ledgerAttempt(seenByEffects(previous, store), fromFile, Date.now());
    return earlier ? { ...seen, earlier } : seen;
  }, (error): LedgerStart => {
    // Busy or failing for writes, it may still be read (a reader never waits): the ledger
    // still decides, and the worker records the run within an interval.
    const out: LedgerStart = failOpen(
      (): LedgerStart =>
        unrecorded(
          settings.resume === false && settings.on_duplicate !== "refuse"
            ? undefined
            : store.sync?.latest(info.runId),
        ),
      () => ({ recorded: false }),
    );
    // Busy (most often with this process's own watchdog committing): its next commit records
    // the run from shared memory, numbered as above, at no cost here, and nothing is lost to say.
    const recorded = !out.refused && busy(error) && failOpen(() => parts.watched?.(), () => false);
    if (!recorded) ledgerFailed(log, "the run's start", error, info.runId);
    return out;
  });
}

/** What a resumed run starts with besides its description. @internal */
export interface Resumed {
  /** The earlier attempt. */
  previous: PreviousAttempt;
  /** Sentences the resume text adds (calls of unknown outcome, a shrunk budget). */
  resumeNote?: string;
  /** The earlier attempt's span, when the ledger kept one: the new span links to it. */
  trace?: EarlierTrace;
  /** True when the earlier attempt left no checkpoint file: the resume text then names none. */
  noFile?: true;
  /** The earlier attempts' effects, when the ledger was read for them. */
  effects?: EffectRow[];
}

/** What a run's start found: the earlier attempt to resume, or that the start was refused. */
export type StartFound = Resumed | { refused: RefusedStart };

/**
 * A run's start: its earlier attempt, from the run ledger first (where it was
 * when it stopped), from its checkpoint file second. Fills in the run's
 * description (its attempt number, the earlier attempts' summaries and use,
 * the caps they left) and records the start in the ledger. Undefined when
 * there is no earlier attempt to resume; `{ refused }` when `on_duplicate`
 * is `refuse` and a live attempt holds the run (nothing was written).
 * @internal
 *
 * @param info The run's description, which this completes.
 * @param table The table the run's slot is in.
 * @param settings The settings in force.
 * @param now The time of the run's start, ms.
 * @param parts The log and the run ledger.
 * @returns The earlier attempt and the resume text's sentences, if any, or the refusal.
 *
 * @example
 * ```ts
 * import { resume, type ResumeParts } from "./_earlier.ts";
 * import type { RunInfo } from "./_writer.ts";
 * import { RunTable } from "./_run_table.ts";
 * import { loadSettings } from "./config.ts";
 * import assert from "node:assert/strict";
 *
 * const settings = loadSettings({ home: "/nonexistent", env: {} }).settings;
 * const info: RunInfo = {
 *   slot: 0,
 *   gen: 1,
 *   runId: "r",
 *   dialect: "chat",
 *   caps: {},
 *   notes: [],
 *   checkpointFile: "/nonexistent/r.md",
 * };
 * const parts: ResumeParts = {
 *   log: () => {},
 *   store: () => undefined, // no run ledger
 *   host: () => ({ machine: "m", pid: 1, start: "" }),
 *   write: () => {},
 * };
 * // No checkpoint file and no ledger: nothing to resume.
 * assert.equal(resume(info, new RunTable(undefined, 1), settings, 0, parts), undefined);
 * ```
 */
export function resume(
  info: RunInfo,
  table: RunTable,
  settings: Settings,
  now: number,
  parts: ResumeParts,
): StartFound | undefined {
  const runId = info.runId;
  const fromFile = settings.resume === false ? undefined : earlierAttempt(
    info.checkpointFile,
    (message) => parts.log("warn", message, runId),
  );
  // The run ledger first (where the earlier attempt was when it stopped), the file second.
  const ledger = ledgerStart(info, table, settings, fromFile, parts);
  if (ledger.refused) return { refused: ledger.refused };
  const earlier = ledger.seen ? ledger.earlier : fromFile;
  if (!earlier) return undefined;
  if (!ledger.recorded && !ledger.numbered) info.attempt = earlier.previous.attempt + 1;
  info.attempts = earlier.attempts;
  info.prior = earlier.prior;
  const remaining = settings.resume_budget === "remaining"
    ? remainingCaps(info.caps, earlier.prior)
    : undefined;
  if (remaining) info.caps = remaining;
  const hasFile = fileExists(info.checkpointFile);
  // What the earlier attempts did to the world, by effect key, as the ledger holds it.
  const generation = info.generation ?? 1;
  const effects = ledger.seen
    ? failOpen(
      // Those of this run's attempts: not of an earlier run of the id that ended done.
      () => parts.store(settings)?.effects?.readSync(runId)?.filter((e) => e.attempt >= generation),
      (error) => {
        ledgerFailed(parts.log, "the earlier attempts' effects", error, runId);
        return undefined;
      },
    )
    : undefined;
  const notes = [
    resumeNote(earlier.previous.inFlight ?? [], remaining, hasFile),
    effects ? effectsNote(effects) : undefined,
  ].filter((n) => n !== undefined);
  const note = notes.length > 0 ? notes.join(" ") : undefined;
  parts.log("info", `resuming: ${earlier.previous.summary}`, runId);
  // The record names what the attempt starts with: its number, caps and what came before.
  if (ledger.recorded) {
    parts.write([recordOf(info, table, parts.host(), now)], "the run's start");
  }
  const resumed: Resumed = { previous: earlier.previous };
  if (note !== undefined) resumed.resumeNote = note;
  if (earlier.trace) resumed.trace = earlier.trace;
  if (!hasFile) resumed.noFile = true;
  if (effects) resumed.effects = effects;
  return resumed;
}
