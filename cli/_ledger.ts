/**
 * The command line's view of the run ledger: `ls`, `show` and `audit` read
 * every run (live, ended, cut off; with or without a checkpoint file) from
 * the store's index, and `prune` removes ended runs past their retention.
 *
 * @module
 */
import * as fs from "node:fs";
import { loadSettings } from "../config.ts";
import type { Settings } from "../settings.ts";
import { formatDuration, formatUsd } from "../template.ts";
import type { RunCaps, TreeRecord, UsageTotals } from "../_record.ts";
import { errorText } from "../log.ts";
import {
  corruptHint,
  type EffectRow,
  isCorruptError,
  isPostgresUrl,
  openPgStore,
  openStore,
  RUN_STATES,
  type RunState,
  type RunStore,
  type RunView,
  storeFile,
  type StoreSummary,
  treeSummaries,
  type TreeSummary,
  treeTotalsText,
} from "../store/mod.ts";
import { ago, type Paint, table, terminalSafe } from "./_format.ts";
import { type CliIo, type Command, NAME, writeJson } from "./_io.ts";
import { homeDir } from "./_home.ts";
import { parseArgs, UsageError } from "./_args.ts";
import { parseDuration } from "../template.ts";

/**
 * A record's tokens and cost, as `ls` shows them (over the ledger or the files): `12000/50000 tok, $0.42/$5.00`
 * (the caps after the slash when the run had them); undefined when the run
 * reported no use and had neither cap.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { usageCell } from "./_ledger.ts";
 *
 * const record = {
 *   usage: { inputTokens: 9000, outputTokens: 3000, usd: 0.42 },
 *   caps: { usd: { value: 5, source: "host" } },
 * };
 * assert.equal(usageCell(record as never), "12000 tok, $0.42/$5.00");
 * assert.equal(usageCell({ caps: {} } as never), undefined);
 * ```
 */
export function usageCell(
  record: { usage?: UsageTotals | undefined; caps?: RunCaps | undefined } | undefined,
): string | undefined {
  const u = record?.usage;
  const caps = record?.caps;
  if (!record || (!u && !caps?.tokens && !caps?.usd)) return undefined;
  const n = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
  const tokens = n(u?.inputTokens) + n(u?.outputTokens);
  let cell = `${tokens}${caps?.tokens ? `/${caps.tokens.value}` : ""} tok`;
  const usd = u?.usd;
  if (typeof usd === "number" || caps?.usd) {
    // Calls of unknown cost make the known dollars a floor: never shown as the whole.
    const floor = (u?.unpriced?.length ?? 0) > 0 ? "≥" : "";
    cell += `, ${typeof usd === "number" ? `${floor}$${formatUsd(usd)}` : u ? "$?" : "$0.00"}${
      caps?.usd ? `/$${formatUsd(caps.usd.value)}` : ""
    }`;
  }
  return cell;
}

/** The home's settings, as the command line reads them. */
export function homeSettings(home: string, io: Pick<CliIo, "env">): Settings {
  return loadSettings({ home, env: io.env }).settings;
}

/**
 * The home's run ledger, opened to read, or undefined when there is none
 * (no file yet, the ledger off, no driver). A file that cannot be read is
 * said on stderr and treated as none.
 */
export function openLedger(
  home: string,
  settings: Settings,
  io: Pick<CliIo, "stderr">,
  store?: string,
): RunStore | undefined {
  // The fleet store: `--store URL`, else the setting (or AGENT_CHECKPOINT_STORE).
  const url = store ?? settings.store;
  if (isPostgresUrl(url)) {
    try {
      return openPgStore({
        url,
        hostTimeoutSeconds: settings.host_timeout_seconds,
        fileMaxKb: settings.store_file_max_kb,
      });
    } catch (error) {
      throw new UsageError(`the store URL cannot be read: ${errorText(error)}`, "--help");
    }
  }
  if (store !== undefined) {
    throw new UsageError(`--store takes a postgres:// URL, not "${store}"`, "--help");
  }
  if (!settings.ledger || !fs.existsSync(storeFile(home))) return undefined;
  let damaged: string | undefined;
  const opened = openStore({
    home,
    settings,
    mode: "read",
    log: (_level, message) => {
      if (isCorruptError(message)) damaged = message;
      else io.stderr(`${NAME}: ${terminalSafe(message)}\n`);
    },
  });
  // Not a database at all: said, with how to set it aside, as a damaged page is.
  if (damaged !== undefined) throw new Error(damaged);
  return opened && explainDamage(opened, storeFile(home));
}

/**
 * A store whose reads, failing on a damaged file, say so: which file, and
 * how to set it aside (the library, finding it so, starts a new one and keeps
 * the old beside it).
 *
 * @example
 * ```ts
 * import { explainDamage } from "./_ledger.ts";
 * import assert from "node:assert/strict";
 *
 * const broken = {
 *   list: (): Promise<never> => Promise.reject(new Error("database disk image is malformed")),
 * };
 * const store = explainDamage(broken, "/h/runs.db");
 * await assert.rejects(store.list(), /run ledger \/h\/runs\.db is damaged .*mv \/h\/runs\.db/);
 * ```
 */
export function explainDamage<T extends object>(store: T, file: string): T {
  const explained = (error: unknown) =>
    isCorruptError(error)
      ? new Error(`the run ledger ${file} is damaged (${errorText(error)}); ${corruptHint(file)}`)
      : error;
  return new Proxy(store, {
    get(target, key) {
      const value = Reflect.get(target, key, target);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        try {
          const out = value.apply(target, args);
          return out instanceof Promise
            ? out.catch((error) => Promise.reject(explained(error)))
            : out;
        } catch (error) {
          throw explained(error);
        }
      };
    },
  });
}

/** A fork's attempt (never run) as the command line says it, escaped. */
const forkText = (fork: { from: string; step: number }) =>
  terminalSafe(`forked from ${fork.from} at step ${fork.step}`);

/** A state as the command line spells it. */
export const stateText = (view: RunView): string =>
  view.record.fork
    ? forkText(view.record.fork)
    : view.state === "ended"
    ? `ended ${view.record.status}`
    : view.state === "live"
    ? "live"
    : "cut off";

const turnsText = (view: RunView) =>
  `${view.record.turnsUsed}${view.record.caps.turns ? ` of ${view.record.caps.turns.value}` : ""}`;

/** When the run was last heard of: its end, its heartbeat, or its record. */
const heardAt = (view: RunView) =>
  view.record.end?.at ?? Math.max(view.record.updatedAt, view.heartbeat?.at ?? 0);

const inFlightText = (view: RunView, now: number) => {
  if (view.state === "ended") return "-";
  const until = view.state === "live" ? now : heardAt(view);
  return view.record.inFlight.map((c) =>
    `${c.tool}${c.callId !== undefined ? ` (${c.callId})` : ""} ${
      formatDuration(Math.max(0, (until - c.startedAt) / 1000))
    }`
  ).join(", ") || "-";
};

/** A run as `ls --json` gives it. */
export function runJson(view: RunView): Record<string, unknown> {
  const { fileContent: _, ...record } = view.record;
  return {
    ...record,
    state: view.state,
    startedAt: new Date(record.startedAt).toISOString(),
    updatedAt: new Date(record.updatedAt).toISOString(),
    heartbeatAt: view.heartbeat ? new Date(view.heartbeat.at).toISOString() : null,
    inFlight: record.inFlight.map((c) => ({
      ...c,
      startedAt: new Date(c.startedAt).toISOString(),
    })),
    ...(record.end ? { end: { ...record.end, at: new Date(record.end.at).toISOString() } } : {}),
  };
}

/** `ls` over the ledger: the runs shown, and the counts over every run. */
export function ledgerLsText(
  views: RunView[],
  counts: StoreSummary,
  file: string,
  io: CliIo,
  p: Paint,
  trees: TreeSummary[] = [],
  attempts: ReadonlyMap<string, AttemptCount> = new Map(),
): string {
  if (counts.total === 0) return `No runs in the run ledger ${terminalSafe(file)}.\n`;
  const now = io.now();
  // Tokens and cost get a column when any run shown reported use or had such a cap.
  const usage = views.map((v) => usageCell(v.record));
  const withUsage = usage.some((u) => u !== undefined);
  // Runs of a tree sharing a budget: each one's parent gets a column.
  const withTree = views.some((v) => v.record.tree !== undefined);
  const rows = views.map((v, i) => [
    terminalSafe(v.record.runId),
    stateText(v),
    attemptCell(v.record.attempt, attempts.get(v.record.runId)),
    turnsText(v),
    v.record.tier === 0 ? "-" : `tier ${v.record.tier}`,
    terminalSafe(inFlightText(v, now)),
    ago(now - heardAt(v)),
    terminalSafe(`${v.record.host.machine}:${v.record.host.pid}`),
    ...(withUsage ? [usage[i] ?? "-"] : []),
    ...(withTree ? [terminalSafe(v.record.tree?.parent ?? "-")] : []),
  ]);
  const cut = views.filter((v) => v.state === "cut-off").map((v) => terminalSafe(v.record.runId));
  const n = (x: number) => x.toLocaleString("en");
  const shown = views.length < counts.total
    ? `${n(views.length)} of ${n(counts.total)} runs shown (--limit 0 lists them all); `
    : "";
  return [
    table(
      [
        [
          "RUN",
          "STATE",
          "ATTEMPT",
          "TURNS",
          "TIER",
          "IN FLIGHT",
          "HEARD",
          "HOST",
          ...(withUsage ? ["TOKENS, COST"] : []),
          ...(withTree ? ["PARENT"] : []),
        ],
        ...rows,
      ],
      p.bold,
    ),
    "",
    ...trees.map((t) => `tree ${terminalSafe(t.root)}: ${terminalSafe(treeTotalsText(t))}`),
    `${shown}${n(counts.total)} run${counts.total === 1 ? "" : "s"}: ${
      n(counts.byState.live)
    } live, ${n(counts.byState.ended)} ended, ${n(counts.byState["cut-off"])} cut off${
      cut.length > 0
        ? ` (${cut.slice(0, 5).join(", ")}${cut.length > 5 ? ` and ${cut.length - 5} more` : ""})`
        : ""
    }`,
    `run ledger: ${terminalSafe(file)}`,
  ].join("\n") + "\n";
}

/** The runs `ls` shows unless told otherwise. */
export const LS_LIMIT = 100;

/**
 * The `--limit` option's value, checked: a whole number >= 0 (0: no limit).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { limitOption, LS_LIMIT } from "./_ledger.ts";
 *
 * assert.equal(limitOption(undefined, "ls"), LS_LIMIT);
 * assert.equal(limitOption("0", "ls"), 0);
 * assert.throws(() => limitOption("ten", "ls"), /--limit takes a whole number/);
 * ```
 */
export function limitOption(value: string | undefined, command: string): number {
  if (value === undefined) return LS_LIMIT;
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n)) {
    throw new UsageError(`--limit takes a whole number, not "${value}"`, `${command} --help`);
  }
  return n;
}

/**
 * The `--status` option's value, checked.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { statusOption } from "./_ledger.ts";
 *
 * assert.equal(statusOption("cut-off", "ls"), "cut-off");
 * assert.throws(() => statusOption("dead", "ls"), /--status takes live, ended or cut-off/);
 * ```
 */
export function statusOption(value: string | undefined, command: string): RunState | undefined {
  if (value === undefined) return undefined;
  if ((RUN_STATES as readonly string[]).includes(value)) return value as RunState;
  throw new UsageError(
    `--status takes live, ended or cut-off, not "${value}"`,
    `${command} --help`,
  );
}

/** The `--since` option as ms since the epoch, checked. */
export function sinceOption(
  value: string | undefined,
  command: string,
  now: number,
): number | undefined {
  if (value === undefined) return undefined;
  const seconds = parseDuration(value);
  if (seconds === undefined) {
    throw new UsageError(
      `--since takes a duration such as 30m, 12h or 7d, not "${value}"`,
      `${command} --help`,
    );
  }
  return now - seconds * 1000;
}

/** Effects `show` lists; the rest are counted. */
const SHOW_EFFECTS = 20;

/** One effect as `show` lists it: tool, key, and done (with the receipt) or outcome unknown. */
export function effectLine(e: EffectRow): string {
  const r = e.receipt;
  if (!r) {
    return `${e.tool} ${e.key}: outcome unknown (intent of attempt ${e.attempt}${
      e.callId === undefined ? "" : `, call ${e.callId}`
    }, no receipt)`;
  }
  const result = r.result === undefined
    ? ""
    : `: ${
      Array.from(r.result).length > 80 ? `${Array.from(r.result).slice(0, 79).join("")}…` : r.result
    }${r.truncated ? " (cut)" : ""}`;
  return `${e.tool} ${e.key}: done by attempt ${r.attempt}, ${r.ok ? "ok" : "failed"}${result}`;
}

/** The ledger's part of `show RUN`: in a tree, the tree; the run's side effects when it has any. */
export function ledgerShowText(
  view: RunView,
  io: CliIo,
  tree?: TreeSummary,
  effects: EffectRow[] = [],
  earlier: RunView[] = [],
): string {
  const r = view.record;
  const now = io.now();
  const head = `Run ${terminalSafe(r.runId)}${r.attempt > 1 ? `, attempt ${r.attempt}` : ""}: ${
    r.fork
      ? forkText(r.fork)
      : view.state === "ended"
      ? `ended ${r.status}${r.end?.summary ? `: ${terminalSafe(r.end.summary)}` : ""}`
      : view.state === "live"
      ? "live"
      : "cut off (its process is gone and it never recorded an end)"
  }`;
  const rows: string[][] = [
    ["turns", turnsText(view)],
    [
      "elapsed",
      `${formatDuration(Math.max(r.elapsedSeconds, (heardAt(view) - r.startedAt) / 1000))}${
        r.caps.time ? ` of ${formatDuration(r.caps.time.value)}` : ""
      }`,
    ],
    ["tier", String(r.tier)],
    ...(usageCell(r) === undefined ? [] : [["tokens, cost", usageCell(r)!]]),
    ["in flight", terminalSafe(inFlightText(view, now))],
    [
      "recent calls",
      terminalSafe(
        r.recent.map((c) => `${c.tool}${c.callId ? ` (${c.callId})` : ""} ${c.status}`).join(
          ", ",
        ) ||
          "-",
      ),
    ],
    ["host", terminalSafe(`${r.host.machine}, pid ${r.host.pid}`)],
    ["started", new Date(r.startedAt).toISOString()],
    ["last heard", `${ago(now - heardAt(view))}`],
    ["checkpoint file", terminalSafe(r.checkpointFile ?? "-")],
  ];
  for (const note of r.notes.slice(-3)) rows.push(["note", terminalSafe(note)]);
  if (earlier.length === 0) {
    for (const line of r.attempts ?? []) rows.push(["earlier attempt", terminalSafe(line)]);
  }
  if (r.generation !== undefined && r.generation > 1) {
    rows.push([
      "started afresh",
      `at attempt ${r.generation}: the attempts before it ended done, a run of their own`,
    ]);
  }
  // Every attempt the ledger keeps, oldest first: a run id started again after done included.
  for (const e of [...earlier].sort((a, b) => a.record.attempt - b.record.attempt)) {
    rows.push([`attempt ${e.record.attempt}`, terminalSafe(attemptLine(e))]);
  }
  if (r.tree) rows.push(...treeShowRows(r.runId, r.tree, tree));
  // Side effects, those of unknown outcome first.
  const sorted = [...effects.filter((e) => !e.receipt), ...effects.filter((e) => e.receipt)];
  for (const e of sorted.slice(0, SHOW_EFFECTS)) rows.push(["effect", terminalSafe(effectLine(e))]);
  if (sorted.length > SHOW_EFFECTS) {
    rows.push(["effect", `… and ${sorted.length - SHOW_EFFECTS} more (--json lists every one)`]);
  }
  return `${head}\n${table(rows)}\n`;
}

/** An earlier attempt of a run as `show` lists it: how it ended, where, when. */
function attemptLine(view: RunView): string {
  const r = view.record;
  const how = r.fork
    ? `forked from ${r.fork.from} at step ${r.fork.step}`
    : view.state === "ended"
    ? `ended ${r.status}${r.end?.summary ? `: ${r.end.summary}` : ""}`
    : view.state === "live"
    ? "live"
    : "cut off";
  const end = r.end ? `, ended ${new Date(r.end.at).toISOString()}` : "";
  return `${how}; ${r.turnsUsed} turns on ${r.host.machine} (pid ${r.host.pid}), started ${
    new Date(r.startedAt).toISOString()
  }${end}`;
}

/** The most children `show` names; the rest are counted. */
const SHOWN_CHILDREN = 20;

/** A run's place in its tree, as `show` gives it: its parent, its children, the tree's totals. */
function treeShowRows(
  runId: string,
  place: Pick<TreeRecord, "root" | "parent" | "totals">,
  tree: TreeSummary | undefined,
): string[][] {
  const rows: string[][] = [];
  rows.push([
    "tree",
    place.root === runId ? "its root (its children share its caps)" : terminalSafe(place.root),
  ]);
  if (place.parent !== undefined) rows.push(["parent", terminalSafe(place.parent)]);
  if (tree) {
    const children = tree.members.filter((m) => m.parent === runId);
    if (children.length > 0) {
      const named = children.slice(0, SHOWN_CHILDREN).map((c) =>
        `${c.runId} (${
          c.state === "ended" ? `ended ${c.status}` : c.state === "live" ? "live" : "cut off"
        })`
      ).join(", ");
      const more = children.length - SHOWN_CHILDREN;
      rows.push(["children", terminalSafe(`${named}${more > 0 ? ` and ${more} more` : ""}`)]);
    }
    rows.push(["tree totals", terminalSafe(treeTotalsText(tree))]);
  } else if (place.totals) {
    // The store cannot say now: the totals as the run last knew them.
    const t = place.totals;
    rows.push([
      "tree totals",
      `${t.turns} turns, ${t.tokens} tokens${
        t.usd === undefined ? "" : `, ${t.unpriced?.length ? "at least " : ""}$${formatUsd(t.usd)}`
      } (as this run last knew them)`,
    ]);
  }
  return rows;
}

/** What a retried attempt's end summary says, after how it ended (`agent-checkpoint run --retries`). */
const RETRIED = /(^|; )retried \(retry \d+ of \d+\) because /;

/** A run's attempts as `ls` counts them: those of its newest start, and how many were retries. */
export interface AttemptCount {
  /** Its attempts since it last started afresh, the newest included. */
  attempts: number;
  /** The earlier ones that ended to be started again (`run --retries`). */
  retries: number;
}

/**
 * Per run of `views` on a later attempt, its attempts and retries: its earlier
 * attempts read from the store in one query (a run on attempt 1 has none).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { attemptCounts } from "./_ledger.ts";
 *
 * const counts = await attemptCounts({ list: async () => [] } as never, []);
 * assert.equal(counts.size, 0);
 * ```
 */
export async function attemptCounts(
  store: RunStore,
  views: readonly RunView[],
): Promise<Map<string, AttemptCount>> {
  const out = new Map<string, AttemptCount>();
  const later = views.filter((v) => v.record.attempt > 1);
  if (later.length === 0) return out;
  const newest = new Map(later.map((v) => [v.record.runId, v.record]));
  const earlier = await store.list({
    earlierOf: [...newest.keys()],
    limit: Number.MAX_SAFE_INTEGER,
  });
  for (const [runId, r] of newest) {
    // A run id started afresh after done: the attempts before it are a run of their own.
    const first = r.generation ?? 1;
    out.set(runId, { attempts: r.attempt - first + 1, retries: 0 });
  }
  for (const e of earlier) {
    const count = out.get(e.record.runId);
    const first = newest.get(e.record.runId)?.generation ?? 1;
    if (count && e.record.attempt >= first && RETRIED.test(e.record.end?.summary ?? "")) {
      count.retries++;
    }
  }
  return out;
}

/** `ls`'s ATTEMPT cell: the attempt, and for a retried run how many retries led to it. */
const attemptCell = (attempt: number, count: AttemptCount | undefined): string =>
  count && count.retries > 0
    ? `${attempt} (${count.retries} ${count.retries === 1 ? "retry" : "retries"})`
    : String(attempt);

/**
 * The trees of the runs `views` names, each read whole from the store (at
 * most `max` trees); none when the store keeps no trees.
 */
export async function treesOf(
  store: RunStore,
  views: readonly RunView[],
  max = 5,
): Promise<TreeSummary[]> {
  if (!store.trees) return [];
  const roots = [...new Set(views.flatMap((v) => v.record.tree ? [v.record.tree.root] : []))];
  const out: TreeSummary[] = [];
  for (const root of roots.slice(0, max)) {
    const [tree] = treeSummaries(await store.trees.list({ root }));
    if (tree) out.push(tree);
  }
  return out;
}

/** `audit` over the ledger. */
export function ledgerAuditText(
  s: StoreSummary,
  file: string,
  since: string | undefined,
  trees: TreeSummary[] = [],
): string {
  const list = (o: Record<string, number>) =>
    Object.keys(o).length === 0
      ? "-"
      : Object.entries(o).sort((x, y) => y[1] - x[1]).map(([k, n]) => `${k}: ${n}`).join(" · ");
  const rows = [
    ["run ledger", `${terminalSafe(file)}${since ? ` (heard of in the last ${since})` : ""}`],
    ["runs", String(s.total)],
    ["  live", String(s.byState.live)],
    ["  ended", s.byState.ended === 0 ? "0" : `${s.byState.ended}  (${list(s.byEnd)})`],
    ["  cut off", String(s.byState["cut-off"])],
  ];
  for (const [machine, n] of Object.entries(s.byMachine)) {
    rows.push([
      `  on ${terminalSafe(machine)}`,
      `live ${n.live} · ended ${n.ended} · cut off ${n["cut-off"]}`,
    ]);
  }
  const u = s.usage;
  if (u) {
    const runs = (k: number) => `${k} run${k === 1 ? "" : "s"}`;
    rows.push(
      [
        "tokens",
        `${u.inputTokens + u.outputTokens} over ${
          runs(u.runs)
        } (${u.inputTokens} in, ${u.outputTokens} out)`,
      ],
      [
        "cost",
        `$${formatUsd(u.usd)} over ${runs(u.usdRuns)}${
          u.runs > u.usdRuns ? ` (${runs(u.runs - u.usdRuns)} with no known cost)` : ""
        }`,
      ],
    );
  }
  if (trees.length > 0) {
    rows.push(["trees", `${trees.length} (runs sharing one budget)`]);
    for (const t of trees.slice(0, AUDIT_TREES)) {
      rows.push([`  tree ${terminalSafe(t.root)}`, terminalSafe(treeTotalsText(t))]);
    }
    if (trees.length > AUDIT_TREES) {
      rows.push(["", `and ${trees.length - AUDIT_TREES} more`]);
    }
  }
  return table(rows) + "\n";
}

/** The most trees `audit` lists one by one, the most recently started first. */
const AUDIT_TREES = 10;

const PRUNE_HELP = `Usage: ${NAME} prune [--home DIR] [--json]

Removes from the run ledger the runs that ended more than ledger_retention_days
(default 30) ago. Live and cut-off runs are kept. Checkpoint files are not
touched.

  --home DIR   the profile directory (default $HERMES_HOME, else ~/.hermes)
  --json       one JSON object: { store, removed, before }`;

/** Records removed per transaction, so that other processes are not held up. */
const PRUNE_BATCH = 5000;

/**
 * `agent-checkpoint prune`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import * as fs from "node:fs";
 * import * as os from "node:os";
 * import * as path from "node:path";
 * import { pruneCommand } from "./_ledger.ts";
 * import { memoryIo } from "./_io.ts";
 *
 * const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-doc-"));
 * const m = memoryIo();
 * assert.equal(await pruneCommand.run(["--home", home], m.io), 0);
 * assert.match(m.stdout(), /No run ledger/);
 * ```
 */
export const pruneCommand: Command = {
  name: "prune",
  summary: "remove ended runs past ledger_retention_days from the run ledger",
  help: PRUNE_HELP,
  async run(args: string[], io: CliIo): Promise<number> {
    const parsed = parseArgs(args, { command: "prune", switches: ["--json"] });
    const home = homeDir(parsed, io);
    const settings = homeSettings(home, io);
    const file = storeFile(home);
    if (!fs.existsSync(file)) {
      if (parsed.switches.has("--json")) writeJson(io, { store: null, removed: 0 });
      else io.stdout(`No run ledger in ${terminalSafe(home)}; nothing to prune.\n`);
      return 0;
    }
    const store = openStore({
      home,
      settings,
      log: (_level, message) => io.stderr(`${NAME}: ${terminalSafe(message)}\n`),
    });
    if (!store) return 1;
    const before = io.now() - settings.ledger_retention_days * 86_400_000;
    let removed = 0;
    try {
      for (;;) {
        const n = await store.prune(before, PRUNE_BATCH);
        removed += n;
        if (n < PRUNE_BATCH) break;
      }
    } finally {
      await store.close();
    }
    if (parsed.switches.has("--json")) {
      writeJson(io, { store: file, removed, before: new Date(before).toISOString() });
    } else {
      io.stdout(
        `Removed ${removed} ended run${
          removed === 1 ? "" : "s"
        } older than ${settings.ledger_retention_days} days from ${terminalSafe(file)}.\n`,
      );
    }
    return 0;
  },
};
