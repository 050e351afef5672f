/**
 * What the web view's JSON API answers: a page of runs (newest first, with
 * the store's counts) and one run's detail (its record, its attempts and its
 * checkpoint file). The page draws exactly this; a fleet's own dashboards can
 * read it too. Built only on the {@linkcode RunStore} interface, so the
 * embedded ledger and the fleet store answer alike.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { EndStatus } from "../_record.ts";
import { END_STATUSES } from "../_record.ts";
import { lastSeen, ledgerSummary } from "../_ledger.ts";
import { readCheckpointBytes } from "../persist.ts";
import type { Settings } from "../settings.ts";
import { capValues, tierPlan, timeCrossing } from "../tier.ts";
import { parseDuration } from "../template.ts";
import type {
  EffectRow,
  Heartbeat,
  ListQuery,
  RunRecord,
  RunState,
  RunStore,
  RunView,
  StoreSummary,
} from "../store/types.ts";
import { treeSummaries, type TreeSummary, treeTotalsText } from "../store/trees.ts";

/** A run's status as the page colors it: live, cut off, or how it ended. */
export type ShownStatus = "live" | EndStatus | "cut-off";

/** Every status the page shows, in the order of its filter. */
export const SHOWN_STATUSES: readonly ShownStatus[] = ["live", ...END_STATUSES, "cut-off"];

/** Runs a page lists unless `limit` says otherwise: the newest. */
export const DEFAULT_LIMIT = 500;
/** The most runs one answer lists. */
export const MAX_LIMIT = 5000;
/**
 * The most ended runs read to find those of one end status (the store
 * filters by live, ended and cut off; the end status is filtered here).
 */
export const SCAN_LIMIT = 20_000;
/** The most characters of a checkpoint file one answer carries. */
export const FILE_CHARS = 1024 * 1024;
/** The most attempts of one run listed in its detail. */
export const ATTEMPTS_LIMIT = 100;
/** The most earlier attempts of one run drawn in its row (the newest of them). */
export const ROW_ATTEMPTS = 20;

/** One attempt of a run, as its row draws it: a stretch of its time bar and how it ended. */
export interface AttemptSpan {
  /** The attempt number. */
  attempt: number;
  /** Its status: live, cut off, or how it ended. */
  status: ShownStatus;
  /** When it started, ms. */
  startedAt: number;
  /** When it ended, or was last heard of (cut off); undefined while live. */
  endAt?: number;
}

/** One cap of a run: what it used of it, and where its tiers fall. */
export interface CapUse {
  /** `turns`, `time` (seconds), `tokens` or `usd`. */
  axis: string;
  /** What the run used. */
  used: number;
  /** The cap. */
  cap: number;
  /** Where the cap came from. */
  source: string;
  /** The tier fractions on this axis, tier 1 first (tier 1 left out when it cannot fire). */
  tiers: number[];
}

/** Something on a run's time line: a tier reached, the checkpoint file written, the end. */
export interface RunMark {
  /** What it is. */
  kind: "tier" | "checkpoint" | "end";
  /** When, ms since the epoch. */
  at: number;
  /** The tier, for a tier mark. */
  tier?: number;
  /**
   * True when the time is estimated: a tier reached on the turn axis, placed
   * as if the turns were spread evenly over the run.
   */
  estimated?: boolean;
}

/** One run as the page draws it in the list. */
export interface RunRow {
  /** The run's id. */
  runId: string;
  /** The attempt shown (the newest). */
  attempt: number;
  /** Its status as colored. */
  status: ShownStatus;
  /** `chat`, `kanban`, `goal` or `command`. */
  dialect: string;
  /** The machine it ran on. */
  machine: string;
  /** Its process id there. */
  pid: number;
  /** When it started, ms. */
  startedAt: number;
  /** When it ended, or was last heard of (cut off); undefined while live. */
  endAt?: number;
  /** When its record was last brought up to date, ms. */
  updatedAt: number;
  /** The budget tier reached. */
  tier: number;
  /** Model calls made. */
  turnsUsed: number;
  /** Seconds it ran (to now while live). */
  elapsedSeconds: number;
  /** Tool calls in flight at its last record. */
  inFlight: { tool: string; callId?: string; startedAt: number }[];
  /** Each cap it has, and its use. */
  caps: CapUse[];
  /** Marks on its time line. */
  marks: RunMark[];
  /** Whether its checkpoint file exists under the home's checkpoint directory. */
  hasFile: boolean;
  /** How many earlier attempts its record names. */
  earlierAttempts: number;
  /** In a tree of runs sharing one budget: the tree's root run. */
  treeRoot?: string;
  /** In a tree, and not its root: the run's parent. */
  parent?: string;
  /**
   * Every attempt the store keeps of the run, oldest first, the newest (this row's) last; the
   * earlier ones only in `GET /api/runs` (at most {@linkcode ROW_ATTEMPTS} of them).
   */
  attempts: AttemptSpan[];
}

/** What `GET /api/runs` answers. */
export interface RunsPayload {
  /** The server's clock, ms. */
  now: number;
  /** The store: engine and where. */
  store: { engine: string; location: string };
  /** The filters applied. */
  query: { status: ShownStatus[]; host?: string; since?: number; limit: number };
  /** Runs matching the filters, counted by status (the store's counts). */
  counts: Record<ShownStatus, number>;
  /** Runs matching the filters, all statuses together. */
  total: number;
  /**
   * Earlier attempts of the runs listed that were cut off (`counts` counts each run's newest
   * attempt only: a run cut off three times and then aborted counts as aborted there).
   */
  earlierCutOff: number;
  /** Every machine of the store (within `since`), with its runs' count. */
  hosts: Record<string, number>;
  /** The runs listed, newest first. */
  runs: RunRow[];
  /**
   * Set when an end-status filter searched only the newest
   * {@linkcode SCAN_LIMIT} ended runs: older ones may match too.
   */
  scanLimited?: number;
}

/** One attempt of a run, in its detail. */
export interface AttemptRow {
  /** The attempt number. */
  attempt: number;
  /** Its status. */
  status: ShownStatus;
  /** Where it got to, in one line. */
  summary: string;
  /** The machine. */
  machine: string;
  /** The process id. */
  pid: number;
  /** When it started, ms. */
  startedAt: number;
  /** When it was last brought up to date, ms. */
  updatedAt: number;
}

/** A run's checkpoint file, as the detail carries it. */
export interface FileView {
  /** Where the content came from: the file, the store's copy, or none. */
  source: "file" | "store" | "none";
  /** The file's path, when the record names one. */
  path?: string;
  /** The content, at most {@linkcode FILE_CHARS} characters. */
  content?: string;
  /** Set when the content was cut to {@linkcode FILE_CHARS}. */
  truncated?: boolean;
  /** Why the file was not read, when it was not. */
  note?: string;
}

/** What `GET /api/runs/:id` answers. */
export interface RunPayload {
  /** The server's clock, ms. */
  now: number;
  /** The run as the list draws it. */
  run: RunRow;
  /** Where it stopped (or stands), in one line. */
  stopped: string;
  /** Its newest record, as stored (without the file's content). */
  record: Omit<RunRecord, "fileContent">;
  /** Its process's heartbeat, when the store has one. */
  heartbeat?: Heartbeat;
  /** Every attempt the store keeps, newest first. */
  attempts: AttemptRow[];
  /**
   * Its side effects, by effect key: those of unknown outcome (an intent, no
   * receipt) first, then those done with their receipts; at most
   * {@linkcode EFFECTS_LIMIT}.
   */
  effects: EffectRow[];
  /** How many effects the run has in all. */
  effectsTotal: number;
  /** Its checkpoint file. */
  file: FileView;
  /** Its tree of runs sharing one budget, when it is in one and the store can say. */
  tree?: TreeDetail;
}

/** A run's tree as its detail carries it. */
export interface TreeDetail extends TreeSummary {
  /** The run's children (its runs whose parent it is), the most recently started first. */
  children: { runId: string; status: ShownStatus }[];
  /** The tree's totals in one line: `9 runs: 40 turns, 6000 tokens, $1.01 of $1.00`. */
  text: string;
}

/** The most effects of one run its detail carries. */
export const EFFECTS_LIMIT = 200;

/** What the answers are made with. */
export interface ApiContext {
  /** The store. */
  store: RunStore;
  /** The settings of the home served (tier fractions, checkpoint directory). */
  settings: Settings;
  /** The clock, ms. */
  now(): number;
}

/** A request the API refuses, with the reason (answered 400). */
export class QueryError extends Error {
  /** @param message What was wrong. */
  constructor(message: string) {
    super(message);
    this.name = "QueryError";
  }
}

/**
 * A run's status as the page shows it: its state when live or cut off, else
 * how it ended.
 *
 * @param view The run as read.
 * @returns The status.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { shownStatus } from "./_api.ts";
 *
 * assert.equal(shownStatus({ state: "cut-off", record: { status: "live" } } as never), "cut-off");
 * assert.equal(shownStatus({ state: "ended", record: { status: "capped" } } as never), "capped");
 * ```
 */
export function shownStatus(view: Pick<RunView, "state" | "record">): ShownStatus {
  if (view.state !== "ended") return view.state;
  const s = view.record.status;
  return s === "live" ? "done" : s;
}

/** A string query parameter's values, comma-separated ones split. */
function many(params: URLSearchParams, name: string): string[] {
  return params.getAll(name).flatMap((v) => v.split(",")).map((v) => v.trim()).filter((v) =>
    v !== ""
  );
}

/**
 * `since` as ms since the epoch: a duration back from now (`90s`, `30m`,
 * `12h`, `7d`, `2w`), an ISO 8601 time, or ms since the epoch.
 */
function sinceParam(text: string, now: number): number {
  const seconds = parseDuration(text);
  if (seconds !== undefined) return now - seconds * 1000;
  if (/^\d{10,}$/.test(text)) return Number(text);
  const t = Date.parse(text);
  if (Number.isFinite(t)) return t;
  throw new QueryError(
    `since takes a duration (30m, 12h, 7d), an ISO time or ms since the epoch, not "${text}"`,
  );
}

/** The filters of `GET /api/runs`, checked. */
export function runsQuery(
  params: URLSearchParams,
  now: number,
): RunsPayload["query"] {
  const status = many(params, "status");
  for (const s of status) {
    if (!SHOWN_STATUSES.includes(s as ShownStatus)) {
      throw new QueryError(`status takes ${SHOWN_STATUSES.join(", ")}; not "${s}"`);
    }
  }
  const out: RunsPayload["query"] = {
    status: SHOWN_STATUSES.filter((s) => status.length === 0 || status.includes(s)),
    limit: DEFAULT_LIMIT,
  };
  const host = params.get("host");
  if (host !== null && host !== "") out.host = host;
  const since = params.get("since");
  if (since !== null && since !== "") out.since = sinceParam(since, now);
  const limit = params.get("limit");
  if (limit !== null && limit !== "") {
    const n = Number(limit);
    if (!Number.isInteger(n) || n < 1 || n > MAX_LIMIT) {
      throw new QueryError(`limit takes a whole number from 1 to ${MAX_LIMIT}, not "${limit}"`);
    }
    out.limit = n;
  }
  return out;
}

/** The checkpoint directory, as named and with its links resolved (undefined: not there). */
interface CheckpointDir {
  dir: string;
  real: string | undefined;
}

function checkpointDir(settings: Settings): CheckpointDir {
  const dir = path.resolve(settings.checkpoint_dir);
  try {
    return { dir, real: fs.realpathSync(dir) };
  } catch {
    // the directory does not exist yet: no real path, so no file is served from it
    return { dir, real: undefined };
  }
}

/** Whether `file` is inside the checkpoint directory, its own directory's links resolved. */
function underDir(file: string, dir: CheckpointDir): boolean {
  if (dir.real === undefined) return false;
  const parent = path.dirname(path.resolve(file));
  // The common case, the file right in the directory as named: no link to resolve.
  if (parent === dir.dir) return true;
  let real: string;
  try {
    real = fs.realpathSync(parent);
  } catch {
    // a parent that cannot be resolved is not shown to be inside the directory: refused
    return false;
  }
  const rel = path.relative(dir.real, real);
  return rel === "" || (!rel.startsWith("..") && !path.isAbsolute(rel));
}

/** The checkpoint file of a record when it is a regular file under the checkpoint directory. */
function checkpointStat(record: RunRecord, dir: CheckpointDir): fs.Stats | undefined {
  const file = record.checkpointFile;
  if (file === undefined || !underDir(file, dir)) return undefined;
  try {
    const st = fs.lstatSync(file);
    return st.isFile() ? st : undefined;
  } catch {
    // absent or unreadable: not found, as the API answers
    return undefined;
  }
}

/** Each cap's use, with the tier fractions that apply to it. */
function capUses(record: RunRecord, elapsed: number, settings: Settings): CapUse[] {
  const plan = tierPlan(capValues(record.caps), settings);
  const tiers = (tier2: number) => plan.tier1Allowed ? [plan.tier1, tier2] : [tier2];
  const out: CapUse[] = [];
  if (record.caps.turns) {
    out.push({
      axis: "turns",
      used: record.turnsUsed,
      cap: record.caps.turns.value,
      source: record.caps.turns.source,
      tiers: tiers(plan.tier2Turn),
    });
  }
  if (record.caps.time) {
    out.push({
      axis: "time",
      used: elapsed,
      cap: record.caps.time.value,
      source: record.caps.time.source,
      tiers: tiers(plan.tier2Time),
    });
  }
  // Tokens and dollars, where the record holds a cap and the use the run reported.
  const usage = record.usage;
  const usedOf: Record<string, number | undefined> = {
    tokens: usage ? usage.inputTokens + usage.outputTokens : undefined,
    usd: usage?.usd,
  };
  for (const [axis, cap] of Object.entries(record.caps as Record<string, unknown>)) {
    if (axis === "turns" || axis === "time") continue;
    const value = (cap as { value?: unknown } | undefined)?.value;
    const used = usedOf[axis];
    if (typeof value !== "number" || typeof used !== "number") continue;
    out.push({
      axis,
      used,
      cap: value,
      source: String((cap as { source?: unknown }).source ?? ""),
      tiers: tiers(plan.tier2Turn),
    });
  }
  return out;
}

/**
 * The marks of a run's time line: each tier it reached (when the ledger
 * recorded the crossing; for a record without those times, when the time
 * axis got there, else estimated from its turns), its checkpoint file's last
 * write, and its end.
 */
function marks(
  record: RunRecord,
  elapsed: number,
  settings: Settings,
  file: fs.Stats | undefined,
): RunMark[] {
  const out: RunMark[] = [];
  const plan = tierPlan(capValues(record.caps), settings);
  for (const tier of [1, 2] as const) {
    if (record.tier < tier) continue;
    if (record.tierAt) {
      // Recorded when crossed; a tier skipped (tier 2 claimed first) has no time and no mark.
      const at = record.tierAt[tier];
      if (typeof at === "number") out.push({ kind: "tier", tier, at });
      continue;
    }
    const byTime = timeCrossing(plan, tier);
    if (byTime !== undefined && byTime <= elapsed) {
      out.push({ kind: "tier", tier, at: record.startedAt + byTime * 1000 });
      continue;
    }
    if (plan.turnCap !== undefined && record.turnsUsed > 0) {
      const fraction = tier === 1 ? plan.tier1 : plan.tier2Turn;
      const turn = Math.min(record.turnsUsed, Math.ceil(fraction * plan.turnCap));
      out.push({
        kind: "tier",
        tier,
        at: record.startedAt + (elapsed * 1000 * turn) / record.turnsUsed,
        estimated: true,
      });
    }
  }
  if (file) out.push({ kind: "checkpoint", at: file.mtimeMs });
  if (record.end) out.push({ kind: "end", at: record.end.at });
  return out;
}

/** A run as the list draws it. */
function runRow(view: RunView, settings: Settings, dir: CheckpointDir, now: number): RunRow {
  const r = view.record;
  const seen = lastSeen(view, now);
  const elapsed = view.state === "live"
    ? Math.max(r.elapsedSeconds, (now - r.startedAt) / 1000)
    : Math.max(r.elapsedSeconds, (seen - r.startedAt) / 1000);
  const file = checkpointStat(r, dir);
  const row: RunRow = {
    runId: r.runId,
    attempt: r.attempt,
    status: shownStatus(view),
    dialect: r.dialect,
    machine: r.host.machine,
    pid: r.host.pid,
    startedAt: r.startedAt,
    updatedAt: r.updatedAt,
    tier: r.tier,
    turnsUsed: r.turnsUsed,
    elapsedSeconds: elapsed,
    inFlight: r.inFlight.map((c) => ({ ...c })),
    caps: capUses(r, elapsed, settings),
    marks: marks(r, elapsed, settings, file),
    hasFile: file !== undefined,
    earlierAttempts: r.attempts?.length ?? 0,
    attempts: [],
  };
  if (view.state !== "live") row.endAt = seen;
  if (r.tree) {
    row.treeRoot = r.tree.root;
    if (r.tree.parent !== undefined) row.parent = r.tree.parent;
  }
  row.attempts = [attemptSpan(view, now)];
  return row;
}

/** An attempt as its run's row draws it. */
function attemptSpan(view: RunView, now: number): AttemptSpan {
  const span: AttemptSpan = {
    attempt: view.record.attempt,
    status: shownStatus(view),
    startedAt: view.record.startedAt,
  };
  if (view.state !== "live") span.endAt = view.record.end?.at ?? lastSeen(view, now);
  return span;
}

const STATE_OF: Record<ShownStatus, RunState> = {
  live: "live",
  "cut-off": "cut-off",
  done: "ended",
  capped: "ended",
  failed: "ended",
  aborted: "ended",
  deadline: "ended",
};

/** The store's counts, by shown status. */
function countsOf(summary: StoreSummary): Record<ShownStatus, number> {
  const out = Object.fromEntries(SHOWN_STATUSES.map((s) => [s, 0])) as Record<
    ShownStatus,
    number
  >;
  out.live = summary.byState.live;
  out["cut-off"] = summary.byState["cut-off"];
  for (const s of END_STATUSES) out[s] = summary.byEnd[s] ?? 0;
  return out;
}

/**
 * The answer of `GET /api/runs`: the newest runs matching the filters, at
 * most `limit`, with the store's counts.
 */
export async function runsPayload(ctx: ApiContext, params: URLSearchParams): Promise<RunsPayload> {
  const now = ctx.now();
  const query = runsQuery(params, now);
  const dir = checkpointDir(ctx.settings);
  const base: ListQuery = {};
  if (query.since !== undefined) base.since = query.since;
  if (query.host !== undefined) base.machine = query.host;
  const everywhere: Omit<ListQuery, "state" | "limit" | "runId"> = query.since !== undefined
    ? { since: query.since }
    : {};
  const [summary, fleet] = await Promise.all([
    ctx.store.summary(base),
    query.host === undefined ? undefined : ctx.store.summary(everywhere),
  ]);
  const counts = countsOf(summary);
  const hosts: Record<string, number> = {};
  for (const [machine, states] of Object.entries((fleet ?? summary).byMachine)) {
    hosts[machine] = states.live + states.ended + states["cut-off"];
  }
  const wanted = new Set(query.status);
  const states = [...new Set(query.status.map((s) => STATE_OF[s]))];
  const whole = (state: RunState) =>
    SHOWN_STATUSES.filter((s) => STATE_OF[s] === state).every((s) => wanted.has(s));
  let views: RunView[];
  let scanLimited: number | undefined;
  if (states.length === 3 && states.every(whole)) {
    views = await ctx.store.list({ ...base, limit: query.limit });
  } else {
    const lists = await Promise.all(states.map(async (state) => {
      if (whole(state)) return await ctx.store.list({ ...base, state, limit: query.limit });
      // Read more of the newest ended runs until enough have a wanted end status.
      for (let scan = Math.min(SCAN_LIMIT, Math.max(1000, query.limit * 4));; scan *= 4) {
        const scanned = await ctx.store.list({ ...base, state, limit: Math.min(scan, SCAN_LIMIT) });
        const found = scanned.filter((v) => wanted.has(shownStatus(v)));
        if (found.length >= query.limit || scanned.length < scan) return found;
        if (scan >= SCAN_LIMIT) {
          scanLimited = SCAN_LIMIT;
          return found;
        }
      }
    }));
    views = lists.flat().sort((a, b) => b.record.updatedAt - a.record.updatedAt).slice(
      0,
      query.limit,
    );
  }
  const runs = views.map((v) => runRow(v, ctx.settings, dir, now));
  // Every earlier attempt of the retried runs listed, in one read: each row draws them all.
  const retried = runs.filter((r) => r.attempt > 1);
  let earlierCutOff = 0;
  if (retried.length > 0) {
    const earlier = await ctx.store.list({
      earlierOf: retried.map((r) => r.runId),
      limit: retried.length * ROW_ATTEMPTS,
    });
    const byRun = new Map<string, AttemptSpan[]>();
    for (const v of earlier) {
      const spans = byRun.get(v.record.runId) ?? [];
      if (spans.length >= ROW_ATTEMPTS) continue;
      spans.push(attemptSpan(v, now));
      byRun.set(v.record.runId, spans);
    }
    for (const row of retried) {
      const spans = (byRun.get(row.runId) ?? []).sort((a, b) => a.attempt - b.attempt);
      earlierCutOff += spans.filter((s) => s.status === "cut-off").length;
      row.attempts = [...spans, ...row.attempts];
    }
  }
  const out: RunsPayload = {
    now,
    store: { engine: ctx.store.engine, location: ctx.store.location },
    query,
    counts,
    total: query.status.reduce((n, s) => n + counts[s], 0),
    earlierCutOff,
    hosts,
    runs,
  };
  if (scanLimited !== undefined) out.scanLimited = scanLimited;
  return out;
}

/** A run's checkpoint file: read from disk when it is a regular file under the checkpoint directory, else the store's copy. */
function fileView(record: RunRecord, dir: CheckpointDir): FileView {
  const out: FileView = { source: "none" };
  const cut = (text: string): FileView => {
    if (text.length <= FILE_CHARS) return { ...out, content: text };
    return { ...out, content: text.slice(0, FILE_CHARS), truncated: true };
  };
  if (record.checkpointFile !== undefined) {
    out.path = record.checkpointFile;
    if (!underDir(record.checkpointFile, dir)) {
      out.note = `not under this home's checkpoint directory (${dir.dir}); not read`;
    } else {
      try {
        const text = new TextDecoder().decode(readCheckpointBytes(record.checkpointFile));
        return { ...cut(text), source: "file" };
      } catch (error) {
        const code = (error as { code?: unknown }).code;
        out.note = code === "ENOENT"
          ? "not written yet, or removed"
          : error instanceof Error
          ? error.message
          : String(error);
      }
    }
  }
  if (typeof record.fileContent === "string") {
    return { ...cut(record.fileContent), source: "store" };
  }
  return out;
}

/**
 * The answer of `GET /api/runs/:id`: the run's newest record, its attempts,
 * and its checkpoint file; undefined when the store has no such run.
 */
export async function runPayload(
  ctx: ApiContext,
  runId: string,
): Promise<RunPayload | undefined> {
  // Every attempt in one read; the newest is the run's record (as `latest` gives it).
  const all = await ctx.store.list({ runId, limit: ATTEMPTS_LIMIT });
  const view = all.reduce<RunView | undefined>(
    (a, v) => (a === undefined || v.record.attempt > a.record.attempt ? v : a),
    undefined,
  );
  if (!view) return undefined;
  const now = ctx.now();
  const dir = checkpointDir(ctx.settings);
  const { fileContent: _content, ...record } = view.record;
  const out: RunPayload = {
    now,
    run: runRow(view, ctx.settings, dir, now),
    stopped: ledgerSummary(view, now),
    record,
    attempts: all.sort((a, b) => b.record.attempt - a.record.attempt).map((v) => ({
      attempt: v.record.attempt,
      status: shownStatus(v),
      summary: ledgerSummary(v, now),
      machine: v.record.host.machine,
      pid: v.record.host.pid,
      startedAt: v.record.startedAt,
      updatedAt: v.record.updatedAt,
    })),
    effects: [],
    effectsTotal: 0,
    file: fileView(view.record, dir),
  };
  // A store of an older version, or one that cannot be read for them: none shown, the rest is.
  const effects = await ctx.store.effects?.read(runId).catch(() => []) ?? [];
  const sorted = [...effects.filter((e) => !e.receipt), ...effects.filter((e) => e.receipt)];
  out.effects = sorted.slice(0, EFFECTS_LIMIT);
  out.effectsTotal = effects.length;
  if (view.heartbeat) out.heartbeat = view.heartbeat;
  const root = view.record.tree?.root;
  if (root !== undefined && ctx.store.trees) {
    const members = await ctx.store.trees.list({ root });
    const [tree] = treeSummaries(members);
    if (tree) {
      out.tree = {
        ...tree,
        children: members.filter((m) => m.record.tree?.parent === runId).map((m) => ({
          runId: m.record.runId,
          status: shownStatus(m),
        })),
        text: treeTotalsText(tree),
      };
    }
  }
  return out;
}
