/**
 * A tree of runs that share a budget, as the command line and the web view
 * show it: its runs (each with its parent), and what they used together
 * against the root's caps. Made from the runs' newest records alone, so the
 * embedded ledger and the fleet store answer alike.
 *
 * @module
 */
import { SHARED_AXES, type SharedAxis } from "../_record.ts";
import type { RunRecord } from "./types.ts";
import { noUse, recordUse, type TreeRow, type TreeUse } from "../_tree.ts";
import type { RunState, RunView } from "./types.ts";

/** What a run of a tree is besides its use. */
export interface TreeMemberOf {
  /** The run's id. */
  runId: string;
  /** Its parent's id; undefined for the root. */
  parent?: string;
  /** Live, ended or cut off. */
  state: RunState;
  /** Its status as recorded (`live`, or how it ended). */
  status: string;
  /** Some of its calls' cost is unknown: `usd` is a lower bound. */
  usdUnknown?: boolean;
}

/**
 * One run of a tree: its own use on each shared axis (not its children's);
 * `usd` is the dollars of the calls whose cost is known (records of earlier
 * versions: undefined then).
 */
export type TreeMember = TreeMemberOf & Omit<{ [A in SharedAxis]: number }, "usd"> & {
  usd?: number;
};

/** A tree: its runs and their totals against the root's caps. */
export interface TreeSummary {
  /** The root run's id. */
  root: string;
  /** Its runs, the most recently started first. */
  members: TreeMember[];
  /** What the tree's runs used together. */
  totals: { [A in SharedAxis]: number } & {
    /** Runs whose cost is (partly) unknown: only their known calls' dollars are in `usd`. */
    usdUnknown: number;
  };
  /** The root's caps, which the whole tree shares. */
  caps: { [A in SharedAxis]?: number };
}

/** How long a model call's reservation of a tree's caps holds, ms: longer, its run is gone. */
const RESERVATION_MS = 300_000;

/**
 * A run of a tree as the run store's row says it (both stores decode it
 * here): its own use, caps, parent, and its call in flight.
 *
 * @example
 * ```ts
 * import { treeRowOf } from "./trees.ts";
 * import assert from "node:assert/strict";
 *
 * const record = { turnsUsed: 2, usage: { inputTokens: 10, outputTokens: 5, usd: 0.5 } };
 * const row = treeRowOf({ run_id: "child", parent: "lead", record: JSON.stringify(record) }, 0);
 * assert.deepEqual(row, {
 *   runId: "child",
 *   parentId: "lead",
 *   caps: {},
 *   use: { turns: 2, tokens: 15, usd: 0.5 },
 * });
 * ```
 */
export function treeRowOf(row: Record<string, unknown>, now: number): TreeRow {
  const record = JSON.parse(String(row.record)) as Partial<RunRecord>;
  const out: TreeRow = {
    runId: String(row.run_id),
    caps: record.caps ?? {},
    // Calls of unknown cost come with it: never $0, never dropped.
    use: recordUse(record),
  };
  if (typeof row.parent === "string") out.parentId = row.parent;
  const figures = (from: Record<string, unknown>, turns?: number): TreeUse => {
    const use = noUse();
    for (const { name } of SHARED_AXES) use[name] = Number(from[name]) || 0;
    if (turns !== undefined) use.turns = turns;
    return use;
  };
  const perCall = record.tree?.perCall;
  // A last call is one turn.
  if (perCall) out.perCall = figures(perCall, 1);
  const reserved = record.tree?.reserved;
  // A call in flight of a run still live, lately: a dead run's reservation holds nothing back.
  if (row.status === "live" && reserved && now - Number(reserved.at) < RESERVATION_MS) {
    out.reserved = figures(reserved);
  }
  return out;
}

/**
 * The trees of `views` (runs of any trees, as {@linkcode RunStore.trees}
 * answers), by root, each with its totals.
 *
 * @example
 * ```ts
 * import { treeSummaries } from "./trees.ts";
 * import assert from "node:assert/strict";
 *
 * const run = (runId: string, parent: string | undefined, usd: number) => ({
 *   state: "ended",
 *   record: {
 *     runId, status: "capped", turnsUsed: 2, caps: runId === "lead" ? { usd: { value: 1 } } : {},
 *     usage: { inputTokens: 100, outputTokens: 50, usd },
 *     tree: parent === undefined ? { root: "lead" } : { root: "lead", parent },
 *   },
 * });
 * const [tree] = treeSummaries([run("lead", undefined, 0.25), run("helper", "lead", 0.5)] as never);
 * assert.deepEqual(tree!.totals, { turns: 4, tokens: 300, usd: 0.75, usdUnknown: 0 });
 * assert.deepEqual(tree!.caps, { usd: 1 });
 * assert.equal(tree!.members[1]!.parent, "lead");
 * ```
 */
export function treeSummaries(views: readonly RunView[]): TreeSummary[] {
  const trees = new Map<string, TreeSummary>();
  for (const view of views) {
    const r = view.record;
    const root = r.tree?.root ?? r.runId;
    let tree = trees.get(root);
    if (!tree) {
      tree = {
        root,
        members: [],
        totals: { ...noUse(), usdUnknown: 0 },
        caps: {},
      };
      trees.set(root, tree);
    }
    const { unpriced, ...use } = recordUse(r);
    const member: TreeMember = { runId: r.runId, state: view.state, status: r.status, ...use };
    if (r.tree?.parent !== undefined) member.parent = r.tree.parent;
    // Calls of unknown cost are never $0: the known ones count, and the run is marked.
    if (r.usage && !Number.isFinite(r.usage.usd)) delete member.usd;
    if (unpriced?.length) member.usdUnknown = true;
    tree.members.push(member);
    for (const { name } of SHARED_AXES) tree.totals[name] += member[name] ?? 0;
    if (member.usdUnknown) tree.totals.usdUnknown++;
    if (r.runId === root) {
      const caps = r.caps ?? {};
      for (const { name } of SHARED_AXES) {
        const cap = caps[name];
        if (cap) tree.caps[name] = cap.value;
      }
    }
  }
  return [...trees.values()];
}

/**
 * A tree's totals in one line: `9 runs: 40 turns, 6000 tokens, $1.01 of $1.00`
 * (each total with the root's cap when it has one; `at least $0.40` when some
 * runs' calls are of unknown cost).
 *
 * @example
 * ```ts
 * import { treeTotalsText } from "./trees.ts";
 * import assert from "node:assert/strict";
 *
 * const text = treeTotalsText({
 *   root: "lead",
 *   members: [{ runId: "lead", state: "ended", status: "capped", turns: 40, tokens: 6000 }],
 *   totals: { turns: 40, tokens: 6000, usd: 1.01, usdUnknown: 0 },
 *   caps: { usd: 1 },
 * });
 * assert.equal(text, "1 run: 40 turns, 6000 tokens, $1.01 of $1.00");
 * ```
 */
export function treeTotalsText(tree: TreeSummary): string {
  const t = tree.totals;
  const runs = tree.members.length;
  const figures = SHARED_AXES.map((axis) => {
    const cap = tree.caps[axis.name];
    const figure = `${axis.show(t[axis.name])}${cap === undefined ? "" : ` of ${axis.show(cap)}`}`;
    // Dollars read as `$1.01 of $1.00`, the others as `40 of 50 turns`.
    if (axis.name !== "usd") return `${figure} ${axis.unit}`;
    return `${t.usdUnknown > 0 ? "at least " : ""}${figure}`;
  });
  return `${runs} run${runs === 1 ? "" : "s"}: ${figures.join(", ")}${
    t.usdUnknown > 0 ? ` (${t.usdUnknown} run${t.usdUnknown === 1 ? "" : "s"} of unknown cost)` : ""
  }`;
}
